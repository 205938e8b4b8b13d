package cfgtypes

import (
	"runtime"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestCheckKeys(t *testing.T) {
	many := func(n int) string {
		var b strings.Builder
		b.WriteString("m:\n")
		for i := range n {
			b.WriteString("  k")
			b.WriteString(strings.Repeat("x", i%7))
			b.WriteString(strconv.Itoa(i))
			b.WriteString(": 1\n")
		}
		return b.String()
	}
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"a: 1\nb: 2\n", ""},
		{"a: 1\nb: {c: 1, d: 2}\n", ""},
		{"a: 1\na: 2\n", `line 2: mapping key "a" already defined at line 1`},
		{"t:\n  - name: x\n    slo: a\n    slo: b\n", `line 4: mapping key "slo" already defined at line 3`},
		{"b: {c: 1, c: 2}\n", `line 1: mapping key "c" already defined at line 1`},
		{"1: a\n\"1\": b\n", `line 2: mapping key "1" already defined at line 1`}, // as the decoder compares them
		{"a: 1\n---\na: 1\na: 2\n", ""}, // only the first document
		{"a: [1\n", ""},                 // not YAML: the decoder's to refuse
		{many(MaxMappingKeys), ""},
		{many(MaxMappingKeys + 1), "line 2: a mapping of 10001 keys, more than the 10000"},
	} {
		err := CheckDocument([]byte(c.in), nil)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%.60q: %v, want none", c.in, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%.60q: %v, want %q", c.in, err, c.want)
		}
		// What it lets through, the decoder reads the same way.
		if err == nil && c.want == "" && !strings.Contains(c.in, "[1") && !strings.Contains(c.in, "---") {
			var v map[string]any
			if derr := yaml.Unmarshal([]byte(c.in), &v); derr != nil {
				t.Errorf("%.60q: passed, but the decoder refuses it: %v", c.in, derr)
			}
		}
	}
}

// A document repeating one key thousands of times is refused at about
// its own cost: the decoder alone allocated 2 GB for 33 KB.
func TestCheckKeysRepeatedKeyCostsItsSize(t *testing.T) {
	doc := "tenants:\n  - name: acme\n" + strings.Repeat("    slo: x\n", 3000)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := CheckDocument([]byte(doc), nil)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), `line 4: mapping key "slo" already defined at line 3`) {
		t.Fatalf("error %v", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Fatalf("%d bytes allocated to refuse %d bytes", alloc, len(doc))
	}
}
