package meter

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func dataEvent(data string) *Event {
	return &Event{Raw: []byte("data: " + data + "\n\n"), Data: []byte(data), HasData: true}
}

// infoWant lists the EventInfo fields a case expects; counts default to
// Unknown.
type infoWant struct {
	token, content, usageOnly, finish, done, hasUsage, isErr bool
	prompt, completion                                       int
	msg                                                      string
	ended                                                    uint8 // ChoicesEnded
}

func (w infoWant) check(t *testing.T, got *EventInfo) {
	t.Helper()
	if w.prompt == 0 && !w.hasUsage {
		w.prompt, w.completion = Unknown, Unknown
	}
	want := EventInfo{
		Token: w.token, Content: w.content, UsageOnly: w.usageOnly, Finish: w.finish, Done: w.done,
		HasUsage: w.hasUsage, PromptTokens: w.prompt, CompletionTokens: w.completion,
		Error: w.isErr, ChoicesEnded: w.ended,
	}
	msg := string(got.ErrorMessage)
	g := *got
	g.ErrorMessage = nil
	if !reflect.DeepEqual(g, want) || msg != w.msg {
		t.Errorf("got  %+v msg %q\nwant %+v msg %q", g, msg, want, w.msg)
	}
}

// TestChatParserHandMade: one hand-made chunk per rule of ChatParser.
func TestChatParserHandMade(t *testing.T) {
	cases := []struct {
		name string
		ev   *Event
		want infoWant
	}{
		{"role-only chunk is a token event without content",
			dataEvent(`{"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}`),
			infoWant{token: true}},
		{"empty content string is not content",
			dataEvent(`{"choices":[{"delta":{"role":"assistant","content":"","refusal":null}}]}`),
			infoWant{token: true}},
		{"content", dataEvent(`{"choices":[{"delta":{"content":"Hi"}}]}`), infoWant{token: true, content: true}},
		{"escaped content", dataEvent(`{"choices":[{"delta":{"content":"\n"}}]}`), infoWant{token: true, content: true}},
		{"content array", dataEvent(`{"choices":[{"delta":{"content":[{"type":"text","text":"a"}]}}]}`), infoWant{token: true, content: true}},
		{"reasoning_content", dataEvent(`{"choices":[{"delta":{"content":null,"reasoning_content":"H"}}]}`), infoWant{token: true, content: true}},
		{"reasoning", dataEvent(`{"choices":[{"delta":{"reasoning":"We","channel":"analysis"}}]}`), infoWant{token: true, content: true}},
		{"refusal", dataEvent(`{"choices":[{"delta":{"refusal":"I'm"}}]}`), infoWant{token: true, content: true}},
		{"tool_calls", dataEvent(`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":""}}]}}]}`), infoWant{token: true, content: true}},
		{"empty tool_calls", dataEvent(`{"choices":[{"delta":{"tool_calls":[]}}]}`), infoWant{token: true}},
		{"legacy function_call", dataEvent(`{"choices":[{"delta":{"function_call":{"name":"f"}}}]}`), infoWant{token: true, content: true}},
		{"message instead of delta", dataEvent(`{"choices":[{"message":{"content":"x"}}]}`), infoWant{token: true, content: true}},
		{"completions text in a chat stream is ignored", dataEvent(`{"choices":[{"text":"x"}]}`), infoWant{token: true}},
		{"second choice has content", dataEvent(`{"choices":[{"delta":{}},{"delta":{"content":"x"}}]}`), infoWant{token: true, content: true}},
		{"empty finish chunk is a token event",
			dataEvent(`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`),
			infoWant{token: true, finish: true, ended: 1}},
		{"usage null is no usage", dataEvent(`{"choices":[{"delta":{"content":"a"}}],"usage":null}`), infoWant{token: true, content: true}},
		{"final usage chunk",
			dataEvent(`{"choices":[],"usage":{"prompt_tokens":46,"total_tokens":60,"completion_tokens":14}}`),
			infoWant{usageOnly: true, hasUsage: true, prompt: 46, completion: 14}},
		{"usage without choices key", dataEvent(`{"usage":{"prompt_tokens":1,"completion_tokens":2}}`),
			infoWant{usageOnly: true, hasUsage: true, prompt: 1, completion: 2}},
		{"usage on the finish chunk (DeepSeek)",
			dataEvent(`{"choices":[{"delta":{"content":""},"finish_reason":"stop"}],"usage":{"prompt_tokens":6,"completion_tokens":212}}`),
			infoWant{token: true, finish: true, hasUsage: true, prompt: 6, completion: 212, ended: 1}},
		{"usage with a missing field", dataEvent(`{"choices":[],"usage":{"prompt_tokens":5}}`),
			infoWant{usageOnly: true, hasUsage: true, prompt: 5, completion: Unknown}},
		{"usage with a float count", dataEvent(`{"choices":[],"usage":{"prompt_tokens":5.0,"completion_tokens":"7"}}`),
			infoWant{usageOnly: true, hasUsage: true, prompt: 5, completion: Unknown}},
		{"[DONE]", dataEvent(`[DONE]`), infoWant{done: true}},
		{"[DONE] with spaces", &Event{Data: []byte(" [DONE] "), HasData: true}, infoWant{done: true}},
		{"comment-only event", &Event{Raw: []byte(": ping\n\n")}, infoWant{}},
		{"empty data", &Event{Raw: []byte("data:\n\n"), Data: []byte{}, HasData: true}, infoWant{}},
		{"error object in a chunk (OpenRouter)",
			dataEvent(`{"error":{"code":400,"message":"Token limit reached"},"choices":[{"delta":{"content":""},"finish_reason":null}]}`),
			infoWant{token: true, isErr: true, msg: "Token limit reached"}},
		{"error string", dataEvent(`{"error":"boom"}`), infoWant{isErr: true, msg: "boom"}},
		{"error null is no error", dataEvent(`{"error":null,"choices":[{"delta":{"content":"a"}}]}`), infoWant{token: true, content: true}},
		{"escaped error message", dataEvent(`{"error":{"message":"bad \"x\""}}`), infoWant{isErr: true, msg: `bad "x"`}},
		{"event: error (Groq)",
			&Event{Type: []byte("error"), HasData: true, Data: []byte(`{"error":{"message":"Tool call validation failed","code":"tool_use_failed"}}`)},
			infoWant{isErr: true, msg: "Tool call validation failed"}},
		{"event: error with a top-level message",
			&Event{Type: []byte("error"), HasData: true, Data: []byte(`{"message":"overloaded"}`)},
			infoWant{isErr: true, msg: "overloaded"}},
		{"event: error with plain-text data",
			&Event{Type: []byte("error"), HasData: true, Data: []byte(`upstream exploded`)},
			infoWant{isErr: true, msg: "upstream exploded"}},
		{"event: error without data", &Event{Type: []byte("error")}, infoWant{isErr: true}},
		{"vLLM error body in a stream",
			dataEvent(`{"object":"error","message":"max_tokens is too large","type":"BadRequestError","param":null,"code":400}`),
			infoWant{isErr: true, msg: "max_tokens is too large"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newParser(APIChat)
			info := EventInfo{Token: true, Content: true, Done: true, Error: true, ErrorMessage: []byte("stale")}
			if err := p.Parse(c.ev, &info); err != nil {
				t.Fatal(err)
			}
			c.want.check(t, &info)
		})
	}
}

