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
	if err := ParseResponseBody(api, body, 1, &full); err != nil {
		t.Fatal(err)
	}
	leanFrom = testLeanFrom
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := ParseResponseBody(api, body, 1, &info)
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

// leanSeeds are answers and events whose lean reading must agree with the
// whole one: small ones of every API, escaped and repeated names, broken
// text, and realistic answers as they come large.
func leanSeeds() []string {
	return []string{
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
		// Choices and results read one at a time (elements): of every
		// kind, nested, and with names read escaped, so that which member
		// a look up finds depends on the looks before it.
		`{"choices":[{},1,[],{"choices":[{"index":1}],"index":1,"finish_reason":"stop"},{"index":0,"delta":{"content":"x"},"message":{"content":"y"}}],"usage":{"prompt_tokens":1}}`,
		`[{"stop":true,"err\u006fr":"first","error":"second","content":"x"},{"stop":false,"content":""}]`,
		`[{"ch\u006fices":[{"text":"x"}],"err\u006fr":"first","error":"second"},{"choices":[{"text":"","finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2}}]`,
		`[{"stop":true,"content":"a"},{"choices":[],"err\u006fr":"first","error":"second"}]`,
		`[{"choices":[{"text":"a","finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2}},{"choices":[{"index":1,"text":""}],"error":{"message":"m"}},{"choices":[1]}]`,
		`[{"stop":true,"content":"x","tokens_predicted":2,"junk":[1,2]},{"stop":false,"content":"","index":1}]`,
		`{"type":"message_start","message":{"usage":{"input_tokens":3,"x":{"a":[]}},"junk":{}},"delta":{"type":"x"}}`,
		`{"type":"response.completed","response":{"status":"completed","output":[],"error":{"message":"e","x":1},"usage":{"input_tokens":1,"output_tokens":2,"output_tokens_details":{"a":1}}}}`,
		`{"model":"m","message":{"role":"assistant","content":"","thinking":"t","images":[1,2]},"done":true,"prompt_eval_count":1,"eval_count":2,"context":[1,2,3]}`,
		// TGI's and SGLang's answers: best_of's other sequences read one
		// at a time, in an answer and in the array of one on /; an
		// SGLang answer, alone and to several prompts.
		`{"generated_text":" Paris.","details":{"finish_reason":"length","generated_tokens":4,"seed":1,"prefill":[{"id":1,"text":"<s>","logprob":null}],"tokens":[{"id":3681,"text":" Paris","logprob":-0.1,"special":false}],"best_of_sequences":[{"generated_text":" Rome.","finish_reason":"length","generated_tokens":5,"seed":2,"prefill":[],"tokens":[{"id":1,"text":"x","logprob":-1,"special":false}]},{"generated_text":"","finish_reason":"eos_token","generated_tokens":1,"seed":3,"prefill":[],"tokens":[]}]}}`,
		`[{"generated_text":" Paris.","details":{"finish_reason":"length","generated_tokens":4,"best_of_sequences":[{"generated_tokens":5},1,{"generated_text":"x"}]}}]`,
		`{"text":" Paris.","output_ids":[3681,13],"meta_info":{"id":"a","finish_reason":{"type":"stop","matched":2},"prompt_tokens":7,"completion_tokens":3,"cached_tokens":0,"output_token_logprobs":[[-0.1,3681,null]]}}`,
		`[{"text":" Paris.","meta_info":{"id":"a","finish_reason":{"type":"stop","matched":2},"prompt_tokens":7,"completion_tokens":3}},{"text":"","output_ids":[],"meta_info":{"id":"b","finish_reason":{"type":"abort","message":"aborted"},"prompt_tokens":6,"completion_tokens":0}}]`,
		// Realistic answers of every API, whole, as they come large: the
		// Responses API's response.completed and its body, Anthropic's
		// message and events, Ollama's last line, llama.cpp's last event and
		// answers, chat and completions of several choices.
		`{"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","object":"response","created_at":1,"status":"completed","error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"m","output":[{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"s"}],"content":[{"type":"reasoning_text","text":"r"}]},{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"hi","annotations":[],"logprobs":[{"token":"hi","logprob":-0.1,"bytes":[104,105],"top_logprobs":[]}]}]},{"type":"function_call","id":"fc_1","call_id":"c","name":"f","arguments":"{}","status":"completed"}],"parallel_tool_calls":true,"temperature":1,"tool_choice":"auto","tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{}}}],"top_p":1,"text":{"format":{"type":"text"}},"usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":4},"output_tokens":30,"output_tokens_details":{"reasoning_tokens":20},"total_tokens":42},"metadata":{}}}`,
		`{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[{"type":"message","content":[{"type":"output_text","text":"h"}]}],"usage":{"input_tokens":3,"output_tokens":5}}}`,
		`{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"boom"},"output":[],"usage":null}}`,
		`{"id":"resp_1","object":"response","status":"completed","error":null,"output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"hi","annotations":[]}]}],"usage":{"input_tokens":12,"output_tokens":30,"total_tokens":42}}`,
		`{"id":"resp_1","object":"response","status":"queued","background":true,"output":[],"usage":null}`,
		`{"id":"resp_1","object":"response","status":"failed","error":{"code":"x","message":"m"},"output":[]}`,
		`{"type":"error","sequence_number":1,"code":"ERR","message":"m","param":null}`,
		`{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"text","text":"hi","citations":null},{"type":"tool_use","id":"tu","name":"f","input":{"a":[1,2]}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":2,"cache_read_input_tokens":5,"cache_creation":{"ephemeral_5m_input_tokens":2},"output_tokens":20,"server_tool_use":null,"service_tier":"standard"}}`,
		`{"id":"msg_1","type":"message","role":"assistant","content":[],"stop_reason":null,"usage":{"input_tokens":10,"output_tokens":0}}`,
		`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":3,"output_tokens":1}}}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":10,"output_tokens":20}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"hi"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"s"}}`,
		`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
		`{"model":"m","created_at":"t","message":{"role":"assistant","content":"hi","thinking":"t","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]},"done":true,"done_reason":"stop","total_duration":1,"load_duration":1,"prompt_eval_count":10,"prompt_eval_duration":1,"eval_count":20,"eval_duration":1,"logprobs":[{"token":"h","logprob":-1,"top_logprobs":[]}]}`,
		`{"model":"m","created_at":"t","response":"hi","thinking":"t","done":true,"done_reason":"length","context":[1,2,3],"prompt_eval_count":10,"eval_count":20}`,
		`{"model":"m","created_at":"t","response":"","done":true,"done_reason":"load"}`,
		`{"model":"m","created_at":"t","message":{"role":"assistant","content":""},"done":true,"done_reason":"unload"}`,
		`{"content":"","id_slot":0,"stop":true,"model":"m","tokens_predicted":20,"tokens_evaluated":10,"generation_settings":{"n_predict":-1,"stop":["a"],"samplers":["top_k"]},"prompt":"p","has_new_line":false,"truncated":false,"stop_type":"eos","stopping_word":"","tokens_cached":29,"timings":{"prompt_n":10,"prompt_ms":1,"predicted_n":20,"predicted_ms":1},"index":0,"completion_probabilities":[{"id":1,"token":"a","logprob":-1,"bytes":[97],"top_logprobs":[]}],"tokens":[1,2]}`,
		`{"content":"hi","stop":false,"index":0,"tokens":[5],"prompt_progress":{"total":10,"cache":0,"processed":10,"time_ms":1}}`,
		`{"content":"hi","tokens_predicted":2,"timings/predicted_n":2}`,
		`[{"content":"a","stop":true,"index":0,"tokens_predicted":1,"tokens_evaluated":2,"timings":{}},{"content":"b","stop":true,"index":1,"tokens_predicted":3,"tokens_evaluated":4,"timings":{}}]`,
		`[{"id":"c","object":"text_completion","choices":[{"text":"a","index":0,"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":2}},{"id":"c","object":"text_completion","choices":[{"text":"b","index":1,"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":4}}]`,
		`{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"reasoning_content":"r","tool_calls":[{"id":"t","type":"function","function":{"name":"f","arguments":"{}"}}]},"logprobs":{"content":[{"token":"a","logprob":-1,"bytes":[97],"top_logprobs":[]}]},"finish_reason":"tool_calls","stop_reason":null,"token_ids":[1,2]},{"index":1,"message":{"role":"assistant","content":"b","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":20,"total_tokens":30,"prompt_tokens_details":{"cached_tokens":0}},"prompt_logprobs":[null,{"1":{"logprob":-1}}],"prompt_token_ids":[1,2,3],"kv_transfer_params":null}`,
		`{"id":"c","object":"text_completion","choices":[{"index":0,"text":"prompt and more","logprobs":{"tokens":["a"],"token_logprobs":[-1],"top_logprobs":[{"a":-1}],"text_offset":[0]},"finish_reason":"length","prompt_logprobs":[null]},{"index":1,"text":"x","finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":4}}`,
		`{"object":"error","message":"too long","type":"BadRequestError","param":null,"code":400}`,
		// llama.cpp's answer of several choices: its usage is the first
		// choice's alone, which its timings tell.
		`{"choices":[{"finish_reason":"length","index":0,"message":{"role":"assistant","content":"a"}},{"finish_reason":"length","index":1,"message":{"role":"assistant","content":"b"}}],"created":1,"model":"m","system_fingerprint":"b7010","object":"chat.completion","usage":{"completion_tokens":16,"prompt_tokens":6,"total_tokens":22},"id":"chatcmpl-1","timings":{"cache_n":0,"prompt_n":6,"prompt_ms":1.5,"predicted_n":16,"predicted_ms":80.2}}`,
		`{"id":"c","object":"chat.completion.chunk","choices":[{"index":2,"delta":{"content":"x"},"logprobs":{"content":[]},"finish_reason":null}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`,
	}
}

// FuzzLeanAnswer: an answer or an event read lean (only the members the
// meter reads kept) reads as the whole one, on every API, error included.
func FuzzLeanAnswer(f *testing.F) {
	addFixtureSeeds(f, func(b []byte) { f.Add(b) })
	for _, s := range leanSeeds() {
		f.Add([]byte(s))
	}
	defer func(n int) { leanFrom = n }(leanFrom)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > maxFuzzInput {
			t.Skip()
		}
		for _, api := range []API{APIChat, APICompletions, APIResponses, APIMessages, APIOllamaChat, APIOllamaGenerate, APILlamaCpp, APITGI, APISGLang} {
			read := func(from int) (EventInfo, EventInfo, error, error) {
				leanFrom = from
				var body, ev EventInfo
				berr := ParseResponseBody(api, data, 1, &body)
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

// The realistic answers of every API (leanSeeds), made larger than
// leanFrom by a member the meter never reads (at the top level, or in
// every object, next to arrays of objects), read as they do small.
func TestLargeAnswersReadAsSmall(t *testing.T) {
	seeds := leanSeeds()
	big := strings.Repeat("0,", 40<<10) + "0"
	for _, s := range seeds {
		if len(s) == 0 || s[0] != '{' && s[0] != '[' {
			continue
		}
		pads := []string{
			strings.Replace(s, `{`, `{"pad":[`+big+`],`, 1),
			strings.ReplaceAll(s, `{"`, `{"zz":[[1],{"a":2}],"yy":"`+strings.Repeat("y", 40<<10)+`","`),
		}
		for _, p := range pads {
			if len(p) <= leanFrom {
				continue
			}
			for _, api := range []API{APIChat, APICompletions, APIResponses, APIMessages, APIOllamaChat, APIOllamaGenerate, APILlamaCpp, APITGI, APISGLang} {
				var a, b, ea, eb EventInfo
				errA := ParseResponseBody(api, []byte(s), 1, &a)
				errB := ParseResponseBody(api, []byte(p), 1, &b)
				var pa, pb StreamParser
				eerrA := pa.Parse(api, &Event{Data: []byte(s), HasData: true}, &ea)
				eerrB := pb.Parse(api, &Event{Data: []byte(p), HasData: true}, &eb)
				if !sameInfo(a, b) || !sameErr(errA, errB) || !sameInfo(ea, eb) || !sameErr(eerrA, eerrB) {
					t.Errorf("%s %.120s:\nsmall %+v %v / %+v\nlarge %+v %v / %+v", api, s, a, errA, ea, b, errB, eb)
				}
			}
		}
	}
}
