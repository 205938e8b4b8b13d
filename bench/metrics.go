package bench

import (
	"math"
	"sort"
	"time"

	"github.com/goodput/goodput/internal/stats"
)

// Stats are one metric's figures over a run, in milliseconds, as vLLM
// computes them: mean, median and standard deviation (numpy's, population)
// and linear-interpolated percentiles (numpy.percentile's default). Over no
// values every figure is 0 (vLLM's "values or 0").
type Stats struct {
	Mean, Median, Std, Max float64
	Percentiles            []Percentile
}

// Percentile is one percentile of a metric.
type Percentile struct {
	P     float64 // 0 to 100
	Value float64 // milliseconds
}

// At returns the value of percentile p and whether the stats hold it.
func (s *Stats) At(p float64) (float64, bool) {
	if s == nil {
		return 0, false
	}
	for _, q := range s.Percentiles {
		if q.P == p {
			return q.Value, true
		}
	}
	return 0, false
}

// percentile is numpy.percentile with linear interpolation over sorted
// values (stats.Quantile, p in percent); 0 for none.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return stats.Quantile(sorted, p/100)
}

// statsOf computes Stats over values given in seconds (as vLLM keeps them),
// reporting milliseconds. values is sorted in place.
func statsOf(values []float64, ps []float64) *Stats {
	s := &Stats{}
	sort.Float64s(values)
	if n := len(values); n > 0 {
		var sum float64
		for _, v := range values {
			sum += v
		}
		mean := sum / float64(n)
		var sq float64
		for _, v := range values {
			sq += (v - mean) * (v - mean)
		}
		s.Mean = mean * 1000
		s.Std = math.Sqrt(sq/float64(n)) * 1000
		s.Median = percentile(values, 50) * 1000
		s.Max = values[n-1] * 1000
	}
	for _, p := range ps {
		s.Percentiles = append(s.Percentiles, Percentile{p, percentile(values, p) * 1000})
	}
	return s
}

// aggregate holds what calculate derives from a run's outcomes: vLLM's
// figures (calculate_metrics in vLLM's benchmarks/serve.py).
type aggregate struct {
	completed, failed, good int
	totalInput, totalOutput int
	requestThroughput       float64
	requestGoodput          float64
	outputThroughput        float64
	totalTokenThroughput    float64
	metrics                 map[string]*Stats
	maxOutputTokensPerS     float64
	maxConcurrentRequests   int

	// goodOutputThroughput is the output tokens of the good requests per
	// second (not a vLLM figure).
	goodOutputThroughput float64

	// Per request, in the order of the outcomes.
	inputLens, outputLens []int
	goodFlags             []bool
}

func seconds(d time.Duration) float64 { return d.Seconds() }

// inputLen is the request's prompt length: the engine's count, else the
// workload's intended length (vLLM counts the dataset's prompt_len).
func inputLen(o *outcome, intended int) int {
	if o.isl >= 0 {
		return o.isl
	}
	return intended
}

// calculate applies vLLM's rules to the outcomes of one run lasting dur:
//   - completed and failed count the successful and failed requests; only
//     successful ones enter the token totals and the latency figures;
//   - a successful request's output length is the engine's completion count
//     (else the gateway's estimate: token events with content);
//   - TPOT per request, only when its output length is above 1:
//     (E2E − TTFT) / (output − 1); for goodput a request with at most one
//     output token has TPOT 0;
//   - ITL pools every gap of every successful request;
//   - throughputs divide by dur; request_goodput counts the successful
//     requests meeting every --goodput bound (inclusive);
//   - max_output_tokens_per_s: the most token events in one whole second
//     counted from the first send; max_concurrent_requests: the most
//     successful requests in flight at one instant (an end before a start
//     at the same instant).
func calculate(outs []outcome, intended []int, dur time.Duration, ps []float64, slo SLO) aggregate {
	var a aggregate
	var ttfts, tpots, itls, e2els []float64
	a.inputLens = make([]int, len(outs))
	a.outputLens = make([]int, len(outs))
	a.goodFlags = make([]bool, len(outs))
	goodOut := 0
	for i := range outs {
		o := &outs[i]
		want := 0
		if i < len(intended) {
			want = intended[i]
		}
		a.inputLens[i] = inputLen(o, want)
		if !o.ok {
			a.failed++
			continue
		}
		a.completed++
		osl := max(o.osl, 0)
		a.outputLens[i] = osl
		a.totalInput += a.inputLens[i]
		ttft, e2e := seconds(o.ttft), seconds(o.e2e)
		tpot := 0.0
		if osl > 1 {
			tpot = (e2e - ttft) / float64(osl-1)
			tpots = append(tpots, tpot)
		}
		for _, g := range o.itl {
			itls = append(itls, seconds(g))
		}
		ttfts = append(ttfts, ttft)
		e2els = append(e2els, e2e)
		if good(slo, ttft, tpot, e2e) {
			a.good++
			a.goodFlags[i] = true
			goodOut += osl
		}
	}
	for _, n := range a.outputLens {
		a.totalOutput += n
	}
	if d := dur.Seconds(); d > 0 {
		a.requestThroughput = float64(a.completed) / d
		a.requestGoodput = float64(a.good) / d
		a.outputThroughput = float64(a.totalOutput) / d
		a.totalTokenThroughput = float64(a.totalInput+a.totalOutput) / d
		a.goodOutputThroughput = float64(goodOut) / d
	}
	a.metrics = map[string]*Stats{
		MetricTTFT: statsOf(ttfts, ps),
		MetricTPOT: statsOf(tpots, ps),
		MetricITL:  statsOf(itls, ps),
		MetricE2EL: statsOf(e2els, ps),
	}
	a.maxOutputTokensPerS, a.maxConcurrentRequests = peaks(outs)
	return a
}

// good applies vLLM's goodput rule to one successful request (seconds).
func good(slo SLO, ttft, tpot, e2e float64) bool {
	if slo.IsZero() {
		return false
	}
	for _, c := range []struct {
		bound time.Duration
		v     float64
	}{{slo.TTFT, ttft}, {slo.TPOT, tpot}, {slo.E2EL, e2e}} {
		if ms, ok := bound(c.bound); ok && !(ms/1000 >= c.v) {
			return false
		}
	}
	return true
}

// peaks computes vLLM's max_output_tokens_per_s and max_concurrent_requests
// over the successful requests.
func peaks(outs []outcome) (float64, int) {
	var first, last time.Time
	n := 0
	for i := range outs {
		o := &outs[i]
		if !o.ok {
			continue
		}
		end := o.send.Add(o.e2e)
		if n == 0 || o.send.Before(first) {
			first = o.send
		}
		if n == 0 || end.After(last) {
			last = end
		}
		n++
	}
	if n == 0 {
		return 0, 0
	}
	buckets := make([]float64, int(math.Ceil(last.Sub(first).Seconds()))+1)
	starts := make([]time.Duration, 0, n)
	ends := make([]time.Duration, 0, n)
	for i := range outs {
		o := &outs[i]
		if !o.ok {
			continue
		}
		t := o.send.Sub(first) + o.ttft
		count := func(t time.Duration) {
			if b := int(t.Seconds()); b >= 0 && b < len(buckets) {
				buckets[b]++
			}
		}
		count(t)
		for _, g := range o.itl {
			t += g
			count(t)
		}
		start := o.send.Sub(first)
		starts, ends = append(starts, start), append(ends, start+o.e2e)
	}
	peak := stats.PeakOverlap(starts, ends)
	top := 0.0
	for _, b := range buckets {
		top = max(top, b)
	}
	return top, peak
}
