package proxy

import (
	"strings"
	"testing"

	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/meter"
	"github.com/valyala/fastjson"
)

// outputsOf counts what each engine generates for a body: n choices, best_of
// candidates, several prompts, and their product, read as the engines read
// them (vLLM's CompletionRequest, llama.cpp's tokenize_input_prompts and
// n_cmpl, TGI's parameters.best_of, SGLang's GenerateReqInput batch and
// sampling_params.n), from a body read whole and from one read shallow
// (every value past 8 bytes emptied but what is read).
func TestOutputsOf(t *testing.T) {
	long := strings.Repeat("x", 64)
	for _, c := range []struct {
		api  meter.API
		body string
		want int64
	}{
		// Chat: n (vLLM, SGLang, OpenAI), n_cmpl (llama.cpp), best_of
		// (vLLM V0): the largest.
		{meter.APIChat, `{"messages":[{"role":"user","content":"hi"}]}`, 1},
		{meter.APIChat, `{"n":8,"messages":[]}`, 8},
		{meter.APIChat, `{"n":"  8 ","messages":[]}`, 8}, // pydantic's lax int
		{meter.APIChat, `{"n":"           8           ","messages":[]}`, 8},
		{meter.APISGLang, `{"text":"a","sampling_params":{"n":"           8           "}}`, 8},
		{meter.APIChat, `{"n":2.9}`, 2},
		{meter.APIChat, `{"n":0}`, 1},
		{meter.APIChat, `{"n":-3}`, 1},
		{meter.APIChat, `{"n":null}`, 1},
		{meter.APIChat, `{"n":"eight"}`, 1},
		{meter.APIChat, `{"n":true}`, 1},
		{meter.APIChat, `{"n":[8]}`, 1},
		{meter.APIChat, `{"n_cmpl":1,"n":8}`, 8},
		{meter.APIChat, `{"n_cmpl":6,"n":1}`, 6},
		{meter.APIChat, `{"best_of":5,"n":2}`, 5},
		{meter.APIChat, `{"n":1e9}`, 1e9},
		{meter.APIChat, `{"n":1e300}`, maxCount},
		{meter.APIChat, `{"n":"99999999999999999999999999"}`, maxCount},
		// A string as pydantic reads an int (vLLM's, SGLang's): trimmed of
		// Unicode's white space, a sign, leading zeros, underscores
		// between digits, a fraction of zeros ("8." in older releases).
		{meter.APIChat, `{"n":"+8"}`, 8},
		{meter.APIChat, `{"n":"8.0"}`, 8},
		{meter.APIChat, `{"n":"8.000"}`, 8},
		{meter.APIChat, `{"n":"8."}`, 8},
		{meter.APIChat, `{"n":"1_000"}`, 1000},
		{meter.APIChat, `{"n":"0_0_8"}`, 8},
		{meter.APIChat, `{"n":"\u00a0\u30008\u2003\u000b"}`, 8},
		{meter.APIChat, `{"n":" +0008.0 "}`, 8},
		{meter.APIChat, `{"n":"-8"}`, 1},
		{meter.APIChat, `{"n":"8.5"}`, 1},
		{meter.APIChat, `{"n":"8e1"}`, 1},
		{meter.APIChat, `{"n":"+"}`, 1},
		{meter.APIChat, `{"n":"."}`, 1},
		{meter.APIChat, `{"n":"8 8"}`, 1},
		// Completions: prompts × choices.
		{meter.APICompletions, `{"prompt":"hi"}`, 1},
		{meter.APICompletions, `{"prompt":"hi","n":3}`, 3},
		{meter.APICompletions, `{"prompt":"hi","best_of":5,"n":2}`, 5},
		{meter.APICompletions, `{"prompt":["a","b","c"]}`, 3},
		{meter.APICompletions, `{"prompt":["a","b","c"],"n":4}`, 12},
		{meter.APICompletions, `{"prompt":[1,2,3,4]}`, 1},                 // token ids: one prompt
		{meter.APICompletions, `{"prompt":[[1,2],[3],[4,5,6]],"n":2}`, 6}, // token lists
		{meter.APICompletions, `{"prompt":["a",[1,2]]}`, 2},               // llama.cpp: a string, then ids
		{meter.APICompletions, `{"prompt":[12,"a",34]}`, 1},               // llama.cpp: one mixed prompt
		{meter.APICompletions, `{"prompt":{"prompt_string":"a","multimodal_data":[]}}`, 1},
		{meter.APICompletions, `{"prompt":[]}`, 1},
		{meter.APICompletions, `{"prompt":null}`, 1},
		{meter.APICompletions, `{"prompt_embeds":["` + long + `","` + long + `"],"n":2}`, 4},
		{meter.APICompletions, `{"prompt":["a"],"prompt_embeds":"` + long + `"}`, 2},
		{meter.APICompletions, `{"pr\u006fmpt":["a","b"]}`, 2},
		{meter.APICompletions, `{"x":[` + strings.Repeat(`"`+long+`",`, 100) + `1],"prompt":["` + long + `","` + long + `"],"y":1}`, 2},
		{meter.APICompletions, `{"prompt":["` + strings.Repeat(`a","`, 1000) + `b"],"n":1e13}`, maxCount},
		// llama.cpp's /completion: n_cmpl, else n, for each prompt.
		{meter.APILlamaCpp, `{"prompt":"hi","n_predict":9}`, 1},
		{meter.APILlamaCpp, `{"prompt":["a","b"],"n_cmpl":3}`, 6},
		{meter.APILlamaCpp, `{"prompt":["a","b"],"n_cmpl":1,"n":3}`, 2},
		{meter.APILlamaCpp, `{"prompt":"a","n":4}`, 4},
		// An n_cmpl that is not a number is no count to llama.cpp: older
		// servers read n instead (json_value's default), newer ones refuse
		// the request.
		{meter.APILlamaCpp, `{"prompt":"a","n_cmpl":"2","n":8}`, 8},
		{meter.APILlamaCpp, `{"prompt":"a","n_cmpl":"9","n":2}`, 9},
		{meter.APILlamaCpp, `{"prompt":"a","n_cmpl":null,"n":3}`, 3},
		// TGI: one input, parameters.best_of sequences.
		{meter.APITGI, `{"inputs":"hi","parameters":{"max_new_tokens":9}}`, 1},
		{meter.APITGI, `{"inputs":"hi","parameters":{"best_of":4,"do_sample":true}}`, 4},
		{meter.APITGI, `{"inputs":"hi","parameters":{"stop":["` + long + `"],"best_of":3}}`, 3},
		{meter.APITGI, `{"inputs":"hi","n":7,"best_of":7}`, 1}, // TGI reads neither
		// SGLang: its batch, sampling_params.n times.
		{meter.APISGLang, `{"text":"hi"}`, 1},
		{meter.APISGLang, `{"text":["a","b","c"]}`, 3},
		{meter.APISGLang, `{"text":"a","sampling_params":{"n":4}}`, 4},
		{meter.APISGLang, `{"text":["a","b"],"sampling_params":{"n":3,"stop":["` + long + `"]}}`, 6},
		{meter.APISGLang, `{"text":["a","b"],"sampling_params":[{"n":2},{"n":2,"stop":["` + long + `"]}]}`, 4},
		{meter.APISGLang, `{"input_ids":[1,2,3]}`, 1},
		{meter.APISGLang, `{"input_ids":[[1],[2],[3]],"sampling_params":{"n":2}}`, 6},
		{meter.APISGLang, `{"input_embeds":[[0.1,0.2],[0.3,0.4]]}`, 1},
		{meter.APISGLang, `{"input_embeds":[[[0.1]],[[0.2]]]}`, 2},
		{meter.APISGLang, `{"text":null,"input_ids":[[1],[2]]}`, 2},
		{meter.APISGLang, `{"text":["a","b"],"input_ids":[[1],[2],[3]]}`, 2}, // text first
		// Both engines' inputs: the larger count.
		{meter.APITGI, `{"inputs":"a","parameters":{"best_of":2},"text":["a","b","c"]}`, 3},
		{meter.APISGLang, `{"inputs":"a","parameters":{"best_of":5},"text":["a","b","c"]}`, 5},
		// vLLM's chat batch: its conversations (messages' elements, each
		// a list), times n; a messages that is no list, one.
		{meter.APIChatBatch, `{"messages":[[{"role":"user","content":"hi"}],[{"role":"user","content":"` + long + `"}],[]]}`, 3},
		{meter.APIChatBatch, `{"n":2,"messages":[[],[]]}`, 4},
		{meter.APIChatBatch, `{"best_of":3,"messages":[[]]}`, 3},
		{meter.APIChatBatch, `{"messages":[{"role":"user","content":"hi"},{"role":"user","content":"` + long + `"}]}`, 2},
		{meter.APIChatBatch, `{"messages":[]}`, 1},
		{meter.APIChatBatch, `{"messages":"hi"}`, 1},
		{meter.APIChatBatch, `{"messages":null}`, 1},
		{meter.APIChatBatch, `{"n":4}`, 1 * 4},
		{meter.APIChatBatch, `{"messages":[` + strings.Repeat("[],", 9999) + `[]]}`, 10000},
		// No n: Ollama, the Responses and Messages APIs.
		{meter.APIOllamaGenerate, `{"prompt":["a","b"],"n":4}`, 1},
		{meter.APIOllamaChat, `{"messages":[],"n":4}`, 1},
		{meter.APIResponses, `{"input":"hi","n":4}`, 1},
		{meter.APIMessages, `{"messages":[],"n":4}`, 1},
	} {
		parsedBothWays(t, c.body, func(v *fastjson.Value, shallow bool) {
			if got := outputsOf(c.api, v, []byte(c.body)); got != c.want {
				t.Errorf("%v %.120s (shallow %v): %d outputs, want %d", c.api, c.body, shallow, got, c.want)
			}
			// Read whole, the parse holds every list: the body's text is
			// not walked again (it doubled the cost of reading an ordinary
			// completions body).
			if got := outputsOf(c.api, v, nil); !shallow && got != c.want {
				t.Errorf("%v %.120s: %d outputs from the parse alone, want %d", c.api, c.body, got, c.want)
			}
		})
	}
}

