package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goodput/goodput/bench/workload"
	"github.com/goodput/goodput/meter"
)

// Run sends the requests with the arrival process of o, meters every
// response and returns the run's figures. The warm-up requests, if any,
// run first and are reported apart. An error is returned for bad options
// or a server that cannot be asked for its model; requests that fail are
// counted as failed (with their error), not returned as an error. When ctx
// ends, no new request is sent, the ones in flight are cut, and Run
// returns the figures so far with ctx's error: those of the requests sent,
// the ones cut counting as failed (Extra.CutInFlight); the requests never
// sent are not failed, and are only counted (Extra.NotSent).
func Run(ctx context.Context, o Options) (*Result, error) {
	opts, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := reachable(&opts); err != nil {
		return nil, err
	}
	if opts.Model == "" {
		if opts.Model, err = fetchModel(&opts); err != nil {
			return nil, err
		}
	}
	if opts.RequestIDPrefix == "" {
		opts.RequestIDPrefix = newIDPrefix()
	}
	c, err := newClient(&opts)
	if err != nil {
		return nil, err
	}
	defer c.close()
	stop := context.AfterFunc(ctx, c.close)
	defer stop()

	reqs := opts.Requests
	workloadName := "requests given"
	var cal *CalibrationInfo
	if reqs == nil {
		if s := opts.Workload.Synth(); s != nil && !opts.NoCalibrate {
			if math.IsNaN(s.Error()) {
				cal = calibrate(c, s, opts.RequestIDPrefix+"calibrate-")
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
			} else {
				// Calibrated by an earlier run with the same workload (a
				// sweep's previous step): keep that fit.
				cal = &CalibrationInfo{Samples: len(workload.ProbeTokens), Reused: true, MaxError: s.Error()}
				cal.TokensPerWord, cal.Overhead = s.Model()
			}
		}
		reqs = opts.Workload.Requests(opts.NumPrompts)
		workloadName = opts.Workload.Describe()
	}
	if len(reqs) == 0 {
		return nil, errors.New("no requests to send")
	}
	plan, info, err := planArrivals(&opts, len(reqs))
	if err != nil {
		return nil, err
	}

	var warm *WarmupResult
	if opts.Warmup > 0 {
		wreqs := make([]Request, opts.Warmup)
		for i := range wreqs {
			wreqs[i] = reqs[i%len(reqs)]
		}
		limit := opts.Arrival.Concurrency
		if limit == 0 {
			limit = opts.Arrival.MaxConcurrency
		}
		if limit == 0 {
			limit = len(wreqs)
		}
		wr := newRunner(ctx, c, &opts, wreqs, opts.RequestIDPrefix+"warmup-", nil)
		wr.closedLoop(limit)
		warm = wr.warmupResult(&opts)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}

	r := newRunner(ctx, c, &opts, reqs, opts.RequestIDPrefix, opts.Progress)
	if opts.Arrival.Closed() {
		r.closedLoop(opts.Arrival.Concurrency)
	} else {
		r.openLoop(plan, opts.Arrival.MaxConcurrency)
	}
	res := r.result(&opts, info, workloadName)
	res.Goodput.Warmup = warm
	res.Goodput.Calibration = cal
	return res, ctx.Err()
}

// calibrate sends the synthesizer's probe texts (workload.Synth.Probes:
// three lengths), each with max_tokens 1, one after the other, and fits it to the prompt_tokens the
// engine reports (workload.Synth.Calibrate). A failure leaves the model as
// it was and is reported in the result.
func calibrate(c *client, s *workload.Synth, prefix string) *CalibrationInfo {
	info := &CalibrationInfo{}
	var samples []workload.Sample
	for i, text := range s.Probes() {
		var out outcome
		c.send(prefix+strconv.Itoa(i), c.body(Request{Prompt: text, MaxTokens: 1}), &out)
		if !out.ok {
			info.Error = "calibration request failed: " + out.err
			return info
		}
		if out.isl <= 0 {
			info.Error = "the server reported no prompt_tokens: prompts keep the default of one token per word"
			return info
		}
		samples = append(samples, workload.Sample{Text: text, Tokens: out.isl})
	}
	info.Samples = len(samples)
	if err := s.Calibrate(samples); err != nil {
		info.Error = err.Error()
		return info
	}
	info.TokensPerWord, info.Overhead = s.Model()
	info.MaxError = s.Error()
	return info
}

// newIDPrefix is "bench-" and 8 random hex digits and "-", as vLLM's
// --request-id-prefix default.
func newIDPrefix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "bench-" + hex.EncodeToString(b[:]) + "-"
}

