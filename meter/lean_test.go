package meter

import (
	"bytes"
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// denseLogprobs returns a non-streamed chat answer of n tokens, each with
// top logprobs: the body a client gets by asking for logprobs and
// top_logprobs on a long answer, some 200 bytes and 30 values per token.
func denseLogprobs(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"logprobs":{"content":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"token":"a","logprob":-0.1,"bytes":[97],"top_logprobs":[{"token":"a","logprob":-0.1,"bytes":[97]},{"token":"b","logprob":-2.5,"bytes":[98]},{"token":"c","logprob":-3,"bytes":[99]},{"token":"d","logprob":-4,"bytes":[100]}]}`)
	}
	b.WriteString(`]},"finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":` + "10000" + `,"total_tokens":10005}}`)
	return []byte(b.String())
}

// testLeanFrom is leanFrom as built (the test sets it back after its
// whole-answer reading).
var testLeanFrom = leanFrom

// An answer made large by what the meter never reads (logprobs, token
// ids) is read without building it, and reads the same (a probe: 8 MB of
// small values, 8 CPU-seconds and 1.8 GB after the client had its answer).
func TestLargeAnswerParsedLean(t *testing.T) {
	body := denseLogprobs(10000)
	info, full := parseLeanAndWhole(t, APIChat, body)
	if !sameInfo(info, full) || !info.HasUsage || info.CompletionTokens != 10000 || !info.Token || !info.Finish {
		t.Fatalf("lean %+v, full %+v", info, full)
	}
}

// parseLeanAndWhole parses body, an answer of api larger than leanFrom,
// whole (full) and as the gateway does (info, lean), and fails t when the
// latter allocated more than twice the body's size.
func parseLeanAndWhole(t *testing.T, api API, body []byte) (info, full EventInfo) {
	t.Helper()
	defer func(n int) { leanFrom = n }(leanFrom)
	leanFrom = 1 << 30
	if err := ParseResponseBody(api, body, &full); err != nil {
		t.Fatal(err)
	}
	leanFrom = testLeanFrom
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := ParseResponseBody(api, body, &info)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 2*uint64(len(body)) {
		t.Errorf("reading a %d-byte answer allocated %d bytes (%.0f times its size)", len(body), alloc, float64(alloc)/float64(len(body)))
	}
	return info, full
}

func sameInfo(a, b EventInfo) bool {
	am, bm := a.ErrorMessage, b.ErrorMessage
	a.ErrorMessage, b.ErrorMessage = nil, nil
	return reflect.DeepEqual(a, b) && bytes.Equal(am, bm)
}

// FuzzLeanAnswer: an answer or an event read lean (only the members the
// meter reads kept) reads as the whole one, on every API, error included.
func FuzzLeanAnswer(f *testing.F) {
	addFixtureSeeds(f, func(b []byte) { f.Add(b) })
	for _, s := range []string{
		string(denseLogprobs(3)),
		`{"choices":[{"delta":{"content":"x"},"logprobs":{"content":[1,2]}}],"token_ids":[1,2,3],"prompt_token_ids":[4]}`,
		`{"type":"response.completed","response":{"status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"hi","logprobs":[{"token":"h"}]}]}],"usage":{"input_tokens":1,"output_tokens":2}}}`,
		`{"error":{"message":"m","logprobs":1}}`, `{"logprobs":`, `{"a":[1,2,{"logprobs":nan}]} x`,
		`{"choices":[{"text":"a","logprobs":{"tokens":["a"],"top_logprobs":[{"a":-1}]},"finish_reason":"stop"}]}`,
		// Names read escaped, twice, both ways (fastjson's Get finds the
		// first written so until the names are unescaped, then the first).
		`{"us\u0061ge":{"prompt_tokens":1},"usage":{"prompt_tokens":2,"completion_tokens":3},"choices":[{"index":1,"x":[1,2]}]}`,
		`{"usage":{"prompt_tokens":2},"us\u0061ge":{"prompt_tokens":1},"err\u006fr":"x","choices":[{"index":0}]}`,
		`{"error":{"message":"m","mess\u0061ge":"n"},"err\u006fr":"x","error":"y"}`,
		`{"choices":[],"choices":[{}],"ch\u006fices":[{"index":2}]}`,
		`{"choices":[{"delta":{"content":[],"tool_calls":[{"a":1}],"function_call":{"x":[1]}},"finish_reason":"stop"},[1],2,{"index":3,"hidden":[1,2,3]}],"error":null}`,
		`[{"stop":true,"content":"x","tokens_predicted":2,"junk":[1,2]},{"stop":false,"content":"","index":1}]`,
		`{"type":"message_start","message":{"usage":{"input_tokens":3,"x":{"a":[]}},"junk":{}},"delta":{"type":"x"}}`,
		`{"type":"response.completed","response":{"status":"completed","output":[],"error":{"message":"e","x":1},"usage":{"input_tokens":1,"output_tokens":2,"output_tokens_details":{"a":1}}}}`,
		`{"model":"m","message":{"role":"assistant","content":"","thinking":"t","images":[1,2]},"done":true,"prompt_eval_count":1,"eval_count":2,"context":[1,2,3]}`,
	} {
		f.Add([]byte(s))
	}
	defer func(n int) { leanFrom = n }(leanFrom)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > maxFuzzInput {
			t.Skip()
		}
		for _, api := range []API{APIChat, APICompletions, APIResponses, APIMessages, APIOllamaChat, APIOllamaGenerate, APILlamaCpp} {
			read := func(from int) (EventInfo, EventInfo, error, error) {
				leanFrom = from
				var body, ev EventInfo
				berr := ParseResponseBody(api, data, &body)
				body.ErrorMessage = bytes.Clone(body.ErrorMessage)
				var p StreamParser
				eerr := p.Parse(api, &Event{Data: data, HasData: true}, &ev)
				ev.ErrorMessage = bytes.Clone(ev.ErrorMessage)
				return body, ev, berr, eerr
			}
			fb, fe, fberr, feerr := read(1 << 30)
			lb, le, lberr, leerr := read(-1)
			if !sameInfo(fb, lb) || !sameErr(fberr, lberr) || !sameInfo(fe, le) || !sameErr(feerr, leerr) {
				t.Fatalf("%s %q:\nwhole body %+v %v, event %+v %v\nlean  body %+v %v, event %+v %v", api, data, fb, fberr, fe, feerr, lb, lberr, le, leerr)
			}
		}
	})
}

func sameErr(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Error() == b.Error() && errors.Is(a, ErrMalformed) == errors.Is(b, ErrMalformed)
}
