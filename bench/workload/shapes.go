package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
)

// lognormal is a clamped lognormal distribution of token counts: median
// exp(μ) and spread σ (of the log), rounded and clamped to [lo, hi].
type lognormal struct {
	median, sigma float64
	lo, hi        int
}

// z90 is the 90th percentile of the standard normal distribution.
const z90 = 1.2815515655446004

// p90 returns the 90th percentile (before clamping).
func (d lognormal) p90() float64 { return d.median * math.Exp(z90*d.sigma) }

func (d lognormal) draw(r *rand.Rand) int {
	v := math.Round(d.median * math.Exp(d.sigma*r.NormFloat64()))
	return int(min(max(v, float64(d.lo)), float64(d.hi)))
}

func (d lognormal) String() string {
	return fmt.Sprintf("lognormal median %.0f p90 %.0f [%d, %d]", d.median, d.p90(), d.lo, d.hi)
}

// preset is a shape of work: ISL and OSL drawn independently, or a mix of
// other presets.
type preset struct {
	name     string
	isl, osl lognormal
	mix      []mixPart // non-empty for a mixture
}

type mixPart struct {
	p     *preset
	share float64
}

// The presets. Their distributions are the contract of README.md's table
// and of the package documentation; TestPresetsClassifyAsTheirShape checks
// that each classifies as its own shape under the gateway's default
// thresholds.
var (
	presetChat = &preset{name: "chat",
		isl: lognormal{median: 512, sigma: 0.8, lo: 16, hi: 8192},
		osl: lognormal{median: 256, sigma: 0.7, lo: 16, hi: 2048}}
	presetRAG = &preset{name: "rag",
		isl: lognormal{median: 4096, sigma: 0.4, lo: 1024, hi: 32768},
		osl: lognormal{median: 96, sigma: 0.5, lo: 16, hi: 1024}}
	presetLongGen = &preset{name: "longgen",
		isl: lognormal{median: 200, sigma: 0.7, lo: 16, hi: 4096},
		osl: lognormal{median: 2048, sigma: 0.4, lo: 256, hi: 8192}}
	presetMixed = &preset{name: "mixed",
		mix: []mixPart{{presetChat, 0.5}, {presetRAG, 0.3}, {presetLongGen, 0.2}}}
	presets = []*preset{presetChat, presetRAG, presetLongGen, presetMixed}
)

// ShapeNames returns the names of the presets.
func ShapeNames() []string {
	n := make([]string, len(presets))
	for i, p := range presets {
		n[i] = p.name
	}
	return n
}

func presetByName(name string) (*preset, bool) {
	for _, p := range presets {
		if p.name == name {
			return p, true
		}
	}
	return nil, false
}

// draw returns one (ISL, OSL) pair.
func (p *preset) draw(r *rand.Rand) (isl, osl int) {
	if len(p.mix) > 0 {
		u := r.Float64()
		for _, m := range p.mix[:len(p.mix)-1] {
			if u < m.share {
				return m.p.draw(r)
			}
			u -= m.share
		}
		return p.mix[len(p.mix)-1].p.draw(r)
	}
	return p.isl.draw(r), p.osl.draw(r)
}

func (p *preset) String() string {
	if len(p.mix) > 0 {
		parts := make([]string, len(p.mix))
		for i, m := range p.mix {
			parts[i] = fmt.Sprintf("%.0f%% %s", 100*m.share, m.p.name)
		}
		return p.name + ": " + strings.Join(parts, ", ")
	}
	return fmt.Sprintf("%s: ISL %s, OSL %s", p.name, p.isl, p.osl)
}

// presetWorkload draws each request's ISL and OSL from a preset and writes
// a prompt of that many tokens.
type presetWorkload struct {
	p     *preset
	seed  int64
	synth *Synth
}

func newPresetWorkload(p *preset, seed int64) *presetWorkload {
	return &presetWorkload{p: p, seed: seed, synth: NewSynth(seed)}
}

func (w *presetWorkload) Requests(n int) []Request {
	if n <= 0 {
		return nil
	}
	r := newRand(w.seed, streamLengths)
	key := mix64(uint64(w.seed) ^ streamLengths)
	out := make([]Request, n)
	for i := range out {
		isl, osl := w.p.draw(r)
		out[i] = Request{Prompt: w.synth.textAt(key, uint64(i), isl), InputTokens: isl, MaxTokens: osl}
	}
	return out
}

func (w *presetWorkload) Rate() (float64, float64, bool) { return 0, 0, false }
func (w *presetWorkload) Describe() string               { return w.p.String() }
func (w *presetWorkload) Synth() *Synth                  { return w.synth }
