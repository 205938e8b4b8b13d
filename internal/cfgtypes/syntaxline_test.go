package cfgtypes

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// A YAML syntax error names the line of the mistake, not the line before
// the block that holds it (yaml.v3's own report).
func TestSyntaxErrorLine(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      string
	}{
		{"key indented under the wrong parent", `tenants:
  - name: acme
    keys:
      - id: acme-prod
        sha256: "aa"
    limits: {rpm: 600}
  - name: beta
    keys:
      - id: beta-1
        sha256: "bb"
    limits: {rpm: 60}
      - id: beta-2
        sha256: "cc"
`, "yaml: line 12: did not find expected key"},
		{"in the top mapping", "listen: \":8080\"\nupstream: http://a:1\n- x\nrequest_log: -\n", "yaml: line 3: "},
		{"after a flow mapping of several lines", "timeouts: {connect: 5s,\n  idle: 30s}\nlabels:\n  tenants: [a]\n  max_values: 3\n    x: 1\n", "yaml: line 6: "},
		{"a tab", "listen: a\nslos:\n\tinteractive: {ttft: 1s}\n", "yaml: line 3: "},
	} {
		var n yaml.Node
		err := yaml.NewDecoder(bytes.NewReader([]byte(tc.doc))).Decode(&n)
		if err == nil || errors.Is(err, io.EOF) {
			t.Fatalf("%s: no error", tc.name)
		}
		got := NameField([]byte(tc.doc), err).Error()
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: %q (yaml.v3: %q), want %q…", tc.name, got, err, tc.want)
		}
	}
}
