package meter

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// nativeWant is what a recorded (or source-built) stream of an engine's
// native API holds, counted from the files with a script independent of
// this package (Ollama: a line is a token event unless it is the last,
// done:true, with no output; llama.cpp: an event with "stop": false that is
// not prompt progress).
type nativeWant struct {
	api                   API
	events                int // lines (Ollama) or SSE events
	tokenEvents, content  int
	firstToken, lastToken int // event indexes
	firstContent          int
	isl, osl              int
	done                  bool
	perEvent              []int
	source                UsageSource
	errMsg                string // the engine's error, when it sent one
}

var nativeWants = map[string]nativeWant{
	// 50 lines of one piece each, then done:true with done_reason length and empty content.
	"ollama/lcgo-api-chat-stream-done-reason-length.ndjson": {APIOllamaChat, 51, 50, 50, 0, 49, 0, 15, 50, true, nil, UsageUpstream, ""},
	"ollama/lcgo-api-chat-stream-format-json.ndjson":        {APIOllamaChat, 9, 8, 8, 0, 7, 0, 25, 9, true, nil, UsageUpstream, ""},
	// done_reason stop: eval_count 22 counts the end-of-sequence token, which has no line.
	"ollama/lcgo-api-chat-stream-gemma3.ndjson":         {APIOllamaChat, 22, 21, 21, 0, 20, 0, 16, 22, true, nil, UsageUpstream, ""},
	"ollama/lcgo-api-generate-stream-gemma3.ndjson":     {APIOllamaGenerate, 22, 21, 21, 0, 20, 0, 16, 22, true, nil, UsageUpstream, ""},
	"ollama/oll-api-chat-stream-llama3-2024.ndjson":     {APIOllamaChat, 50, 49, 49, 0, 48, 0, 17, 50, true, nil, UsageUpstream, ""},
	"ollama/oll-api-generate-stream-llama3-2024.ndjson": {APIOllamaGenerate, 71, 70, 70, 0, 69, 0, 17, 71, true, nil, UsageUpstream, ""},
	// a prompt_progress event, 5 pieces, the end-of-sequence token's event (content ""), the
	// last event (stop:true, not a token event); a running tokens_predicted on each.
	"llamacpp/llamacpp-src-completion-stream-native.txt": {APILlamaCpp, 8, 6, 5, 1, 6, 1, 12, 6, false, []int{1, 1, 1, 1, 1, 1}, UsageUpstream, ""},
	// TGI: 5 tokens, then the end-of-sequence token's event (special, not
	// content) with generated_text and details (input_length 9,
	// generated_tokens 6); no counts before it.
	"tgi/tgi-src-generate-stream-details.txt": {APITGI, 6, 6, 5, 0, 5, 0, 9, 6, true, nil, UsageUpstream, ""},
	// SGLang: 4 events, cumulative text, running completion_tokens on each,
	// finish_reason on the last, then [DONE].
	"sglang/sglang-src-generate-stream.txt": {APISGLang, 5, 4, 4, 0, 3, 0, 7, 4, true, []int{1, 1, 1, 1}, UsageUpstream, ""},
	// llama.cpp before its pull request #16109: three token events with
	// running counts, then its streamed error in the error: field; no
	// stop:true event, so the counts are the running ones.
	"llamacpp/llamacpp-src-completion-stream-error-field.txt": {APILlamaCpp, 4, 3, 3, 0, 2, 0, 12, 3, false, []int{1, 1, 1}, UsageContinuous, "Context size has been exceeded."},
}

func (w nativeWant) record() Record {
	at := func(k int) time.Duration { return time.Duration(k+1) * time.Millisecond }
	r := Record{}
	r.Reset()
	r.ISL, r.OSL, r.UsageSource = w.isl, w.osl, w.source
	r.Events = w.tokenEvents
	r.TTFT, r.TTFTContent, r.E2E = at(w.firstToken), at(w.firstContent), at(w.lastToken)
	r.TPOT = (r.E2E - r.TTFT) / time.Duration(w.osl-1)
	for i := 1; i < w.tokenEvents; i++ {
		r.ITL = append(r.ITL, time.Millisecond) // token events are consecutive in each file
	}
	r.MaxITL = time.Millisecond
	r.TokensPerEvent = append(r.TokensPerEvent, w.perEvent...)
	return r
}

// TestNativeFixtures meters each stream of Ollama's and llama.cpp's native
// APIs whole, then fed one byte at a time, cut in two around every event
// boundary and at every 13th byte, and at random cuts, and requires the
// counts above and the same result every time.
func TestNativeFixtures(t *testing.T) {
	kinds := provenance(t)
	for file, w := range nativeWants {
		t.Run(file, func(t *testing.T) {
			if kinds[file] == "" {
				t.Fatalf("%s is not in PROVENANCE.tsv", file)
			}
			input := readFixture(t, file)
			p := newParser(w.api)
			whole := runMeterFramed(input, nil, p, w.api.NDJSON())
			var tok, content int
			for _, info := range whole.infos {
				if info.Token {
					tok++
					if info.Content {
						content++
					}
				}
				if info.UsageOnly {
					t.Errorf("usage-only event: %+v (nothing of these streams is the gateway's to strip)", info)
				}
			}
			if whole.events != w.events || tok != w.tokenEvents || content != w.content || whole.parseErrs != 0 || whole.done != w.done ||
				whole.errSeen != (w.errMsg != "") || whole.errMsg != w.errMsg {
				t.Errorf("events %d, token %d, content %d, parse errors %d, done %v, error %q; want %d, %d, %d, 0, %v, %q",
					whole.events, tok, content, whole.parseErrs, whole.done, whole.errMsg, w.events, w.tokenEvents, w.content, w.done, w.errMsg)
			}
			if want := w.record(); !recordsEqual(&whole.rec, &want) {
				t.Errorf("record\n got %+v\nwant %+v", whole.rec, want)
			}
			check := func(cuts []int) {
				t.Helper()
				if got := runMeterFramed(input, cuts, p, w.api.NDJSON()); !runsEqual(&got, &whole) {
					t.Fatalf("cuts %v: %+v, want %+v", cuts, got.rec, whole.rec)
				}
			}
			check(everyByte(len(input)))
			// Cut in two at every event boundary (±2 bytes) and every 13th
			// byte (the framer's own tests cut at every byte).
			fr := frameWith(&SSEFramer{NDJSON: w.api.NDJSON()}, input, nil)
			off := 0
			for _, ev := range fr.events {
				off += len(ev.Raw)
				for d := -2; d <= 2; d++ {
					if c := off + d; c >= 0 && c <= len(input) {
						check([]int{c})
					}
				}
			}
			for i := 0; i <= len(input); i += 13 {
				check([]int{i})
			}
			rng := rand.New(rand.NewPCG(11, uint64(len(input))))
			for k := 0; k < 10; k++ {
				check(randomCuts(rng, len(input)))
			}
		})
	}
}

// llama.cpp serves its native API on /completions too (route
// completions): an event in its shape (no choices, a boolean stop) is read
// as llama.cpp's there, with the same result as on /completion.
func TestLlamaCppNativeOnCompletions(t *testing.T) {
	input := readFixture(t, "llamacpp/llamacpp-src-completion-stream-native.txt")
	native := runMeter(input, nil, newParser(APILlamaCpp))
	got := runMeter(input, nil, newParser(APICompletions))
	if !runsEqual(&got, &native) || got.rec.Events != 6 || got.rec.OSL != 6 || got.rec.ISL != 12 {
		t.Fatalf("on completions: %+v\non /completion: %+v", got.rec, native.rec)
	}
}

