package proxy

import (
	"encoding/json"
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
		// An empty refusal part makes no text either (vLLM skips it).
		{meter.APIChat, `{"echo":true,"messages":[{"role":"assistant","content":[{"type":"refusal","refusal":""}]}]}`, meter.EchoNone},
		{meter.APIChat, `{"echo":true,"messages":[{"role":"assistant","content":[{"type":"image_url","image_url":{"url":"u"}}]}]}`, meter.EchoChunk},
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
		if got, _ := echoOf(c.api, v, []byte(c.body)); got != c.want {
			t.Errorf("%v %s: %v, want %v", c.api, c.body, got, c.want)
		}
	}
}

// An engine that ignores echo (SGLang, llama.cpp, TGI, Ollama, OpenAI's
// chat) sends its output as without it: a request with echo is metered as
// the same request without (streams from SGLang's source). The echo is
// told by its text: taken by its place, the first token's chunk (chat)
// was no token event, and with max_tokens 0 no chunk was (completions).
func TestEchoIgnoredByEngine(t *testing.T) {
	streams := map[string]string{
		"/v1/completions":      fixtureText(t, "sglang/sglang-src-completions-stream-hidden-states.txt"),
		"/v1/chat/completions": fixtureText(t, "sglang/sglang-src-chat-stream-hidden-states.txt"),
	}
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, streams[string(c.Req.URI().Path())])
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	for _, c := range []struct{ path, plain, echo string }{
		{"/v1/completions", `{"model":"m","prompt":"The capital of France is","max_tokens":0,"stream":true}`,
			`{"model":"m","prompt":"The capital of France is","echo":true,"max_tokens":0,"stream":true}`},
		{"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"Complete it."},{"role":"assistant","content":"The capital of France is"}]}`,
			`{"model":"m","stream":true,"echo":true,"messages":[{"role":"user","content":"Complete it."},{"role":"assistant","content":"The capital of France is"}]}`},
	} {
		var recs [2]meter.Record
		for i, body := range []string{c.plain, c.echo} {
			if status, _, _, err := post(t, g.URL()+c.path, body, nil); err != nil || status != 200 {
				t.Fatalf("%s: status %d err %v", c.path, status, err)
			}
			recs[i] = g.record(t)
		}
		p, e := &recs[0], &recs[1]
		if e.Events != p.Events || e.Events == 0 || (e.TTFT >= 0) != (p.TTFT >= 0) || e.OSL != p.OSL || e.UsageSource != p.UsageSource || e.Outcome != meter.OutcomeOK {
			t.Errorf("%s with echo: events %d, ttft known %v, osl %d (%v), %v; without: %d, %v, %d (%v)", c.path,
				e.Events, e.TTFT >= 0, e.OSL, e.UsageSource, e.Outcome, p.Events, p.TTFT >= 0, p.OSL, p.UsageSource)
		}
	}
}

// vLLM's echo of a long last message, in a body the gateway parses shallow
// (over 64 KiB: its long strings emptied in the copy it reads), is told by
// its text, read from the body: escapes unescaped (vLLM writes é where the
// client wrote \u00e9), text parts joined with "\n" as vLLM's chat_utils
// joins them. 6 token events, not 7.
func TestEchoOfLongMessage(t *testing.T) {
	long := strings.Repeat(`The \"capital\" of Fran\u00e7e is `, 3000)
	var p fastjson.Parser
	v, err := p.Parse(`"` + long + `"`)
	if err != nil {
		t.Fatal(err)
	}
	text := string(v.GetStringBytes())
	echoed := func(s string) string {
		b, _ := json.Marshal(s) // as pydantic writes it: é as is
		return strings.Replace(fixtureText(t, "vllm/vllm-src-chat-stream-echo.txt"), `"The capital of France is"`, string(b), 1)
	}
	for _, c := range []struct{ name, content, stream string }{
		{"a string", `"` + long + `"`, echoed(text)},
		{"text parts", `[{"type":"text","text":"` + long + `"},{"type":"text","text":""},{"type":"text","text":"Paris?"}]`, echoed(text + "\nParis?")},
	} {
		up := startRawUpstream(t, func(sc *scriptConn) {
			writeSSEHead(sc)
			writeChunk(sc, c.stream)
			endChunks(sc)
		})
		g := startGateway(t, Config{Upstream: up.URL()})
		body := `{"model":"m","stream":true,"echo":true,"messages":[{"role":"user","content":"Complete it."},{"role":"assistant","content":` + c.content + `}]}`
		if len(body) <= shallowFrom {
			t.Fatalf("the body is %d bytes: not parsed shallow", len(body))
		}
		if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", body, nil); err != nil || status != 200 {
			t.Fatalf("%s: status %d err %v", c.name, status, err)
		}
		if rec := g.record(t); rec.Events != 6 || rec.OSL != 5 || rec.Outcome != meter.OutcomeOK {
			t.Errorf("%s: events %d osl %d %v; want 6, 5, ok", c.name, rec.Events, rec.OSL, rec.Outcome)
		}
	}
}

