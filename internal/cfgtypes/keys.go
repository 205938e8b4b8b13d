package cfgtypes

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"
)

// MaxMappingKeys is the most keys one mapping of a configuration may have.
// The YAML decoder compares every key of a mapping with every other (to
// find duplicates), so a mapping of n keys costs n² comparisons: 10,000
// keys are some 50 million, a tenth of a second; a 64 MiB file of short
// keys holds millions.
const MaxMappingKeys = 10000

// CheckDocument reads the first YAML document of b as the decoder would
// and refuses a mapping that names a key twice, at its second place, or
// that has more than MaxMappingKeys keys, before the document is decoded
// into a configuration. The decoder refuses a duplicate too, but makes an
// error of every pair of duplicates first (n² messages, each its own
// string): a tenants file of 33 KB repeating one key made it allocate 2
// GB, with an error of 266 MB, and a few times that ran a gateway that
// reloads the file out of memory. Keys are compared as the decoder
// compares them (kind and text). Then, when target is not nil (a pointer
// to the structure the document is decoded into), it refuses a number
// with a fraction decoded into an integer field (checkWholeNumbers), in
// the same parse of b. Text that is not YAML is left for the decoder to
// refuse, with its own message.
func CheckDocument(b []byte, target any) error {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(b)).Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil
	}
	if err := checkKeys(&doc); err != nil {
		return err
	}
	if target == nil {
		return nil
	}
	return checkWholeNumbers(&doc, target)
}

func checkKeys(n *yaml.Node) error {
	if n.Kind == yaml.MappingNode {
		if len(n.Content)/2 > MaxMappingKeys {
			return fmt.Errorf("line %d: a mapping of %d keys, more than the %d a configuration may have in one", n.Line, len(n.Content)/2, MaxMappingKeys)
		}
		type key struct {
			kind  yaml.Kind
			value string
		}
		seen := make(map[key]int, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if first, ok := seen[key{k.Kind, k.Value}]; ok {
				return fmt.Errorf("line %d: mapping key %q already defined at line %d", k.Line, k.Value, first)
			}
			seen[key{k.Kind, k.Value}] = k.Line
		}
	}
	for _, c := range n.Content {
		if err := checkKeys(c); err != nil {
			return err
		}
	}
	return nil
}