func TestNativeEventsHandMade(t *testing.T) {
	for _, c := range []struct {
		api  API
		data string
		want infoWant
	}{
		{APIOllamaChat, `{"model":"m","message":{"role":"assistant","content":"Hi"},"done":false}`, infoWant{token: true, content: true}},
		{APIOllamaChat, `{"model":"m","message":{"role":"assistant","content":"","thinking":"Hmm"},"done":false}`, infoWant{token: true, content: true}},
		{APIOllamaChat, `{"model":"m","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{}}}]},"done":false}`, infoWant{token: true, content: true}},
		// logprobs only, while a tool-call parser holds the text back: a token all the same
		{APIOllamaChat, `{"model":"m","message":{"role":"assistant","content":""},"done":false,"logprobs":[{"token":"<","logprob":-0.1}]}`, infoWant{token: true}},
		{APIOllamaChat, `{"model":"m","message":{"role":"assistant","content":""},"done_reason":"stop","done":true,"prompt_eval_count":26,"eval_count":298}`,
			infoWant{finish: true, done: true, hasUsage: true, prompt: 26, completion: 298}},
		// the held-back text flushed on the last line: output
		{APIOllamaChat, `{"model":"m","message":{"role":"assistant","content":"tail"},"done":true,"eval_count":3}`,
			infoWant{token: true, content: true, finish: true, done: true, hasUsage: true, prompt: Unknown, completion: 3}},
		{APIOllamaChat, `{"error":"model runner has unexpectedly stopped"}`, infoWant{isErr: true, msg: "model runner has unexpectedly stopped"}},
		{APIOllamaChat, `{"status":"pulling manifest"}`, infoWant{}},
		{APIOllamaGenerate, `{"model":"m","response":" joke","done":false}`, infoWant{token: true, content: true}},
		{APIOllamaGenerate, `{"model":"m","response":"","thinking":"so","done":false}`, infoWant{token: true, content: true}},
		{APIOllamaGenerate, `{"model":"m","response":"","done":true,"done_reason":"stop","context":[1,2],"prompt_eval_count":17,"eval_count":71}`,
			infoWant{finish: true, done: true, hasUsage: true, prompt: 17, completion: 71}},
		{APILlamaCpp, `{"content":"Hi","stop":false,"tokens_predicted":1,"tokens_evaluated":9}`, infoWant{token: true, content: true, hasUsage: true, prompt: 9, completion: 1}},
		{APILlamaCpp, `{"content":"","stop":false,"prompt_progress":{"total":9,"processed":4}}`, infoWant{}},
		{APILlamaCpp, `{"content":"","stop":true,"stop_type":"limit","tokens_predicted":16,"tokens_evaluated":9}`, infoWant{finish: true, hasUsage: true, prompt: 9, completion: 16, ended: 64}},
		{APILlamaCpp, `{"error":{"code":500,"message":"slot unavailable","type":"server_error"}}`, infoWant{isErr: true, msg: "slot unavailable"}},
		// TGI (router/src/server.rs, lib.rs): a token event without details,
		// the last event without details (not asked: no counts), its error
		// event (ErrorResponse: error a string)
		{APITGI, `{"index":1,"token":{"id":3681,"text":" Paris","logprob":-0.1,"special":false},"generated_text":null,"details":null}`, infoWant{token: true, content: true}},
		{APITGI, `{"index":4,"token":{"id":2,"text":"</s>","logprob":-0.01,"special":true},"generated_text":" Paris.","details":null}`, infoWant{token: true, finish: true, done: true}},
		{APITGI, `{"error":"Request failed during generation: Server error: CUDA out of memory","error_type":"generation"}`, infoWant{isErr: true, msg: "Request failed during generation: Server error: CUDA out of memory"}},
		// SGLang (http_server.py, tokenizer_manager.py): a running count,
		// a finish of type length, an abort, the stream's error event
		{APISGLang, `{"text":" Paris","output_ids":[3681],"meta_info":{"id":"a","finish_reason":null,"prompt_tokens":7,"completion_tokens":1,"cached_tokens":0}}`, infoWant{token: true, content: true, hasUsage: true, prompt: 7, completion: 1}},
		{APISGLang, `{"text":" Paris is","output_ids":[3681,374],"meta_info":{"id":"a","finish_reason":{"type":"length","length":2},"prompt_tokens":7,"completion_tokens":2,"cached_tokens":0}}`, infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: 7, completion: 2}},
		{APISGLang, `{"text":"","output_ids":[],"meta_info":{"id":"a","finish_reason":{"type":"abort","message":"The request is aborted."},"prompt_tokens":7,"completion_tokens":0}}`, infoWant{isErr: true, msg: "The request is aborted.", finish: true, hasUsage: true, prompt: 7, completion: 0}},
		{APISGLang, `{"error":{"message":"The input (9000 tokens) is longer than the model's context length (8192 tokens)."}}`, infoWant{isErr: true, msg: "The input (9000 tokens) is longer than the model's context length (8192 tokens)."}},
		// SGLang's events on TGI's route (a body naming both engines'
		// inputs, run by SGLang): read as SGLang's, abort included
		{APITGI, `{"text":" Paris","output_ids":[3681],"meta_info":{"id":"a","finish_reason":null,"prompt_tokens":7,"completion_tokens":1,"cached_tokens":0}}`, infoWant{token: true, content: true, hasUsage: true, prompt: 7, completion: 1}},
		{APITGI, `{"text":" Paris is","output_ids":[3681,374],"meta_info":{"id":"a","finish_reason":{"type":"length","length":2},"prompt_tokens":7,"completion_tokens":2,"cached_tokens":0}}`, infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: 7, completion: 2}},
		{APITGI, `{"text":"","output_ids":[],"meta_info":{"id":"a","finish_reason":{"type":"abort","message":"The request is aborted."},"prompt_tokens":7,"completion_tokens":0}}`, infoWant{isErr: true, msg: "The request is aborted.", finish: true, hasUsage: true, prompt: 7, completion: 0}},
		{APITGI, `{"error":{"message":"The input (9000 tokens) is longer than the model's context length (8192 tokens)."}}`, infoWant{isErr: true, msg: "The input (9000 tokens) is longer than the model's context length (8192 tokens)."}},
	} {
		p := newParser(c.api)
		var info EventInfo
		if err := p.Parse(dataEvent(c.data), &info); err != nil {
			t.Fatalf("%v %s: %v", c.api, c.data, err)
		}
		c.want.check(t, &info)
	}
	// A llama.cpp event of another prompt than the first: its counts are that prompt's.
	var info EventInfo
	if err := newParser(APILlamaCpp).Parse(dataEvent(`{"index":1,"content":"x","stop":false,"tokens_predicted":1}`), &info); err != nil || !info.OtherChoice || !info.Token {
		t.Fatalf("index 1: %+v %v", info, err)
	}
	// SGLang's stream of several prompts: each output carries its place
	// ("index", added by the tokenizer manager's batch request); its
	// counts are that prompt's.
	if err := newParser(APISGLang).Parse(dataEvent(`{"text":" Rome","meta_info":{"id":"b","finish_reason":null,"prompt_tokens":6,"completion_tokens":1},"index":1}`), &info); err != nil || !info.OtherChoice || !info.Token {
		t.Fatalf("sglang index 1: %+v %v", info, err)
	}
}

// A JSON array is llama.cpp's answer to several prompts only when every
// element is a result in its native shape; any other array is malformed.
func TestNativeBodyArraysMalformed(t *testing.T) {
	for _, c := range []struct {
		api  API
		body string
	}{
		{APILlamaCpp, `[]`},
		{APILlamaCpp, `[{"content":"x","stop":true},1]`},
		{APILlamaCpp, `[{"content":"x","stop":true},{"choices":[],"stop":true}]`},
		{APICompletions, `[{"choices":[{"text":"x","finish_reason":"stop"}]},1]`},
		{APICompletions, `[{"choices":{"text":"x"}}]`},
		{APICompletions, `[{"choices":[],"stop":true},{"content":"x","stop":true}]`},
		{APIChat, `[{"choices":[{"text":"x","finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}]`},
		{APILlamaCpp, `[{"choices":[{"text":"x","finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}]`},
		{APIChat, `[{"content":"x","stop":true}]`},
		{APIOllamaGenerate, `[{"content":"x","stop":true}]`},
	} {
		var info EventInfo
		if err := ParseResponseBody(c.api, []byte(c.body), 1, &info); !errors.Is(err, ErrMalformed) || info.HasUsage || info.Token {
			t.Errorf("%v %s: %v, %+v", c.api, c.body, err, info)
		}
	}
}

