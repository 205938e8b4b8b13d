package sweep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goodput/goodput/bench"
)

// Options configures Run.
type Options struct {
	// Bench is every step's options: server, workload, number of prompts,
	// seed, SLO, label, warm-up (run before each step, reported apart),
	// headers. Its Arrival is the base each step changes: a request-rate
	// ladder sets Arrival.Rate, a max-concurrency ladder
	// Arrival.MaxConcurrency, a concurrency ladder the closed loop's
	// Arrival.Concurrency.
	Bench bench.Options
	// Ladder is the steps, in increasing load.
	Ladder Ladder
	// Rule is the knee rule (zero: MinGain 0.25, no attainment check).
	Rule Rule
	// OnStep, when not nil, is called after each step with its summary and
	// its full result (nil when the step could not run).
	OnStep func(i int, st *Step, res *bench.Result)
}

// Result is a sweep's result file: the summary (steps, knee, label) and
// every step's full bench result, in the order of the steps (null for a
// step that could not run).
type Result struct {
	Sweep
	Results []*bench.Result `json:"results"`
}

// arrival returns the base arrival process with the ladder's value v.
func arrival(base bench.Arrival, k Kind, v Load) bench.Arrival {
	a := base
	switch k {
	case RequestRate:
		a.Rate = float64(v)
	case MaxConcurrency:
		a.MaxConcurrency = int(v)
	case Concurrency:
		a = bench.Arrival{Concurrency: int(v)}
	}
	return a
}

// check refuses a base arrival process the ladder contradicts.
func (o *Options) check() error {
	if len(o.Ladder.Values) == 0 {
		return errNoSteps
	}
	a := o.Bench.Arrival
	switch o.Ladder.Kind {
	case RequestRate, MaxConcurrency:
		if a.Concurrency > 0 {
			return fmt.Errorf("a %s sweep is an open loop: it excludes a closed loop's concurrency", o.Ladder.Kind)
		}
		if a.Offsets != nil {
			return errors.New("a sweep plans its own arrivals: planned offsets are not supported")
		}
	case Concurrency:
		if a.Rate != 0 || a.MaxConcurrency != 0 || a.Offsets != nil {
			return errors.New("a concurrency sweep is a closed loop: it excludes a request rate and a max concurrency")
		}
	default:
		return fmt.Errorf("unknown sweep kind %q", o.Ladder.Kind)
	}
	return nil
}

// Run runs the ladder's steps in order, each its own bench.Run with the
// same options (so the same workload, requests and seed) but the step's
// load, and returns every step's summary and result with the knee. The
// workload's prompts are calibrated to the server once, before the first
// step. A step that cannot run at all (the server went away) is recorded
// with its error and the sweep goes on; an error before any step ran, or
// ctx ending, ends the sweep: Run then returns what it has with the
// error. A step ctx ends while it runs is not a step done: its requests
// were cut or never sent, so its figures say nothing of the load. It is
// left out of the steps, the results, the knee and OnStep, and
// Sweep.Stopped says so (nil and the error when it was the first step).
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	res := &Result{Sweep: Sweep{
		Ladder: o.Ladder.String(), Kind: o.Ladder.Kind, SLO: o.Bench.Goodput.String(),
		Date: time.Now().UTC().Format(time.RFC3339),
	}}
	var runErr error
	for i, v := range o.Ladder.Values {
		bo := o.Bench
		bo.Arrival = arrival(o.Bench.Arrival, o.Ladder.Kind, v)
		if i > 0 {
			// The first step calibrated the workload's prompt synthesizer in
			// place: the later steps send the same prompts.
			bo.NoCalibrate = true
		}
		r, err := bench.Run(ctx, bo)
		if ctx.Err() != nil && (r == nil || err != nil) {
			runErr = ctx.Err()
			res.Stopped = fmt.Sprintf("the sweep was stopped (%v) during step %d of %d (%s %s), which is left out: %d of %d steps ran",
				runErr, i+1, len(o.Ladder.Values), o.Ladder.Kind, fmtLoad(o.Ladder.Kind, v), i, len(o.Ladder.Values))
			break
		}
		if r == nil && i == 0 {
			runErr = err
			break
		}
		st := StepOf(o.Ladder.Kind, v, r)
		if err != nil {
			st.Error = err.Error()
		}
		res.Steps = append(res.Steps, st)
		res.Results = append(res.Results, r)
		if o.OnStep != nil {
			o.OnStep(i, &res.Steps[i], r)
		}
		if ctx.Err() != nil && i+1 < len(o.Ladder.Values) {
			runErr = ctx.Err()
			res.Stopped = fmt.Sprintf("the sweep was stopped (%v) after step %d of %d: %d of %d steps ran",
				runErr, i+1, len(o.Ladder.Values), i+1, len(o.Ladder.Values))
			break
		}
	}
	res.Knee = FindKnee(res.Steps, o.Rule)
	res.Label = Label(&o, res).String()
	if len(res.Steps) == 0 {
		return nil, runErr
	}
	return res, runErr
}

