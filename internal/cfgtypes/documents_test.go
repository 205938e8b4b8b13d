package cfgtypes

import (
	"bytes"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// oneDocument decodes the first document of src and checks what follows.
func oneDocument(src []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var first yaml.Node
	if dec.Decode(&first) != nil {
		return nil
	}
	return NextDocument(dec)
}

// A second document is refused with its line; one document, with or
// without "---" before it or a bare "---" or "..." after it, passes.
func TestOneDocument(t *testing.T) {
	for _, ok := range []string{"", "a: 1\n", "---\na: 1\n", "a: 1\n---\n", "a: 1\n...\n", "# only a comment\n"} {
		if err := oneDocument([]byte(ok)); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, c := range []struct{ src, want string }{
		{"a: 1\n---\nb: 2\n", "line 2: a second YAML document"},
		{"---\na: 1\n---\ntenants: []\n", "line 3: a second YAML document"},
	} {
		if err := oneDocument([]byte(c.src)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.src, err, c.want)
		}
	}
}