// planArrivals returns the planned send offsets of an open loop (nil for a
// closed loop) and the arrival process to report.
func planArrivals(o *Options, n int) ([]time.Duration, ArrivalInfo, error) {
	a := o.Arrival
	info := ArrivalInfo{Loop: "open", Burstiness: a.Burstiness, MaxConcurrency: a.MaxConcurrency, Source: "flags"}
	if info.Burstiness == 0 {
		info.Burstiness = 1
	}
	if a.Closed() {
		info.Loop, info.Concurrency, info.Rate, info.Burstiness = "closed", a.Concurrency, 0, 0
		return nil, info, nil
	}
	if a.Offsets != nil {
		if len(a.Offsets) != n {
			return nil, info, fmt.Errorf("%d planned offsets for %d requests", len(a.Offsets), n)
		}
		info.Source = "offsets"
		info.Rate = Rate(math.Inf(1))
		last := time.Duration(0)
		for _, d := range a.Offsets {
			if d < 0 {
				return nil, info, fmt.Errorf("planned offset %v: before the start", d)
			}
			last = max(last, d)
		}
		if n > 1 && last > 0 {
			info.Rate = Rate(float64(n-1) / last.Seconds())
		}
		return a.Offsets, info, nil
	}
	rate, burst := a.Rate, info.Burstiness
	if rate == 0 {
		rate = math.Inf(1)
		if o.Requests == nil && o.Workload != nil {
			if r, b, ok := o.Workload.Rate(); ok && r > 0 {
				rate, burst, info.Source = r, b, "workload"
				if burst <= 0 {
					burst = 1
				}
			}
		}
	}
	info.Rate, info.Burstiness = Rate(rate), burst
	return workload.Schedule(n, rate, burst, o.Seed), info, nil
}

// runner runs one set of requests.
type runner struct {
	ctx      context.Context
	c        *client
	opts     *Options
	reqs     []Request
	bodies   [][]byte
	prefix   string
	outs     []outcome
	start    time.Time
	progress *progress
}

func newRunner(ctx context.Context, c *client, o *Options, reqs []Request, prefix string, pw io.Writer) *runner {
	r := &runner{ctx: ctx, c: c, opts: o, reqs: reqs, prefix: prefix, outs: make([]outcome, len(reqs))}
	// Bodies are built before the clock starts, so that building one never
	// delays a send.
	r.bodies = make([][]byte, len(reqs))
	for i, q := range reqs {
		r.bodies[i] = c.body(q)
	}
	if pw != nil {
		r.progress = newProgress(pw, len(reqs))
	}
	return r
}

// one sends request i, planned at planned and ready to go at ready (its
// planned time came, or its client became free), waiting first for a slot
// of sem when not nil.
func (r *runner) one(i int, planned time.Duration, ready time.Time, sem chan struct{}) {
	out := &r.outs[i]
	out.planned = planned
	if sem != nil {
		select {
		case sem <- struct{}{}:
			defer func() { <-sem }()
		case <-r.ctx.Done():
			notSent(out)
			return
		}
		out.queue = time.Since(ready)
	}
	if r.ctx.Err() != nil {
		notSent(out)
		return
	}
	if r.progress != nil {
		r.progress.sent.Add(1)
	}
	r.c.send(r.prefix+strconv.Itoa(i), r.bodies[i], out)
	if out.unsent {
		if r.progress != nil {
			r.progress.sent.Add(-1)
		}
		return
	}
	if !out.ok && r.ctx.Err() != nil {
		out.err = "stopped with the run: " + out.err
		out.cut = true
	}
	if r.progress != nil {
		r.progress.finish(out)
	}
}

// notSent marks a request the run stopped before sending: it was never
// written to the server, so it is not a failed request; the result leaves
// it out of every figure and per-request array and counts it apart
// (Extra.NotSent).
func notSent(out *outcome) {
	out.unsent = true
	out.err = "not sent: the run was stopped"
	out.isl, out.osl, out.ttft, out.e2e = meter.Unknown, meter.Unknown, meter.Unknown, meter.Unknown
}

// sent returns the outcomes of the requests sent, in request order, and
// their intended input lengths: a run stopped early leaves out the
// requests it never sent.
func (r *runner) sent() ([]outcome, []int) {
	intended := r.intended()
	outs := make([]outcome, 0, len(r.outs))
	want := make([]int, 0, len(r.outs))
	for i := range r.outs {
		if !r.outs[i].unsent {
			outs = append(outs, r.outs[i])
			want = append(want, intended[i])
		}
	}
	return outs, want
}

