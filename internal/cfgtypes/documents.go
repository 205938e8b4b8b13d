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
	var first yaml.Node
	if dec.Decode(&first) != nil {
		return nil // no document; a parse error is the reader's to say
	}
	return NextDocument(dec)
}

// NextDocument is OneDocument for a decoder that has decoded the first
// document: it parses only what follows. A reader that decodes with one
// (instead of yaml.Unmarshal, then OneDocument) parses the file once: a
// tenants file of 20,000 tenants and 100,000 keys (42 MB) took 12 s to
// load, 4.5 s of it OneDocument's second parse.
func NextDocument(dec *yaml.Decoder) error {
	var next yaml.Node
	if dec.Decode(&next) != nil {
		return nil // one document; a parse error after it is not read
	}
	if len(next.Content) == 1 {
		if n := next.Content[0]; n.Kind == yaml.ScalarNode && n.Tag == "!!null" && n.Value == "" {
			return nil
		}
	}
	return fmt.Errorf("line %d: a second YAML document starts here (after ---), and only the first is read: put everything in one", next.Line)
}