// echoText reads the text vLLM echoes as vLLM's chat_utils makes it: text
// parts (and refusal, thinking, bare strings) joined with "\n", empty ones
// left out, escapes read; a part of another kind puts a placeholder line
// first (or, with --interleave-mm-strings, in its place: the text keeps
// where the parts that are not text come); a completions prompt is known
// when it is one string.
func TestEchoText(t *testing.T) {
	const other = "\x00other" // a part that is not text, in parts
	parts := func(ps ...string) meter.EchoText {
		var e meter.EchoText
		for _, s := range ps {
			if s == other {
				e.AddOther()
			} else {
				e.AddText([]byte(s))
			}
		}
		return e
	}
	text := func(others int, unknown bool, texts ...string) meter.EchoText {
		var e meter.EchoText
		for range others {
			e.AddOther()
		}
		for _, s := range texts {
			e.AddText([]byte(s))
		}
		if unknown {
			e.SetUnknown()
		}
		return e
	}
	for _, c := range []struct {
		api  meter.API
		body string
		want meter.EchoText
	}{
		{meter.APIChat, `{"messages":[{"role":"assistant","content":"a\u00e9\n"}]}`, text(0, false, "a\u00e9\n")},
		{meter.APIChat, `{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"b","content":"c"}]}`, text(0, false, "b")},
		{meter.APIChat, `{"messages":[{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":""},"b",{"type":"refusal","refusal":"c"},{"type":"thinking","thinking":"d"},{"type":"input_text","text":"e"}]}]}`,
			text(0, false, "a", "b", "c", "d", "e")},
		{meter.APIChat, `{"messages":[{"role":"assistant","content":[{"type":"image_url","image_url":{"url":"u"}},{"type":"text","text":"a"}]}]}`, text(1, false, "a")},
		{meter.APIChat, `{"messages":[{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}},"b",{"type":"text","text":""},{"type":"input_audio"},{"type":"text","text":"c"}]}]}`,
			parts("a", other, "b", "", other, "c")},
		// vLLM joins a tool_reference part's name as a text, with no
		// placeholder.
		{meter.APIChat, `{"messages":[{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"tool_reference","name":"f"}]}]}`, text(0, false, "a", "f")},
		{meter.APIChat, `{"messages":[{"role":"assistant","content":null}]}`, text(0, false)},
		{meter.APIChat, `{"messages":"x"}`, text(0, false)},
		{meter.APICompletions, `{"prompt":"a\tb"}`, text(0, false, "a\tb")},
		{meter.APICompletions, `{"prompt":["a"]}`, text(0, false, "a")},
		{meter.APICompletions, `{"prompt":["a","b"]}`, text(0, true)},
		{meter.APICompletions, `{"prompt":[1,2,3]}`, text(0, true)},
		{meter.APICompletions, `{"prompt":[[1,2,3]]}`, text(0, true)},
	} {
		if got := echoText(c.api, []byte(c.body)); got != c.want {
			t.Errorf("%v %s: %+v, want %+v", c.api, c.body, got, c.want)
		}
	}
}

// vLLM's echo of a last message with a text before an image: without
// --interleave-mm-strings the image's placeholder line comes first, with
// it in the image's place, after the text. Either is told from the
// request's content (the text before the first image and after the last
// are known): 6 token events, not 7; the same stream for a request whose
// message has another text is 7.
func TestEchoInterleaved(t *testing.T) {
	echoed := func(s string) string {
		b, _ := json.Marshal(s)
		return strings.Replace(fixtureText(t, "vllm/vllm-src-chat-stream-echo.txt"), `"The capital of France is"`, string(b), 1)
	}
	image := `{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}`
	for _, c := range []struct {
		name, content, stream string
		events                int
	}{
		{"placeholder first", `[{"type":"text","text":"The capital of France is"},` + image + `]`, echoed("<image>\nThe capital of France is"), 6},
		{"interleaved", `[{"type":"text","text":"The capital of France is"},` + image + `]`, echoed("The capital of France is\n<image>"), 6},
		{"interleaved, texts around", `[{"type":"text","text":"The capital"},` + image + `,{"type":"text","text":"of France is"}]`, echoed("The capital\n<image>\nof France is"), 6},
		{"interleaved, another text", `[{"type":"text","text":"The capital of Spain is"},` + image + `]`, echoed("The capital of France is\n<image>"), 7},
	} {
		up := startRawUpstream(t, func(sc *scriptConn) {
			writeSSEHead(sc)
			writeChunk(sc, c.stream)
			endChunks(sc)
		})
		g := startGateway(t, Config{Upstream: up.URL()})
		body := `{"model":"m","stream":true,"echo":true,"add_generation_prompt":false,"messages":[{"role":"user","content":` + c.content + `}]}`
		if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", body, nil); err != nil || status != 200 {
			t.Fatalf("%s: status %d err %v", c.name, status, err)
		}
		if rec := g.record(t); rec.Events != c.events || rec.Outcome != meter.OutcomeOK {
			t.Errorf("%s: events %d %v; want %d, ok", c.name, rec.Events, rec.Outcome, c.events)
		}
	}
}
