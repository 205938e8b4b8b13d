package compare

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/goodput/goodput/bench"
)

// What goodput bench accepts as --goodput, compare reads: a bound of 0 ms
// (met only by 0) too, from --slo and from the result alike, and the other
// bounds beside it are kept.
func TestCompareOwnSLOZeroBound(t *testing.T) {
	b, err := bench.ParseSLO([]string{"ttft:0", "tpot:25"})
	if err != nil {
		t.Fatal(err)
	}
	doc := benchWith(t, func(m map[string]any) {
		m["goodput_bench"] = map[string]any{"slo": b.String()} // as bench writes it: "ttft:0 tpot:25"
		m["ttfts"].([]any)[0] = 0.0                            // the one request a TTFT bound of 0 lets through
	})
	s, err := ReadBench("b.json", doc, BenchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.OwnSLO == nil || s.OwnSLO.String() != "ttft:0,tpot:25" || s.OwnSLOError() != nil {
		t.Fatalf("own SLO %+v (%v), want ttft:0,tpot:25", s.OwnSLO, s.OwnSLOError())
	}
	if o, err := ParseSLO("ttft:0 tpot:25"); err != nil || o != *s.OwnSLO {
		t.Errorf("--slo ttft:0 tpot:25 = %+v, %v; want the file's %+v", o, err, *s.OwnSLO)
	}
	r := Compare(s, s, SLO{}, DefaultTolerances())
	if r.SLO == nil || r.SLO.String() != "ttft:0,tpot:25" || !strings.Contains(text(t, r), "SLO:       ttft:0,tpot:25 (the benchmark result's goodput SLO)") {
		t.Fatalf("SLO %v:\n%s", r.SLO, text(t, r))
	}
	// Of the five, only the request of TTFT 0 can be good (its TPOT, of a
	// chat request, is well within 25 ms).
	if a := r.AttainSynth; !a.Exact() || a.Low != 1.0/5 {
		t.Errorf("attainment %+v, want 1/5", a)
	}
	var out bytes.Buffer
	if err := r.WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	var back struct {
		SLO SLO `json:"slo"`
	}
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back.SLO != *s.OwnSLO || !strings.Contains(out.String(), `"ttft_ms": 0`) {
		t.Errorf("json slo %+v %v, want ttft_ms 0 read back as the bound of 0", back.SLO, err)
	}
}

// An SLO the result carries that compare cannot read is never dropped in
// silence: a note, and OwnSLOError for the command to refuse the file when
// no --slo replaces it.
func TestCompareOwnSLOUnreadable(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"object of a word", func(m map[string]any) { m["goodput"] = map[string]any{"ttft": "abc"} }, `field "goodput"`},
		{"negative bound", func(m map[string]any) { m["goodput"] = []string{"ttft:-5"} }, `field "goodput"`},
		{"a bound holding another", func(m map[string]any) { m["goodput"] = map[string]any{"ttft": "5,tpot:1"} }, `"ttft" is "5,tpot:1": want a number of milliseconds`},
		{"unknown metric", func(m map[string]any) { m["slo"] = "latency:5" }, `field "slo"`},
		{"a number", func(m map[string]any) { m["goodput"] = 7 }, `field "goodput": 7: want an object`},
		{"goodput bench's", func(m map[string]any) { m["goodput_bench"] = map[string]any{"slo": "ttft:abc"} }, "goodput_bench.slo"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := ReadBench("b.json", benchWith(t, c.edit), BenchOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if s.OwnSLO != nil || s.OwnSLOError() == nil || !strings.Contains(s.OwnSLOError().Error(), c.want) {
				t.Errorf("own SLO %+v, error %v; want none and an error with %q", s.OwnSLO, s.OwnSLOError(), c.want)
			}
			if !strings.Contains(strings.Join(s.Notes, "\n"), "the result's own SLO cannot be read") {
				t.Errorf("notes %q", s.Notes)
			}
		})
	}
	// A bound written as a string of a number reads; an empty SLO is none.
	for _, c := range []struct {
		v    any
		want string
	}{{map[string]any{"ttft": "500", "e2el": 2000}, "ttft:500,e2el:2000"}, {[]string{}, ""}, {"none", ""}} {
		s, err := ReadBench("b.json", benchWith(t, func(m map[string]any) { m["goodput"] = c.v }), BenchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if s.OwnSLO != nil {
			got = s.OwnSLO.String()
		}
		if got != c.want || s.OwnSLOError() != nil {
			t.Errorf("goodput %v: own SLO %q, error %v; want %q", c.v, got, s.OwnSLOError(), c.want)
		}
	}
}