// streamChoices counts the choices a chat or completions stream carries as
// few as any engine would send: the smaller of n as vLLM reads it and
// llama.cpp's n_cmpl (else n), times the prompts (of "prompt", else of
// vLLM's "prompt_embeds"); best_of is no stream's; 1 for other APIs.
// The meter waits for that many choices' ends: one too many would judge a
// whole stream cut.
func TestStreamChoices(t *testing.T) {
	long := strings.Repeat("x", 64)
	for _, c := range []struct {
		api  meter.API
		body string
		want int64
	}{
		{meter.APIChat, `{"messages":[]}`, 1},
		{meter.APIChat, `{"n":2,"messages":[]}`, 2},
		{meter.APIChat, `{"n":"2","messages":[]}`, 1},           // llama.cpp reads no string: one choice
		{meter.APIChat, `{"n_cmpl":4,"n":2}`, 2},                // vLLM streams 2, llama.cpp 4
		{meter.APIChat, `{"n_cmpl":2}`, 1},                      // vLLM streams 1
		{meter.APIChat, `{"n_cmpl":3,"n":3}`, 3},                // both 3
		{meter.APIChat, `{"best_of":4,"n":2}`, 2},               // best_of is no stream's
		{meter.APIChat, `{"n":2000000,"messages":[]}`, 1 << 20}, // llama.cpp's reading, capped
		{meter.APICompletions, `{"prompt":"a","n":2}`, 2},
		{meter.APICompletions, `{"prompt":["a","b","` + long + `"],"n":2}`, 6},
		{meter.APICompletions, `{"prompt":[1,2,3]}`, 1},                       // token ids: one prompt
		{meter.APICompletions, `{"prompt":[[1],[2]],"n":3}`, 6},               // token lists: one each
		{meter.APICompletions, `{"prompt_embeds":["x","y"]}`, 2},              // vLLM's alone
		{meter.APICompletions, `{"prompt":"a","prompt_embeds":["x","y"]}`, 1}, // llama.cpp reads the prompt alone
		{meter.APILlamaCpp, `{"prompt":["a","b"],"n_cmpl":2}`, 1},
		{meter.APISGLang, `{"text":["a","b"],"sampling_params":{"n":2}}`, 1},
		{meter.APIOllamaChat, `{"messages":[],"n":4}`, 1},
	} {
		parsedBothWays(t, c.body, func(v *fastjson.Value, shallow bool) {
			if got := streamChoices(c.api, v, []byte(c.body)); got != c.want {
				t.Errorf("%v %.120s (shallow %v): %d choices, want %d", c.api, c.body, shallow, got, c.want)
			}
		})
	}
}

