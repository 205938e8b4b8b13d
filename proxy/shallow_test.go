package proxy

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/valyala/fastjson"
)

// A large request body is read without building its values: a 1 MiB body
// of half a million small values (a probe sent 16 MiB of them: 2.3 GB of
// heap and a minute of both CPUs before the engine saw it) costs the
// gateway what its rewritten copy costs, and reads as the full parse reads
// it.
func TestLargeBodyParsedShallow(t *testing.T) {
	const head = `{"model":"m","stream":true,"stream_options":{"include_usage":false},"max_tokens":7,"messages":[{"role":"user","content":"hi"}],"x":[`
	body := []byte(head + strings.Repeat("0,", (1<<20-len(head))/2) + "0]}")
	var (
		p   fastjson.Parser
		ri  reqInfo
		dup string
		out []byte
	)
	alloc, took := allocatedBy(func() {
		var v *fastjson.Value
		ri, v = parseRequest(&p, body)
		dup = duplicateKey(v)
		out = injectUsage(nil, body, v)
	})
	if alloc > 4*uint64(len(body)) {
		t.Errorf("reading and rewriting a %d-byte body allocated %d bytes (%.0f times its size), in %v", len(body), alloc, float64(alloc)/float64(len(body)), took)
	}
	if !ri.valid || ri.model != "m" || !ri.stream || ri.maxTokens != 7 || ri.usage != usageNotAsked || dup != "" {
		t.Fatalf("read %+v, duplicate %q", ri, dup)
	}
	if want := strings.Replace(string(body), `"include_usage":false`, `"include_usage":true`, 1); string(out) != want {
		t.Fatalf("rewritten body: %.200s", out)
	}
}

// So is a large body's list of SGLang sampling_params (one a prompt),
// whose elements newTokens and sglangOutputs read each: a copy of every
// one cost fastjson 147 times the body (1.7 GB and 2 s for 12 MB of {}),
// where the copy keeps the elements that decide the reads (the first
// without a limit, the largest limit, the largest n, the first naming a
// member twice). The reads agree with the full parse (FuzzShallowRequest).
func TestLargeSamplingParamsParsedShallow(t *testing.T) {
	for _, c := range []struct {
		el     string
		tokens int // the largest max_new_tokens, or 0 (the default) when one has none
	}{
		{`{},`, 0},
		{`{"max_new_tokens":7,"n":2,"stop":["x"]},`, 9},
		{`7,`, 0},
	} {
		head := `{"text":"a","sampling_params":[{"max_new_tokens":9,"n":1},`
		tail := `{"n":"3","max_new_tokens":8}]}`
		body := []byte(head + strings.Repeat(c.el, (1<<20-len(head))/len(c.el)) + tail)
		var (
			p       fastjson.Parser
			ri      reqInfo
			v       *fastjson.Value
			outputs int64
		)
		alloc, took := allocatedBy(func() {
			ri, v = parseRequest(&p, body)
			nativeRequest(meter.APISGLang, v, &ri)
			outputs = outputsOf(meter.APISGLang, v, body)
		})
		if alloc > 4*uint64(len(body)) {
			t.Errorf("%s: reading a %d-byte body allocated %d bytes (%.0f times its size), in %v", c.el, len(body), alloc, float64(alloc)/float64(len(body)), took)
		}
		if !ri.valid || ri.maxTokens != c.tokens || outputs != 3 || paramsDuplicateKey(v, ri.paramsDupAt) != "" {
			t.Errorf("%s: max_new_tokens %d, %d outputs, want %d and 3", c.el, ri.maxTokens, outputs, c.tokens)
		}
	}
}

// allocatedBy runs f once and returns the bytes it allocated (the
// collector run first) and the time it took.
func allocatedBy(f func()) (uint64, time.Duration) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	f()
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, took
}

