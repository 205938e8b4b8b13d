package compare

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Tolerances are the limits beyond which a benchmark does not represent
// the real traffic. A zero limit turns its check off.
type Tolerances struct {
	// MaxKS bounds the two-sample KS statistic of ISL and of OSL.
	MaxKS float64 `json:"max_ks"`
	// MaxRateRatio bounds max(a/b, b/a) of the arrival rates.
	MaxRateRatio float64 `json:"max_rate_ratio"`
	// MaxBurstinessRatio bounds max(a/b, b/a) of the burstiness k.
	MaxBurstinessRatio float64 `json:"max_burstiness_ratio"`
	// MaxConcurrencyRatio bounds max(a/b, b/a) of the mean concurrency.
	MaxConcurrencyRatio float64 `json:"max_concurrency_ratio"`
	// MaxAttainmentDiff bounds |a - b| of the SLO attainments (a fraction).
	MaxAttainmentDiff float64 `json:"max_attainment_diff"`
}

// DefaultTolerances: the ISL and OSL distributions within KS 0.2, the
// arrival rate and the burstiness within a factor of 2; concurrency and
// attainment reported, not checked.
func DefaultTolerances() Tolerances {
	return Tolerances{MaxKS: 0.2, MaxRateRatio: 2, MaxBurstinessRatio: 2}
}

// Check is one tolerance test.
type Check struct {
	Name  string  `json:"name"`
	Value Num     `json:"value"`
	Limit float64 `json:"limit"`
	// Pass is true within the limit; a check that could not be made
	// (Skipped says why) passes.
	Pass    bool   `json:"pass"`
	Skipped string `json:"skipped,omitempty"`
	// Detail says how the value was computed.
	Detail string `json:"detail,omitempty"`
}

// Row is one line of the side-by-side table.
type Row struct {
	Group     string `json:"group"`
	Name      string `json:"name"`
	Synthetic Num    `json:"synthetic"`
	Real      Num    `json:"real"`
	Unit      string `json:"unit,omitempty"`
}

// Result is a comparison.
type Result struct {
	Synthetic *Side `json:"synthetic"`
	Real      *Side `json:"real"`
	Rows      []Row `json:"rows"`
	ISLKS     KS    `json:"isl_ks"`
	OSLKS     KS    `json:"osl_ks"`
	// SLO is the objective both sides were judged against (none: nil);
	// SLOFrom says whose it is.
	SLO         *SLO       `json:"slo,omitempty"`
	SLOFrom     string     `json:"slo_from,omitempty"`
	AttainSynth Attainment `json:"attainment_synthetic"`
	AttainReal  Attainment `json:"attainment_real"`
	Checks      []Check    `json:"checks"`
	Findings    []string   `json:"findings"`
	Pass        bool       `json:"pass"`
	Tolerances  Tolerances `json:"tolerances"`
}

// Compare puts a benchmark (synthetic) beside real traffic. slo, when not
// zero, is the objective both are judged against; otherwise the
// benchmark's own (vLLM's --goodput), if it carries one.
func Compare(syn, real *Side, o SLO, tol Tolerances) *Result {
	r := &Result{Synthetic: syn, Real: real, Tolerances: tol, Pass: true}
	r.ISLKS = ksStat(&syn.ISL, &real.ISL)
	r.OSLKS = ksStat(&syn.OSL, &real.OSL)
	for _, ks := range []*KS{&r.ISLKS, &r.OSLKS} {
		switch {
		case present(ks.D):
		case syn.Requests == 0 && syn.perRequest:
			ks.Why = "no request of the benchmark completed"
		case real.Requests == 0 && real.perRequest:
			ks.Why = "no request of the real traffic completed"
		}
	}
	own := false
	switch {
	case !o.IsZero():
		r.SLO, r.SLOFrom = &o, "--slo"
	case syn.OwnSLO != nil:
		r.SLO, r.SLOFrom, own = syn.OwnSLO, "the benchmark result's goodput SLO", true
	}
	if r.SLO != nil {
		r.AttainSynth = syn.attainment(*r.SLO, own)
		r.AttainReal = real.attainment(*r.SLO, false)
	}
	r.rows()
	r.checks()
	r.findings()
	for _, c := range r.Checks {
		r.Pass = r.Pass && c.Pass
	}
	return r
}