// parsedBothWays calls fn with body parsed whole, then shallow as a large
// body is (every value over 8 bytes copied as the shallow copy does).
func parsedBothWays(t *testing.T, body string, fn func(v *fastjson.Value, shallow bool)) {
	t.Helper()
	for _, shallow := range []bool{false, true} {
		func() {
			defer func(from, keep int) { shallowFrom, keepWhole = from, keep }(shallowFrom, keepWhole)
			if shallow {
				shallowFrom, keepWhole = -1, 8
			}
			var p fastjson.Parser
			ri, v := parseRequest(&p, []byte(body))
			if !ri.valid {
				t.Fatalf("%s: not read", body)
			}
			fn(v, shallow)
		}()
	}
}

// Counting the outputs (and a stream's choices) is on every metered
// request's way: it allocates nothing, prompts walked in the body's text
// included.
func TestOutputsOfAllocatesNothing(t *testing.T) {
	for _, c := range []struct {
		api  meter.API
		body string
	}{
		{meter.APIChat, `{"model":"m","n":"2","best_of":3,"messages":[{"role":"user","content":"hi"}]}`},
		{meter.APICompletions, `{"model":"m","n":2,"prompt":["a","b",[1,2]],"prompt_embeds":["x"]}`},
		{meter.APILlamaCpp, `{"prompt":[[1,2],[3]],"n_cmpl":2}`},
		{meter.APITGI, `{"inputs":"a","parameters":{"best_of":2},"text":["a","b"]}`},
		{meter.APISGLang, `{"input_embeds":[[[0.1]],[[0.2]]],"sampling_params":[{"n":2},{"n":2}]}`},
		{meter.APIChatBatch, `{"model":"m","n":1,"messages":[[{"role":"user","content":"hi"}],[]]}`},
		// Over shallowFrom: the conversations are counted in the text.
		{meter.APIChatBatch, `{"model":"m","messages":[` + strings.Repeat("[],", shallowFrom) + `[]]}`},
	} {
		body := []byte(c.body)
		var p fastjson.Parser
		_, v := parseRequest(&p, body)
		if n := testenv.AllocsPerRun(100, func() { outputsOf(c.api, v, body); streamChoices(c.api, v, body) }); n != 0 {
			t.Errorf("%v %s: %v allocations", c.api, c.body, n)
		}
	}
}