// StepOf summarises the bench result r of the step at load v (nil r: the
// step could not run; every figure is then unknown or zero).
func StepOf(k Kind, v Load, r *bench.Result) Step {
	st := Step{
		Kind: k, Load: v, RequestGoodput: Unknown, GoodOutputThroughput: Unknown, Attainment: Unknown,
		TTFT: Pct{Unknown, Unknown}, ITL: Pct{Unknown, Unknown}, TPOT: Pct{Unknown, Unknown}, E2EL: Pct{Unknown, Unknown},
	}
	if r == nil {
		st.Error = "the step did not run"
		return st
	}
	st.Completed, st.Failed, st.Duration = r.Completed, r.Failed, r.Duration
	st.RequestThroughput, st.OutputThroughput = r.RequestThroughput, r.OutputThroughput
	// Without an SLO every successful request is good.
	st.Good, st.GoodOutputThroughput = r.Completed, Num(r.OutputThroughput)
	if r.RequestGoodput != nil {
		st.RequestGoodput = Num(*r.RequestGoodput)
		st.Good, st.GoodOutputThroughput = int(math.Round(*r.RequestGoodput*r.Duration)), Unknown
		if r.Goodput != nil {
			st.Good, st.GoodOutputThroughput = r.Goodput.GoodRequests, Num(r.Goodput.GoodOutputThroughput)
		}
	}
	if n := st.Total(); n > 0 {
		st.Attainment = Num(float64(st.Good) / float64(n))
	}
	for _, m := range []struct {
		name string
		p    *Pct
	}{{bench.MetricTTFT, &st.TTFT}, {bench.MetricITL, &st.ITL}, {bench.MetricTPOT, &st.TPOT}, {bench.MetricE2EL, &st.E2EL}} {
		s := r.Metrics[m.name]
		if s == nil {
			continue
		}
		if v, ok := s.At(50); ok {
			m.p.P50 = Num(v)
		} else {
			m.p.P50 = Num(s.Median)
		}
		if v, ok := s.At(99); ok {
			m.p.P99 = Num(v)
		}
	}
	if st.Completed == 0 {
		// vLLM's figures of an empty run are zeros; no latency was measured.
		st.TTFT, st.ITL, st.TPOT, st.E2EL = Pct{Unknown, Unknown}, Pct{Unknown, Unknown}, Pct{Unknown, Unknown}, Pct{Unknown, Unknown}
	}
	// So are its figures over no values: TPOT when no request generated
	// more than one token (it is undefined then), ITL when no request had
	// a gap (one token event each). Known only from the per-request
	// figures, which a vLLM result file holds with --save-detailed.
	if len(r.OutputLens) > 0 && !slices.ContainsFunc(r.OutputLens, func(n int) bool { return n > 1 }) {
		st.TPOT = Pct{Unknown, Unknown}
	}
	if len(r.ITLs) > 0 && !hasGap(r) {
		st.ITL = Pct{Unknown, Unknown}
	}
	return st
}

// hasGap reports whether a successful request of r (no error: failed ones
// are not in the figures) had an inter-token gap.
func hasGap(r *bench.Result) bool {
	for i, g := range r.ITLs {
		if len(g) > 0 && (i >= len(r.Errors) || r.Errors[i] == "") {
			return true
		}
	}
	return false
}