func TestCompletionsParserHandMade(t *testing.T) {
	p := newParser(APICompletions)
	var info EventInfo
	for _, c := range []struct {
		data string
		want infoWant
	}{
		{`{"choices":[{"text":" +","index":0,"finish_reason":null}],"usage":null}`, infoWant{token: true, content: true}},
		{`{"choices":[{"text":"","index":0,"finish_reason":null}]}`, infoWant{token: true}},
		{`{"choices":[{"delta":{"content":"x"}}]}`, infoWant{token: true}},
		{`{"choices":[{"text":":\n","finish_reason":"length"}]}`, infoWant{token: true, content: true, finish: true, ended: 1}},
		// TGI's running chunk: a finish_reason of "" ends every choice
		{`{"object":"text_completion","choices":[{"index":0,"text":"x","logprobs":null,"finish_reason":""}]}`, infoWant{token: true, content: true, finish: true, ended: 64}},
		{`{"model":"m","usage":{"prompt_tokens":31,"completion_tokens":25,"total_tokens":56},"choices":[]}`,
			infoWant{usageOnly: true, hasUsage: true, prompt: 31, completion: 25}},
	} {
		if err := p.Parse(dataEvent(c.data), &info); err != nil {
			t.Fatalf("%s: %v", c.data, err)
		}
		c.want.check(t, &info)
	}
}