func TestNativeBodies(t *testing.T) {
	for _, c := range []struct {
		api  API
		body string
		want infoWant
	}{
		{APIOllamaChat, `{"model":"m","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":"Paris."},"done_reason":"stop","done":true,"total_duration":1,"prompt_eval_count":26,"eval_count":3}`,
			infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: 26, completion: 3}},
		{APIOllamaGenerate, `{"model":"m","response":"Paris.","done":true,"context":[1],"prompt_eval_count":17,"eval_count":4}`,
			infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: 17, completion: 4}},
		{APIOllamaChat, `{"error":"model 'x' not found"}`, infoWant{isErr: true, msg: "model 'x' not found"}},
		// TGI's /generate (GenerateResponse): with details, its output
		// count; without, none; on / without "stream", the same in an array
		{APITGI, `{"generated_text":" Paris is the capital.","details":{"finish_reason":"eos_token","generated_tokens":6,"seed":null,"prefill":[],"tokens":[{"id":3681,"text":" Paris","logprob":-0.1,"special":false}]}}`,
			infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: Unknown, completion: 6}},
		{APITGI, `{"generated_text":" Paris."}`, infoWant{token: true, content: true, finish: true}},
		{APITGI, `[{"generated_text":" Paris.","details":{"finish_reason":"length","generated_tokens":2,"seed":null,"prefill":[],"tokens":[]}}]`,
			infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: Unknown, completion: 2}},
		{APITGI, `{"error":"Input validation error: inputs must have less than 4096 tokens","error_type":"validation"}`, infoWant{isErr: true, msg: "Input validation error: inputs must have less than 4096 tokens"}},
		// SGLang's /generate: one output; several prompts, an array, summed
		{APISGLang, `{"text":" Paris.","output_ids":[3681,13],"meta_info":{"id":"a","finish_reason":{"type":"stop","matched":2},"prompt_tokens":7,"completion_tokens":3,"cached_tokens":0,"e2e_latency":0.05}}`,
			infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: 7, completion: 3}},
		{APISGLang, `[{"text":" Paris.","meta_info":{"id":"a","finish_reason":{"type":"stop","matched":2},"prompt_tokens":7,"completion_tokens":3}},{"text":" Rome.","meta_info":{"id":"b","finish_reason":{"type":"length","length":4},"prompt_tokens":6,"completion_tokens":4}}]`,
			infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: 13, completion: 7}},
		{APISGLang, `{"error":{"message":"Either text, input_ids or input_embeds should be provided."}}`, infoWant{isErr: true, msg: "Either text, input_ids or input_embeds should be provided."}},
		// TGI's best_of (router/src/infer/mod.rs generate_best_of): every
		// sequence was generated; details holds the best one's count and
		// best_of_sequences each other's, so the output is their sum
		{APITGI, `{"generated_text":" Paris.","details":{"finish_reason":"length","generated_tokens":4,"seed":1,"prefill":[],"tokens":[],"best_of_sequences":[{"generated_text":" Rome.","finish_reason":"length","generated_tokens":5,"seed":2,"prefill":[],"tokens":[]},{"generated_text":" Nice.","finish_reason":"eos_token","generated_tokens":3,"seed":3,"prefill":[],"tokens":[]}]}}`,
			infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: Unknown, completion: 12}},
		{APITGI, `[{"generated_text":" Paris.","details":{"finish_reason":"length","generated_tokens":4,"seed":1,"prefill":[],"tokens":[],"best_of_sequences":[{"generated_text":" Rome.","finish_reason":"length","generated_tokens":5,"seed":2,"prefill":[],"tokens":[]}]}}]`,
			infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: Unknown, completion: 9}},
		// a sequence without its count: the output is not known
		{APITGI, `{"generated_text":" Paris.","details":{"finish_reason":"length","generated_tokens":4,"best_of_sequences":[{"generated_text":" Rome.","finish_reason":"length"}]}}`,
			infoWant{token: true, content: true, finish: true}},
		// A body naming both engines' inputs is metered as TGI's (the
		// gateway cannot tell which engine it goes to); SGLang, which
		// ignores inputs, answers it in its own shape: read as SGLang's.
		{APITGI, `{"text":" Paris.","output_ids":[3681,13],"meta_info":{"id":"a","finish_reason":{"type":"stop","matched":2},"prompt_tokens":7,"completion_tokens":3,"cached_tokens":0}}`,
			infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: 7, completion: 3}},
		{APITGI, `[{"text":" Paris.","meta_info":{"id":"a","finish_reason":{"type":"stop","matched":2},"prompt_tokens":7,"completion_tokens":3}},{"text":" Rome.","meta_info":{"id":"b","finish_reason":{"type":"length","length":4},"prompt_tokens":6,"completion_tokens":4}}]`,
			infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: 13, completion: 7}},
		{APILlamaCpp, `{"index":0,"content":"Paris.","tokens":[],"id_slot":0,"stop":true,"tokens_predicted":3,"tokens_evaluated":9,"stop_type":"eos"}`,
			infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: 9, completion: 3}},
		{APICompletions, `{"index":0,"content":"Paris.","stop":true,"tokens_predicted":3,"tokens_evaluated":9}`,
			infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: 9, completion: 3}},
		// several prompts, not streamed: an array of results, their counts summed
		{APILlamaCpp, `[{"index":0,"content":" Paris.","stop":true,"tokens_predicted":3,"tokens_evaluated":6},{"index":1,"content":"","stop":true,"tokens_predicted":5,"tokens_evaluated":7}]`,
			infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: 13, completion: 8}},
		{APICompletions, `[{"index":0,"content":"","stop":true,"tokens_predicted":3},{"index":1,"content":"","stop":false,"tokens_predicted":5,"tokens_evaluated":7}]`,
			infoWant{hasUsage: true, prompt: Unknown, completion: 8}},
		// several prompts on /v1/completions, not streamed: llama.cpp's
		// array of text_completion objects (its to_json_oaicompat, one per
		// prompt, each with its usage), their counts summed
		{APICompletions, `[{"choices":[{"text":" Paris.","index":0,"logprobs":null,"finish_reason":"stop"}],"created":1,"model":"m","system_fingerprint":"b7010","object":"text_completion","id":"chatcmpl-1","timings":{"prompt_n":6,"predicted_n":3},"usage":{"completion_tokens":3,"prompt_tokens":6,"total_tokens":9,"prompt_tokens_details":{"cached_tokens":0}}},` +
			`{"choices":[{"text":" Rome, of course.","index":1,"logprobs":null,"finish_reason":"length"}],"created":1,"model":"m","system_fingerprint":"b7010","object":"text_completion","id":"chatcmpl-1","usage":{"completion_tokens":5,"prompt_tokens":7,"total_tokens":12}}]`,
			infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: 13, completion: 8}},
		// one element without usage: the sums are not known
		{APICompletions, `[{"choices":[{"text":"","index":0,"finish_reason":"stop"}],"usage":{"completion_tokens":3,"prompt_tokens":6}},{"choices":[{"text":"","index":1,"finish_reason":null}]}]`,
			infoWant{token: true}},
		// llama.cpp's server answers /api/chat as its /v1/chat/completions:
		// a chat.completion body there is read by the chat rules.
		{APIOllamaChat, `{"choices":[{"finish_reason":"stop","index":0,"message":{"role":"assistant","content":"Olá!"}}],"object":"chat.completion","usage":{"completion_tokens":57,"prompt_tokens":84,"total_tokens":141}}`,
			infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: 84, completion: 57}},
	} {
		var info EventInfo
		if err := ParseResponseBody(c.api, []byte(c.body), 1, &info); err != nil {
			t.Fatalf("%v %s: %v", c.api, c.body, err)
		}
		c.want.check(t, &info)
	}
}