// shallowSeeds are bodies whose shallow reading must agree with the full
// one: escaped names, duplicates, large values of every type where the
// reads look, nesting at fastjson's limit and past it, fastjson's lenient
// numbers, broken text.
var shallowSeeds = []string{
	`{"mo\u0064el":"x","stream":true}`,
	`{"model":"a","model":"b"}`,
	`{"model":"a","mo\u0064el":"b"}`,
	`{"stream_options":{"include_usage":false,"continuous_usage_stats":true,"junk":[1,2,3,4,5,6,7,8,9]},"stream":true}`,
	`{"stream_options":{"include_usage":false,"include_usage":true}}`,
	`{"stream_options":{"incl\u0075de_usage":false,"x":{"a":[1,2,3,4,5,6]}},"stream":true}`,
	`{"stream_options":{"include_usage":[1,2,3,4,5,6,7,8],"continuous_usage_stats":"aaaaaaaaaaa"}}`,
	`{"stream_options":{},"stream":true}`,
	`{"stream_options":{ },"stream":true,"messages":[[1,2,3,4,5,6,7,8,9,10]]}`,
	`{"stream_options":null,"stream":true,"prompt":"aaaaaaaaaaaaaaaa"}`,
	`{"stream_options":"yes","stream":true}`,
	`{"model":"a very long model name indeed","max_tokens":12,"max_completion_tokens":[1,2,3,4,5,6,7]}`,
	`{"model":[1,2,3,4,5,6,7,8,9],"stream":{"a":1,"b":2,"c":3},"background":"truetruetrue"}`,
	`{"a":nan,"b":-Inf,"c":+inf,"d":1e5,"e":-0.5,"f":NaN}`,
	`{"a":"\\\"","b":"\\\\\"x","c":"\\"}`,
	`{"a":1} x`, `{"a":1,}`, `{"a" 1}`, `{"a":1`, `{"a":tru}`, `{"a":nul}`, `{,}`, `{`, `}`, ` `, ``,
	`[` + strings.Repeat(`[`, 298) + strings.Repeat(`]`, 299),
	`[` + strings.Repeat(`[`, 299) + strings.Repeat(`]`, 300),
	`{"a":` + strings.Repeat(`{"a":`, 298) + `1` + strings.Repeat(`}`, 299),
	`{"a":` + strings.Repeat(`{"a":`, 299) + `1` + strings.Repeat(`}`, 300),
	`{"a":` + strings.Repeat(`[`, 310) + `x`,
	`{"a":[1,2,` + strings.Repeat(`[`, 310),
	`{"stream_options":` + strings.Repeat(`{"a":`, 299) + `1` + strings.Repeat(`}`, 299) + `}`,
	// The output limit each route's engines read (routeLimit): names
	// some engines ignore, null, 0, -1, a string, a fraction.
	`{"max_tokens":1,"max_output_tokens":100000,"input":"aaaaaaaaaaaaaaaaaaaaaaa"}`,
	`{"max_completion_tokens":1,"max_tokens":4000,"n_predict":null,"prompt":"aaaaaaaaaaaaaaaaaa"}`,
	`{"max_completion_tokens":0,"max_tokens":4000,"n_predict":"9","messages":[1,2,3,4,5,6,7,8,9]}`,
	`{"max_completion_tokens":null,"max_tokens":-1,"n_predict":4000.5,"max_output_tokens":[1,2,3,4]}`,
	`{"max_tokens":"300","n_predict":-1,"max_completion_tokens":"aaaaaaaaaaaaaaaaaaaaaaaa"}`,
	// Ollama's output limit and the names options holds.
	`{"model":"m","options":{"num_predict":500,"stop":["aaaaaaaa","bbbbbbbb"]}}`,
	`{"model":"m","options":{"num_predict":5,"num_predict":900000,"stop":["aaaaaaaa"]}}`,
	`{"model":"m","opti\u006fns":{"num_predict":500,"stop":["aaaaaaaa"]}}`,
	// What echo makes the engine send back: the last message.
	`{"echo":true,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello there"}]}`,
	`{"echo":true,"messages":[{"role":"assistant","content":[{"type":"text","text":""},{"type":"text","text":"hello there"}]}]}`,
	`{"echo":true,"messages":[{"role":"assistant","content":[{"type":"text","text":""},{"type":"text","text":""}]}]}`,
	`{"echo":true,"messages":[{"role":"assistant","content":[{"type":"image_url","image_url":{"url":"aaaaaaaaaaa"}}]}]}`,
	`{"echo":true,"add_generation_prompt":false,"messages":[{"role":"user-with-a-long-role","c\u006fntent":"hello there","content":"","content":"x"}]}`,
	`{"echo":true,"messages":[{"role":"assistant","content":""},"aaaaaaaaaa"]}`,
	`{"echo":true,"messages":[[1,2,3,4,5,6,7,8,9]]}`,
	`{"echo":true,"max_tokens":"          0"}`,
	// Members left out of a large object: the duplicates, names that fold
	// alike (Ollama) and the reads by name are found in the copy as in the
	// body, escaped or not, with the gateway's names among them or not.
	`{"a":1,"b":2,"A":3,"a":4,"c":5}`,
	`{"a":1,"b":2,"B":3,"c":5,"A":4}`,
	`{"x":1,"Model":"x","model":"y","stream":true}`,
	`{"x":1,"ſtream":true,"stream":false,"y":2}`,
	`{"aa":1,"AA":2,"x":[1,2,3],"Model":"x","model":"m"}`,
	`{"aa":1,"aa":2,"x":[1,2,3],"STREAM":true}`,
	`{"":0,"":1,"x":[1,2,3],"model":"a","model":"b"}`,
	`{"a\u004b":1,"a\u212a":2,"ak":3,"zz":[1,2,3]}`,
	"{\"x\":1,\"\xff\":1,\"\xfe\":2,\"\\ufffd\":3}",
	`{"mo\u0064el":"a","model":"b","stream":true,"x":[1,2,3]}`,
	`{"model":"b","mo\u0064el":"a","stre\u0061m":false,"stream":true,"x":[1,2,3]}`,
	`{"options":{"num_predict":1,"a":2,"num_predict":3,"b":[1,2,3]},"OPTIONS":{}}`,
	`{"options":{"a":2,"num_pr\u0065dict":3,"num_predict":1,"b":[1,2,3]},"model":"m"}`,
	`{"stream":true,"stream_options":{"x":1,"include_usage":true,"incl\u0075de_usage":false,"x":2}}`,
	`{"stream":true,"stream_options":{"x":1,"y":2,"z":3,"include_usage":false}}`,
	`{"echo":true,"messages":[{"x":1,"r\u006fle":"user","role":"assistant","content":"x","c\u006fntent":""}]}`,
	`{"echo":true,"messages":[{"role":"assistant","content":[{"x":1,"t\u0065xt":"","type":"text","text":"a"}]}]}`,
	// Ollama's load (and unload) requests: an empty, absent or null
	// prompt or messages, next to large members; a prompt or messages
	// read under a name that folds to it; a prompt too long to keep.
	`{"model":"m","prompt":"","context":[1,2,3,4,5,6,7,8,9]}`,
	`{"model":"m","pr\u006fmpt":"","keep_alive":0,"x":[1,2,3,4,5,6,7,8,9]}`,
	`{"model":"m","prompt":"a prompt longer than kept whole"}`,
	`{"model":"m","prompt":"\u0000\u0000\u0000"}`,
	`{"model":"m","prompt":["aaaaaaaaaaaa"],"messages":{"a":"bbbbbbbbbbbb"}}`,
	`{"model":"m","Prompt":"x","context":[1,2,3,4,5,6,7,8,9]}`,
	`{"model":"m","PROMPT":"","prompt":"","context":[1,2,3,4,5,6,7,8,9]}`,
	`{"model":"m","messages":[],"tools":[1,2,3,4,5,6,7,8,9]}`,
	`{"model":"m","messages":[                    ],"tools":[1,2,3,4,5,6,7,8,9]}`,
	`{"model":"m","messages":null,"prompt":null,"tools":[1,2,3,4,5,6,7,8,9]}`,
	`{"model":"m","meſſages":[{"role":"user","content":"hi"}],"x":[1,2,3,4,5,6,7,8,9]}`,
	`{"x":[1,2,3,4,5,6,7,8,9],"Messages":"","prompt":"","MESSAGES":[]}`,
	`{"x":[1,2,3,4,5,6,7,8,9],"Messages":"","prompt":"","Model":"m"}`,
	// Realistic requests of every API.
	`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:image/png;base64,aaaa"}}]},{"role":"assistant","content":"ok","tool_calls":[{"id":"t","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"t","content":"r"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string"}}}}}],"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":false},"max_completion_tokens":100,"n":2,"logprobs":true,"top_logprobs":5,"echo":false}`,
	`{"model":"m","prompt":["a","b"],"max_tokens":0,"echo":"yes","logprobs":5,"stream":false}`,
	`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"hi"},{"type":"input_image","image_url":"x"}]}],"instructions":"i","max_output_tokens":50,"background":true,"stream":true,"reasoning":{"effort":"low"}}`,
	`{"model":"m","max_tokens":1024,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"aaaa"}}]}],"stream":true,"thinking":{"type":"enabled","budget_tokens":100}}`,
	`{"model":"m","messages":[{"role":"user","content":"hi","images":["aaaa"]}],"stream":false,"format":{"type":"object"},"options":{"num_predict":64,"temperature":0,"stop":["x"],"num_ctx":4096},"keep_alive":"5m","think":true}`,
	`{"model":"m","prompt":"","keep_alive":0}`,
	`{"model":"m","prompt":"p","context":[1,2,3,4,5,6,7,8,9],"options":{"num_predict":-1},"stream":null}`,
	`{"prompt":"p","n_predict":128,"stream":true,"cache_prompt":true,"n_probs":3,"return_tokens":true,"response_fields":["content","timings/predicted_n"],"image_data":[{"data":"aaaa","id":1}],"max_tokens":9}`,
	`{"model":"m","echo":true,"add_generation_prompt":false,"continue_final_message":true,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"text","text":"partial answer"},{"type":"thinking","thinking":"t"}]}],"stream":true}`,
	// TGI's and SGLang's native bodies, SGLang's of several prompts.
	`{"inputs":"The capital of France is","parameters":{"max_new_tokens":20,"best_of":2,"do_sample":true,"stop":["\n"],"details":true},"stream":true}`,
	`{"text":["a","b"],"sampling_params":[{"max_new_tokens":8,"stop":["x"]},{"max_new_tokens":12,"temperature":0}],"stream":true}`,
	`{"text":["a","b"],"sampling_params":[{"max_new_tokens":8,"n":2,"temperature":0.7,"stop":["x"]},{"n":2,"max_new_tokens":12,"temperature":0.7}]}`,
	`{"text":"a","sampling_params":{"max_new_tokens":8,"temperature":0.7,"stop":["x","y"],"n":3},"n":5}`,
	`{"input_ids":[[1,2],[3]],"sampling_params":[{"max_new_tokens":8},7,{}],"inputs":null}`,
	// The outputs asked for: counts of every type, padded past what is
	// kept whole, several prompts of every shape.
	`{"n":"          8          ","n_cmpl":"  3  ","best_of":"x","prompt":["aaaaaaaaaa","bbbbbbbbbb"]}`,
	`{"n":1e300,"best_of":-1,"prompt":[[1,2,3,4,5,6,7,8],[9]],"prompt_embeds":["aaaaaaaaaa"]}`,
	`{"n":[1,2,3,4,5,6,7,8],"prompt":[1,"aaaaaaaaaa",2],"n_cmpl":{"a":"bbbbbbbbbb"}}`,
	`{"inputs":"a","parameters":{"best_of":"     4     ","stop":["aaaaaaaaaa"]},"text":["a","b","c"]}`,
	`{"text":["aaaaaaaaaa","b"],"sampling_params":[{"n":2,"stop":["aaaaaaaaaa"]},{"n":"   3   "}]}`,
	`{"input_embeds":[[[0.1,0.2,0.3,0.4]],[[0.5]]],"sampling_params":{"stop":["aaaaaaaaaa"],"n":2}}`,
	// SGLang's sampling_params lists past what is kept whole: the elements
	// that decide the reads, in every order.
	`{"text":["a","b","c","d"],"sampling_params":[{"max_new_tokens":5,"n":2},{"max_new_tokens":9},7,{"n":"3","max_new_tokens":9},{"n":3,"n":4}]}`,
	`{"text":"a","sampling_params":[{"n":1e300,"max_new_tokens":1e300},{"max_new_tokens":-1},{"max_new_tokens":"9"},{"max_new_tokens":2.5},[1,2,3,4,5,6,7,8]]}`,
	`{"input_ids":[[1],[2]],"sampling_params":[{"m\u0061x_new_tokens":4,"x":"aaaaaaaaaa"},{"max_new_tokens":3,"\u006e":5}]}`,
	// Members named twice in the native parameters: refused.
	`{"text":"a","sampling_params":{"n":1,"stop":["aaaaaaaaaa"],"n":8}}`,
	`{"text":["a","b"],"sampling_params":[{"n":2,"x":"aaaaaaaaaa"},{"m\u0061x_new_tokens":1,"max_new_tokens":9,"stop":["aaaaaaaaaa"]}]}`,
	`{"inputs":"a","parameters":{"best_of":1,"stop":["aaaaaaaaaa"],"b\u0065st_of":4}}`,
	`{"inputs":"a","parameters":[{"best_of":1,"best_of":4},"aaaaaaaaaa"]}`,
	// A name twice in parameters or a sampling_params (paramsDuplicateKey).
	`{"text":["a","b"],"sampling_params":{"n":2,"temperature":0.7,"stop":["x"],"\u006e":1}}`,
	`{"text":["a","b"],"sampling_params":[{"n":1,"stop":["x"]},{"max_new_tokens":1,"stop":["y"],"max_new_tokens":8000}]}`,
	`{"inputs":"a","parameters":{"best_of":1,"stop":["x","y"],"do_sample":true,"best_of":2}}`,
	// The duplicate in an element the copy keeps after fewer elements
	// than the body has before it: named by the body's place (the fuzzer's).
	`{"sampling_params":[0,{},{"n":0,"n":0}]}`,
	// SGLang's LoRA adapters (sglangAdapter): a list's first, the first
	// differing (escaped alike or not), one of another type.
	`{"model":"base:lora-a","text":["a","b"],"lora_path":["lora-a","lora\u002da",null,"lora-b"]}`,
	`{"text":["a","b","c"],"lora_path":[null,"",{"x":"lora-a"},"lora-a"]}`,
	`{"inputs":"a","parameters":{"adapter_id":"lora-a","stop":["x"]},"lora_path":"lora-b"}`,
	// Many different names (loraNames: the first maxBatchAdapters+1).
	`{"text":"a","lora_path":["a","b","a","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q","r",null,"s",[]]}`,
	`{"text":"a","lora_path":["a","b","a","c","d","e","f","g","h","i","j","k","l","m","n","o","\u0070",null,"q","b"]}`,
}