func (r *Result) add(group, name, unit string, a, b Num) {
	r.Rows = append(r.Rows, Row{Group: group, Name: name, Synthetic: a, Real: b, Unit: unit})
}

func (r *Result) rows() {
	s, l := r.Synthetic, r.Real
	r.add("requests", "completed", "", Num(s.Requests), Num(l.Requests))
	r.add("requests", "failed", "", s.Failed, l.Failed)
	for _, t := range []struct {
		name string
		a, b *Dist
	}{{"ISL", &s.ISL, &l.ISL}, {"OSL", &s.OSL, &l.OSL}} {
		r.dist(t.name, "tokens", t.a, t.b)
	}
	r.add("arrivals", "rate", "req/s", s.ArrivalRate, l.ArrivalRate)
	r.add("arrivals", "burstiness k", "", s.Burstiness, l.Burstiness)
	r.add("concurrency", "mean", "", s.ConcMean, l.ConcMean)
	r.add("concurrency", "peak", "", s.ConcPeak, l.ConcPeak)
	for _, t := range []struct {
		name string
		a, b *Dist
	}{{"TTFT", &s.TTFT, &l.TTFT}, {"TPOT", &s.TPOT, &l.TPOT}, {"ITL", &s.ITL, &l.ITL}, {"E2E", &s.E2E, &l.E2E}} {
		r.dist(t.name, "ms", t.a, t.b)
	}
	if r.SLO != nil {
		r.add("SLO "+r.SLO.String(), "attainment", "", r.AttainSynth.Mid(), r.AttainReal.Mid())
	}
}

// dist adds the rows of one distribution: its mean, p50, p90, p95 and p99
// (numpy's linear interpolation on per-request values) and its maximum.
func (r *Result) dist(name, unit string, a, b *Dist) {
	r.add(name, "mean", unit, a.Mean(), b.Mean())
	for _, q := range []float64{0.5, 0.9, 0.95, 0.99} {
		r.add(name, pKey(q), unit, a.Quantile(q), b.Quantile(q))
	}
	r.add(name, "max", unit, a.Max(), b.Max())
}

// ratio returns max(a/b, b/a) of two positive figures (Inf when exactly
// one is infinite, 1 when both are).
func ratio(a, b Num) float64 {
	x, y := float64(a), float64(b)
	switch {
	case math.IsInf(x, 1) && math.IsInf(y, 1):
		return 1
	case math.IsInf(x, 1) || math.IsInf(y, 1):
		return math.Inf(1)
	case x <= 0 || y <= 0:
		if x == y {
			return 1
		}
		return math.Inf(1)
	}
	return math.Max(x/y, y/x)
}

func present(n Num) bool { return !math.IsNaN(float64(n)) }