// llama.cpp's chat with n > 1 (n_cmpl) runs a task per choice, each with
// the request's one prompt, and each task's last result, asked for usage
// (the gateway asks), ends with a usage-only chunk of its own
// (to_json_oaicompat_chat_stream): the output counts add up, the prompt
// is counted once (OpenAI and vLLM count it once for n > 1). The choices
// one after another and interleaved, cut at every byte. Found by review:
// the first version summed the prompts too (isl 20).
func TestLlamaCppChatSeveralChoicesUsageChunks(t *testing.T) {
	chunk := func(i, delta, finish string) string {
		return `data: {"choices":[{"finish_reason":` + finish + `,"index":` + i + `,"delta":` + delta + `}],"created":1,"id":"chatcmpl-1","model":"m","system_fingerprint":"b7300","object":"chat.completion.chunk"}` + "\n\n"
	}
	usage := func(p, c string) string {
		return `data: {"choices":[],"created":1,"id":"chatcmpl-1","model":"m","system_fingerprint":"b7300","object":"chat.completion.chunk","usage":{"completion_tokens":` + c + `,"prompt_tokens":` + p + `,"total_tokens":0}}` + "\n\n"
	}
	role := `{"role":"assistant","content":null}`
	sequential := chunk("0", role, "null") + chunk("0", `{"content":"Hi"}`, "null") + chunk("0", `{}`, `"stop"`) + usage("10", "2") +
		chunk("1", role, "null") + chunk("1", `{"content":"Hello"}`, "null") + chunk("1", `{"content":","}`, "null") + chunk("1", `{}`, `"length"`) + usage("10", "5") + "data: [DONE]\n\n"
	together := chunk("0", role, "null") + chunk("1", role, "null") + chunk("0", `{"content":"Hi"}`, "null") + chunk("1", `{"content":"Hello"}`, "null") +
		chunk("0", `{}`, `"stop"`) + usage("10", "2") + chunk("1", `{}`, `"length"`) + usage("10", "5") + "data: [DONE]\n\n"
	for name, s := range map[string]string{"sequential": sequential, "together": together} {
		input := []byte(s)
		p := newParser(APIChat)
		whole := runMeter(input, nil, p)
		if r := whole.rec; r.ISL != 10 || r.OSL != 7 || r.UsageSource != UsageUpstream || whole.parseErrs != 0 {
			t.Fatalf("%s: isl %d osl %d (%v), parse errors %d; want 10 (the one prompt) 7 (usage)", name, r.ISL, r.OSL, r.UsageSource, whole.parseErrs)
		}
		for c := 0; c <= len(input); c++ {
			if got := runMeter(input, []int{c}, p); !runsEqual(&got, &whole) {
				t.Fatalf("%s cut at %d: %+v, want %+v", name, c, got.rec, whole.rec)
			}
		}
	}
	// One usage chunk of a stream of several choices (vLLM's, SGLang's) is
	// the whole's already: taken as it is.
	one := chunk("0", role, "null") + chunk("1", role, "null") + chunk("0", `{"content":"Hi"}`, "null") + chunk("1", `{"content":"Hello"}`, "null") +
		chunk("0", `{}`, `"stop"`) + chunk("1", `{}`, `"length"`) + usage("10", "7") + "data: [DONE]\n\n"
	if r := runMeter([]byte(one), nil, newParser(APIChat)).rec; r.ISL != 10 || r.OSL != 7 || r.UsageSource != UsageUpstream {
		t.Fatalf("one usage chunk: isl %d osl %d (%v); want 10 7 (usage)", r.ISL, r.OSL, r.UsageSource)
	}
}

// llama.cpp's response_fields cuts its last result to the members a request
// names (server_task_result_cmpl_final::to_json_non_oaicompat, through
// json_get_nested_values: each kept under its path); the events before it
// (server_task_result_cmpl_partial) come whole, "stop": false included. The
// recorded stream with its last event so cut: that event is still the last
// (Finish, no token), its counts are believed when it kept them, and
// otherwise the running counts of the events before stand (continuous
// usage); on /completion and /completions alike, cut at every byte.
func TestLlamaCppResponseFieldsStream(t *testing.T) {
	full := string(readFixture(t, "llamacpp/llamacpp-src-completion-stream-native.txt"))
	cut := strings.TrimSuffix(full, "\n\n")
	head := full[:strings.LastIndex(cut, "\n\n")+2] // every event but the last
	for _, c := range []struct {
		last   string
		source UsageSource
	}{
		{`{"content":""}`, UsageContinuous},
		{`{}`, UsageContinuous},
		{`{"timings/predicted_n":6,"timings/prompt_n":12}`, UsageContinuous},
		{`{"content":"","tokens_evaluated":12,"tokens_predicted":6}`, UsageUpstream},
	} {
		input := []byte(head + "data: " + c.last + "\n\n")
		for _, api := range []API{APILlamaCpp, APICompletions} {
			p := newParser(api)
			whole := runMeter(input, nil, p)
			last := whole.infos[len(whole.infos)-1]
			r := whole.rec
			if !last.Finish || last.Token || whole.parseErrs != 0 || r.Events != 6 || r.ISL != 12 || r.OSL != 6 || r.UsageSource != c.source {
				t.Fatalf("%v %s: last %+v; events %d isl %d osl %d (%v), parse errors %d; want finish, 6 12 6 (%v)",
					api, c.last, last, r.Events, r.ISL, r.OSL, r.UsageSource, whole.parseErrs, c.source)
			}
			for k := 0; k <= len(input); k++ {
				if got := runMeter(input, []int{k}, p); !runsEqual(&got, &whole) {
					t.Fatalf("%v %s cut at %d: %+v, want %+v", api, c.last, k, got.rec, whole.rec)
				}
			}
		}
	}
	// Not streamed: the one result so cut, and several prompts' results.
	for _, c := range []struct {
		body string
		want infoWant
	}{
		{`{"content":" Paris."}`, infoWant{token: true, content: true, finish: true}},
		{`{"content":" Paris.","tokens_predicted":3}`, infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: Unknown, completion: 3}},
		{`[{"content":" Paris.","tokens_predicted":3,"tokens_evaluated":6},{"content":"","tokens_predicted":5,"tokens_evaluated":7}]`,
			infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: 13, completion: 8}},
	} {
		var info EventInfo
		if err := ParseResponseBody(APILlamaCpp, []byte(c.body), 1, &info); err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		c.want.check(t, &info)
	}
}

// llama.cpp serves its native API on /completions as on /completion: a
// non-streamed answer to several prompts with response_fields, each result
// cut to the members named (no "stop"), is their sum there too, not a
// malformed body (an upstream_error with no counts).
func TestLlamaCppResponseFieldsBodiesOnCompletions(t *testing.T) {
	body := `[{"content":" Paris.","tokens_predicted":3,"tokens_evaluated":6},{"content":"","tokens_predicted":5,"tokens_evaluated":7}]`
	for _, api := range []API{APILlamaCpp, APICompletions} {
		var info EventInfo
		if err := ParseResponseBody(api, []byte(body), 1, &info); err != nil {
			t.Fatalf("%v: %v", api, err)
		}
		infoWant{token: true, content: true, finish: true, hasUsage: true, prompt: 13, completion: 8}.check(t, &info)
	}
}

