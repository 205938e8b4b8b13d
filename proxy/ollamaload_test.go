package proxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/slo"
	"github.com/valyala/fastjson"
)

// Ollama answers a request with an empty prompt (/api/generate) or
// messages (/api/chat) by loading the model, and with keep_alive 0 too by
// unloading it: one JSON object, whether a stream was asked for or not,
// done, empty, without counts, done_reason "load" or "unload" (its
// server's routes.go). That is no inference: the record says model_op, it
// is not judged (its time is the model's load, seconds), is no arrival in
// the profile, and counts in goodput_requests_total with route other. An
// answer that is done and empty for another reason is an inference
// request's, judged.
func TestOllamaLoadNotJudged(t *testing.T) {
	answers := map[string]string{
		"/api/generate load":   `{"model":"llama3","created_at":"2025-09-01T10:00:00.000000Z","response":"","done":true,"done_reason":"load"}`,
		"/api/generate unload": `{"model":"llama3","created_at":"2025-09-01T10:00:00.000000Z","response":"","done":true,"done_reason":"unload"}`,
		"/api/chat load":       `{"model":"gemma3:1b","created_at":"2025-09-01T10:00:00.000000Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"load"}`,
		"/api/chat unload":     `{"model":"gemma3:1b","created_at":"2025-09-01T10:00:00.000000Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"unload"}`,
		"/api/generate stop":   `{"model":"llama3","created_at":"2025-09-01T10:00:00.000000Z","response":"","done":true,"done_reason":"stop","total_duration":5,"prompt_eval_count":3}`,
	}
	up := startRawUpstream(t, func(c *scriptConn) {
		body := string(c.Req.Body())
		key := string(c.Req.URI().Path()) + " load"
		switch {
		case strings.Contains(body, `"keep_alive":0`):
			key = string(c.Req.URI().Path()) + " unload"
		case strings.Contains(body, `"prompt":"hi"`):
			key = "/api/generate stop"
		}
		a := answers[key]
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s", len(a), a)
		c.BW.Flush()
	})
	// A bound no request keeps: every judged request misses.
	strict := map[string]*slo.Class{"strict": {TTFT: cfgtypes.Duration(time.Nanosecond), Objective: 0.99}}
	m := startMetered(t, Config{Upstream: up.URL()}, strict, "strict")
	for _, c := range []struct {
		path, body, answer string
		op                 meter.ModelOp
	}{
		{"/api/generate", `{"model":"llama3"}`, "/api/generate load", meter.ModelOpLoad},
		{"/api/generate", `{"model":"llama3","prompt":"","stream":false}`, "/api/generate load", meter.ModelOpLoad},
		{"/api/generate", `{"model":"llama3","keep_alive":0}`, "/api/generate unload", meter.ModelOpUnload},
		{"/api/chat", `{"model":"gemma3:1b","messages":[]}`, "/api/chat load", meter.ModelOpLoad},
		{"/api/chat", `{"model":"gemma3:1b","keep_alive":0}`, "/api/chat unload", meter.ModelOpUnload},
		{"/api/generate", `{"model":"llama3","prompt":"hi"}`, "/api/generate stop", meter.ModelOpNone},
	} {
		status, _, got, err := post(t, m.URL()+c.path, c.body, nil)
		if err != nil || status != 200 || got != answers[c.answer] {
			t.Fatalf("%s %s: status %d err %v body %q", c.path, c.body, status, err, got)
		}
		rec := m.record(t)
		log := string(rec.AppendJSON(nil))
		if rec.ModelOp != c.op || rec.Inference() != (c.op == meter.ModelOpNone) || rec.Outcome != meter.OutcomeOK ||
			strings.Contains(log, `"model_op"`) != (c.op != meter.ModelOpNone) || !strings.Contains(log, `"model_op":"`+c.op.String()+`"`) && c.op != meter.ModelOpNone {
			t.Errorf("%s %s: model_op %q inference %v outcome %s; log %s", c.path, c.body, rec.ModelOp, rec.Inference(), rec.Outcome, log)
		}
		if rec.Judged != (c.op == meter.ModelOpNone) {
			t.Errorf("%s %s: judged %v", c.path, c.body, rec.Judged)
		}
	}
	m.settle(t)
	if got := m.sum(t, "goodput_slo_requests_total", nil); got != 1 {
		t.Errorf("goodput_slo_requests_total %v, want 1: a load was judged", got)
	}
	if got := m.sum(t, "goodput_requests_total", map[string]string{"route": "other"}); got != 5 {
		t.Errorf("goodput_requests_total{route=other} %v, want the 5 loads and unloads", got)
	}
	if prof := m.profile(t).Tenants[0].Profile; prof.Arrivals != 1 || prof.Requests != 1 {
		t.Errorf("profile: arrivals %d requests %d, want 1", prof.Arrivals, prof.Requests)
	}
}

