package sweep

import (
	"fmt"
	"math"
	"strings"

	"github.com/goodput/goodput/internal/svgchart"
)

// Rule is the knee rule's two settings. See FindKnee.
type Rule struct {
	// MinGain is the least fraction of the load's relative growth that
	// goodput must gain for a step to count as still rising (0.25: at +100%
	// load, goodput must rise more than 25%). 0 takes DefaultMinGain.
	MinGain float64 `json:"min_gain"`
	// Objective is the attainment objective (0.99: 99% of requests good); a
	// step below it is the knee at the latest. 0: attainment is not
	// checked.
	Objective float64 `json:"objective"`
}

// DefaultMinGain is Rule.MinGain's default. It sits between what a step
// below the knee shows (goodput grows about as fast as the load: a gain
// near 1, give or take the run's noise) and one past it (goodput flat or
// falling: near 0 or below). It also lets a curve that bends slowly, as a
// closed loop's does while the batch still grows, keep rising.
const DefaultMinGain = 0.25

// DefaultObjective is the attainment objective a sweep checks by default.
const DefaultObjective = 0.99

// Knee reasons.
const (
	ReasonFlat       = "goodput_flat"
	ReasonAttainment = "attainment"
)

// Knee is where the capacity curve bends: the first step at which goodput
// stops rising or attainment falls below the objective.
type Knee struct {
	// Found is false when no step qualifies: the knee lies beyond the
	// ladder's last step.
	Found bool `json:"found"`
	// Index is the knee's step (−1 when not found) and Load its load.
	Index int  `json:"index"`
	Load  Load `json:"load"`
	// Reasons are why that step is the knee: ReasonFlat, ReasonAttainment
	// or both.
	Reasons []string `json:"reasons"`
	// Sustained is the step before the knee, the highest load of the
	// ladder the service absorbed within the objective (−1: none, the
	// knee is the first step).
	Sustained int `json:"sustained_index"`
	// Note says it in a sentence.
	Note string `json:"note"`
	// Rule is the rule applied.
	Rule Rule `json:"rule"`
}

// FindKnee finds the knee of steps, which are in order of increasing load.
// With g the goodput of a step (Step.Goodput: good requests per second, or
// completed requests per second without an SLO) and x its load, the knee
// is the first step i that meets either condition:
//
//   - attainment: the objective is set (Rule.Objective > 0) and step i's
//     attainment is known and below it;
//
//   - goodput stops rising (i ≥ 1): with M the highest goodput before step
//     i, reached first at step m, no step j from i on raises goodput above
//     M by MinGain times the relative growth of the load:
//
//     g_j ≤ M·(1 + MinGain·(x_j/x_m − 1))   for every j ≥ i
//
//     Comparing with the best step before, not only the previous one, and
//     asking that no later step rise again, keeps a noisy dip below the
//     knee from being taken for it. An infinite load (request-rate inf)
//     counts as twice the load of the step before it. With M = 0 (no
//     goodput yet), any goodput above 0 is a rise.
//
// No step qualifying (goodput still rising at the end) gives Found false.
// A single step can only be a knee by attainment.
func FindKnee(steps []Step, rule Rule) Knee {
	if rule.MinGain <= 0 || math.IsNaN(rule.MinGain) {
		rule.MinGain = DefaultMinGain
	}
	k := Knee{Index: -1, Sustained: -1, Load: Load(math.NaN()), Rule: rule}
	if len(steps) == 0 {
		k.Note = "no knee: no steps"
		return k
	}
	x := loads(steps)
	g := make([]float64, len(steps))
	for i := range steps {
		g[i] = svgchart.Finite(steps[i].Goodput(), 0)
	}
	best, m := math.Inf(-1), -1 // M and m before step i
	for i := range steps {
		var reasons []string
		if i > 0 {
			if g[i-1] > best {
				best, m = g[i-1], i-1
			}
			if !risesFrom(g, x, i, best, m, rule.MinGain) {
				reasons = append(reasons, ReasonFlat)
			}
		}
		if a := steps[i].Attainment; rule.Objective > 0 && a.Known() && float64(a) < rule.Objective {
			reasons = append(reasons, ReasonAttainment)
		}
		if reasons == nil {
			continue
		}
		k.Found, k.Index, k.Load, k.Reasons, k.Sustained = true, i, steps[i].Load, reasons, i-1
		k.Note = kneeNote(steps, i, reasons, best, m, rule)
		return k
	}
	last := &steps[len(steps)-1]
	meets := ""
	if rule.Objective > 0 {
		meets = " and attainment meets the objective " + fmtPct(Num(rule.Objective))
	}
	if len(steps) == 1 {
		// One step (a sweep stopped after it): nothing to rise from.
		k.Note = fmt.Sprintf("no knee in one step (%s %s): a knee by goodput needs two%s", last.Kind, fmtLoad(last.Kind, last.Load), meets)
		return k
	}
	k.Note = fmt.Sprintf("no knee up to %s %s: goodput still rises%s; the knee lies beyond the last step", last.Kind, fmtLoad(last.Kind, last.Load), meets)
	return k
}

// risesFrom reports whether some step j ≥ i raises goodput above best
// (reached at step m) by more than minGain times the load's growth.
func risesFrom(g, x []float64, i int, best float64, m int, minGain float64) bool {
	for j := i; j < len(g); j++ {
		if g[j] > best*(1+minGain*(x[j]/x[m]-1)) && g[j] > best {
			return true
		}
	}
	return false
}

// loads returns the steps' loads for the knee rule: an infinite load is
// twice the one before it (or 1 when first).
func loads(steps []Step) []float64 {
	x := make([]float64, len(steps))
	for i := range steps {
		v := float64(steps[i].Load)
		if math.IsInf(v, 1) || math.IsNaN(v) || v <= 0 {
			v = 1
			if i > 0 {
				v = 2 * x[i-1]
			}
		}
		x[i] = v
	}
	return x
}

func kneeNote(steps []Step, i int, reasons []string, best float64, m int, rule Rule) string {
	s := &steps[i]
	var parts []string
	for _, r := range reasons {
		switch r {
		case ReasonFlat:
			parts = append(parts, fmt.Sprintf("goodput %s req/s against %s req/s at %s %s, and no later step rises again",
				fmtRate(s.Goodput()), fmtRate(best), steps[m].Kind, fmtLoad(steps[m].Kind, steps[m].Load)))
		case ReasonAttainment:
			parts = append(parts, fmt.Sprintf("attainment %s, below the objective %s", fmtPct(s.Attainment), fmtPct(Num(rule.Objective))))
		}
	}
	note := fmt.Sprintf("knee at %s %s: %s", s.Kind, fmtLoad(s.Kind, s.Load), strings.Join(parts, "; "))
	if i > 0 {
		p := &steps[i-1]
		note += fmt.Sprintf(" (highest load sustained: %s)", fmtLoad(p.Kind, p.Load))
	} else {
		note += " (the first step: the knee is at or below the lowest load)"
	}
	return note
}