// llama.cpp's /v1/completions streams a request of several prompts (and of
// n > 1 choices a prompt: n_cmpl) as a task per choice
// (server_routes::handle_completions_impl; server_response_reader::post_tasks
// numbers them one prompt's choices after the other: index = prompt × n +
// choice), each chunk in server_task_result_cmpl_partial::to_json_oaicompat's
// shape, each task's last in server_task_result_cmpl_final::to_json_oaicompat's:
// its finish_reason, its text empty (in a stream the text came before), and
// the usage of that task (its prompt's tokens, its output's), whether or
// not the request asked for usage; no usage-only chunk, [DONE] once every
// task has ended. OSL is the sum of the output counts, ISL of the prompts'
// (each prompt once: a prompt's later choices repeat its count), the
// engine's count; in whatever order the tasks run, cut at every byte. A
// stream cut before its [DONE], or whose choices' usage is not all on
// their finish chunks, keeps the estimate.
func TestLlamaCppCompletionsSeveralPromptsUsage(t *testing.T) {
	chunk := func(i int, text string) string {
		return `data: {"choices":[{"text":"` + text + `","index":` + strconv.Itoa(i) + `,"logprobs":null,"finish_reason":null}],"created":1764000000,"model":"gpt-3.5-turbo","system_fingerprint":"b7300-0a1b2c3d","object":"text_completion","id":"chatcmpl-x"}` + "\n\n"
	}
	final := func(i int, finish string, prompt, completion int) string {
		return `data: {"choices":[{"text":"","index":` + strconv.Itoa(i) + `,"logprobs":null,"finish_reason":"` + finish + `"}],"created":1764000000,"model":"gpt-3.5-turbo","system_fingerprint":"b7300-0a1b2c3d","object":"text_completion",` +
			`"usage":{"completion_tokens":` + strconv.Itoa(completion) + `,"prompt_tokens":` + strconv.Itoa(prompt) + `,"total_tokens":` + strconv.Itoa(prompt+completion) + `},"id":"chatcmpl-x",` +
			`"timings":{"cache_n":0,"prompt_n":` + strconv.Itoa(prompt) + `,"prompt_ms":20.1,"prompt_per_token_ms":2.1,"prompt_per_second":480.2,"predicted_n":` + strconv.Itoa(completion) + `,"predicted_ms":40.2,"predicted_per_token_ms":13.4,"predicted_per_second":74.6}}` + "\n\n"
	}
	const done = "data: [DONE]\n\n"
	// Two prompts of 5 and 7 tokens, answered in 3 and 2.
	interleaved := chunk(0, " Paris") + chunk(1, " Rome") + chunk(0, ",") + chunk(1, ".") + chunk(0, " France") + final(1, "stop", 7, 2) + final(0, "length", 5, 3) + done
	sequential := chunk(0, " Paris") + chunk(0, ",") + chunk(0, " France") + final(0, "length", 5, 3) + chunk(1, " Rome") + chunk(1, ".") + final(1, "stop", 7, 2) + done
	// One prompt of 5 tokens, n 2: both choices' usage count it.
	oneN2 := chunk(0, " Paris") + chunk(1, " Rome") + chunk(1, ".") + final(1, "stop", 5, 2) + chunk(0, ".") + final(0, "stop", 5, 2) + done
	// Two prompts of 5 and 7 tokens, n 2: choices 0 and 1 are the first's,
	// 2 and 3 the second's.
	twoN2 := chunk(2, " a") + chunk(0, " b") + chunk(3, " c") + chunk(1, " d") + final(3, "stop", 7, 1) + final(0, "stop", 5, 1) + chunk(2, " e") +
		final(2, "stop", 7, 2) + final(1, "stop", 5, 1) + done
	for _, c := range []struct {
		name      string
		input     string
		perPrompt int
		isl, osl  int
		source    UsageSource
	}{
		{"interleaved", interleaved, 1, 12, 5, UsageUpstream},
		{"sequential", sequential, 1, 12, 5, UsageUpstream},
		{"one prompt, n 2", oneN2, 2, 5, 4, UsageUpstream},
		{"two prompts, n 2", twoN2, 2, 12, 5, UsageUpstream},
		// n not known (64 or more): the prompts' count is not.
		{"choices per prompt unknown", twoN2, 64, Unknown, 5, UsageUpstream},
		// Cut before [DONE]: a choice may not have ended; the estimate.
		{"no [DONE]", strings.TrimSuffix(interleaved, done), 1, Unknown, 5, UsageEstimate},
		// A finish chunk without usage: the sum lacks its choice's.
		{"a finish without usage", chunk(0, " a") + chunk(1, " b") + final(0, "stop", 5, 1) + strings.Replace(final(1, "stop", 7, 1), `"usage"`, `"x_usage"`, 1) + done, 1, Unknown, 2, UsageEstimate},
		// An error, then [DONE]: llama.cpp before its pull request #16109
		// wrote it in the error: field and ended the stream with [DONE],
		// the other choices cut (receive_cmpl_results_stream stops at the
		// first error); later builds send it as data: {"error":...}. The
		// choices still running ended without their usage.
		{"an error, then [DONE]", chunk(0, " a") + chunk(1, " b") + final(0, "stop", 5, 1) + chunk(1, " c") +
			`error: {"code":500,"message":"Context size has been exceeded.","type":"server_error"}` + "\n\n" + done, 1, Unknown, 3, UsageEstimate},
		{"an error event, then [DONE]", chunk(0, " a") + chunk(1, " b") + final(0, "stop", 5, 1) + chunk(1, " c") +
			`data: {"error":{"code":500,"message":"Context size has been exceeded.","type":"server_error"}}` + "\n\n" + done, 1, Unknown, 3, UsageEstimate},
		// A choice's finish chunk sent again (an odd engine's, or a replay
		// by something between): its usage counts once, wherever the
		// repeat comes, however often; a repeat without the usage takes
		// nothing away. Its second choice's, later, and back to back; the
		// first choice's before the stream shows a second; a prompt's
		// first choice's (its prompt counted once), at the end; three
		// times.
		{"a finish chunk twice", strings.Replace(interleaved, done, final(1, "stop", 7, 2)+done, 1), 1, 12, 5, UsageUpstream},
		{"a finish chunk twice, back to back", strings.Replace(sequential, final(1, "stop", 7, 2), final(1, "stop", 7, 2)+final(1, "stop", 7, 2), 1), 1, 12, 5, UsageUpstream},
		{"the first choice's finish chunk twice, before the second's first chunk", strings.Replace(sequential, final(0, "length", 5, 3), final(0, "length", 5, 3)+final(0, "length", 5, 3), 1), 1, 12, 5, UsageUpstream},
		{"a prompt's first choice's finish chunk twice", strings.Replace(twoN2, done, final(0, "stop", 5, 1)+done, 1), 2, 12, 5, UsageUpstream},
		{"a finish chunk three times", strings.Replace(twoN2, final(3, "stop", 7, 1), final(3, "stop", 7, 1)+final(3, "stop", 7, 1)+chunk(0, "")+final(3, "stop", 7, 1), 1), 2, 12, 5, UsageUpstream},
		{"a finish chunk again without its usage", strings.Replace(interleaved, done, strings.Replace(final(1, "stop", 7, 2), `"usage"`, `"x_usage"`, 1)+done, 1), 1, 12, 5, UsageUpstream},
		{"the first choice's finish chunk again without its usage, before the second's first chunk", strings.Replace(sequential, final(0, "length", 5, 3), final(0, "length", 5, 3)+strings.Replace(final(0, "length", 5, 3), `"usage"`, `"x_usage"`, 1), 1), 1, 12, 5, UsageUpstream},
		// A choice's first finish chunk without usage leaves the sum
		// unknown, whatever comes after it.
		{"a finish without usage, then with it", chunk(0, " a") + chunk(1, " b") + final(0, "stop", 5, 1) + strings.Replace(final(1, "stop", 7, 1), `"usage"`, `"x_usage"`, 1) + final(1, "stop", 7, 1) + done, 1, Unknown, 2, UsageEstimate},
	} {
		input := []byte(c.input)
		whole := runMeterPerPrompt(&SSEFramer{}, input, nil, newParser(APICompletions), c.perPrompt)
		if r := whole.rec; r.ISL != c.isl || r.OSL != c.osl || r.UsageSource != c.source || whole.parseErrs != 0 {
			t.Fatalf("%s: isl %d osl %d (%v), parse errors %d; want %d %d (%v)", c.name, r.ISL, r.OSL, r.UsageSource, whole.parseErrs, c.isl, c.osl, c.source)
		}
		for k := 0; k <= len(input); k++ {
			if got := runMeterPerPrompt(&SSEFramer{}, input, []int{k}, newParser(APICompletions), c.perPrompt); !runsEqual(&got, &whole) {
				t.Fatalf("%s cut at %d: %+v, want %+v", c.name, k, got.rec, whole.rec)
			}
		}
	}
	// vLLM's continuous usage on a stream of several choices (a running
	// count on every chunk, each choice's own, then the whole's in a
	// usage-only chunk) is not summed: the last chunk's count stands, and
	// without it the estimate.
	withUsage := func(s, usage string) string {
		return strings.Replace(s, `,"id":"chatcmpl-x"}`, `,"usage":`+usage+`,"id":"chatcmpl-x"}`, 1)
	}
	cont := withUsage(chunk(0, " a"), `{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}`) + withUsage(chunk(1, " b"), `{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}`) +
		final(0, "stop", 5, 1) + final(1, "stop", 5, 1)
	if r := runMeter([]byte(cont+done), nil, newParser(APICompletions)).rec; r.ISL != Unknown || r.OSL != 2 || r.UsageSource != UsageEstimate {
		t.Fatalf("continuous usage: isl %d osl %d (%v); want the estimate", r.ISL, r.OSL, r.UsageSource)
	}
	whole := `data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}` + "\n\n"
	if r := runMeter([]byte(cont+whole+done), nil, newParser(APICompletions)).rec; r.ISL != 5 || r.OSL != 2 || r.UsageSource != UsageUpstream {
		t.Fatalf("continuous usage, then the whole's: isl %d osl %d (%v); want 5 2 (usage)", r.ISL, r.OSL, r.UsageSource)
	}
}

