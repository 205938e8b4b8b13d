package sim

import (
	"bufio"
	"io"
	"strings"
	"testing"

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
		if err != nil || len(vec) != 1 {
			t.Fatalf("%s: %v %v", name, vec, err)
		}
		out[name] = vec[0]
	}
	return out
}
