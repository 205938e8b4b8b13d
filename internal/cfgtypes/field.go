package cfgtypes

import (
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// ValueError is a bad value at a place in a YAML document. A type's
// UnmarshalYAML returns it; the loader then names the field with NameField,
// since the value's own node does not know its key.
type ValueError struct {
	Line, Column int
	Msg          string
	Field        string // the key path, once NameField found it
}

func (e *ValueError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("line %d: %s: %s", e.Line, e.Field, e.Msg)
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
}

// NameField finds, for a *ValueError in err, the key path of the bad value
// in the document src ("timeouts.idle", "tenants[0].limits.rpm") and puts it
// in the message. A YAML syntax error gets the line it is on (see
// syntaxLine). Any other error is returned unchanged.
func NameField(src []byte, err error) error {
	var ve *ValueError
	if !errors.As(err, &ve) || ve.Field != "" {
		return syntaxLine(src, err)
	}
	var root yaml.Node
	if yaml.Unmarshal(src, &root) != nil {
		return err
	}
	if path, ok := findPath(&root, ve.Line, ve.Column, ""); ok {
		ve.Field = path
	}
	return err
}

// findPath returns the key path of the node at line:col under n.
func findPath(n *yaml.Node, line, col int, path string) (string, bool) {
	at := func(c *yaml.Node) bool { return c.Line == line && c.Column == col }
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if p, ok := findPath(c, line, col, path); ok {
				return p, true
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if path != "" {
				p = path + "." + p
			}
			if v := n.Content[i+1]; at(v) {
				return p, true
			} else if r, ok := findPath(v, line, col, p); ok {
				return r, true
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if at(c) {
				return p, true
			}
			if r, ok := findPath(c, line, col, p); ok {
				return r, true
			}
		}
	}
	return "", false
}
