package sim

import (
	"bytes"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/valyala/fasthttp"
)

// KVCacheTokens is the simulated KV cache's size in tokens, the denominator
// of vllm:kv_cache_usage_perc in Linear mode (Batching uses its
// BatchConfig.KVCacheTokens).
const KVCacheTokens = 1 << 17

// vLLM's histogram buckets (vllm/v1/metrics/loggers.py).
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	requestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
		40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// Finish reasons of vllm:request_success_total.
const (
	finishStop = iota
	finishLength
	finishAbort
	numFinish
)

var finishNames = [numFinish]string{"stop", "length", "abort"}

// engineStats are the request-level metrics, observed as the responses are
// written (no allocation per observation).
type engineStats struct {
	ttft, itl, e2e, queue   prometheus.Histogram
	promptTokens, genTokens prometheus.Counter
	success                 [numFinish]prometheus.Counter
}

// A stateReporter is a Scheduler that reports the engine's state (Batching).
type stateReporter interface {
	Stats() BatchStats
}

// engineMetrics are the metrics vLLM's /metrics serves, under vLLM's names
// and labels (model_name, engine), so that dashboards and alerts written
// for vLLM read the simulator too:
//
//	vllm:num_requests_running         gauge: requests running (Linear: every request in flight)
//	vllm:num_requests_waiting         gauge: requests waiting for a slot (Linear never queues: 0)
//	vllm:kv_cache_usage_perc          gauge: KV blocks in use / all blocks (Linear: the requests in
//	                                         flight's prompt and output tokens / KVCacheTokens, counted
//	                                         whole from admission)
//	vllm:num_preemptions_total        counter: recompute preemptions (Linear: 0)
//	vllm:prompt_tokens_total          counter: prompt tokens of requests whose first token was produced
//	vllm:generation_tokens_total      counter: output tokens produced
//	vllm:request_success_total        counter by finished_reason: stop, length (all tokens sent),
//	                                  abort (the client went away or a fault ended the response)
//	vllm:time_to_first_token_seconds  histogram: token 1's due time − request start
//	vllm:inter_token_latency_seconds  histogram: gaps between consecutive tokens' due times
//	vllm:e2e_request_latency_seconds  histogram: last token's due time − start, completed requests
//	vllm:request_queue_time_seconds   histogram: waiting time before the first engine step,
//	                                  completed requests (Linear: 0)
//
// Times are the schedule's, not when the bytes were flushed (the traces
// have those). Histogram buckets are vLLM's.
func (s *Server) engineMetrics() (*prometheus.Registry, *engineStats) {
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"model_name": s.model, "engine": "0"}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f)
	}
	hist := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: labels})
	}
	counter := func(name, help string, l prometheus.Labels) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: l})
	}
	st := &engineStats{
		ttft:         hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets),
		itl:          hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets),
		e2e:          hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", requestLatencyBuckets),
		queue:        hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", requestLatencyBuckets),
		promptTokens: counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", labels),
		genTokens:    counter("vllm:generation_tokens_total", "Number of generation tokens processed.", labels),
	}
	for i, name := range finishNames {
		st.success[i] = counter("vllm:request_success_total", "Count of successfully processed requests.",
			prometheus.Labels{"model_name": s.model, "engine": "0", "finished_reason": name})
	}
	reporter, batching := s.sched.(stateReporter)
	reg.MustRegister(
		gauge("vllm:num_requests_running", "Number of requests in model execution batches.", func() float64 {
			if batching {
				return float64(reporter.Stats().Running)
			}
			running, _ := s.load()
			return float64(running)
		}),
		gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", func() float64 {
			if batching {
				return float64(reporter.Stats().Waiting)
			}
			return 0
		}),
		gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", func() float64 {
			if batching {
				return reporter.Stats().KVCacheUsage
			}
			_, tokens := s.load()
			return min(1, float64(tokens)/KVCacheTokens)
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "vllm:num_preemptions_total", Help: "Cumulative number of preemption from the engine.", ConstLabels: labels,
		}, func() float64 {
			if batching {
				return float64(reporter.Stats().Preemptions)
			}
			return 0
		}),
		st.ttft, st.itl, st.e2e, st.queue, st.promptTokens, st.genTokens,
	)
	for _, c := range st.success {
		reg.MustRegister(c)
	}
	return reg, st
}

// A queueTimer is a Schedule that knows how long its request waited.
type queueTimer interface {
	queueTime() time.Duration
}

// A tokenObserver is a Schedule that can feed all its token times to the
// TTFT and ITL histograms at once (for a non-streaming response).
type tokenObserver interface {
	observeTokens(start time.Time, m *engineStats)
}

// load returns the requests in flight and their prompt and output tokens.
func (s *Server) load() (running, tokens int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for st := range s.active {
		running++
		tokens += st.prompt + st.n
	}
	return running, tokens
}

// metrics serves GET /metrics in Prometheus's text format.
func (s *Server) metrics(ctx *fasthttp.RequestCtx) {
	mfs, err := s.metricsReg.Gather()
	if err != nil {
		sendError(ctx, fasthttp.StatusInternalServerError, "sim: metrics: "+err.Error())
		return
	}
	var b bytes.Buffer
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	enc := expfmt.NewEncoder(&b, format)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			sendError(ctx, fasthttp.StatusInternalServerError, "sim: metrics: "+err.Error())
			return
		}
	}
	ctx.SetContentType(string(format))
	ctx.SetBody(b.Bytes())
}