// endsWithUsage returns the recorded OpenAI chat stream of n 3 up to its
// usage chunk, each finish chunk given its choice's usage (14 of the 42
// tokens, of the 79 of the prompt), and end(i), choice i's finish chunk.
func endsWithUsage(t testing.TB) (head string, end func(i int) string) {
	n3 := string(readFixture(t, "openai/oaipy-chat-stream-n3-choices.txt"))
	const id = `data: {"id":"chatcmpl-ABfw2KKFuVXmEJgVwYfBvejMAdWtq","object":"chat.completion.chunk","created":1727346170,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_b40fb1c6fb","choices":[`
	head = n3[:strings.Index(n3, id+`],"usage"`)]
	const usage = `,"usage":{"prompt_tokens":79,"completion_tokens":14,"total_tokens":93}}`
	head = strings.ReplaceAll(head, `"finish_reason":"stop"}]}`, `"finish_reason":"stop"}]`+usage)
	end = func(i int) string {
		return id + `{"index":` + strconv.Itoa(i) + `,"delta":{},"logprobs":null,"finish_reason":"stop"}]` + usage + "\n\n"
	}
	if !strings.Contains(head, end(1)) {
		t.Fatal("the n 3 stream's finish chunks are not as expected")
	}
	return head, end
}

// A chat stream whose choices each end with their usage (llama.cpp's
// /v1/completions sends its choices so, TestLlamaCppCompletionsSeveralPromptsUsage;
// here on the chat route, the recorded OpenAI stream of n 3, its usage
// chunk left out and each finish chunk given its choice's usage, 14 of the
// 42 tokens; and DeepSeek's recorded stream, whose finish chunk carries
// the usage), with a choice's finish chunk sent again: the choice's count
// is taken once (the sum was 56). A repeat
// that brings the usage a first end lacked is not a repeat of a count:
// of one choice, it is the count. Fed a byte at a time, and cut in two at
// every byte of the stream's end.
func TestRepeatedFinishChunkUsage(t *testing.T) {
	head, end := endsWithUsage(t)
	const done = "data: [DONE]\n\n"
	deepseek := string(readFixture(t, "openai-compat-other/pai-deepseek-chat-stream-reasoning-content.txt"))
	dsEnd := deepseek[strings.LastIndex(deepseek, "data: {"):strings.LastIndex(deepseek, done)]
	dsHead := strings.TrimSuffix(deepseek, dsEnd+done)
	dsNoUsage := dsEnd[:strings.Index(dsEnd, `,"usage":{`)] + `,"usage":null}` + "\n\n"
	// An end with an early count (90 of the 212), more output after it,
	// then the end with the whole count.
	dsEarly := strings.Replace(dsEnd, `"completion_tokens":212,"total_tokens":218`, `"completion_tokens":90,"total_tokens":96`, 1)
	dsMore := strings.Replace(strings.Replace(dsEnd, `"content":""`, `"content":" more"`, 1), `"finish_reason":"stop"`, `"finish_reason":null`, 1)
	dsMore = dsMore[:strings.Index(dsMore, `,"usage":{`)] + `,"usage":null}` + "\n\n"
	for _, c := range []struct {
		name      string
		input     string
		perPrompt int
		isl, osl  int
		source    UsageSource
	}{
		{"n 3", head + done, 3, 79, 42, UsageUpstream},
		{"n 3, a choice's finish chunk twice", head + end(1) + done, 3, 79, 42, UsageUpstream},
		{"n 3, a choice's finish chunk twice, back to back", strings.Replace(head, end(1), end(1)+end(1), 1) + done, 3, 79, 42, UsageUpstream},
		{"n 3, a choice's finish chunk again without its usage", head + strings.Replace(end(2), `"usage"`, `"x_usage"`, 1) + done, 3, 79, 42, UsageUpstream},
		{"one choice, its finish chunk twice", dsHead + dsEnd + dsEnd + done, 1, 6, 212, UsageUpstream},
		{"one choice, its finish chunk first without its usage", dsHead + dsNoUsage + dsEnd + done, 1, 6, 212, UsageUpstream},
		// Of one choice, a later end's count is the choice's latest, as
		// any later count is: nothing is summed, so nothing is counted
		// twice.
		{"one choice, an end with an early count, more output, its end", dsHead + dsEarly + dsMore + dsEnd + done, 1, 6, 212, UsageUpstream},
		{"one choice, an end with an early count, then its end", dsHead + dsEarly + dsEnd + done, 1, 6, 212, UsageUpstream},
		{"one choice, its end, then one without its usage", dsHead + dsEnd + dsNoUsage + done, 1, 6, 212, UsageUpstream},
	} {
		input := []byte(c.input)
		whole := runMeterPerPrompt(&SSEFramer{}, input, nil, newParser(APIChat), c.perPrompt)
		if r := whole.rec; r.ISL != c.isl || r.OSL != c.osl || r.UsageSource != c.source || whole.parseErrs != 0 {
			t.Fatalf("%s: isl %d osl %d (%v), parse errors %d; want %d %d (%v)", c.name, r.ISL, r.OSL, r.UsageSource, whole.parseErrs, c.isl, c.osl, c.source)
		}
		// One byte at a time, and cut in two at every byte of the end
		// (the finish chunks and [DONE]: what the repeats change).
		if got := runMeterPerPrompt(&SSEFramer{}, input, everyByte(len(input)), newParser(APIChat), c.perPrompt); !runsEqual(&got, &whole) {
			t.Fatalf("%s a byte at a time: %+v, want %+v", c.name, got.rec, whole.rec)
		}
		for k := max(len(input)-3*len(end(0))-3*len(dsEnd), 0); k <= len(input); k++ {
			if got := runMeterPerPrompt(&SSEFramer{}, input, []int{k}, newParser(APIChat), c.perPrompt); !runsEqual(&got, &whole) {
				t.Fatalf("%s cut at %d: %+v, want %+v", c.name, k, got.rec, whole.rec)
			}
		}
	}
	// A finish_reason of "" ends nothing it names (TGI's completions send
	// it on every chunk): a chunk with it repeats no end, so a count on
	// each such chunk (TGI's shape, given a running usage) is each taken.
	tgi := func(text, finish string, completion int) string {
		return `data: {"id":"","object":"text_completion","created":1727000000,"choices":[{"index":0,"text":"` + text + `","logprobs":null,"finish_reason":"` + finish + `"}],"model":"tgi","system_fingerprint":"2.2.0-native",` +
			`"usage":{"prompt_tokens":5,"completion_tokens":` + strconv.Itoa(completion) + `,"total_tokens":` + strconv.Itoa(5+completion) + `}}` + "\n\n"
	}
	input := []byte(tgi(" a", "", 1) + tgi(" b", "", 2) + tgi(" c", "length", 3) + done)
	whole := runMeter(input, nil, newParser(APICompletions))
	if r := whole.rec; r.ISL != 5 || r.OSL != 3 || r.UsageSource != UsageUpstream {
		t.Fatalf(`finish_reason "" on every chunk: isl %d osl %d (%v); want 5 3 (usage)`, r.ISL, r.OSL, r.UsageSource)
	}
	if got := runMeter(input, everyByte(len(input)), newParser(APICompletions)); !runsEqual(&got, &whole) {
		t.Fatalf(`finish_reason "" on every chunk, a byte at a time: %+v, want %+v`, got.rec, whole.rec)
	}
}

