package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/goodput/goodput/bench"
	"github.com/goodput/goodput/bench/sweep"
)

// demoCurveSteps is how many equal slices of the ramp make the capacity
// curve's steps.
const demoCurveSteps = 6

// demoSLO is a class's bounds as the load generator's --goodput: the demo's
// classes bound only TTFT, TPOT and E2E, which bench judges with the same
// inclusive rule.
func demoSLO(class string) bench.SLO {
	c := demoClasses()[class]
	return bench.SLO{TTFT: c.TTFT.D(), TPOT: c.TPOT.D(), E2EL: c.E2E.D()}
}

// capacityCurve cuts the ramp into demoCurveSteps slices of time and makes
// each a step of a sweep (package sweep) at the offered rate of its middle:
// the requests the load generator sent in the slice, all tenants together,
// each judged good against its own tenant's class. Requests the demo's end
// cut have no fate and are left out (the count is returned). A run stopped
// early (Ctrl-C) keeps the slices it finished; the requests of the others
// are left out too. Nil when the ramp does not rise, nothing was sent, or
// fewer than two slices were finished.
//
// The knee is where goodput stops rising (sweep.FindKnee without an
// attainment objective): the tenants' classes have objectives of their
// own, which the report judges each against.
func (r *demoRun) capacityCurve() (*sweep.Sweep, int) {
	p := r.plan
	if p.to <= p.from || len(r.results) == 0 {
		return nil, 0
	}
	slice := p.duration.Seconds() / demoCurveSteps
	steps := demoCurveSteps
	if r.stoppedAfter > 0 {
		// A slice is finished when the stop came after its end and none
		// of its requests was cut in flight: a cut request's fate is
		// unknown, and leaving it out would understate the slice's
		// goodput (most near the knee, where requests take longest).
		steps = min(steps, int(r.stoppedAfter.Seconds()/slice))
		for _, t := range p.tenants {
			res := r.results[t.name]
			if res == nil {
				continue
			}
			for j, e := range res.Errors {
				if strings.HasPrefix(e, "stopped with the run") && j < len(res.StartTimes) {
					steps = min(steps, max(int(res.StartTimes[j]/slice), 0))
				}
			}
		}
	}
	type bin struct {
		completed, failed, good int
		out, goodOut            int
		ttft, itl, tpot, e2e    []float64
	}
	bins := make([]bin, demoCurveSteps)
	cut := 0
	for _, t := range p.tenants {
		res := r.results[t.name]
		if res == nil {
			continue
		}
		if res.Goodput != nil {
			cut += res.Goodput.NotSent // in no per-request array
		}
		for j, e := range res.Errors {
			if strings.HasPrefix(e, "stopped with the run") {
				cut++
				continue
			}
			i := min(max(int(res.StartTimes[j]/slice), 0), demoCurveSteps-1)
			if i >= steps {
				cut++ // sent in a slice the stopped run did not finish
				continue
			}
			b := &bins[i]
			if e != "" {
				b.failed++
				continue
			}
			b.completed++
			osl := at(res.OutputLens, j)
			b.out += osl
			if res.Goodput != nil && j < len(res.Goodput.Good) && res.Goodput.Good[j] {
				b.good++
				b.goodOut += osl
			}
			ttft, e2e := 1000*at(res.TTFTs, j), 1000*at(res.Latencies, j)
			b.ttft = append(b.ttft, ttft)
			b.e2e = append(b.e2e, e2e)
			if osl > 1 {
				b.tpot = append(b.tpot, (e2e-ttft)/float64(osl-1))
			}
			if j < len(res.ITLs) {
				for _, g := range res.ITLs[j] {
					b.itl = append(b.itl, 1000*g)
				}
			}
		}
	}
	if steps < 2 {
		return nil, cut
	}
	var loads []string
	s := &sweep.Sweep{Kind: sweep.RequestRate, Date: r.start.UTC().Format(time.RFC3339)}
	for i, b := range bins[:steps] {
		mid := time.Duration((float64(i) + 0.5) * slice * float64(time.Second))
		load := math.Round(100*p.rateAt(mid)) / 100
		loads = append(loads, fmt.Sprint(load))
		st := sweep.Step{
			Kind: sweep.RequestRate, Load: sweep.Load(load), Completed: b.completed, Failed: b.failed, Duration: slice,
			RequestThroughput: float64(b.completed) / slice, OutputThroughput: float64(b.out) / slice,
			RequestGoodput: sweep.Num(float64(b.good) / slice), GoodOutputThroughput: sweep.Num(float64(b.goodOut) / slice),
			Good: b.good, Attainment: sweep.Unknown,
			TTFT: pct50and99(b.ttft), ITL: pct50and99(b.itl), TPOT: pct50and99(b.tpot), E2EL: pct50and99(b.e2e),
		}
		if n := b.completed + b.failed; n > 0 {
			st.Attainment = sweep.Num(float64(b.good) / float64(n))
		}
		s.Steps = append(s.Steps, st)
	}
	s.Ladder = "request-rate=" + strings.Join(loads, ",")
	s.Knee = sweep.FindKnee(s.Steps, sweep.Rule{})
	var classes []string
	for _, t := range p.tenants {
		classes = append(classes, fmt.Sprintf("%s %s (%s)", t.name, demoSLO(t.class), t.class))
	}
	s.SLO = "per tenant: " + strings.Join(classes, "; ")
	s.Label = sweep.LabelFields{
		Engine: "goodput sim (batching)", Version: "preset " + p.preset, Precision: "simulated", GPUs: "simulated", TP: "simulated",
		ISL: fmt.Sprintf("%d (mean of the mix)", p.capacity.ISL), OSL: fmt.Sprintf("%d (mean of the mix)", p.capacity.OSL),
		Load:       fmt.Sprintf("goodput demo's ramp %.1f× → %.1f× the predicted knee (%.2f req/s) over %s, in %d slices", p.from, p.to, p.capacity.MaxRate, p.duration, demoCurveSteps),
		Percentile: "p50, p99", Goodput: "each tenant's class, as the load generator measured it",
	}.String()
	return s, cut
}