// A request is taken for a load as Ollama's Go server reads it: an empty,
// absent or null prompt (generate) or messages (chat); not when a member
// whose name folds to it (read by Go's encoding/json as it) holds one.
func TestOllamaLoadRequest(t *testing.T) {
	for _, c := range []struct {
		api  meter.API
		body string
		load bool
	}{
		{meter.APIOllamaGenerate, `{"model":"m"}`, true},
		{meter.APIOllamaGenerate, `{"model":"m","prompt":""}`, true},
		{meter.APIOllamaGenerate, `{"model":"m","prompt":null,"keep_alive":0}`, true},
		{meter.APIOllamaGenerate, `{"model":"m","prompt":"hi"}`, false},
		{meter.APIOllamaGenerate, `{"model":"m","Prompt":"hi"}`, false},
		{meter.APIOllamaGenerate, `{"model":"m","PROMPT":""}`, false},
		{meter.APIOllamaGenerate, `{"model":"m","prompt":1}`, false},
		{meter.APIOllamaGenerate, `{"model":"m","messages":[]}`, true},
		{meter.APIOllamaChat, `{"model":"m"}`, true},
		{meter.APIOllamaChat, `{"model":"m","messages":[]}`, true},
		{meter.APIOllamaChat, `{"model":"m","messages":null}`, true},
		{meter.APIOllamaChat, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, false},
		{meter.APIOllamaChat, `{"model":"m","meſſages":[{"role":"user","content":"hi"}]}`, false},
		{meter.APIOllamaChat, `{"model":"m","prompt":""}`, true},
		{meter.APIChat, `{"model":"m","messages":[]}`, false},
		{meter.APICompletions, `{"model":"m","prompt":""}`, false},
	} {
		v, err := fastjson.Parse(c.body)
		if err != nil {
			t.Fatal(err)
		}
		if got := ollamaLoad(c.api, v); got != c.load {
			t.Errorf("%v %s: load %v, want %v", c.api, c.body, got, c.load)
		}
	}
}

// A load request over 64 KiB (parsed shallow: its large values are not
// built) is known as one from the request too, and is no arrival in the
// profile: the copy keeps whether the prompt or messages are empty, and a
// member whose name folds to them. A request with a long prompt is an
// inference request's arrival.
func TestOllamaLargeLoadNoArrival(t *testing.T) {
	answers := map[string]string{
		"/api/generate": `{"model":"llama3","created_at":"2025-09-01T10:00:00.000000Z","response":"","done":true,"done_reason":"load"}`,
		"/api/chat":     `{"model":"gemma3:1b","created_at":"2025-09-01T10:00:00.000000Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"load"}`,
		"stop":          `{"model":"llama3","created_at":"2025-09-01T10:00:00.000000Z","response":"x","done":true,"done_reason":"stop","prompt_eval_count":3,"eval_count":1}`,
	}
	up := startRawUpstream(t, func(c *scriptConn) {
		a := answers[string(c.Req.URI().Path())]
		if body := string(c.Req.Body()); strings.Contains(body, `"prompt":"hi`) || strings.Contains(body, `"Prompt"`) {
			a = answers["stop"]
		}
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s", len(a), a)
		c.BW.Flush()
	})
	strict := map[string]*slo.Class{"strict": {TTFT: cfgtypes.Duration(time.Nanosecond), Objective: 0.99}}
	m := startMetered(t, Config{Upstream: up.URL()}, strict, "strict")
	context := strings.TrimSuffix(strings.Repeat("1234,", 20_000), ",") // 100 KB of token ids
	tools := `[` + strings.TrimSuffix(strings.Repeat(`{"type":"function","function":{"name":"f","parameters":{}}},`, 2_000), ",") + `]`
	for _, c := range []struct {
		path, body string
		op         meter.ModelOp
	}{
		{"/api/generate", `{"model":"llama3","prompt":"","context":[` + context + `]}`, meter.ModelOpLoad},
		{"/api/generate", `{"model":"llama3","context":[` + context + `],"stream":false}`, meter.ModelOpLoad},
		{"/api/chat", `{"model":"gemma3:1b","messages":[],"tools":` + tools + `}`, meter.ModelOpLoad},
		{"/api/generate", `{"model":"llama3","prompt":"hi ` + strings.Repeat("x", 100<<10) + `"}`, meter.ModelOpNone},
		{"/api/generate", `{"model":"llama3","Prompt":"hi","context":[` + context + `]}`, meter.ModelOpNone},
	} {
		if len(c.body) <= shallowFrom {
			t.Fatalf("a body of %d bytes is not parsed shallow", len(c.body))
		}
		status, _, _, err := post(t, m.URL()+c.path, c.body, nil)
		if err != nil || status != 200 {
			t.Fatalf("%s %.60s: status %d err %v", c.path, c.body, status, err)
		}
		if rec := m.record(t); rec.ModelOp != c.op || rec.Outcome != meter.OutcomeOK {
			t.Errorf("%s %.60s: model_op %q outcome %s", c.path, c.body, rec.ModelOp, rec.Outcome)
		}
	}
	m.settle(t)
	if ts := m.profile(t).Tenants; len(ts) != 1 || ts[0].Profile.Arrivals != 2 || ts[0].Profile.Requests != 2 {
		t.Errorf("profile: %+v, want the 2 inference requests' arrivals", ts)
	}
}