// llama.cpp answers a non-streamed chat or completions request of several
// tasks (several prompts, or n > 1 choices a prompt: a task per choice,
// numbered one prompt's after the other) with one object:
// server_routes::handle_completions_impl waits for every task's result
// (server_response_reader::wait_for_all, in index order) and, for an
// OpenAI-shaped answer of more than one, appends each other task's choice
// to the first task's object, whose usage and timings stay that first
// task's (server_task_result_cmpl_final::to_json_oaicompat, and
// to_json_oaicompat_chat for chat). That usage counts the first prompt
// and the first choice's output alone: the record keeps only what is the
// whole's, the prompt count when every choice is of the one prompt, and
// leaves the rest unknown. An answer of one task (a single object), and
// another engine's body of several choices (no timings: its usage counts
// them all), keep their usage.
func TestLlamaCppMergedChoicesBody(t *testing.T) {
	timings := func(prompt, predicted int) string {
		return `"timings":{"cache_n":0,"prompt_n":` + strconv.Itoa(prompt) + `,"prompt_ms":20.1,"prompt_per_token_ms":3.3,"prompt_per_second":298.5,"predicted_n":` + strconv.Itoa(predicted) + `,"predicted_ms":40.2,"predicted_per_token_ms":13.4,"predicted_per_second":74.6}`
	}
	usage := func(prompt, completion int) string {
		return `"usage":{"completion_tokens":` + strconv.Itoa(completion) + `,"prompt_tokens":` + strconv.Itoa(prompt) + `,"total_tokens":` + strconv.Itoa(prompt+completion) + `}`
	}
	text := func(i int, s, finish string) string {
		return `{"text":"` + s + `","index":` + strconv.Itoa(i) + `,"logprobs":null,"finish_reason":"` + finish + `"}`
	}
	// to_json_oaicompat of the first task, the later tasks' choices appended.
	completions := func(choices []string, prompt, completion int) string {
		return `{"choices":[` + strings.Join(choices, ",") + `],"created":1764000000,"model":"gpt-3.5-turbo","system_fingerprint":"b7300-0a1b2c3d","object":"text_completion",` +
			usage(prompt, completion) + `,"id":"chatcmpl-x",` + timings(prompt, completion) + `}`
	}
	message := func(i int, s string) string {
		return `{"finish_reason":"stop","index":` + strconv.Itoa(i) + `,"message":{"role":"assistant","content":"` + s + `"}}`
	}
	chat := func(choices []string, prompt, completion int) string {
		return `{"choices":[` + strings.Join(choices, ",") + `],"created":1764000000,"model":"gpt-3.5-turbo","system_fingerprint":"b7300-0a1b2c3d","object":"chat.completion",` +
			usage(prompt, completion) + `,"id":"chatcmpl-x",` + timings(prompt, completion) + `}`
	}
	for _, c := range []struct {
		name      string
		api       API
		body      string
		perPrompt int
		choices   uint16 // FirstChoiceUsage
		isl, osl  int
		source    UsageSource
	}{
		// Two prompts of 6 and 7 tokens answered in 3 and 5: the usage is
		// the first's.
		{"two prompts", APICompletions, completions([]string{text(0, " Paris.", "stop"), text(1, " Rome, of course.", "length")}, 6, 3), 1, 2, Unknown, Unknown, UsageNone},
		// One prompt of 6 tokens, n 2: its count is the whole's.
		{"one prompt, n 2", APICompletions, completions([]string{text(0, " Paris.", "stop"), text(1, " Lyon.", "stop")}, 6, 3), 2, 2, 6, Unknown, UsageUpstream},
		{"one prompt, n_cmpl 3", APICompletions, completions([]string{text(0, " a", "length"), text(1, " b", "length"), text(2, " c", "length")}, 6, 1), 3, 3, 6, Unknown, UsageUpstream},
		// Two prompts, n 2: four choices, the first two the first prompt's.
		{"two prompts, n 2", APICompletions, completions([]string{text(0, " a", "length"), text(1, " b", "length"), text(2, " c", "length"), text(3, " d", "length")}, 6, 1), 2, 4, Unknown, Unknown, UsageNone},
		// The choices per prompt not known (64 or more): nor is the prompt's count.
		{"n unknown", APICompletions, completions([]string{text(0, " a", "length"), text(1, " b", "length")}, 6, 1), 64, 2, Unknown, Unknown, UsageNone},
		{"chat, n 2", APIChat, chat([]string{message(0, "Hi"), message(1, "Hello there")}, 10, 2), 2, 2, 10, Unknown, UsageUpstream},
		{"chat, n 2, on /api/chat", APIOllamaChat, chat([]string{message(0, "Hi"), message(1, "Hello there")}, 10, 2), 2, 2, 10, Unknown, UsageUpstream},
		// One task: its object alone ("if single request, return single
		// object instead of array"), its usage the whole's.
		{"one task", APICompletions, completions([]string{text(0, " Paris.", "stop")}, 6, 3), 1, 0, 6, 3, UsageUpstream},
		{"one task, chat", APIChat, chat([]string{message(0, "Hi")}, 10, 2), 1, 0, 10, 2, UsageUpstream},
		// vLLM's answer of two choices: one usage for both.
		{"no timings", APICompletions, `{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[` + text(0, " a", "length") + `,` + text(1, " b", "length") + `],"usage":{"prompt_tokens":6,"total_tokens":8,"completion_tokens":2}}`, 2, 0, 6, 2, UsageUpstream},
	} {
		var info EventInfo
		if err := ParseResponseBody(c.api, []byte(c.body), 1, &info); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !info.HasUsage || !info.Token || !info.Content || !info.Finish || info.FirstChoiceUsage != c.choices {
			t.Fatalf("%s: %+v, want usage, token, content, finish, first choice's usage of %d", c.name, info, c.choices)
		}
		var m Meter
		var rec Record
		rec.Reset()
		m.Start(testT0)
		m.SetChoicesPerPrompt(c.perPrompt)
		m.ObserveBody(&info, at(ms(800)))
		m.Finish(&rec)
		if rec.ISL != c.isl || rec.OSL != c.osl || rec.UsageSource != c.source || rec.E2E != ms(800) {
			t.Errorf("%s: isl %d osl %d (%v) e2e %v; want %d %d (%v)", c.name, rec.ISL, rec.OSL, rec.UsageSource, rec.E2E, c.isl, c.osl, c.source)
		}
	}
}

// TGI's non-streamed answer (/generate, and / without "stream") has no
// prompt count in its body, and no output count without details; its head
// has both, x-prompt-tokens and x-generated-tokens (router/src/server.rs,
// generate_internal). The record takes them where the body lacks them; a
// count in the body wins, each count apart; a header that is not a plain
// non-negative integer is no count.
func TestObserveHead(t *testing.T) {
	const (
		plain   = `{"generated_text":" Paris is the capital."}`
		details = `{"generated_text":" Paris.","details":{"finish_reason":"eos_token","generated_tokens":6,"seed":null,"prefill":[],"tokens":[]}}`
		sglang  = `{"text":" Paris.","meta_info":{"id":"a","finish_reason":{"type":"stop","matched":2},"prompt_tokens":7,"completion_tokens":3}}`
	)
	for _, c := range []struct {
		name, body     string
		prompt, output string // the headers' values
		isl, osl       int
		source         UsageSource
	}{
		{"no details", plain, "9", "6", 9, 6, UsageUpstream},
		{"in an array", "[" + plain + "]", "9", "6", 9, 6, UsageUpstream},
		{"details win", details, "9", "7", 9, 6, UsageUpstream},
		{"the body's counts win", sglang, "9", "8", 7, 3, UsageUpstream},
		{"no header", plain, "", "", Unknown, Unknown, UsageNone},
		{"only the prompt's", plain, "9", "", 9, Unknown, UsageUpstream},
		{"zero", plain, "0", "000", 0, 0, UsageUpstream},
		{"not plain", plain, "+9", "6 ", Unknown, Unknown, UsageNone},
		{"not counts", plain, "-1", "1.5", Unknown, Unknown, UsageNone},
		{"too large", details, "2147483648", "99999999999999999999", Unknown, 6, UsageUpstream},
		{"the largest", plain, "2147483647", "1e3", 2147483647, Unknown, UsageUpstream},
		{"a body not read", "{", "9", "6", 9, 6, UsageUpstream},
	} {
		var m Meter
		var info EventInfo
		m.Start(testT0)
		m.ObserveHead(HeaderCount([]byte(c.prompt)), HeaderCount([]byte(c.output)))
		if err := ParseResponseBody(APITGI, []byte(c.body), 1, &info); err != nil {
			m.ObserveBody(nil, stamp(0))
		} else {
			m.ObserveBody(&info, stamp(0))
		}
		var rec Record
		m.Finish(&rec)
		if rec.ISL != c.isl || rec.OSL != c.osl || rec.UsageSource != c.source {
			t.Errorf("%s: isl %d osl %d (%v), want %d %d (%v)", c.name, rec.ISL, rec.OSL, rec.UsageSource, c.isl, c.osl, c.source)
		}
	}
	for _, n := range []int{-2, maxCount + 1} {
		var m Meter
		var rec Record
		m.Start(testT0)
		m.ObserveHead(n, n)
		m.ObserveBody(nil, stamp(0))
		if m.Finish(&rec); rec.ISL != Unknown || rec.OSL != Unknown || rec.UsageSource != UsageNone {
			t.Errorf("ObserveHead(%d): isl %d osl %d (%v)", n, rec.ISL, rec.OSL, rec.UsageSource)
		}
	}
}