func (r *Result) checks() {
	s, l, t := r.Synthetic, r.Real, r.Tolerances
	for _, k := range []struct {
		name string
		ks   KS
	}{{"ISL KS", r.ISLKS}, {"OSL KS", r.OSLKS}} {
		if t.MaxKS <= 0 {
			continue
		}
		c := Check{Name: k.name, Value: k.ks.D, Limit: t.MaxKS}
		switch {
		case !present(k.ks.D):
			c.Pass, c.Skipped = true, k.ks.Why
		default:
			c.Pass = float64(k.ks.D) <= t.MaxKS
			if k.ks.Method == "buckets" {
				c.Detail = fmt.Sprintf("bucketed at %d bounds: a lower bound of the exact statistic", k.ks.Points)
			} else {
				c.Detail = "exact, on per-request values"
			}
		}
		r.Checks = append(r.Checks, c)
	}
	for _, q := range []struct {
		name         string
		a, b         Num
		limit        float64
		fromA, fromB string
	}{
		{"arrival rate ratio", s.ArrivalRate, l.ArrivalRate, t.MaxRateRatio, s.RateFrom, l.RateFrom},
		{"burstiness ratio", s.Burstiness, l.Burstiness, t.MaxBurstinessRatio, s.BurstinessFrom, l.BurstinessFrom},
		{"concurrency ratio (mean)", s.ConcMean, l.ConcMean, t.MaxConcurrencyRatio, s.ConcFrom, l.ConcFrom},
	} {
		if q.limit <= 0 {
			continue
		}
		c := Check{Name: q.name, Limit: q.limit, Value: unknown}
		switch {
		case !present(q.a):
			c.Pass, c.Skipped = true, "the benchmark does not give it"
		case !present(q.b):
			c.Pass, c.Skipped = true, "the real source does not give it"
		default:
			c.Value = Num(ratio(q.a, q.b))
			c.Pass = float64(c.Value) <= q.limit
			c.Detail = "synthetic: " + q.fromA + "; real: " + q.fromB
		}
		r.Checks = append(r.Checks, c)
	}
	if t.MaxAttainmentDiff > 0 {
		c := Check{Name: "attainment difference", Limit: t.MaxAttainmentDiff, Value: unknown}
		a, b := r.AttainSynth, r.AttainReal
		switch {
		case r.SLO == nil:
			c.Pass, c.Skipped = true, "no SLO (--slo, or a benchmark result with its goodput SLO)"
		case !present(a.Low) || !present(b.Low):
			c.Pass, c.Skipped = true, "a side's attainment is unknown"
		default:
			// The smallest difference the ranges allow.
			d := math.Max(0, math.Max(float64(a.Low-b.High), float64(b.Low-a.High)))
			c.Value = Num(d)
			c.Pass = d <= t.MaxAttainmentDiff
			if !a.Exact() || !b.Exact() {
				c.Detail = "the smallest difference the attainment ranges allow"
			}
		}
		r.Checks = append(r.Checks, c)
	}
}

// describeK says in words what a burstiness k is.
func describeK(k Num, regular bool) string {
	switch {
	case regular:
		return "regular (constant gaps)"
	case !known(k):
		return "unknown"
	case float64(k) >= 0.8 && float64(k) <= 1.25:
		return "Poisson (k=" + fmtNum(float64(k)) + ")"
	case float64(k) < 0.8:
		return "bursty (k=" + fmtNum(float64(k)) + ")"
	}
	return "more regular than Poisson (k=" + fmtNum(float64(k)) + ")"
}

func (r *Result) limitExceeded(name string) bool {
	for _, c := range r.Checks {
		if c.Name == name {
			return !c.Pass
		}
	}
	return false
}

