package cfgtypes

import (
	"strings"
	"testing"
)

// A number with a fraction is refused where it is decoded into an integer
// field, at its line: the YAML decoder cut it without a word (rpm: 0.5 was
// 0, no limit at all). Whole numbers however written, floats where the
// field holds floats, durations and what the decoder refuses itself pass.
func TestCheckWholeNumbers(t *testing.T) {
	type limits struct {
		RPM  int64   `yaml:"rpm"`
		Frac float64 `yaml:"frac"`
	}
	type inline struct {
		Threshold int `yaml:"threshold"`
	}
	type doc struct {
		Max     int               `yaml:"max_values"`
		Count   uint32            `yaml:"count"`
		Wait    Duration          `yaml:"wait"`
		List    []limits          `yaml:"list"`
		ByName  map[string]limits `yaml:"by_name"`
		Ptr     *limits           `yaml:"ptr"`
		Skipped int               `yaml:"-"`
		Inline  inline            `yaml:",inline"`
	}
	for _, c := range []struct{ in, want string }{
		{"max_values: 3\ncount: 1e3\nlist: [{rpm: 1_000, frac: 0.5}]\nthreshold: 2.0\n", ""},
		{"max_values: 0.5\n", "line 1: 0.5 is not a whole number (it would be read as 0)"},
		{"count: 2.9\n", "line 1: 2.9 is not a whole number (it would be read as 2)"},
		{"list:\n  - {rpm: 1}\n  - {frac: 0.5, rpm: 0.25}\n", "line 3: 0.25 is not a whole number"},
		{"by_name: {a: {rpm: -1.5}}\n", "line 1: -1.5 is not a whole number (it would be read as -1)"},
		{"ptr: {rpm: 1.5e0}\n", "line 1: 1.5e0 is not a whole number"},
		{"max_values: -0.5\n", "line 1: -0.5 is not a whole number (it would be read as 0)"}, // not "-0"
		{"threshold: 10.5\n", "line 1: 10.5 is not a whole number"},
		{"list: [{frac: &f 0.5}]\nmax_values: *f\n", "line 1: 0.5 is not a whole number"},                           // through an alias
		{"by_name: {a: {frac: &f 0.5}, b: {<<: {rpm: *f}}}\n", "line 1: 0.5 is not a whole number"},                 // through a merge key
		{"list: [{frac: 1}]\nby_name: {a: {<<: [{frac: 0.5}, {rpm: 2.5}]}}\n", "line 2: 2.5 is not a whole number"}, // through a list of them
		{"ptr: {<<: {rpm: 0.5}, rpm: 1}\n", "line 1: 0.5 is not a whole number"},                                    // overridden, but a fraction
		{"by_name: {<<: {a: {rpm: 3.5}}}\n", "line 1: 3.5 is not a whole number"},                                   // merged into a map
		{"by_name: {a: {<<: {frac: 0.5}, rpm: 2}}\n", ""},
		// Through YAML's merge key: the decoder reads the merged keys as
		// the mapping's own (max_values: 2).
		{"<<: {max_values: 2.5}\n", "line 1: 2.5 is not a whole number (it would be read as 2)"},
		{"by_name: {a: {<<: [{rpm: 1}, {rpm: 0.5}]}}\n", "line 1: 0.5 is not a whole number"},
		{"ptr: &b {rpm: 1, frac: 0.5}\nlist: [{<<: *b, frac: 1.5}]\n", ""},
		{"\"<<\": {max_values: 0.5}\n", ""},      // a quoted key is no merge: the decoder refuses it
		{"max_values: \"0.5\"\n", ""},            // a string: the decoder refuses it
		{"max_values: .nan\n", ""},               // not a finite number: the decoder refuses it
		{"wait: 1.5\n", ""},                      // a duration reads itself
		{"unknown: 0.5\n", ""},                   // the decoder refuses an unknown key
		{"list: [\n", ""},                        // not YAML
		{"max_values: 1\n---\ncount: 0.5\n", ""}, // only the first document
	} {
		err := CheckDocument([]byte(c.in), &doc{})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v, want none", c.in, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: %v, want %q", c.in, err, c.want)
		}
	}
	// An alias of an alias, nine deep, is walked once per node, not 9⁹
	// times.
	var b strings.Builder
	b.WriteString("list:\n  - &a0 {rpm: 1}\n")
	for i := 1; i < 10; i++ {
		b.WriteString("  - &a" + string(rune('0'+i)) + " {sub: [")
		for j := range 9 {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + string(rune('0'+i-1)))
		}
		b.WriteString("]}\n")
	}
	if err := CheckDocument([]byte(b.String()), &tree{}); err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(b.String(), "- &a0 {rpm: 1}", "- &a0 {rpm: 1.5}", 1)
	if err := CheckDocument([]byte(bad), &tree{}); err == nil || !strings.Contains(err.Error(), "1.5 is not a whole number") {
		t.Fatalf("nested aliases: %v", err)
	}
}

// tree is a list of lists, as deep as a document's: every alias of the
// nine-deep document above is walked under it.
type tree struct {
	List []node `yaml:"list"`
}

type node struct {
	RPM int    `yaml:"rpm"`
	Sub []node `yaml:"sub"`
}
