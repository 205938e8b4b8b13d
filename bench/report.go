package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// metricHeaders are vLLM's section titles.
var metricHeaders = map[string][2]string{
	MetricTTFT:        {"TTFT", "Time to First Token"},
	MetricTPOT:        {"TPOT", "Time per Output Token (excl. 1st token)"},
	MetricITL:         {"ITL", "Inter-token Latency"},
	MetricE2EL:        {"E2EL", "End-to-end Latency"},
	MetricClientQueue: {"Client Queue Time", "Client-side Queueing"},
	MetricE2ELQueue:   {"E2EL incl. Client Queue", "Queue-inclusive End-to-end Latency"},
}

// WriteSummary prints the result as vLLM's "Serving Benchmark Result" block
// (the metrics given; nil: vLLM's defaults, ttft, tpot and itl), each with
// its mean, median, p90, p95, p99, the percentiles given (nil: p99, vLLM's
// default) and its maximum (a benchmark's figures are never a mean alone,
// nor a median and one tail), then the report label, the arrival lateness
// and the warm-up.
func WriteSummary(w io.Writer, r *Result, metrics []string, percentiles []float64) {
	if metrics == nil {
		metrics = DefaultPercentileMetrics
	}
	if percentiles == nil {
		percentiles = []float64{99}
	}
	line := func(name string, v any) {
		var s string
		switch v := v.(type) {
		case float64:
			s = strconv.FormatFloat(v, 'f', 2, 64)
		default:
			s = fmt.Sprint(v)
		}
		fmt.Fprintf(w, "%-40s %-10s\n", name, s)
	}
	fmt.Fprintln(w, center(" Serving Benchmark Result ", "=", 50))
	line("Successful requests:", r.Completed)
	line("Failed requests:", r.Failed)
	if r.MaxConcurrency != nil {
		line("Maximum request concurrency:", *r.MaxConcurrency)
	}
	if rate := float64(r.RequestRate); !math.IsInf(rate, 1) && rate > 0 {
		line("Request rate configured (RPS):", rate)
	}
	line("Benchmark duration (s):", r.Duration)
	line("Total input tokens:", r.TotalInputTokens)
	line("Total generated tokens:", r.TotalOutputTokens)
	line("Request throughput (req/s):", r.RequestThroughput)
	if r.RequestGoodput != nil {
		line("Request goodput (req/s):", *r.RequestGoodput)
	}
	line("Output token throughput (tok/s):", r.OutputThroughput)
	line("Peak output token throughput (tok/s):", r.MaxOutputTokensPerS)
	line("Peak concurrent requests:", float64(r.MaxConcurrentRequests))
	line("Total token throughput (tok/s):", r.TotalTokenThroughput)
	for _, m := range metrics {
		s := r.Metrics[m]
		h, ok := metricHeaders[m]
		if s == nil || !ok {
			continue
		}
		fmt.Fprintln(w, center(h[1], "-", 50))
		line("Mean "+h[0]+" (ms):", s.Mean)
		line("Median "+h[0]+" (ms):", s.Median)
		for _, p := range resultPercentiles(percentiles) {
			// p50 is the median's line, unless asked for (vLLM prints it then).
			if v, ok := s.At(p); ok && (p != 50 || slices.Contains(percentiles, 50)) {
				line("P"+pWord(p)+" "+h[0]+" (ms):", v)
			}
		}
		line("Max "+h[0]+" (ms):", s.Max)
	}
	fmt.Fprintln(w, strings.Repeat("=", 50))
	if ex := r.Goodput; ex != nil {
		fmt.Fprintln(w, "Label: "+LabelLine(r, percentiles))
		fmt.Fprintf(w, "Arrival lateness p99 (ms): %.3f (p50 %.3f, max %.3f; actual send − planned send)\n",
			ex.Lateness.P99, ex.Lateness.P50, ex.Lateness.Max)
		if ex.Connect.New > 0 {
			fmt.Fprintf(w, "New connections: %d, opened in p50 %.3f ms, p99 %.3f ms, max %.3f ms (part of the lateness)\n",
				ex.Connect.New, ex.Connect.P50, ex.Connect.P99, ex.Connect.Max)
		}
		if cal := ex.Calibration; cal != nil {
			if cal.Error != "" {
				fmt.Fprintf(w, "Prompt calibration failed: %s\n", cal.Error)
			} else {
				again := ""
				if cal.Reused {
					again = "; from an earlier run"
				}
				fmt.Fprintf(w, "Prompt calibration: %.3f tokens per word + %.1f (largest miss %.1f%% over %d prompts%s)\n",
					cal.TokensPerWord, cal.Overhead, cal.MaxError*100, cal.Samples, again)
			}
		}
		if wu := ex.Warmup; wu != nil {
			ttft := wu.Metrics[MetricTTFT]
			med := 0.0
			if ttft != nil {
				med = ttft.Median
			}
			fmt.Fprintf(w, "Warm-up (not in the figures above): %d requests, %d completed, %d failed, median TTFT %.2f ms\n",
				wu.Requests, wu.Completed, wu.Failed, med)
		}
		if ex.CutInFlight > 0 || ex.NotSent > 0 {
			fmt.Fprintf(w, "Stopped early: %d of the failed requests were cut in flight; %d never sent (not in the figures)\n",
				ex.CutInFlight, ex.NotSent)
		}
	}
}