func at[T int | float64](s []T, i int) T {
	if i < len(s) {
		return s[i]
	}
	return 0
}

// pct50and99 is the median and p99 (linear interpolation, as numpy and
// vLLM) of values in ms; unknown without values.
func pct50and99(v []float64) sweep.Pct {
	if len(v) == 0 {
		return sweep.Pct{P50: sweep.Unknown, P99: sweep.Unknown}
	}
	sort.Float64s(v)
	q := func(p float64) sweep.Num {
		x := p / 100 * float64(len(v)-1)
		lo := int(math.Floor(x))
		hi := min(lo+1, len(v)-1)
		return sweep.Num(v[lo] + (v[hi]-v[lo])*(x-float64(lo)))
	}
	return sweep.Pct{P50: q(50), P99: q(99)}
}

// curveFile is the capacity curve's page beside the report:
// goodput-demo.html → goodput-demo-capacity.html.
func curveFile(report string) string {
	ext := filepath.Ext(report)
	return strings.TrimSuffix(report, ext) + "-capacity" + ext
}

// writeCurve writes the capacity curve's page (sweep.WriteHTML) beside the
// report and returns a sentence about it for the summary and the report.
func (r *demoRun) writeCurve() (note string, err error) {
	s, cut := r.capacityCurve()
	if s == nil {
		if r.stoppedAfter > 0 {
			// Not a curve of an earlier run left beside this report.
			_ = os.Remove(curveFile(r.args.reportFile))
			fmt.Fprintf(r.stdout, "no capacity curve: the run stopped before two of the ramp's %d slices were finished\n", demoCurveSteps)
		}
		return "", nil
	}
	path := curveFile(r.args.reportFile)
	f, err := os.Create(path)
	if err != nil {
		return "", fmt.Errorf("capacity curve: %w", err)
	}
	if err := sweep.WriteHTML(f, s); err != nil {
		f.Close()
		return "", fmt.Errorf("capacity curve: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("capacity curve: %w", err)
	}
	knee := "no knee within the ramp (goodput still rising at its end)"
	if s.Knee.Found {
		knee = fmt.Sprintf("measured knee (where goodput stops rising) at %s req/s offered (step %d of %d)", s.Knee.Load, s.Knee.Index+1, len(s.Steps))
	}
	slices := fmt.Sprintf("the ramp in %d slices", len(s.Steps))
	if len(s.Steps) < demoCurveSteps {
		slices = fmt.Sprintf("the %d of the ramp's %d slices the run finished", len(s.Steps), demoCurveSteps)
	}
	note = fmt.Sprintf("capacity curve (%s, the load generator's figures): %s; predicted %.2f req/s", slices, knee, r.plan.capacity.MaxRate)
	if cut > 0 {
		note += fmt.Sprintf("; %d requests cut by the end left out", cut)
	}
	return note, nil
}
