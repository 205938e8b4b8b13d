package proxy

import (
	"strings"
	"testing"

	"github.com/goodput/goodput/meter"
	"github.com/valyala/fastjson"
)

// A request with "echo": true gets back some of its own text before its
// output (streams built from vLLM's source): the gateway reads the option
// from the body and does not take that text for output. A completions
// request with max_tokens 0 gets its prompt only: no token event, no TTFT
// (vLLM's usage still counts the one token it generated and dropped). A
// chat request ending with an assistant message gets that message back in
// a chunk of its own: 6 token events, not 7. The client gets every byte
// but the usage chunk it did not ask for.
func TestEchoIsNoOutput(t *testing.T) {
	streams := map[string]string{
		"/v1/completions":      fixtureText(t, "vllm/vllm-src-completions-stream-echo-max-tokens-0.txt"),
		"/v1/chat/completions": fixtureText(t, "vllm/vllm-src-chat-stream-echo.txt"),
	}
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, streams[string(c.Req.URI().Path())])
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	for _, c := range []struct {
		path, body    string
		events        int
		ttftKnown     bool
		isl, osl      int
		clientSeesLen int // events the client gets
	}{
		{"/v1/completions", `{"model":"m","prompt":"The capital of France is","echo":true,"max_tokens":0,"stream":true}`,
			0, false, 6, 1, 2},
		{"/v1/chat/completions", `{"model":"m","stream":true,"echo":true,"messages":[{"role":"user","content":"Complete it."},{"role":"assistant","content":"The capital of France is"}]}`,
			6, true, 18, 5, 8},
	} {
		status, _, got, err := post(t, g.URL()+c.path, c.body, nil)
		if err != nil || status != 200 {
			t.Fatalf("%s: status %d err %v", c.path, status, err)
		}
		if n := strings.Count(got, "data: "); n != c.clientSeesLen || strings.Contains(got, `"usage"`) {
			t.Errorf("%s: the client got %d events (usage chunk: %v), want %d and none", c.path, n, strings.Contains(got, `"usage"`), c.clientSeesLen)
		}
		rec := g.record(t)
		if rec.Events != c.events || (rec.TTFT >= 0) != c.ttftKnown || rec.ISL != c.isl || rec.OSL != c.osl ||
			rec.UsageSource != meter.UsageUpstream || rec.Outcome != meter.OutcomeOK {
			t.Errorf("%s: events %d ttft %v isl %d osl %d (%v) outcome %v; want %d, ttft known %v, %d %d (usage) ok",
				c.path, rec.Events, rec.TTFT, rec.ISL, rec.OSL, rec.UsageSource, rec.Outcome, c.events, c.ttftKnown, c.isl, c.osl)
		}
	}
}

func TestEchoOf(t *testing.T) {
	var p fastjson.Parser
	for _, c := range []struct {
		api  meter.API
		body string
		want meter.Echo
	}{
		{meter.APICompletions, `{"prompt":"x","echo":true,"max_tokens":0}`, meter.EchoOnly},
		{meter.APICompletions, `{"prompt":"x","echo":true,"max_tokens":0.0}`, meter.EchoOnly},
		{meter.APICompletions, `{"prompt":"x","echo":true,"max_tokens":3}`, meter.EchoNone},
		{meter.APICompletions, `{"prompt":"x","echo":true}`, meter.EchoNone},
		{meter.APICompletions, `{"prompt":"x","echo":false,"max_tokens":0}`, meter.EchoNone},
		// vLLM's request models are pydantic's, which read a boolean in
		// lax mode: 1, 1.0 and "true", "yes", "on", "t", "y", "1" (any
		// case) are true; 0, "false", "no", ... false; anything else is
		// refused (400).
		{meter.APICompletions, `{"prompt":"x","echo":"true","max_tokens":0}`, meter.EchoOnly},
		{meter.APICompletions, `{"prompt":"x","echo":"Yes","max_tokens":0}`, meter.EchoOnly},
		{meter.APICompletions, `{"prompt":"x","echo":1,"max_tokens":0}`, meter.EchoOnly},
		{meter.APICompletions, `{"prompt":"x","echo":1.0,"max_tokens":"0"}`, meter.EchoOnly},
		{meter.APICompletions, `{"prompt":"x","echo":"off","max_tokens":0}`, meter.EchoNone},
		{meter.APICompletions, `{"prompt":"x","echo":2,"max_tokens":0}`, meter.EchoNone},
		{meter.APICompletions, `{"prompt":"x","echo":"sure","max_tokens":0}`, meter.EchoNone},
		{meter.APIChat, `{"echo":"on","add_generation_prompt":"false","messages":[{"role":"user","content":"a"}]}`, meter.EchoChunk},
		{meter.APIChat, `{"echo":true,"add_generation_prompt":0,"messages":[{"role":"user","content":"a"}]}`, meter.EchoChunk},
		// Text parts are joined into the content vLLM echoes: empty ones
		// make none, and no echo chunk comes.
		{meter.APIChat, `{"echo":true,"messages":[{"role":"assistant","content":[{"type":"text","text":""}]}]}`, meter.EchoNone},
		{meter.APIChat, `{"echo":true,"messages":[{"role":"assistant","content":[{"type":"text","text":""},{"type":"text","text":"b"}]}]}`, meter.EchoChunk},
		{meter.APIChat, `{"echo":true,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}`, meter.EchoChunk},
		{meter.APIChat, `{"echo":true,"messages":[{"role":"assistant","content":[{"type":"text","text":"b"}]}]}`, meter.EchoChunk},
		{meter.APIChat, `{"echo":true,"messages":[{"role":"assistant","content":""}]}`, meter.EchoNone},
		{meter.APIChat, `{"echo":true,"messages":[{"role":"user","content":"a"}]}`, meter.EchoNone},
		{meter.APIChat, `{"echo":true,"add_generation_prompt":false,"messages":[{"role":"user","content":"a"}]}`, meter.EchoChunk},
		{meter.APIChat, `{"echo":true,"messages":[]}`, meter.EchoNone},
		{meter.APIChat, `{"echo":true,"messages":"x"}`, meter.EchoNone},
		{meter.APIChat, `{"messages":[{"role":"assistant","content":"b"}]}`, meter.EchoNone},
		{meter.APIResponses, `{"echo":true,"max_tokens":0}`, meter.EchoNone},
	} {
		v, err := p.Parse(c.body)
		if err != nil {
			t.Fatal(err)
		}
		if got := echoOf(c.api, v); got != c.want {
			t.Errorf("%v %s: %v, want %v", c.api, c.body, got, c.want)
		}
	}
}
