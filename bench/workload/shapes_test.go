package workload

import (
	"strings"
	"testing"
	"time"
)

// Every preset classifies as its own shape under the gateway's own
// thresholds: its requests, fed through the gateway's profiler, make
// traffic of that shape (mixed: no shape reaches the dominant share).
func TestPresetsClassifyAsTheirShape(t *testing.T) {
	const n = 2000
	for _, name := range ShapeNames() {
		w, err := FromFlags(name, "", "", 7)
		if err != nil {
			t.Fatal(err)
		}
		reqs := w.Requests(n)
		tr := make([]traffic, n)
		for i, r := range reqs {
			if r.InputTokens <= 0 || r.MaxTokens <= 0 || r.Prompt == "" {
				t.Fatalf("%s: request %d: %+v", name, i, r)
			}
			tr[i] = traffic{tenant: "t", model: "m", at: time.Duration(i) * time.Second, isl: r.InputTokens, osl: r.MaxTokens}
		}
		snap := decodeProfile(t, gatewayProfile(t, tr))
		p := snap.Tenants[0].Profile
		t.Logf("%s: traffic %s, fractions chat %.3f rag %.3f longgen %.3f; ISL p50 %.0f p90 %.0f, OSL p50 %.0f p90 %.0f",
			name, p.Shapes.Traffic, p.Shapes.Fractions["chat"], p.Shapes.Fractions["rag"], p.Shapes.Fractions["longgen"],
			p.ISL.P50, p.ISL.P90, p.OSL.P50, p.OSL.P90)
		if p.Shapes.Traffic != name {
			t.Errorf("%s preset classifies as %s traffic", name, p.Shapes.Traffic)
		}
		if !strings.HasPrefix(w.Describe(), name+":") {
			t.Errorf("describe %q", w.Describe())
		}
		if _, _, ok := w.Rate(); ok {
			t.Errorf("%s: a preset carries no arrival process", name)
		}
	}
}

// The presets' drawn medians and p90s are the documented ones (README and
// package doc), within sampling error.
func TestPresetQuantiles(t *testing.T) {
	for _, p := range []*preset{presetChat, presetRAG, presetLongGen} {
		w := newPresetWorkload(p, 3)
		reqs := w.Requests(4000)
		isl := make([]float64, len(reqs))
		osl := make([]float64, len(reqs))
		for i, r := range reqs {
			isl[i], osl[i] = float64(r.InputTokens), float64(r.MaxTokens)
		}
		for _, c := range []struct {
			what string
			xs   []float64
			d    lognormal
		}{{"ISL", isl, p.isl}, {"OSL", osl, p.osl}} {
			med, p90 := quantileOf(c.xs, 0.5), quantileOf(c.xs, 0.9)
			if d := med/c.d.median - 1; d > 0.05 || d < -0.05 {
				t.Errorf("%s %s median %.0f, documented %.0f", p.name, c.what, med, c.d.median)
			}
			if d := p90/c.d.p90() - 1; d > 0.06 || d < -0.06 {
				t.Errorf("%s %s p90 %.0f, documented %.0f", p.name, c.what, p90, c.d.p90())
			}
		}
	}
}

func TestFromFlags(t *testing.T) {
	w, err := FromFlags("", "", "", 1)
	if err != nil || !strings.HasPrefix(w.Describe(), "chat:") {
		t.Fatalf("default: %v %v", w, err)
	}
	if _, err := FromFlags("chat", "p.json", "", 1); err == nil || !strings.Contains(err.Error(), "choose one") {
		t.Errorf("two set: %v", err)
	}
	if _, err := FromFlags("batch", "", "", 1); err == nil || !strings.Contains(err.Error(), "chat, rag, longgen, mixed") {
		t.Errorf("unknown shape: %v", err)
	}
	// Deterministic for the seed, whatever was asked before.
	a := w.Requests(50)
	_ = w.Synth().Text(100)
	_ = w.Requests(10)
	b := w.Requests(50)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("request %d differs: %+v vs %+v", i, a[i], b[i])
		}
	}
	w2, _ := FromFlags("chat", "", "", 2)
	if c := w2.Requests(50); c[0] == a[0] && c[1] == a[1] {
		t.Error("seeds 1 and 2 give the same requests")
	}
}