// LabelLine is the report label of a result: engine · version · precision ·
// GPUs · TP · ISL · OSL · the arrival process · the percentile · goodput
// with its SLO; unknown fields print "unknown".
func LabelLine(r *Result, percentiles []float64) string {
	var parts []string
	var ex Extra
	if r.Goodput != nil {
		ex = *r.Goodput
	}
	for _, kv := range ex.Label.Fields() {
		parts = append(parts, kv[0]+" "+kv[1])
	}
	num := func(v float64) string {
		if v <= 0 {
			return "unknown"
		}
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	parts = append(parts, "ISL "+num(ex.ISLMean)+" (mean)", "OSL "+num(ex.OSLMean)+" (mean)")
	switch a := ex.Arrival; {
	case a.Loop == "closed":
		parts = append(parts, fmt.Sprintf("closed loop, concurrency %d", a.Concurrency))
	case a.Loop == "open":
		s := "open loop, rate "
		if math.IsInf(float64(a.Rate), 1) {
			s += "inf (all at once)"
		} else {
			s += strconv.FormatFloat(float64(a.Rate), 'g', 4, 64) + " req/s, burstiness " + strconv.FormatFloat(a.Burstiness, 'g', 4, 64)
		}
		if a.MaxConcurrency > 0 {
			s += fmt.Sprintf(", max concurrency %d", a.MaxConcurrency)
		}
		parts = append(parts, s)
	default:
		parts = append(parts, "arrival unknown")
	}
	var pw []string
	for _, p := range percentiles {
		pw = append(pw, "p"+pWord(p))
	}
	if len(pw) == 0 {
		pw = []string{"unknown"}
	}
	parts = append(parts, "percentile "+strings.Join(pw, ","))
	if r.RequestGoodput != nil {
		parts = append(parts, fmt.Sprintf("goodput %.2f req/s (%s)", *r.RequestGoodput, ex.SLO))
	} else {
		parts = append(parts, "goodput unknown (no --goodput)")
	}
	return strings.Join(parts, " · ")
}

// center is Python's "{s:{c}^{n}}": s centred in n, padded with c (the
// extra pad on the right).
func center(s, c string, n int) string {
	pad := n - len([]rune(s))
	if pad <= 0 {
		return s
	}
	left := pad / 2
	return strings.Repeat(c, left) + s + strings.Repeat(c, pad-left)
}

// progress keeps the counts of a run for a live line on a terminal.
type progress struct {
	w     io.Writer
	total int
	sent  atomic.Int64
	done  atomic.Int64
	fail  atomic.Int64
	t0    time.Time

	mu    sync.Mutex
	ring  [512]float64 // the latest TTFTs, ms
	n     int
	quit  chan struct{}
	ended chan struct{}
}

func newProgress(w io.Writer, total int) *progress {
	return &progress{w: w, total: total}
}

func (p *progress) finish(o *outcome) {
	if !o.ok {
		p.fail.Add(1)
		return
	}
	p.done.Add(1)
	p.mu.Lock()
	p.ring[p.n%len(p.ring)] = float64(o.ttft) / 1e6
	p.n++
	p.mu.Unlock()
}

func (p *progress) start(t0 time.Time) {
	p.t0 = t0
	p.quit, p.ended = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.ended)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				p.print()
			case <-p.quit:
				p.print()
				fmt.Fprintln(p.w)
				return
			}
		}
	}()
}

func (p *progress) stop() {
	close(p.quit)
	<-p.ended
}

func (p *progress) print() {
	done, fail, sent := p.done.Load(), p.fail.Load(), p.sent.Load()
	el := time.Since(p.t0).Seconds()
	rate := 0.0
	if el > 0 {
		rate = float64(done+fail) / el
	}
	p.mu.Lock()
	k := min(p.n, len(p.ring))
	recent := append([]float64(nil), p.ring[:k]...)
	p.mu.Unlock()
	sort.Float64s(recent)
	ttft := "-"
	if k > 0 {
		ttft = strconv.FormatFloat(percentile(recent, 50), 'f', 1, 64) + " ms"
	}
	fmt.Fprintf(p.w, "\rsent %d/%d  done %d  failed %d  in flight %d  %.1f req/s  TTFT p50 %s   ",
		sent, p.total, done, fail, sent-done-fail, rate, ttft)
}
