package cfgtypes

import (
	"bytes"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// OneDocument refuses a YAML file that holds a second document ("---" and
// what follows it): the configuration and a tenants file are read as one
// document, and what came after a "---" (tenants, limits, a fix pasted at
// the end) was silently not read. A "---" with nothing after it is no
// document. The error names the line where the second one starts.
func OneDocument(src []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var first, next yaml.Node
	if dec.Decode(&first) != nil || dec.Decode(&next) != nil {
		return nil // one document, or none; a parse error is the reader's to say
	}
	if len(next.Content) == 1 {
		if n := next.Content[0]; n.Kind == yaml.ScalarNode && n.Tag == "!!null" && n.Value == "" {
			return nil
		}
	}
	return fmt.Errorf("line %d: a second YAML document starts here (after ---), and only the first is read: put everything in one", next.Line)
}
