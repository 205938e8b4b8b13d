package sim

import (
	"bufio"
	"context"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// GET /metrics serves vLLM's engine-health metrics: a stream in flight is
// running and holds its prompt and output tokens of the KV cache; once it
// has ended, nothing is.
func TestEngineMetrics(t *testing.T) {
	h := start(t, Config{Model: "m-1"})
	// One token at once, then a gap of an hour: the stream stays in flight.
	resp := h.do("POST", "/v1/chat/completions",
		`{"model":"m-1","stream":true,"max_tokens":7,"messages":[{"role":"user","content":"two words"}]}`,
		"X-Sim-ITL", "1h")
	readEvents(t, bufio.NewReader(resp.Body), 2) // the role chunk and the first token

	m := h.do("GET", "/metrics", "")
	defer m.Body.Close()
	if ct := m.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("content type %q", ct)
	}
	body, _ := io.ReadAll(m.Body)
	got := parseMetrics(t, string(body))
	prompt := ChatPromptTokens("two words")
	want := map[string]float64{
		"vllm:num_requests_running":  1,
		"vllm:num_requests_waiting":  0,
		"vllm:kv_cache_usage_perc":   float64(prompt+7) / KVCacheTokens,
		"vllm:num_preemptions_total": 0,
	}
	for name, v := range want {
		s, ok := got[name]
		if !ok || s.Value != model.SampleValue(v) || s.Metric["model_name"] != "m-1" || s.Metric["engine"] != "0" {
			t.Errorf("%s: %v, want %v{model_name=m-1,engine=0}", name, s, v)
		}
	}
	if st, _, _ := h.post("/metrics", "x"); st != 405 {
		t.Errorf("POST /metrics: %d", st)
	}

	resp.Body.Close()
	if err := h.s.Shutdown(); err != nil { // returns once no response is in flight
		t.Fatal(err)
	}
	running, tokens := h.s.load()
	if running != 0 || tokens != 0 {
		t.Fatalf("after the stream: running %d, tokens %d", running, tokens)
	}
}

// parseMetrics returns the samples of a /metrics text by name: a
// histogram's as name_count and name_sum (no buckets), a labelled counter's
// as name{value} (request_success_total{stop}).
func parseMetrics(t *testing.T, text string) map[string]*model.Sample {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("%v in\n%s", err, text)
	}
	out := map[string]*model.Sample{}
	for name, mf := range mfs {
		vec, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{Timestamp: model.Now()}, mf)
		if err != nil || len(vec) == 0 {
			t.Fatalf("%s: %v %v", name, vec, err)
		}
		for _, s := range vec {
			if _, ok := s.Metric["le"]; ok {
				continue
			}
			key := string(s.Metric[model.MetricNameLabel])
			if r, ok := s.Metric["finished_reason"]; ok {
				key += "{" + string(r) + "}"
			}
			if _, dup := out[key]; dup {
				t.Fatalf("%s: two samples", key)
			}
			out[key] = s
		}
	}
	return out
}

// In Linear mode the request metrics follow the schedule too: TTFT and
// ITL from the configured timing, no queue, a success per completed
// request and an abort per request whose client went away.
func TestLinearRequestMetrics(t *testing.T) {
	h := start(t, Config{Model: "m-1", TTFT: 30 * time.Millisecond, ITL: 20 * time.Millisecond})
	h.post("/v1/chat/completions", `{"model":"m-1","stream":true,"max_tokens":3,"messages":[{"role":"user","content":"a b"}]}`)
	h.post("/v1/completions", `{"model":"m-1","max_tokens":3,"prompt":"a b"}`)
	ctx, cancel := context.WithCancel(context.Background())
	resp := h.doCtx(ctx, "POST", "/v1/chat/completions",
		`{"model":"m-1","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"a b"}]}`, "X-Sim-ITL", "1h", "X-Request-Id", "gone")
	readEvents(t, bufio.NewReader(resp.Body), 2)
	cancel()
	resp.Body.Close()
	h.waitTrace("gone")
	m := h.do("GET", "/metrics", "")
	body, _ := io.ReadAll(m.Body)
	m.Body.Close()
	got := parseMetrics(t, string(body))
	prompt := ChatPromptTokens("a b") + ChatPromptTokens("a b") + CompletionPromptTokens("a b")
	want := map[string]float64{
		"vllm:time_to_first_token_seconds_count": 3,
		"vllm:time_to_first_token_seconds_sum":   3 * 0.03,
		"vllm:inter_token_latency_seconds_count": 4,
		"vllm:inter_token_latency_seconds_sum":   4 * 0.02,
		"vllm:e2e_request_latency_seconds_count": 2,
		"vllm:e2e_request_latency_seconds_sum":   2 * 0.07,
		"vllm:request_queue_time_seconds_count":  2,
		"vllm:request_queue_time_seconds_sum":    0,
		"vllm:request_success_total{length}":     2,
		"vllm:request_success_total{abort}":      1,
		"vllm:prompt_tokens_total":               float64(prompt),
		"vllm:generation_tokens_total":           7,
		"vllm:num_requests_waiting":              0,
		"vllm:num_preemptions_total":             0,
	}
	for name, v := range want {
		s, ok := got[name]
		if !ok || math.Abs(float64(s.Value)-v) > 1e-9 {
			t.Errorf("%s: %v, want %v", name, s, v)
		}
	}
}