// FuzzShallowRequest: a body read shallow (every value past a few bytes
// emptied) reads as the full parse reads it (valid, too deep, the model,
// stream, background, the output limit, what it says of usage, a duplicate
// member), and its rewritten body (injectUsage) holds the same members.
func FuzzShallowRequest(f *testing.F) {
	for _, s := range append(slices.Clone(rewriteSeeds), shallowSeeds...) {
		f.Add([]byte(s))
	}
	defer func(from, keep int) { shallowFrom, keepWhole = from, keep }(shallowFrom, keepWhole)
	f.Fuzz(func(t *testing.T, body []byte) {
		read := func(from, keep int) (reqInfo, string, []byte) {
			shallowFrom, keepWhole = from, keep
			var p fastjson.Parser
			ri, v := parseRequest(&p, body)
			if !ri.valid {
				return ri, "", nil
			}
			// What the native APIs read (Ollama's options, llama.cpp's
			// n_predict) and what echo sends back (the last message).
			ollama, llama, tgi, sgl := ri, ri, ri, ri
			nativeRequest(meter.APIOllamaChat, v, &ollama)
			nativeRequest(meter.APILlamaCpp, v, &llama)
			// TGI's and SGLang's max_new_tokens, and which engine's a
			// body on /generate and / is (its own parser: v stays valid).
			var gp fastjson.Parser
			nativeRequest(meter.APITGI, v, &tgi)
			nativeRequest(meter.APISGLang, v, &sgl)
			chat, chatText := echoOf(meter.APIChat, v, body)
			cmpl, cmplText := echoOf(meter.APICompletions, v, body)
			// The output limit each OpenAI-shaped route's engines read
			// (routeLimit), and whether one reads none.
			limits := ""
			for _, api := range [...]meter.API{meter.APIChat, meter.APICompletions, meter.APIResponses, meter.APIMessages} {
				n, dflt := routeLimit(api, v)
				limits += fmt.Sprintf(" %d %v", n, dflt)
			}
			dup := limits + fmt.Sprintf(" %q %q %q ollama %d %v %v llama.cpp %d %v echo %d %v %d %v tgi %d best_of %d %d sglang %d n %d generate %v %v", duplicateKey(v), foldedKey(v), paramsDuplicateKey(v, ri.paramsDupAt),
				ollama.maxTokens, ollama.someDefault, ollama.stream, llama.maxTokens, llama.someDefault, chat, chatText, cmpl, cmplText, tgi.maxTokens, tgi.bestOf, tgi.perPrompt, sgl.maxTokens, sgl.perPrompt,
				generateAPI(&gp, body, false), generateAPI(&gp, body, true))
			// The LoRA adapter each route's engine runs.
			dup += fmt.Sprintf(" adapter %q names %q", adapterOf(v), loraNames(v, nil))
			for _, api := range [...]meter.API{meter.APISGLang, meter.APIChat} {
				a, unsure, several := sglangAdapter(api, v, ri.model, api == meter.APISGLang)
				dup += fmt.Sprintf(" %q %v %v", a, unsure, several)
			}
			if duplicateKey(v) == "" && paramsDuplicateKey(v, ri.paramsDupAt) == "" {
				// How many outputs each route's engines generate (a body
				// naming a member twice is refused before).
				dup += " outputs"
				for _, api := range [...]meter.API{meter.APIChat, meter.APICompletions, meter.APILlamaCpp, meter.APITGI, meter.APISGLang, meter.APIChatBatch} {
					dup += fmt.Sprintf(" %d", outputsOf(api, v, body))
				}
			}
			if duplicateKey(v) == "" && foldedKey(v) == "" {
				// A body Ollama's routes take: whether it is a load.
				dup += fmt.Sprintf(" load %v %v", ollamaLoad(meter.APIOllamaGenerate, v), ollamaLoad(meter.APIOllamaChat, v))
			}
			var out []byte
			if duplicateKey(v) == "" && json.Valid(body) {
				// fastjson re-serialises a string with raw control bytes
				// its own way (FuzzInjectUsage); the engine refuses them.
				out = injectUsage(nil, body, v)
			}
			return ri, dup, out
		}
		full, fullDup, fullOut := read(1<<30, 1<<30)
		shallow, shallowDup, shallowOut := read(-1, 8)
		// Where a copy's duplicate is in the body: compared by the name
		// paramsDuplicateKey gives, in fullDup and shallowDup.
		shallow.paramsDupAt = full.paramsDupAt
		if full != shallow || fullDup != shallowDup {
			t.Fatalf("%q: full %+v %q, shallow %+v %q", body, full, fullDup, shallow, shallowDup)
		}
		if fullOut == nil {
			return
		}
		if a, b := rewritten(t, fullOut), rewritten(t, shallowOut); !slices.Equal(a, b) {
			t.Fatalf("%q rewritten:\nfull    %q: %v\nshallow %q: %v", body, fullOut, a, shallowOut, b)
		}
	})
}

