package sim

import (
	"bytes"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/valyala/fasthttp"
)

// KVCacheTokens is the simulated KV cache's size in tokens, the denominator
// of vllm:kv_cache_usage_perc.
const KVCacheTokens = 1 << 17

// engineMetrics are the engine-health metrics vLLM's /metrics serves, under
// vLLM's names and labels (model_name, engine), so that dashboards and
// alerts written for vLLM read the simulator too:
//
//	vllm:num_requests_running   gauge: generation requests being served
//	vllm:num_requests_waiting   gauge: requests waiting for a slot (the simulator never queues: 0)
//	vllm:kv_cache_usage_perc    gauge: the running requests' prompt and output tokens / KVCacheTokens
//	                                   (vLLM allocates as it generates; the simulator counts the whole
//	                                   request from its admission)
//	vllm:num_preemptions_total  counter: the simulator never preempts: 0
//
// They are read from the requests in flight when /metrics is scraped.
func (s *Server) engineMetrics() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"model_name": s.model, "engine": "0"}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f)
	}
	reg.MustRegister(
		gauge("vllm:num_requests_running", "Number of requests in model execution batches.", func() float64 {
			running, _ := s.load()
			return float64(running)
		}),
		gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", func() float64 { return 0 }),
		gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", func() float64 {
			_, tokens := s.load()
			return min(1, float64(tokens)/KVCacheTokens)
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "vllm:num_preemptions_total", Help: "Cumulative number of preemption from the engine.", ConstLabels: labels,
		}, func() float64 { return 0 }),
	)
	return reg
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