func (r *Result) findings() {
	s, l := r.Synthetic, r.Real
	add := func(format string, a ...any) { r.Findings = append(r.Findings, fmt.Sprintf(format, a...)) }
	for _, t := range []struct {
		name, phase string
		a, b        *Dist
		ks          KS
	}{{"ISL", "prefill", &s.ISL, &l.ISL, r.ISLKS}, {"OSL", "decode", &s.OSL, &l.OSL, r.OSLKS}} {
		am, bm := t.a.Quantile(0.5), t.b.Quantile(0.5)
		what := "median"
		if !known(am) || !known(bm) {
			am, bm, what = t.a.Mean(), t.b.Mean(), "mean"
		}
		if !known(am) || !known(bm) {
			continue
		}
		switch rt := ratio(am, bm); {
		case rt >= 1.5 && am < bm:
			add("synthetic %s %s %s vs real %s: %s is understated", t.name, what, fmtNum(float64(am)), fmtNum(float64(bm)), t.phase)
		case rt >= 1.5:
			add("synthetic %s %s %s vs real %s: %s is overstated", t.name, what, fmtNum(float64(am)), fmtNum(float64(bm)), t.phase)
		case r.limitExceeded(t.name + " KS"):
			a99, b99 := t.a.Quantile(0.99), t.b.Quantile(0.99)
			tail := ""
			if known(a99) && known(b99) {
				tail = fmt.Sprintf(" (p99 %s vs %s)", fmtNum(float64(a99)), fmtNum(float64(b99)))
			}
			add("%s %ss are close (%s vs %s) but the distributions differ, KS %s%s", t.name, what, fmtNum(float64(am)), fmtNum(float64(bm)), fmtNum(float64(t.ks.D)), tail)
		}
	}
	if present(s.ArrivalRate) && present(l.ArrivalRate) {
		if rt := ratio(s.ArrivalRate, l.ArrivalRate); rt > 1.5 {
			word := "overstated"
			if s.ArrivalRate < l.ArrivalRate {
				word = "understated"
			}
			add("synthetic arrival rate %s req/s vs real %s req/s: load is %s ×%s", fmtNum(float64(s.ArrivalRate)), fmtNum(float64(l.ArrivalRate)), word, fmtNum(rt))
		}
	}
	if present(s.Burstiness) && present(l.Burstiness) && ratio(s.Burstiness, l.Burstiness) > 1.5 {
		word := "understated"
		if s.Burstiness < l.Burstiness {
			word = "overstated"
		}
		add("synthetic arrivals are %s, real traffic is %s: queueing is %s", describeK(s.Burstiness, s.Regular), describeK(l.Burstiness, l.Regular), word)
	}
	if present(s.ConcMean) && present(l.ConcMean) && ratio(s.ConcMean, l.ConcMean) > 2 {
		add("synthetic keeps %s requests in flight on average vs real %s (peak %s vs %s)", fmtNum(float64(s.ConcMean)), fmtNum(float64(l.ConcMean)), fmtNum(float64(s.ConcPeak)), fmtNum(float64(l.ConcPeak)))
	}
	if r.SLO != nil && present(r.AttainSynth.Low) && present(r.AttainReal.Low) {
		a, b := r.AttainSynth, r.AttainReal
		switch {
		case float64(a.Low-b.High) > 0.05:
			add("under the same SLO (%s), synthetic attainment %s vs real %s: the benchmark is optimistic", r.SLO, fmtAttain(a), fmtAttain(b))
		case float64(b.Low-a.High) > 0.05:
			add("under the same SLO (%s), synthetic attainment %s vs real %s: the benchmark is pessimistic", r.SLO, fmtAttain(a), fmtAttain(b))
		}
	}
	var skipped []string
	for _, c := range r.Checks {
		if c.Skipped != "" {
			skipped = append(skipped, c.Name)
		}
	}
	if len(skipped) > 0 {
		add("not checked (a side lacks the data): %s", strings.Join(skipped, ", "))
	}
	if r.allPass() {
		add("the benchmark represents the real traffic within the tolerances")
	}
}

func (r *Result) allPass() bool {
	for _, c := range r.Checks {
		if !c.Pass {
			return false
		}
	}
	return true
}

func fmtAttain(a Attainment) string {
	if !present(a.Low) {
		return "unknown"
	}
	if a.Exact() {
		return fmtPct(float64(a.Low))
	}
	return fmtPct(float64(a.Low)) + "–" + fmtPct(float64(a.High))
}

func fmtPct(f float64) string { return strconv.FormatFloat(f*100, 'f', 1, 64) + "%" }

// fmtNum formats a figure for people: thousands separated by commas from
// 1,000 (to 10^15), three significant digits below, and beyond 10^15,
// where an int64 would not hold every figure, three significant digits
// with an exponent (a hostile or broken request log's 1e20).
func fmtNum(f float64) string {
	switch {
	case math.IsNaN(f):
		return "–"
	case math.IsInf(f, 1):
		return "∞"
	case math.IsInf(f, -1):
		return "-∞"
	case math.Abs(f) >= 1e15:
		return strconv.FormatFloat(f, 'g', 3, 64)
	case math.Abs(f) >= 999.5:
		// From 999.5 up, three significant digits round to 1,000 or more:
		// written whole, not as 1e+03.
		s := strconv.FormatInt(int64(math.Round(math.Abs(f))), 10)
		var b strings.Builder
		if f < 0 {
			b.WriteByte('-')
		}
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		return b.String()
	case f == math.Trunc(f):
		return strconv.FormatFloat(f, 'f', 0, 64)
	}
	return strconv.FormatFloat(f, 'g', 3, 64)
}