// SGLang answers a request of k prompts of n samples each (its
// sampling_params' n) with an array of k·n outputs, each prompt's n one
// after the other (tokenizer_manager.py, _handle_batch_request: for each
// prompt in turn, n copies sent, their outputs gathered in that order),
// every one with its prompt's meta_info.prompt_tokens: the ISL counts each
// prompt once, on its first output, and the OSL every output.
func TestSGLangOutputsPerPrompt(t *testing.T) {
	out := func(id string, prompt, completion int) string {
		return `{"text":" x","output_ids":[87],"meta_info":{"id":"` + id + `","finish_reason":{"type":"length","length":` + strconv.Itoa(completion) +
			`},"prompt_tokens":` + strconv.Itoa(prompt) + `,"weight_version":"default","completion_tokens":` + strconv.Itoa(completion) + `,"cached_tokens":0,"e2e_latency":0.1}}`
	}
	arr := func(outs ...string) string { return "[" + strings.Join(outs, ",") + "]" }
	two := arr(out("a1", 7, 3), out("a2", 7, 4), out("b1", 6, 5), out("b2", 6, 6)) // 2 prompts, n 2
	for _, c := range []struct {
		name      string
		api       API
		body      string
		perPrompt int
		isl, osl  int
	}{
		{"2 prompts, n 2", APISGLang, two, 2, 13, 18},
		{"one prompt, n 3", APISGLang, arr(out("a1", 7, 3), out("a2", 7, 4), out("a3", 7, 1)), 3, 7, 8},
		{"2 prompts, n 1", APISGLang, arr(out("a", 7, 3), out("b", 6, 5)), 1, 13, 8},
		{"one prompt, n 1 (not an array)", APISGLang, out("a", 7, 3), 1, 7, 3},
		{"n not known (64 or more)", APISGLang, two, Unknown, Unknown, 18},
		{"one output, n not known", APISGLang, arr(out("a", 7, 3)), Unknown, 7, 3},
		{"not a whole number of prompts' outputs", APISGLang, arr(out("a1", 7, 3), out("a2", 7, 4), out("b1", 6, 5)), 2, Unknown, 12},
		{"run by SGLang on TGI's route", APITGI, two, 2, 13, 18},
	} {
		var info EventInfo
		if err := ParseResponseBody(c.api, []byte(c.body), c.perPrompt, &info); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var m Meter
		var rec Record
		m.Start(testT0)
		m.SetChoicesPerPrompt(c.perPrompt)
		if c.perPrompt == Unknown {
			m.SetChoicesPerPrompt(64)
		}
		if got := m.ChoicesPerPrompt(); got != c.perPrompt {
			t.Fatalf("%s: ChoicesPerPrompt %d", c.name, got)
		}
		m.ObserveBody(&info, stamp(0))
		m.Finish(&rec)
		if rec.ISL != c.isl || rec.OSL != c.osl || rec.UsageSource != UsageUpstream {
			t.Errorf("%s: isl %d osl %d (%v), want %d %d (usage)", c.name, rec.ISL, rec.OSL, rec.UsageSource, c.isl, c.osl)
		}
	}
}

// SGLang streams a request of several prompts or samples as the events of
// its outputs, interleaved, each naming its output ("index", prompt i's
// sample j at i·n + j) with that output's running count, and the output's
// total on its finishing event; no count of the whole comes. The record
// sums the totals once every output that came had its finishing event and
// [DONE] came: the OSL every output's, the ISL each prompt's once, on its
// first output (by the request's n). It estimated the OSL and left the ISL
// unknown. Otherwise (cut short, an output's end missing or without its
// counts, an error) it still does. Whatever the cuts.
func TestSGLangBatchStream(t *testing.T) {
	batch := string(readFixture(t, "sglang/sglang-src-generate-stream-batch.txt"))
	evs := strings.SplitAfter(batch, "\n\n")
	evs = evs[:len(evs)-1] // the empty string after the last
	if len(evs) != 11 || evs[10] != "data: [DONE]\n\n" {
		t.Fatalf("the fixture has %d events", len(evs))
	}
	without := func(k ...int) string {
		var b strings.Builder
		for i, e := range evs {
			if !slices.Contains(k, i) {
				b.WriteString(e)
			}
		}
		return b.String()
	}
	// twice is the batch with event k sent again after event after.
	twice := func(k, after int) string {
		var b strings.Builder
		for i, e := range evs {
			b.WriteString(e)
			if i == after {
				b.WriteString(evs[k])
			}
		}
		return b.String()
	}
	single := string(readFixture(t, "sglang/sglang-src-generate-stream.txt"))
	type want struct {
		isl, osl int
		source   UsageSource
		perEvent []int
	}
	estimate := want{Unknown, 10, UsageEstimate, nil}
	for _, c := range []struct {
		name      string
		input     string
		perPrompt int
		want      want
	}{
		{"whole, n 2", batch, 2, want{13, 10, UsageUpstream, nil}},
		{"read as 4 prompts of one sample", batch, 1, want{26, 10, UsageUpstream, nil}},
		{"n 64 or more", batch, 64, want{Unknown, 10, UsageUpstream, nil}},
		{"cut before [DONE]", without(10), 2, estimate},
		// output 2's last event (its finish) missing: 9 events with content
		{"an output's end missing", without(9), 2, want{Unknown, 9, UsageEstimate, nil}},
		// output 2's end without its output count: the prompts' counts
		// are whole, the output is estimated
		{"an output's end without its output count", strings.Replace(batch, `"completion_tokens":4,`, ``, 1), 2, want{13, 10, UsageEstimate, nil}},
		{"an output's end without counts", without(9, 10) + strings.Replace(strings.Replace(evs[9], `"prompt_tokens":6,`, ``, 1), `"completion_tokens":4,`, ``, 1) + evs[10], 2, estimate},
		{"an error before [DONE]", without(9, 10) + `data: {"error":{"message":"The request is aborted."}}` + "\n\n" + "data: [DONE]\n\n", 2, want{Unknown, 9, UsageEstimate, nil}},
		// SGLang's error ends its batch (http_server.py: the ValueError
		// of one output's generator, then [DONE]): an output that had
		// not come yet (output 2, its prompt's first) ended without its
		// counts, though every output that came had its finishing event.
		{"an error before [DONE], every output that came ended", without(1, 6, 8, 9, 10) + `data: {"error":{"message":"The request is aborted."}}` + "\n\n" + "data: [DONE]\n\n", 2, want{Unknown, 6, UsageEstimate, nil}},
		{"an output from index 63", strings.ReplaceAll(batch, `"index":3}`, `"index":63}`), 2, estimate},
		// an output's finishing event sent twice (output 1's, a prompt's
		// second; output 3's, whose only event it is; output 0's, a
		// prompt's first, its count 7 and 3): its total is taken once
		{"an output's finishing event twice", twice(5, 7), 2, want{13, 10, UsageUpstream, nil}},
		{"an output's only event twice", twice(3, 9), 2, want{13, 10, UsageUpstream, nil}},
		{"a prompt's first output's end twice, back to back", twice(7, 7), 2, want{13, 10, UsageUpstream, nil}},
		// a batch of one prompt and one sample: one output, metered as
		// one stream is (its running counts, tokens per event)
		{"one output", strings.ReplaceAll(single, "}}\n", `},"index":0}`+"\n"), 1, want{7, 4, UsageUpstream, []int{1, 1, 1, 1}}},
	} {
		input := []byte(c.input)
		run := func(cuts []int) meterRun {
			return runMeterPerPrompt(&SSEFramer{}, input, cuts, newParser(APISGLang), c.perPrompt)
		}
		whole := run(nil)
		w := c.want
		if whole.rec.ISL != w.isl || whole.rec.OSL != w.osl || whole.rec.UsageSource != w.source || !slices.Equal(whole.rec.TokensPerEvent, w.perEvent) || whole.parseErrs != 0 {
			t.Errorf("%s: isl %d osl %d (%v) tokens per event %v, %d parse errors; want %d %d (%v) %v",
				c.name, whole.rec.ISL, whole.rec.OSL, whole.rec.UsageSource, whole.rec.TokensPerEvent, whole.parseErrs, w.isl, w.osl, w.source, w.perEvent)
		}
		rng := rand.New(rand.NewPCG(7, uint64(len(input))))
		for _, cuts := range [][]int{everyByte(len(input)), randomCuts(rng, len(input)), randomCuts(rng, len(input)), {len(input) / 3, len(input) / 2}} {
			if got := run(cuts); !runsEqual(&got, &whole) {
				t.Fatalf("%s, cuts %v: %+v, want %+v", c.name, cuts, got.rec, whole.rec)
			}
		}
	}
}