// TestHiddenStatesChunkIsNoTokenEvent: SGLang's return_hidden_states adds,
// after each choice's finish chunk, a chunk with that choice's hidden states
// (non-empty choices, finish_reason null, no usage): no output, so no token
// event, and no usage chunk to strip either. Another choice's chunk after it
// still counts.
func TestHiddenStatesChunkIsNoTokenEvent(t *testing.T) {
	for _, c := range []struct {
		api                  API
		finish, hidden, next string
	}{
		{APIChat,
			`{"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop","matched_stop":2}]}`,
			`{"choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":null,"tool_calls":null,"hidden_states":[0.5,-1.25]},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}`,
			`{"choices":[{"index":1,"delta":{},"finish_reason":null}]}`},
		{APICompletions,
			`{"choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":"length","matched_stop":null}],"usage":null}`,
			`{"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":null,"matched_stop":null,"hidden_states":[0.5,-1.25]}],"usage":null}`,
			`{"choices":[{"index":1,"text":"","finish_reason":null}],"usage":null}`},
	} {
		p := newParser(c.api)
		var info EventInfo
		for i, s := range []struct {
			data string
			want infoWant
		}{
			{c.finish, infoWant{token: true, content: c.api == APICompletions, finish: true, ended: 1}},
			{c.hidden, infoWant{}},
			{c.next, infoWant{token: true}},
		} {
			if err := p.Parse(dataEvent(s.data), &info); err != nil {
				t.Fatalf("%v step %d: %v", c.api, i, err)
			}
			info.OtherChoice = false // not what this test is about
			s.want.check(t, &info)
		}
	}
}

// TestChatParserUsageTrailer: hand-made OpenRouter-style stream whose usage
// comes in a chunk with non-empty choices after the finish chunk.
func TestChatParserUsageTrailer(t *testing.T) {
	p := newParser(APIChat)
	var info EventInfo
	steps := []struct {
		data string
		want infoWant
	}{
		{`{"choices":[{"delta":{"role":"assistant","content":""},"finish_reason":null}]}`, infoWant{token: true}},
		// Before any finish, an empty delta with usage is still a token event
		// (vLLM continuous usage sends its role chunk like this).
		{`{"choices":[{"delta":{"content":""},"finish_reason":null}],"usage":{"prompt_tokens":9,"completion_tokens":0}}`,
			infoWant{token: true, hasUsage: true, prompt: 9, completion: 0}},
		{`{"choices":[{"delta":{"content":"hi"},"finish_reason":"stop"}]}`, infoWant{token: true, content: true, finish: true, ended: 1}},
		{`{"choices":[{"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":{"prompt_tokens":9,"completion_tokens":1}}`,
			infoWant{usageOnly: true, hasUsage: true, prompt: 9, completion: 1}},
		{`[DONE]`, infoWant{done: true}},
	}
	for i, s := range steps {
		if err := p.Parse(dataEvent(s.data), &info); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		s.want.check(t, &info)
	}
	// Reset forgets the finish: the same chunk is a token event again.
	p.Reset()
	if err := p.Parse(dataEvent(steps[3].data), &info); err != nil {
		t.Fatal(err)
	}
	infoWant{token: true, hasUsage: true, prompt: 9, completion: 1}.check(t, &info)
}