// rewritten lists a rewritten body's members (values re-marshalled), its
// stream_options' members sorted (fastjson's Set adds include_usage last,
// the edit in place first).
func rewritten(t *testing.T, out []byte) []string {
	t.Helper()
	var p fastjson.Parser
	v, err := p.ParseBytes(out)
	if err != nil || v.Type() != fastjson.TypeObject {
		t.Fatalf("rewritten %q: not an object: %v", out, err)
	}
	var ms []string
	v.GetObject().Visit(func(k []byte, m *fastjson.Value) {
		if string(k) == "stream_options" && m.Type() == fastjson.TypeObject {
			inner := members(m)
			slices.Sort(inner)
			ms = append(ms, "stream_options="+strings.Join(inner, ","))
			return
		}
		ms = append(ms, string(k)+"="+string(m.MarshalTo(nil)))
	})
	return ms
}

// A large body's duplicate in an element of a long sampling_params list is
// named by its place in the body, as the full parse names it: the shallow
// copy keeps two elements before it of the body's three, and the message
// (the client's 400 and the record's error) said [1].
func TestShallowDuplicateNamedByItsPlace(t *testing.T) {
	pad := strings.Repeat("x", shallowFrom)
	body := `{"text":["` + pad + `","b","c"],"sampling_params":[{"n":1,"stop":"` + strings.Repeat("y", keepWhole) + `"},{"n":1},{"max_new_tokens":5,"max_new_tokens":6}]}`
	var p fastjson.Parser
	ri, v := parseRequest(&p, []byte(body))
	if !parsedShallow([]byte(body)) || !ri.valid {
		t.Fatalf("not read shallow, or not valid (%v)", ri.valid)
	}
	if got, want := paramsDuplicateKey(v, ri.paramsDupAt), "sampling_params[2].max_new_tokens"; got != want {
		t.Errorf("duplicate named %q, want %q", got, want)
	}
}
