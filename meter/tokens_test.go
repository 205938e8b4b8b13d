package meter

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// sse joins events as an engine writes them.
func sse(events ...string) []byte {
	var b strings.Builder
	for _, e := range events {
		b.WriteString("data: " + e + "\n\n")
	}
	return []byte(b.String())
}

// tokens_per_event for each engine kind the meter parses, and how OSL
// compares with the token events (what ITL measured). Hand-made streams in
// the engines' formats (the recorded set has no continuous_usage_stats
// stream), each event one read.
func TestTokensPerEventByEngine(t *testing.T) {
	u := func(c int) string {
		return `,"usage":{"prompt_tokens":9,"total_tokens":` + strconv.Itoa(9+c) + `,"completion_tokens":` + strconv.Itoa(c) + `}`
	}
	chunk := func(delta, finish string, usage string) string {
		return `{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":` + delta + `,"logprobs":null,"finish_reason":` + finish + `}]` + usage + `}`
	}
	compl := func(text, finish, usage string) string {
		return `{"id":"x","object":"text_completion","choices":[{"index":0,"text":"` + text + `","logprobs":null,"finish_reason":` + finish + `}]` + usage + `}`
	}
	cases := []struct {
		name        string
		completions bool
		input       []byte
		tpe         []int
		osl, events int
		cmp         EventTokens
		multi       bool
	}{
		{
			// vLLM, stream_options.continuous_usage_stats: running usage on
			// every chunk. The second content chunk holds three tokens (a
			// character split across tokens, then a held-back stop string).
			name: "vllm chat continuous_usage_stats",
			input: sse(chunk(`{"role":"assistant","content":""}`, "null", u(0)),
				chunk(`{"content":"Hi"}`, "null", u(1)),
				chunk(`{"content":" th\u00e9re"}`, "null", u(4)),
				chunk(`{"content":"!"}`, "null", u(5)),
				chunk(`{}`, `"stop"`, u(5)),
				`{"id":"x","object":"chat.completion.chunk","choices":[]`+u(5)+`}`, "[DONE]"),
			tpe: []int{0, 1, 3, 1, 0}, osl: 5, events: 5, cmp: EventTokensEqual, multi: true,
		},
		{
			name:        "vllm completions continuous_usage_stats",
			completions: true,
			input: sse(compl("a", "null", u(1)), compl("bc", "null", u(3)), compl("", `"length"`, u(3)),
				`{"id":"x","object":"text_completion","choices":[]`+u(3)+`}`, "[DONE]"),
			tpe: []int{1, 2, 0}, osl: 3, events: 3, cmp: EventTokensEqual, multi: true,
		},
		{
			// vLLM with include_usage only (and OpenAI, llama.cpp, SGLang):
			// one count at the end, so the tokens of each event are unknown.
			name: "vllm chat include_usage",
			input: sse(chunk(`{"role":"assistant","content":""}`, "null", ""),
				chunk(`{"content":"Hi"}`, "null", ""), chunk(`{"content":" there"}`, "null", ""),
				chunk(`{}`, `"stop"`, ""), `{"id":"x","object":"chat.completion.chunk","choices":[]`+u(3)+`}`, "[DONE]"),
			tpe: nil, osl: 3, events: 4, cmp: EventTokensBelow, multi: false,
		},
		{
			// DeepSeek: usage on the finish chunk only. Unknown per event;
			// OSL above the events proves a merged event.
			name: "deepseek usage on the finish chunk",
			input: sse(chunk(`{"role":"assistant","content":""}`, "null", `,"usage":null`),
				chunk(`{"content":"Hello"}`, "null", `,"usage":null`),
				chunk(`{"content":""}`, `"stop"`, u(4)), "[DONE]"),
			tpe: nil, osl: 4, events: 3, cmp: EventTokensAbove, multi: true,
		},
		{
			// Perplexity: usage on every chunk, counting from the first.
			name: "perplexity usage on every chunk",
			input: sse(chunk(`{"role":"assistant","content":"The"}`, "null", u(1)),
				chunk(`{"content":" sky is"}`, "null", u(3)),
				chunk(`{"content":" blue."}`, `"stop"`, u(6))),
			tpe: []int{1, 2, 3}, osl: 6, events: 3, cmp: EventTokensAbove, multi: true,
		},
		{
			// No usage at all: OSL is estimated from the events, so it says
			// nothing of them.
			name:  "no usage",
			input: sse(chunk(`{"role":"assistant","content":""}`, "null", ""), chunk(`{"content":"Hi"}`, "null", ""), "[DONE]"),
			tpe:   nil, osl: 1, events: 2, cmp: EventTokensUnknown, multi: false,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := runMeter(c.input, nil, parserFor(c.completions))
			r := &got.rec
			if got.parseErrs != 0 {
				t.Fatalf("%d parse errors", got.parseErrs)
			}
			tpe := r.TokensPerEvent
			if len(tpe) == 0 {
				tpe = nil
			}
			if !reflect.DeepEqual(tpe, c.tpe) || r.OSL != c.osl || r.Events != c.events {
				t.Fatalf("tokens per event %v, osl %d, events %d; want %v, %d, %d", r.TokensPerEvent, r.OSL, r.Events, c.tpe, c.osl, c.events)
			}
			if r.EventTokens() != c.cmp || r.MultiTokenEvents() != c.multi {
				t.Fatalf("osl vs events %v, multi-token %v; want %v, %v", r.EventTokens(), r.MultiTokenEvents(), c.cmp, c.multi)
			}
		})
	}
}