// Label is the sweep's report label: the bench label's fields, the ISL and
// OSL means of the steps, the arrival process with the ladder, the
// percentiles charted and the goodput definition.
func Label(o *Options, res *Result) LabelFields {
	var l LabelFields
	bl := o.Bench.Label
	l.Engine, l.Version, l.Precision, l.GPUs, l.TP = bl.Engine, bl.Version, bl.Precision, bl.GPUs, bl.TP
	l.ISL, l.OSL = lengths(res.Results)
	vals := o.Ladder.Values
	var rng string
	switch len(vals) {
	case 0:
	case 1:
		rng = fmtLoad(o.Ladder.Kind, vals[0])
	default:
		rng = vals[0].String() + " to " + fmtLoad(o.Ladder.Kind, vals[len(vals)-1]) + " in " + strconv.Itoa(len(vals)) + " steps"
	}
	a := o.Bench.Arrival
	switch o.Ladder.Kind {
	case RequestRate:
		l.Load = "open loop, request-rate " + rng + ", burstiness " + strconv.FormatFloat(burst(a.Burstiness), 'g', 4, 64)
		if a.MaxConcurrency > 0 {
			l.Load += ", max concurrency " + strconv.Itoa(a.MaxConcurrency)
		}
	case MaxConcurrency:
		rate := "inf"
		if r := a.Rate; r > 0 && !math.IsInf(r, 1) {
			rate = strconv.FormatFloat(r, 'g', 4, 64) + " req/s, burstiness " + strconv.FormatFloat(burst(a.Burstiness), 'g', 4, 64)
		} else if r == 0 && o.Bench.Requests == nil && o.Bench.Workload != nil {
			// Rate 0 leaves the workload's own arrival process (a
			// profile's) or, without one, every request at once.
			rate = "the workload's own, else inf"
			for _, res := range res.Results {
				if res != nil && res.Goodput != nil {
					if ar := res.Goodput.Arrival; ar.Source == "workload" {
						rate = "the profile's, " + strconv.FormatFloat(float64(ar.Rate), 'g', 4, 64) + " req/s, burstiness " + strconv.FormatFloat(ar.Burstiness, 'g', 4, 64)
					} else {
						rate = "inf"
					}
					break
				}
			}
		}
		l.Load = "open loop, max concurrency " + rng + ", request-rate " + rate
	case Concurrency:
		l.Load = "closed loop, concurrency " + rng
	}
	l.Percentile = "p50, p99"
	obj := "no attainment objective"
	if o.Rule.Objective > 0 {
		obj = "objective " + fmtPct(Num(o.Rule.Objective))
	}
	if o.Bench.Goodput.IsZero() {
		l.Goodput = "no SLO (every successful request is good), " + obj
	} else {
		l.Goodput = "SLO " + o.Bench.Goodput.String() + " ms, " + obj
	}
	return l
}

func burst(b float64) float64 {
	if b <= 0 {
		return 1
	}
	return b
}

// lengths describes the mean ISL and OSL of the steps that completed
// requests: one value when they agree to a token, else the range.
func lengths(rs []*bench.Result) (isl, osl string) {
	var is, os []float64
	for _, r := range rs {
		if r != nil && r.Goodput != nil && r.Completed > 0 {
			is, os = append(is, r.Goodput.ISLMean), append(os, r.Goodput.OSLMean)
		}
	}
	return meanRange(is), meanRange(os)
}

func meanRange(v []float64) string {
	if len(v) == 0 {
		return ""
	}
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	if math.Round(lo) == math.Round(hi) {
		return strconv.FormatFloat(lo, 'f', 0, 64) + " (mean)"
	}
	return strings.Join([]string{strconv.FormatFloat(lo, 'f', 0, 64), strconv.FormatFloat(hi, 'f', 0, 64)}, " to ") + " (mean, by step)"
}

// WriteFile writes the result as indented JSON.
func (r *Result) WriteFile(path string) error {
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