func TestChatParserMalformed(t *testing.T) {
	// Hand-made malformed events: each must give an error wrapping ErrMalformed.
	for _, data := range []string{
		`{"choices":[{"delta":{"content":"a"}}]`, // truncated
		`{"choices":`,
		`not json`,
		`[1,2,3]`,
		`"a string"`,
		`42`,
		`{"a":1} {"b":2}`,
		`[DONE`,
	} {
		p := newParser(APIChat)
		var info EventInfo
		err := p.Parse(dataEvent(data), &info)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: err = %v, want ErrMalformed", data, err)
		}
	}
}

func TestParseResponseBody(t *testing.T) {
	cases := []struct {
		name string
		api  API
		body string
		want infoWant
		err  bool
	}{
		{"chat response (hand-made)", APIChat,
			`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}`,
			infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: 9, completion: 12}, false},
		{"chat tool call response (hand-made)", APIChat,
			`{"choices":[{"message":{"content":null,"tool_calls":[{"id":"c","type":"function"}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":4}}`,
			infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: 3, completion: 4}, false},
		{"completions response (hand-made)", APICompletions,
			`{"object":"text_completion","choices":[{"text":" fib","finish_reason":"length"}],"usage":{"prompt_tokens":31,"completion_tokens":25}}`,
			infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: 31, completion: 25}, false},
		{"vLLM error body (hand-made)", APIChat,
			`{"object":"error","message":"This model's maximum context length is 2048 tokens.","type":"BadRequestError","param":null,"code":400}`,
			infoWant{isErr: true, msg: "This model's maximum context length is 2048 tokens."}, false},
		{"not JSON", APIChat, `<html>502</html>`, infoWant{}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var info EventInfo
			err := ParseResponseBody(c.api, []byte(c.body), 1, &info)
			if c.err {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("err = %v, want ErrMalformed", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			c.want.check(t, &info)
		})
	}

	// Recorded error bodies.
	for file, msg := range map[string]string{
		"errors/aigw-openai-chat-400-bad-request.json":   "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
		"errors/aigw-openai-chat-404-unknown-model.json": "The model `gpt-4.1-nano-wrong` does not exist or you do not have access to it.",
		"errors/lcgo-openrouter-429-rate-limit.json":     "Rate limit exceeded: limit_rpm/meta-llama/llama-3.2-3b-instruct/e8440b11-29fb-4887-a222-eff9ba33dfbf. High demand for meta-llama/llama-3.2-3b-instruct:free on OpenRouter - limited to 1 requests per minute. Please retry shortly.",
	} {
		var info EventInfo
		if err := ParseResponseBody(APIChat, readFixture(t, file), 1, &info); err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		infoWant{isErr: true, msg: msg}.check(t, &info)
	}
	var info EventInfo
	if err := ParseResponseBody(APIChat, readFixture(t, "errors/hfh-tgi-422-text-plain.txt"), 1, &info); !errors.Is(err, ErrMalformed) {
		t.Errorf("TGI plain-text 422: err = %v, want ErrMalformed", err)
	}

	// The message is a copy: it survives other calls.
	var a, b EventInfo
	if err := ParseResponseBody(APIChat, []byte(`{"error":{"message":"first"}}`), 1, &a); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		_ = ParseResponseBody(APIChat, []byte(`{"error":{"message":"`+strings.Repeat("x", 5)+`"}}`), 1, &b)
	}
	if string(a.ErrorMessage) != "first" {
		t.Errorf("message changed to %q", a.ErrorMessage)
	}
}