// openLoop sends request i at start+plan[i] (vLLM's schedule), each in its
// own goroutine; with maxConc > 0 a request waits for one of maxConc slots
// before it is sent.
func (r *runner) openLoop(plan []time.Duration, maxConc int) {
	var sem chan struct{}
	if maxConc > 0 {
		sem = make(chan struct{}, maxConc)
	}
	var wg sync.WaitGroup
	r.start = time.Now()
	r.startProgress()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	// Requests go in the order of their planned times (given offsets need
	// not be sorted).
	order := make([]int, len(r.reqs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return plan[order[a]] < plan[order[b]] })
	for k, i := range order {
		at := r.start.Add(plan[i])
		if d := time.Until(at); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-r.ctx.Done():
			}
		}
		if r.ctx.Err() != nil {
			for _, j := range order[k:] {
				r.outs[j].planned = plan[j]
				notSent(&r.outs[j])
			}
			break
		}
		wg.Add(1)
		go func(i int, ready time.Time) {
			defer wg.Done()
			r.one(i, plan[i], ready, sem)
		}(i, time.Now())
	}
	wg.Wait()
	r.stopProgress()
}

// closedLoop runs n clients; each sends the next request as soon as its
// previous one ended. A request's planned send is when its client became
// free.
func (r *runner) closedLoop(n int) {
	n = min(n, len(r.reqs))
	var next atomic.Int64
	var wg sync.WaitGroup
	r.start = time.Now()
	r.startProgress()
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ready := r.start
			for {
				i := int(next.Add(1) - 1)
				if i >= len(r.reqs) {
					return
				}
				r.one(i, ready.Sub(r.start), ready, nil)
				ready = time.Now()
			}
		}()
	}
	wg.Wait()
	r.stopProgress()
}

func (r *runner) startProgress() {
	if r.progress != nil {
		r.progress.start(r.start)
	}
}

func (r *runner) stopProgress() {
	if r.progress != nil {
		r.progress.stop()
	}
}

// span returns the run's duration as vLLM measures it: from the clock's
// start, before the wait for the first planned send (an open loop's first
// request goes one gap in), to the last end over the sent requests; 0 when
// none was sent.
func (r *runner) span() time.Duration {
	var last time.Time
	for i := range r.outs {
		if o := &r.outs[i]; !o.send.IsZero() && o.end.After(last) {
			last = o.end
		}
	}
	if last.IsZero() {
		return 0
	}
	return last.Sub(r.start)
}

func (r *runner) intended() []int {
	out := make([]int, len(r.reqs))
	for i, q := range r.reqs {
		out[i] = q.InputTokens
	}
	return out
}

