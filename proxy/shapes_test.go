package proxy

import (
	"fmt"
	"slices"
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
		wantMsg := errNoFinish
		if c.events == nil {
			wantMsg = errNoEvent // no output at all
		}
		if !c.ok && (rec.Outcome != meter.OutcomeUpstreamError || rec.ErrorMessage != wantMsg) {
			t.Errorf("%s: %s %q, want upstream_error %q", c.name, rec.Outcome, rec.ErrorMessage, wantMsg)
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
	// llama.cpp's own /completions (its native handler, not OpenAI's) ends
	// a whole stream with "stop":true, no choices and no [DONE]
	// (ggml-org/llama.cpp, tools/server/server.cpp: [DONE] only for its
	// OpenAI-compatible routes): not cut (found by review).
	next(sse(`{"index":0,"content":"A","tokens":[32],"stop":false,"id_slot":-1,"tokens_predicted":1,"tokens_evaluated":3}`),
		sse(`{"index":0,"content":"","tokens":[],"stop":true,"stop_type":"limit","tokens_predicted":2,"tokens_evaluated":3}`))
	if _, _, _, err := post(t, g.URL()+"/completions", `{"prompt":"a","stream":true,"n_predict":2}`, nil); err != nil {
		t.Fatal(err)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
		t.Errorf("llama.cpp's /completions: %s %q, want ok", rec.Outcome, rec.ErrorMessage)
	}
}

// A stream of several choices (n > 1, several prompts) is whole only once
// every choice asked for had its finish_reason, or [DONE] came: an engine
// whose connection closed after choice 0's finish, choice 1 still
// generating and no [DONE], cut the stream, and the record says so
// (upstream_error, the outputs' ends missing), its output estimated. It
// was recorded ok, the first finish_reason taken for every choice's.
// Ended by the engine (each choice's finish, or [DONE]) it is ok; so is
// a stream of one choice from an engine that reads no n.
func TestStreamOfSeveralChoicesCut(t *testing.T) {
	g, next := shapeGateway(t)
	chunk := func(i int, delta, finish string) string {
		return sse(fmt.Sprintf(`{"id":"chatcmpl-2","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":%d,"delta":%s,"finish_reason":%s}]}`, i, delta, finish))
	}
	text := func(i int) string { return chunk(i, `{"content":"Hi"}`, "null") }
	fin := func(i int) string { return chunk(i, `{}`, `"stop"`) }
	cmpl := func(i int, finish string) string {
		return sse(fmt.Sprintf(`{"id":"cmpl-2","object":"text_completion","created":1,"model":"m","choices":[{"index":%d,"text":" x","finish_reason":%s}]}`, i, finish))
	}
	start := []string{chunk(0, `{"role":"assistant","content":""}`, "null"), chunk(1, `{"role":"assistant","content":""}`, "null"), text(0), text(1)}
	const (
		chatN2  = `{"model":"m","stream":true,"n":2,"messages":[{"role":"user","content":"hi"}]}`
		prompts = `{"model":"m","stream":true,"prompt":["a","b"]}`
	)
	for _, c := range []struct {
		name, path, body string
		events           []string
		ok               bool
	}{
		{"n 2, closed after choice 0's finish", "/v1/chat/completions", chatN2, append(slices.Clone(start), fin(0), text(1)), false},
		{"n 2, both finished, no [DONE]", "/v1/chat/completions", chatN2, append(slices.Clone(start), fin(0), text(1), fin(1)), true},
		{"n 2, both finished and [DONE]", "/v1/chat/completions", chatN2, append(slices.Clone(start), fin(1), fin(0), done), true},
		{"n 2, choice 1's end missing, [DONE]", "/v1/chat/completions", chatN2, append(slices.Clone(start), fin(0), done), true},
		{"n 2, choice 0's finish twice", "/v1/chat/completions", chatN2, append(slices.Clone(start), fin(0), fin(0)), false},
		{"n 2 asked, one choice streamed", "/v1/chat/completions", chatN2, []string{text(0), fin(0)}, true},
		{"2 prompts, closed after the first's finish", "/v1/completions", prompts, []string{cmpl(0, "null"), cmpl(1, "null"), cmpl(0, `"stop"`), cmpl(1, "null")}, false},
		{"2 prompts, both finished, no [DONE]", "/v1/completions", prompts, []string{cmpl(0, "null"), cmpl(1, "null"), cmpl(0, `"stop"`), cmpl(1, `"length"`)}, true},
		// TGI's completions before 2.2: n not read, one choice a prompt,
		// every chunk's finish_reason "", no [DONE] (router/src/server.rs)
		{"TGI 2.1, 2 prompts, n 2", "/v1/completions", `{"model":"m","stream":true,"prompt":["a","b"],"n":2}`, []string{cmpl(0, `""`), cmpl(1, `""`), cmpl(1, `""`), cmpl(0, `""`)}, true},
	} {
		next(c.events...)
		_, _, body, err := post(t, g.URL()+c.path, c.body, nil)
		if err != nil || body != strings.Join(c.events, "") {
			t.Fatalf("%s: err %v body %q", c.name, err, body)
		}
		rec := g.record(t)
		if c.ok && (rec.Outcome != meter.OutcomeOK || rec.ErrorMessage != "") {
			t.Errorf("%s: %s %q, want ok", c.name, rec.Outcome, rec.ErrorMessage)
		}
		if !c.ok && (rec.Outcome != meter.OutcomeUpstreamError || rec.ErrorMessage != errOutputsUnfinished || rec.UsageSource != meter.UsageEstimate) {
			t.Errorf("%s: %s %q (%v), want upstream_error %q (estimate)", c.name, rec.Outcome, rec.ErrorMessage, rec.UsageSource, errOutputsUnfinished)
		}
	}
}

// vLLM streams the choices of a request for several (n > 1) interleaved,
// and with stream_options.continuous_usage_stats puts on each chunk its
// own choice's running count (vllm-project/vllm,
// vllm/entrypoints/openai/chat_completion/serving.py: completion_tokens is
// previous_num_tokens[i]; SGLang's serving_chat.py does the same), until
// the final chunk sums them. Those counts say nothing of one event's
// tokens, and a choice's chunk after another choice finished is still
// output, not a usage trailer: each event is a token event, the record has
// no tokens_per_event, and a stream cut before its final count has its
// output estimated, not taken from one choice's count (found by a probe of
// engines' stream shapes: tokens_per_event was [0 0 1 0 1 0 ...], and the
// second choice's chunk of empty text after the first had finished was not
// a token event).
func TestSeveralChoicesCountedApart(t *testing.T) {
	g, next := shapeGateway(t)
	const head = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":`
	chunk := func(i int, delta, finish string, completion int) string {
		return sse(fmt.Sprintf(`%s%d,"delta":%s,"logprobs":null,"finish_reason":%s}],"usage":{"prompt_tokens":9,"total_tokens":%d,"completion_tokens":%d}}`,
			head, i, delta, finish, 9+completion, completion))
	}
	events := []string{
		chunk(0, `{"role":"assistant","content":""}`, "null", 0),
		chunk(1, `{"role":"assistant","content":""}`, "null", 0),
		chunk(0, `{"content":"A"}`, "null", 1),
		chunk(1, `{"content":"B"}`, "null", 1),
		chunk(0, `{"content":"C"}`, `"length"`, 2),
		// A token that is half a character: no text yet, one token more.
		chunk(1, `{"content":""}`, "null", 2),
		chunk(1, `{"content":"é"}`, `"length"`, 3),
	}
	final := sse(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":9,"total_tokens":14,"completion_tokens":5}}`)
	const body = `{"model":"m","stream":true,"n":2,"max_tokens":2,"stream_options":{"include_usage":true,"continuous_usage_stats":true},"messages":[]}`
	for _, c := range []struct {
		name     string
		events   []string
		isl, osl int
		source   meter.UsageSource
	}{
		{"whole", append(append([]string{}, events...), final, done), 9, 5, meter.UsageUpstream},
		// Ended after the last finish_reason, without the final count:
		// one token per event with text (A, B, C, é).
		{"without its final count", events, meter.Unknown, 4, meter.UsageEstimate},
	} {
		next(c.events...)
		if _, _, got, err := post(t, g.URL()+"/v1/chat/completions", body, nil); err != nil || got != strings.Join(c.events, "") {
			t.Fatalf("%s: err %v body %q", c.name, err, got)
		}
		rec := g.record(t)
		if rec.Outcome != meter.OutcomeOK || rec.Events != len(events) || len(rec.ITL) != len(events)-1 || rec.LeadEvents != 2 {
			t.Errorf("%s: %s %q, %d token events, %d gaps, %d before the first with content; want ok, %d, %d, 2",
				c.name, rec.Outcome, rec.ErrorMessage, rec.Events, len(rec.ITL), rec.LeadEvents, len(events), len(events)-1)
		}
		if len(rec.TokensPerEvent) != 0 {
			t.Errorf("%s: tokens_per_event %v, want none (the counts are each choice's)", c.name, rec.TokensPerEvent)
		}
		if rec.ISL != c.isl || rec.OSL != c.osl || rec.UsageSource != c.source {
			t.Errorf("%s: isl %d osl %d (%s), want %d %d (%s)", c.name, rec.ISL, rec.OSL, rec.UsageSource, c.isl, c.osl, c.source)
		}
	}
}

// Shapes that engines send today and the gateway already meters right,
// kept so that they stay right: reasoning before the answer, a tool call as
// the only output, and errors in the middle of a stream, each in the
// engine's own format.
func TestEngineStreamShapes(t *testing.T) {
	g, next := shapeGateway(t)
	const head = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,`
	vllm := func(rest string) string { return sse(head + rest + "}]}") }
	role := vllm(`"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null`)
	const asked = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}`
	for _, c := range []struct {
		name, path, body string
		events           []string
		outcome          meter.Outcome
		msg              string
		isl, osl, tokens int
		lead             int // token events before the first with content
	}{
		// vllm-project/vllm, chat_completion/serving.py with a reasoning
		// parser: the role chunk (content ""), reasoning deltas, the
		// answer, a finish chunk, the usage chunk (cached tokens are part
		// of prompt_tokens). The first reasoning delta is the first
		// content: the user sees the work start.
		{"vLLM reasoning", "/v1/chat/completions", asked, []string{role,
			vllm(`"delta":{"reasoning":"Okay"},"logprobs":null,"finish_reason":null`),
			vllm(`"delta":{"reasoning":", so"},"logprobs":null,"finish_reason":null`),
			vllm(`"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null`),
			vllm(`"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null`),
			sse(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":12,"total_tokens":17,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":8}}}`),
			done}, meter.OutcomeOK, "", 12, 5, 5, 1},
		// The same with a tool parser, a tool call the only output (its
		// name first, then the arguments in pieces, the last on the finish
		// chunk); the client did not ask for usage, the gateway did.
		{"vLLM tool call only", "/v1/chat/completions", chatBody, []string{role,
			vllm(`"delta":{"tool_calls":[{"id":"chatcmpl-tool-1","type":"function","index":0,"function":{"name":"get_weather"}}]},"logprobs":null,"finish_reason":null`),
			vllm(`"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\": \""}}]},"logprobs":null,"finish_reason":null`),
			vllm(`"delta":{"tool_calls":[{"index":0,"function":{"arguments":"Paris\"}"}}]},"logprobs":null,"finish_reason":"tool_calls","stop_reason":null`),
			sse(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":120,"total_tokens":140,"completion_tokens":20}}`),
			done}, meter.OutcomeOK, "", 120, 20, 4, 1},
		// finish_reason "error" (a generation error): vLLM sends its error
		// object, then [DONE].
		{"vLLM generation error", "/v1/chat/completions", asked, []string{role,
			vllm(`"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null`),
			sse(`{"error": {"message": "Internal server error", "type": "InternalServerError", "param": null, "code": 500}}`),
			done}, meter.OutcomeUpstreamError, "error event in stream: Internal server error", meter.Unknown, 1, 2, 1},
		// ggml-org/llama.cpp, tools/server: {"error": ...} and the end.
		{"llama.cpp error", "/v1/chat/completions", asked, []string{
			sse(`{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1,"id":"chatcmpl-x","model":"m","object":"chat.completion.chunk"}`),
			sse(`{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"Hi"}}],"created":1,"id":"chatcmpl-x","model":"m","object":"chat.completion.chunk"}`),
			sse(`{"error":{"code":500,"message":"Context size has been exceeded.","type":"server_error"}}`),
		}, meter.OutcomeUpstreamError, "error event in stream: Context size has been exceeded.", meter.Unknown, 1, 2, 1},
		// vllm-project/vllm, anthropic/serving.py: a thinking block, then
		// the converter's error event and [DONE] (no message_stop).
		{"vLLM Messages error", "/v1/messages", `{"model":"m","stream":true,"max_tokens":5,"messages":[]}`, []string{
			"event: message_start\n" + sse(`{"type":"message_start","message":{"id":"chatcmpl-1","type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}}`),
			"event: content_block_start\n" + sse(`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`),
			"event: content_block_delta\n" + sse(`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Hm"}}`),
			"event: error\n" + sse(`{"type":"error","error":{"type":"internal_error","message":"boom"}}`),
			done}, meter.OutcomeUpstreamError, "error event in stream: boom", meter.Unknown, 1, 1, 0},
		// llama.cpp's Responses API sends each reasoning piece twice (a
		// reasoning_text and a reasoning_summary_text delta): one token
		// event.
		{"llama.cpp Responses reasoning", "/v1/responses", `{"model":"m","stream":true,"input":"x"}`, []string{
			"event: response.created\n" + sse(`{"type":"response.created","response":{"id":"r","status":"in_progress","usage":null}}`),
			"event: response.reasoning_text.delta\n" + sse(`{"type":"response.reasoning_text.delta","delta":"Hm"}`),
			"event: response.reasoning_summary_text.delta\n" + sse(`{"type":"response.reasoning_summary_text.delta","delta":"Hm"}`),
			"event: response.output_text.delta\n" + sse(`{"type":"response.output_text.delta","delta":"Hi"}`),
			"event: response.completed\n" + sse(`{"type":"response.completed","response":{"id":"r","status":"completed","usage":{"input_tokens":10,"output_tokens":3,"output_tokens_details":{"reasoning_tokens":2}}}}`),
		}, meter.OutcomeOK, "", 10, 3, 2, 0},
	} {
		next(c.events...)
		_, _, body, err := post(t, g.URL()+c.path, c.body, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.body == chatBody && strings.Contains(body, `"usage"`) {
			t.Errorf("%s: the client got the usage it did not ask for: %q", c.name, body)
		}
		rec := g.record(t)
		if rec.Outcome != c.outcome || rec.ErrorMessage != c.msg {
			t.Errorf("%s: %s %q, want %s %q", c.name, rec.Outcome, rec.ErrorMessage, c.outcome, c.msg)
		}
		if rec.ISL != c.isl || rec.OSL != c.osl || rec.Events != c.tokens || rec.LeadEvents != c.lead {
			t.Errorf("%s: isl %d osl %d, %d token events, %d before content; want %d %d, %d, %d",
				c.name, rec.ISL, rec.OSL, rec.Events, rec.LeadEvents, c.isl, c.osl, c.tokens, c.lead)
		}
		if rec.TTFT <= 0 || rec.TTFTContent < rec.TTFT || len(rec.ITL) != c.tokens-1 {
			t.Errorf("%s: ttft %v, ttft_content %v, %d gaps", c.name, rec.TTFT, rec.TTFTContent, len(rec.ITL))
		}
	}
}
