package proxy

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// Streams shaped as engines send them today, run through the gateway: each
// event written on its own, a millisecond apart, so that each has a stamp
// of its own.

// shapeGateway starts an engine that answers every request with the
// events next holds, and a gateway in front of it.
func shapeGateway(t *testing.T) (g *gateway, next func(events ...string)) {
	t.Helper()
	var mu sync.Mutex
	var cur []string
	up := startRawUpstream(t, func(c *scriptConn) {
		mu.Lock()
		events := cur
		mu.Unlock()
		writeSSEHead(c)
		for _, ev := range events {
			time.Sleep(time.Millisecond)
			writeChunk(c, ev)
		}
		endChunks(c)
	})
	return startGateway(t, Config{Upstream: up.URL()}), func(events ...string) {
		mu.Lock()
		cur = events
		mu.Unlock()
	}
}

// sse is one event whose data is s.
func sse(s string) string { return "data: " + s + "\n\n" }

// Ollama's OpenAI-compatible chat route ends a stream whose generation
// failed with a chunk of empty content, without a finish_reason or [DONE]
// (ollama/ollama, server/routes.go streamResponse writes {"error": ...} to
// the route's writer, and middleware/openai.go ChatWriter turns it into a
// chunk of the empty message, dropping the error): the answer was cut, and
// the record says so. A stream that says why it stopped, by a finish_reason
// or by [DONE] (TGI 1.4.3 sent no [DONE]), is whole.
func TestStreamWithoutFinishIsCut(t *testing.T) {
	g, next := shapeGateway(t)
	const head = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen3","system_fingerprint":"fp_ollama",`
	role := sse(head + `"choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning":"Hmm"},"finish_reason":null}]}`)
	text := sse(head + `"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}`)
	failed := sse(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"content":""},"finish_reason":null}]}`)
	finish := sse(head + `"choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}]}`)
	for _, c := range []struct {
		name   string
		events []string
		ok     bool
	}{
		{"cut by the engine's error", []string{role, text, failed}, false},
		{"no event at all", nil, false},
		{"finish_reason and [DONE]", []string{role, text, finish, done}, true},
		{"finish_reason, no [DONE]", []string{role, text, finish}, true},
		{"[DONE], no finish_reason", []string{role, text, done}, true},
	} {
		next(c.events...)
		_, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
		if err != nil || body != strings.Join(c.events, "") {
			t.Fatalf("%s: err %v body %q", c.name, err, body)
		}
		rec := g.record(t)
		if c.ok && (rec.Outcome != meter.OutcomeOK || rec.ErrorMessage != "") {
			t.Errorf("%s: %s %q, want ok", c.name, rec.Outcome, rec.ErrorMessage)
		}
		if !c.ok && (rec.Outcome != meter.OutcomeUpstreamError || rec.ErrorMessage != errNoFinish) {
			t.Errorf("%s: %s %q, want upstream_error %q", c.name, rec.Outcome, rec.ErrorMessage, errNoFinish)
		}
		want := len(c.events) // every one a token event, but [DONE]
		if strings.HasSuffix(body, done) {
			want--
		}
		if rec.Events != want {
			t.Errorf("%s: %d token events, want %d", c.name, rec.Events, want)
		}
	}
	// Completions too (a text_completion stream cut the same way).
	next(sse(`{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" x","finish_reason":null}]}`))
	if _, _, _, err := post(t, g.URL()+"/v1/completions", `{"model":"m","stream":true,"prompt":"a"}`, nil); err != nil {
		t.Fatal(err)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeUpstreamError || rec.ErrorMessage != errNoFinish {
		t.Errorf("completions: %s %q", rec.Outcome, rec.ErrorMessage)
	}
}