// result assembles the run's Result. Its per-request arrays and counts
// cover the requests sent; those the run stopped before sending are only
// counted (Extra.NotSent).
func (r *runner) result(o *Options, info ArrivalInfo, workload string) *Result {
	dur := r.span()
	ps := resultPercentiles(o.Percentiles)
	outs, intended := r.sent()
	a := calculate(outs, intended, dur, ps, o.Goodput)
	res := &Result{
		Date:                  time.Now().Format("20060102-150405"),
		EndpointType:          backendName(o.Endpoint),
		Backend:               backendName(o.Endpoint),
		Label:                 o.Label.String(),
		ModelID:               o.Model,
		NumPrompts:            len(r.reqs),
		RequestRate:           info.Rate,
		Burstiness:            info.Burstiness,
		Duration:              dur.Seconds(),
		Completed:             a.completed,
		Failed:                a.failed,
		TotalInputTokens:      a.totalInput,
		TotalOutputTokens:     a.totalOutput,
		RequestThroughput:     a.requestThroughput,
		OutputThroughput:      a.outputThroughput,
		TotalTokenThroughput:  a.totalTokenThroughput,
		InputLens:             a.inputLens,
		OutputLens:            a.outputLens,
		MaxOutputTokensPerS:   a.maxOutputTokensPerS,
		MaxConcurrentRequests: a.maxConcurrentRequests,
		Metrics:               a.metrics,
	}
	if info.Loop == "closed" {
		res.Burstiness = 1
		res.RequestRate = Rate(math.Inf(1))
		c := info.Concurrency
		res.MaxConcurrency = &c
	} else if info.MaxConcurrency > 0 {
		c := info.MaxConcurrency
		res.MaxConcurrency = &c
	}
	if !o.Goodput.IsZero() {
		g := a.requestGoodput
		res.RequestGoodput = &g
	}
	ex := &Extra{
		Label:                o.Label,
		BaseURL:              o.BaseURL,
		Endpoint:             o.Endpoint,
		Workload:             workload,
		Seed:                 o.Seed,
		Arrival:              info,
		SLO:                  o.Goodput.String(),
		GoodRequests:         a.good,
		Good:                 a.goodFlags,
		GoodOutputThroughput: a.goodOutputThroughput,
		MaxMs:                map[string]float64{},
		UsageSources:         map[string]int{},
		NotSent:              len(r.outs) - len(outs),
	}
	if info.Loop == "open" && info.MaxConcurrency > 0 {
		// vLLM's client-side queueing figures, over the successful requests.
		var queue, withQueue []float64
		for i := range outs {
			if out := &outs[i]; out.ok {
				queue = append(queue, out.queue.Seconds())
				withQueue = append(withQueue, (out.e2e + out.queue).Seconds())
			}
		}
		res.Metrics[MetricClientQueue] = statsOf(queue, ps)
		if !math.IsInf(float64(info.Rate), 1) {
			res.Metrics[MetricE2ELQueue] = statsOf(withQueue, ps)
		}
	}
	for name, s := range res.Metrics {
		ex.MaxMs[name] = s.Max
	}
	n := len(outs)
	res.TTFTs = make([]float64, n)
	res.ITLs = make([][]float64, n)
	res.Latencies = make([]float64, n)
	res.StartTimes = make([]float64, n)
	res.QueueTimes = make([]float64, n)
	res.Errors = make([]string, n)
	ex.ArrivalLateness = make([]float64, n)
	ex.RequestIDs = make([]string, n)
	ex.ConnectTimes = make([]float64, n)
	late := make([]float64, 0, n)
	var connects []float64
	islSum, oslSum := 0, 0
	for i := range outs {
		out := &outs[i]
		if out.cut {
			ex.CutInFlight++
		}
		ex.RequestIDs[i] = out.id
		if out.dialed {
			ex.ConnectTimes[i] = out.connect.Seconds()
			connects = append(connects, out.connect.Seconds())
		}
		res.Errors[i] = out.err
		res.QueueTimes[i] = out.queue.Seconds()
		res.ITLs[i] = []float64{}
		if out.ttft >= 0 {
			res.TTFTs[i] = out.ttft.Seconds()
		}
		if out.e2e >= 0 {
			res.Latencies[i] = out.e2e.Seconds()
		}
		for _, g := range out.itl {
			res.ITLs[i] = append(res.ITLs[i], g.Seconds())
		}
		if !out.send.IsZero() {
			res.StartTimes[i] = out.send.Sub(r.start).Seconds()
			l := out.send.Sub(r.start) - out.planned
			ex.ArrivalLateness[i] = l.Seconds()
			late = append(late, l.Seconds())
		}
		if out.ok {
			ex.UsageSources[out.usageSource.String()]++
			islSum += a.inputLens[i]
			oslSum += a.outputLens[i]
		}
	}
	if a.completed > 0 {
		ex.ISLMean = float64(islSum) / float64(a.completed)
		ex.OSLMean = float64(oslSum) / float64(a.completed)
	}
	ls := statsOf(late, []float64{50, 99})
	ex.Lateness = LatenessStats{Mean: ls.Mean, P50: ls.Percentiles[0].Value, P99: ls.Percentiles[1].Value, Max: ls.Max}
	cs := statsOf(connects, []float64{50, 99})
	ex.Connect = ConnectStats{New: len(connects), P50: cs.Percentiles[0].Value, P99: cs.Percentiles[1].Value, Max: cs.Max}
	res.Goodput = ex
	return res
}

// warmupResult summarises a warm-up run.
func (r *runner) warmupResult(o *Options) *WarmupResult {
	dur := r.span()
	outs, intended := r.sent()
	a := calculate(outs, intended, dur, resultPercentiles(o.Percentiles), SLO{})
	return &WarmupResult{Requests: len(r.reqs), Duration: dur.Seconds(), Completed: a.completed, Failed: a.failed, Metrics: a.metrics}
}

// backendName is vLLM's --backend for the endpoint ("openai-responses"
// and "anthropic-messages" for the two APIs vLLM's benchmark does not
// drive).
func backendName(endpoint string) string {
	switch endpoint {
	case EndpointCompletions:
		return "openai"
	case EndpointResponses:
		return "openai-responses"
	case EndpointMessages:
		return "anthropic-messages"
	}
	return "openai-chat"
}

func sortStrings(s []string) { sort.Strings(s) }

func sortPercentiles(p []Percentile) {
	sort.Slice(p, func(i, j int) bool { return p[i].P < p[j].P })
}
