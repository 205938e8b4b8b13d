package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"unicode"

	"github.com/goodput/goodput/internal/jsonwalk"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
	"github.com/valyala/fastjson"
)

// reqInfo is what the proxy reads from a metered request body.
type reqInfo struct {
	valid   bool // the body is a JSON object
	tooDeep bool // the body was refused only for nesting deeper than fastjson.MaxDepth
	model   string
	stream  bool
	usage   usageAsk // what a streamed request says of usage
	// maxTokens: the output limit, 0 when absent. parseRequest reads
	// max_completion_tokens, else max_tokens, else max_output_tokens;
	// once the route is known, nativeRequest replaces it with the largest
	// limit any engine serving that route reads (routeLimit).
	maxTokens int
	// someDefault: an engine serving the route would generate to its own
	// default (it reads no limit in the body): the charge is then at least
	// the default allowance (chargedLimit).
	someDefault bool
	// perPrompt: the choices asked for each prompt, as llama.cpp reads
	// them (choicesPerPrompt); 1 when absent.
	perPrompt int
	// bestOf: TGI's parameters.best_of (nativeRequest): above 1, TGI
	// generates that many sequences and answers the best, and its
	// x-generated-tokens header counts that one alone.
	bestOf int
	// outputs: how many outputs the engine generates, each up to
	// maxTokens (outputsOf: n choices of each of several prompts are n
	// times their number), charged at admission; set by rewrite once the
	// route is known (0, charged as one, for a body it does not read).
	outputs int64
	// streamChoices: how many choices a chat or completions stream of
	// the request carries, at least (streamChoices); set with outputs.
	streamChoices int64
	// background: a Responses API request to be generated after its answer
	// ("background": true), which acknowledges it.
	background bool
	// modelUnread: no engine that may serve the request reads a model
	// from its body (readsNoModel); it counts against the default model's
	// limits whatever its model says, or its adapter's.
	modelUnread bool
	// adapter: the LoRA adapter a TGI body names in parameters.adapter_id
	// (adapterOf), read when modelUnread, or an SGLang body in lora_path or
	// its model (sglangAdapter); adapterUnsure when the route's engine may
	// not read it (ratelimit.Request.AdapterUnsure). adapters: its
	// lora_path is a batch naming several different adapters (or an
	// adapter and none), which one model's limits may not hold
	// (adaptersSplit).
	adapter       string
	adapterUnsure bool
	adapters      bool
	// echo: what the request's echo option makes the engine send back
	// before its output, and that text (echoOf).
	echo     meter.Echo
	echoText meter.EchoText
	// paramsDupAt: parseShallow's dupAt, for paramsDuplicateKey.
	paramsDupAt int
}

// usageAsk is what a request's stream_options say of the usage chunk, read
// as vLLM reads them (StreamOptions: include_usage defaults to true once
// stream_options is an object; continuous_usage_stats, default false,
// applies only with include_usage).
type usageAsk uint8

const (
	// usageNotAsked: no stream_options, "stream_options":null, or an object
	// whose include_usage is false or null (and whose
	// continuous_usage_stats, if any, is a boolean or null). The engine
	// sends no usage; the gateway asks for it (injectUsage) and removes
	// what it asked for before the client sees it.
	usageNotAsked usageAsk = iota
	// usageAsked: include_usage is true, or stream_options is an object
	// without include_usage (vLLM's default). The engine's usage chunk is
	// the client's: it passes untouched, and so does the body. (An engine
	// whose default is false, such as OpenAI's API, then sends none, and
	// the gateway estimates OSL: the client's bytes stay the engine's.)
	usageAsked
	// usageUnclear: stream_options, include_usage or
	// continuous_usage_stats of another type (a string, a number, ...),
	// which engines coerce or refuse each in their own way. The body is
	// forwarded untouched, so the engine answers what the client sent, and
	// nothing is removed.
	usageUnclear
)

// parseRequest reads the fields the proxy needs from a metered request
// body (chat, completions, Responses API, Messages API: model and stream
// are named alike; the output limit, read here as one name of three, is
// read per route once the route is known, by nativeRequest). A body that is not a JSON object is forwarded unchanged and
// the engine answers it; valid is then false. So is one that nests deeper
// than the parser goes (fastjson.MaxDepth), but tooDeep is then true: the
// engine's parser may read it (Python's json does), and the proxy must
// refuse it, since it cannot check what it cannot read.
//
// A body larger than shallowFrom is parsed shallow (shallow.go): a few
// kilobytes of values instead of some 140 bytes for each byte of it.
func parseRequest(p *fastjson.Parser, body []byte) (reqInfo, *fastjson.Value) {
	var ri reqInfo
	var v *fastjson.Value
	var err error
	if parsedShallow(body) {
		v, ri.paramsDupAt, err = parseShallow(p, body)
		ri.tooDeep = errors.Is(err, jsonwalk.ErrTooDeep)
	} else if v, err = p.ParseBytes(body); err != nil {
		ri.tooDeep = isDepthError(err)
	}
	if err != nil {
		return ri, nil
	}
	if v.Type() != fastjson.TypeObject {
		return ri, nil
	}
	ri.valid = true
	ri.model = modelOf(v, body)
	// As vLLM and SGLang read it (pydantic's lax mode: "true", 1, "yes"
	// stream too), so that their streams get the usage the gateway asks
	// for; engines that read it strictly refuse the request, or answer
	// one JSON body.
	ri.stream = pyBool(v.Get("stream")) == pyTrue
	ri.background = v.GetBool("background")
	ri.usage = usageOf(v.Get("stream_options"))
	if n := v.GetInt("max_completion_tokens"); n > 0 {
		ri.maxTokens = n
	} else if n := v.GetInt("max_tokens"); n > 0 {
		ri.maxTokens = n
	} else if n := v.GetInt("max_output_tokens"); n > 0 {
		ri.maxTokens = n // the Responses API's
	}
	ri.perPrompt = choicesPerPrompt(v)
	return ri, v
}

// modelOf returns the model member's string, as a JSON decoder reads it
// ("" when it holds none). fastjson leaves an escape it cannot decode as
// it came: a lone surrogate, {"model":"a\udc80b"}, read as the eight bytes
// a, \, u, d, c, 8, 0, b, where Python's json (the engine's) reads one
// surrogate and Go's encoding/json U+FFFD. The record then named a model no
// client wrote, with its backslash. A name that holds "\u" once read (such
// an escape, or a backslash the client escaped) is read again from body,
// parsed anew (fastjson decodes a string in place on its first read), and
// decoded by encoding/json: a surrogate is U+FFFD, as a record's JSON and
// Prometheus's labels need valid UTF-8. An escape not even that reads stays
// as fastjson leaves it.
func modelOf(v *fastjson.Value, body []byte) string {
	m := v.GetStringBytes("model")
	if !bytes.Contains(m, []byte(`\u`)) {
		return string(m)
	}
	// Shallow whatever the body's size: a walk of the body and a copy of
	// the few members read, the model's string whole, where a full parse
	// of a 64 KiB body took 80 times the first's (a review).
	p := modelParsers.Get().(*fastjson.Parser)
	defer modelParsers.Put(p)
	w, _, err := parseShallow(p, body)
	var s string
	if err != nil || json.Unmarshal(w.Get("model").MarshalTo(nil), &s) != nil {
		return string(m)
	}
	return s
}

// modelParsers are modelOf's second parsers (the request's holds its
// first parse).
var modelParsers = sync.Pool{New: func() any { return new(fastjson.Parser) }}

// invocationAPI returns the API of a POST to vLLM's SageMaker route,
// /invocations, from its body, as vLLM serves it: a chat request (its
// messages an array) as chat, else a completions request (a prompt, or
// prompt_embeds, not null) as completions, and any other body (an
// embedding's or a score's) as another route, passed through unmetered.
// A body the gateway cannot read as a JSON object, or that names a member
// twice (vLLM reads the last, fastjson's Get the first: {"prompt":null,
// "prompt":"..."} is a completions request), is chat: the checks of a
// metered body apply to it (a duplicate is refused; under gateway keys, an
// unreadable body too). Passed
// through as another route, a generation there was charged its body's
// bytes/4 and never its output, and no per-model limit applied.
func invocationAPI(p *fastjson.Parser, body []byte) meter.API {
	ri, v := parseRequest(p, body)
	if !ri.valid || duplicateKey(v) != "" {
		return meter.APIChat
	}
	if m := v.Get("messages"); m != nil && m.Type() == fastjson.TypeArray {
		return meter.APIChat
	}
	for _, name := range [...]string{"prompt", "prompt_embeds"} {
		if x := v.Get(name); x != nil && x.Type() != fastjson.TypeNull {
			return meter.APICompletions
		}
	}
	return meter.APIOther
}

// choicesPerPrompt returns the choices a request asks for each of its
// prompts as llama.cpp's server reads them (params_from_json_cmpl: n_cmpl,
// else n, else 1; a value that is not a number is taken for absent, a
// fraction cut; below 1, one choice). The meter needs it to count each
// prompt once when llama.cpp's stream puts every choice's usage on its
// finish chunk (meter.Meter.SetChoicesPerPrompt). Other engines read n;
// their streams of several choices end with one usage for the whole.
func choicesPerPrompt(v *fastjson.Value) int {
	for _, name := range [...]string{"n_cmpl", "n"} {
		if n, ok := perPromptOf(v.Get(name)); ok {
			return n
		}
	}
	return 1
}

// perPromptOf reads a number of choices per prompt: ok false when n is not
// a number (taken for absent); a fraction cut, below 1 one, at most 2^20.
func perPromptOf(n *fastjson.Value) (int, bool) {
	if n == nil || n.Type() != fastjson.TypeNumber {
		return 0, false
	}
	f := n.GetFloat64()
	switch {
	case f < 1:
		return 1, true
	case f > 1<<20:
		return 1 << 20, true
	}
	return int(f), true
}

// samplesPerPrompt returns the outputs an SGLang request asks of each of
// its prompts, as GenerateReqInput reads them (parallel_sample_num): its
// sampling_params' n, of a list of them (one a prompt, which must all say
// the same) the first's; 1 when absent (read as perPromptOf). SGLang
// answers each prompt's outputs one after the other (the meter counts a
// prompt once, on its first: meter.ParseResponseBody, and the index of
// each streamed output, Meter.SetChoicesPerPrompt).
func samplesPerPrompt(v *fastjson.Value) int {
	ps := v.Get("sampling_params")
	if ps != nil && ps.Type() == fastjson.TypeArray {
		ps = ps.Get("0")
	}
	if ps == nil || ps.Type() != fastjson.TypeObject {
		return 1
	}
	if n, ok := perPromptOf(ps.Get("n")); ok {
		return n
	}
	return 1
}

// generateAPI returns the API of a POST to /generate, which TGI and SGLang
// both serve, or to /, TGI's too (root), from its body, as the engines
// read it: TGI's GenerateRequest needs "inputs" (a string), SGLang's
// GenerateReqInput one of "text", "input_ids" or "input_embeds". A body
// with TGI's (not null) is TGI's; on /generate, one with SGLang's only is
// SGLang's and any other body TGI's; on /, any other body, which TGI does
// not generate from, passes through as another route. A body the gateway cannot
// read as a JSON object, or that names a member twice, is TGI's: the
// checks of a metered body apply to it (a duplicate is refused; under
// gateway keys, an unreadable body too). Passed through as another route,
// a generation there was charged its body's bytes/4 and never its output,
// and no per-model limit applied.
func generateAPI(p *fastjson.Parser, body []byte, root bool) meter.API {
	ri, v := parseRequest(p, body)
	if !ri.valid || duplicateKey(v) != "" {
		return meter.APITGI
	}
	switch {
	case notNull(v.Get("inputs")):
		return meter.APITGI
	case root:
		return meter.APIOther // SGLang serves no /
	case sglangInput(v):
		return meter.APISGLang
	}
	return meter.APITGI
}

// readsNoModel reports whether no engine that may serve a metered request
// reads a model from its body, each running its one model whatever the
// body names: TGI's native routes (router/src/server.rs reads /generate's
// and /generate_stream's body as GenerateRequest, /'s as
// CompatGenerateRequest, router/src/lib.rs: neither has a model, and serde
// passes over members a struct does not declare). Not SGLang's /generate
// (onGenerate: the path is /generate), nor a TGI body there that names
// SGLang's input too, which SGLang may run: SGLang's server reads no model
// (GenerateReqInput, python/sglang/srt/managers/io_struct.py), but its
// model gateway, which serves several models behind one /generate, sends
// a request to the workers of the model its body names
// (sgl-model-gateway/src/server.rs passes body.model to route_generate;
// with --enable-igw, src/routers/http/router.rs picks that model's
// workers). There the name is matched as on the other routes: counted
// against the default model, a request for another listed model passed
// that model's limits.
func readsNoModel(api meter.API, v *fastjson.Value, onGenerate bool) bool {
	return api == meter.APITGI && !(onGenerate && sglangInput(v))
}

// sglangInput reports whether a body names SGLang's input: text, input_ids
// or input_embeds, not null.
// adapterOf returns the LoRA adapter a TGI body names: its parameters'
// adapter_id, a string (GenerateParameters, router/src/lib.rs), or "".
// TGI runs the base model for an adapter it has not loaded
// (ADAPTER_TO_INDEX.get(adapter_id, 0), server/text_generation_server/
// models/flash_causal_lm.py), so a request naming one is held by that
// adapter's limits when the tenant lists it as a model, by the default
// model's otherwise (ratelimit.Request.NoModel): matched as a model's
// name, an adapter a tenant lists escaped its limits on these routes, and
// one it does not list escaped the default model's.
func adapterOf(v *fastjson.Value) string {
	a := v.Get("parameters", "adapter_id")
	if a == nil || a.Type() != fastjson.TypeString {
		return ""
	}
	return string(a.GetStringBytes())
}

// sglangAdapter returns the LoRA adapter an SGLang body names, as SGLang
// reads it (OpenAIServingBase's _parse_model_parameter and
// _resolve_lora_path, python/sglang/srt/
// entrypoints/openai/serving_base.py; GenerateReqInput.lora_path,
// managers/io_struct.py; LoRARegistry.acquire, lora/lora_registry.py), and
// whether the route's engine may not read it (unsure), and whether its
// lora_path names several (several):
//
//   - on /generate, with SGLang's input (onSGLang: generateAPI's
//     sglang_generate, or a body there with TGI's input too), lora_path: a
//     string, or for a batch a list of them (null, "": the base model);
//   - on the chat and completions routes (/invocations' too, which SGLang
//     serves as chat), the adapter of a model written "base:adapter" (split
//     at the first ':', spaces around each part dropped as Python's
//     str.strip() drops them (pySpace), an empty adapter
//     taken for none), else lora_path: the model's adapter wins. vLLM serves
//     these routes too, and ignores lora_path and reads "base:adapter" as
//     one model's name; the gateway cannot tell the engines apart there,
//     so the adapter is unsure: it holds a request only when its model
//     matches none of the tenant's (ratelimit.Request.AdapterUnsure).
//
// Not on vLLM's own chat_batch, nor the Responses and Messages APIs, whose
// SGLang handlers read no adapter. SGLang refuses (400) a request naming
// an adapter it has not loaded, and runs one it has: an adapter the tenant
// does not list runs as a model the tenant does not list, and the request
// is matched as without it (its model's limits, or the default model's
// when it names none), never off them. A lora_path that is not a string,
// or a list of strings and nulls, names none (SGLang refuses it, 400).
// A batch naming two different adapters, or an adapter and null, is
// several: one request is held by one model's limits and queues in one
// line, and held by the first a batch could run a listed adapter under
// the limits of another it put first; the caller refuses it when limits
// apply and its adapters would hold its prompts by different models'
// (adaptersSplit). An empty string is null's base model, as null is. It
// allocates the adapter's string only.
func sglangAdapter(api meter.API, v *fastjson.Value, model string, onSGLang bool) (adapter string, unsure, several bool) {
	switch {
	case onSGLang:
	case api == meter.APIChat || api == meter.APICompletions:
		unsure = true
		if _, a, ok := strings.Cut(model, ":"); ok {
			if a = strings.TrimFunc(a, pySpace); a != "" {
				return a, unsure, false
			}
		}
	default:
		return "", false, false
	}
	lp := v.Get("lora_path")
	if lp == nil {
		return "", unsure, false
	}
	switch lp.Type() {
	case fastjson.TypeString:
		return string(lp.GetStringBytes()), unsure, false
	case fastjson.TypeArray:
	default:
		return "", unsure, false
	}
	arr, _ := lp.Array()
	var first []byte
	for i, el := range arr {
		var name []byte
		switch el.Type() {
		case fastjson.TypeString:
			name = el.GetStringBytes()
		case fastjson.TypeNull:
		default:
			return "", unsure, false
		}
		if i == 0 {
			first = name
		} else if !bytes.Equal(name, first) {
			several = true
		}
	}
	if several {
		// Read to the end: an element of another type names none.
		return "", unsure, true
	}
	return string(first), unsure, false
}

// pySpace reports whether Python's str.strip() drops r: Go's white space
// and the separators U+001C to U+001F, which Go's does not count (SGLang
// strips a "base:adapter" model's adapter so; trimmed as Go's, an adapter
// written after U+001F matched none, and the request passed its limits).
func pySpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

// maxBatchAdapters is how many different LoRA adapters a batch's
// lora_path may name when limits apply (adaptersSplit); a large body's
// shallow copy keeps the first maxBatchAdapters+1 (shallow.loraPaths).
const maxBatchAdapters = 16

// loraNames appends to dst the different names a lora_path list of
// strings and nulls holds (null as ""), in the order they first appear,
// at most maxBatchAdapters+1 of them; nothing for another lora_path.
func loraNames(v *fastjson.Value, dst [][]byte) [][]byte {
	lp := v.Get("lora_path")
	if lp == nil || lp.Type() != fastjson.TypeArray {
		return dst
	}
	arr, _ := lp.Array()
	n := len(dst)
	for _, el := range arr {
		var name []byte
		switch el.Type() {
		case fastjson.TypeString:
			name = el.GetStringBytes()
		case fastjson.TypeNull:
		default:
			return dst[:n]
		}
		if !slices.ContainsFunc(dst[n:], func(b []byte) bool { return bytes.Equal(b, name) }) && len(dst)-n <= maxBatchAdapters {
			if name == nil {
				name = []byte{}
			}
			dst = append(dst, name)
		}
	}
	return dst
}

func sglangInput(v *fastjson.Value) bool {
	return notNull(v.Get("text")) || notNull(v.Get("input_ids")) || notNull(v.Get("input_embeds"))
}

func notNull(x *fastjson.Value) bool { return x != nil && x.Type() != fastjson.TypeNull }

// newTokens returns the max_new_tokens of a body's parameters (TGI) or
// sampling_params (SGLang; of a list of them, one a prompt, the largest),
// or -1 when there is none (absent, or 0 or less: the engine's default).
func newTokens(v *fastjson.Value, params string) int {
	ps := v.Get(params)
	if ps == nil {
		return -1
	}
	if ps.Type() == fastjson.TypeArray {
		n := -1
		arr, _ := ps.Array()
		for _, one := range arr {
			m := maxNewTokens(one)
			if m < 0 {
				return -1 // that prompt's limit is the engine's default
			}
			n = max(n, m)
		}
		return n
	}
	return maxNewTokens(ps)
}

// maxNewTokens is the max_new_tokens of one parameters object, or -1 when
// it has none (absent, not a number, 0 or less; not an object). A number
// is read as limitValue reads one (4000.0 and 1e4 too, a fraction counted
// up): SGLang's SamplingParams generates to any number it is given (its
// check is only below 0), TGI refuses a float.
func maxNewTokens(ps *fastjson.Value) int {
	if m := ps.Get("max_new_tokens"); m != nil && m.Type() == fastjson.TypeNumber {
		if n, ok := limitValue(m, false); ok && n > 0 {
			return n
		}
	}
	return -1
}

// nativeRequest reads the output limit of the OpenAI-shaped routes as
// their engines read it (routeLimit), and what an engine's native API
// names otherwise: Ollama streams unless "stream" is false (absent or null
// streams), and its output limit is options.num_predict alone (Go's json
// drops the max_tokens it does not know; on /api/chat, which llama.cpp
// also serves, llama.cpp's limit counts too, the larger charged);
// llama.cpp's is n_predict, before max_completion_tokens
// and max_tokens (a number there, -1 for none, is the limit, whatever
// follows). A limit of none (0, -1) leaves maxTokens 0 and sets
// someDefault: the default is charged. vLLM's chat batch never streams,
// and its limit is read as chat's. v is the request body, a JSON object.
func nativeRequest(api meter.API, v *fastjson.Value, ri *reqInfo) {
	switch api {
	case meter.APIChatBatch:
		// vLLM answers a batch with one JSON body, whatever the body says
		// of stream (BatchChatCompletionRequest declares no stream: it is
		// ignored, or refused by the releases that check it), so the
		// gateway asks for no usage chunk there (injectsUsage: chat only).
		ri.stream = false
		ri.maxTokens, ri.someDefault = routeLimit(meter.APIChat, v)
	case meter.APIChat, meter.APICompletions, meter.APIResponses, meter.APIMessages:
		ri.maxTokens, ri.someDefault = routeLimit(api, v)
	case meter.APIOllamaChat, meter.APIOllamaGenerate:
		if st := v.Get("stream"); st == nil || st.Type() == fastjson.TypeNull {
			ri.stream = true
		}
		ri.maxTokens = numPredict(v.Get("options", "num_predict"))
		ri.someDefault = ri.maxTokens == 0
		if api == meter.APIOllamaChat {
			// llama.cpp's server serves /api/chat as its chat route, and
			// reads there its names, never options.num_predict.
			n, dflt := limitRules[limitLlamaCpp].read(v)
			ri.maxTokens, ri.someDefault = max(ri.maxTokens, n), ri.someDefault || dflt
		}
	case meter.APITGI, meter.APISGLang:
		// max_new_tokens of TGI's parameters, or SGLang's sampling_params;
		// of a body that names both engines' inputs, the larger of both
		// limits (the default when either has none): either engine may
		// run it. Neither reads the OpenAI names.
		tgi, sgl := newTokens(v, "parameters"), newTokens(v, "sampling_params")
		own := tgi
		if api == meter.APISGLang {
			own = sgl
		}
		if notNull(v.Get("inputs")) && sglangInput(v) {
			own = -1
			if tgi > 0 && sgl > 0 {
				own = max(tgi, sgl)
			}
		}
		ri.maxTokens = max(own, 0)
		ri.someDefault = ri.maxTokens == 0
		ri.bestOf = v.GetInt("parameters", "best_of")
		// Neither engine reads a top-level n (choicesPerPrompt): SGLang
		// reads its sampling_params' (a body with TGI's inputs too may be
		// run by SGLang); TGI answers one output a request.
		ri.perPrompt = 1
		if sglangInput(v) {
			ri.perPrompt = samplesPerPrompt(v)
		}
	case meter.APILlamaCpp:
		ri.maxTokens, ri.someDefault = limitRules[limitLlamaCpp].read(v) // it reads no max_output_tokens
	}
}

// numPredict reads Ollama's options.num_predict, x, as Options.FromMap
// does: a JSON number (a float64 to Go) cut to an int, so 4000.0, 1e4 and
// 4000.5 are 4000, 10000 and 4000 (fastjson's GetInt read them as 0: the
// default charged), and 0.5 is 0; 0 for none (0 or less: Ollama's
// default; not a number, which Ollama refuses); at most maxCount.
func numPredict(x *fastjson.Value) int {
	if x == nil || x.Type() != fastjson.TypeNumber {
		return 0
	}
	f := math.Trunc(x.GetFloat64())
	switch {
	case f != f, f <= 0:
		return 0
	case f >= maxCount:
		return maxCount
	}
	return int(f)
}

// How an engine picks its output limit among the names it reads (limitRule).
const (
	// firstNotNull: the first name present and not null decides (pydantic's
	// and serde's optional fields, Go's pointers, read in the engine's
	// order of precedence); a value that is not a number above 0 is the
	// engine's default.
	firstNotNull = iota
	// firstPositive: the first number above 0 (SGLang's
	// max_completion_tokens or max_tokens: Python's or skips 0 and None).
	firstPositive
	// firstNumber: the first name holding a number decides, another type
	// taken for absent (llama.cpp's json_value); 0 or less (-1: none) is
	// its default.
	firstNumber
)

// limitRule is how one engine reads a route's output limit: its names, in
// its order of precedence, and how it picks among them. A member named by,
// when the body has one (null too), is read in the place of the name
// replaced, whatever its value.
type limitRule struct {
	pick         uint8
	names        []string
	replaced, by string
}

// read returns the limit the engine reads from the body, v, or dflt true
// when it generates to its own default (no name it reads sets one).
func (l limitRule) read(v *fastjson.Value) (n int, dflt bool) {
	for _, name := range l.names {
		x := v.Get(name)
		if name == l.replaced {
			if y := v.Get(l.by); y != nil {
				x = y
			}
		}
		if x == nil || x.Type() == fastjson.TypeNull {
			continue
		}
		isNum := x.Type() == fastjson.TypeNumber
		if lim, ok := limitValue(x, l.pick != firstNumber); ok && lim > 0 {
			return lim, false
		}
		switch {
		case l.pick == firstNotNull, l.pick == firstNumber && isNum:
			return 0, true
		}
	}
	return 0, true
}

// limitValue reads an output limit, x, as the engines read one: a number
// (4000.0 and 1e4 too: pydantic takes a float with no fraction for an int,
// nlohmann's json cuts one; a fraction is counted up, as a limit read too
// large only charges a request an engine refuses), or with lax, for the
// engines that validate with pydantic (vLLM, SGLang), a string of one
// ("4000", "1_000": laxInt); at most maxCount. ok is false for any other
// value; n is 0 for a limit of 0 or less.
func limitValue(x *fastjson.Value, lax bool) (n int, ok bool) {
	switch x.Type() {
	case fastjson.TypeNumber:
		f := x.GetFloat64()
		switch {
		case f != f:
			return 0, false // NaN
		case f <= 0:
			return 0, true
		case f >= maxCount:
			return maxCount, true
		}
		return int(math.Ceil(f)), true
	case fastjson.TypeString:
		if !lax {
			return 0, false
		}
		m, neg, ok := laxInt(x.GetStringBytes())
		if !ok || neg {
			return 0, ok
		}
		return int(m), true
	}
	return 0, false
}

// The engines' readings of the OpenAI-shaped routes' limits (routeLimit),
// from their sources: vLLM's protocol (chat: max_completion_tokens, else
// max_tokens; completions and the Messages API: max_tokens; the Responses
// API: max_output_tokens), SGLang's (chat: max_completion_tokens or
// max_tokens; completions: max_tokens; responses: max_output_tokens),
// llama.cpp's server (params_from_json_cmpl, on every route: n_predict,
// else max_completion_tokens, else max_tokens; on the Responses API
// max_output_tokens, when the body has it, null too, in the place of
// max_tokens, which its conversion to chat overwrites), TGI's (chat: max_tokens, or its alias
// max_completion_tokens; completions: max_tokens) and Ollama's OpenAI and
// Anthropic layers (max_tokens; responses: max_output_tokens).
const (
	limitVLLMChat = iota
	limitSGLangChat
	limitLlamaCpp
	limitTGIChat
	limitMaxTokens  // max_tokens alone: vLLM's, SGLang's, TGI's and Ollama's completions, Ollama's chat, the Messages API
	limitMaxOutput  // max_output_tokens alone: the Responses API of vLLM, SGLang and Ollama
	limitLlamaCppRe // llama.cpp's Responses API
)

var limitRules = [...]limitRule{
	limitVLLMChat:   {pick: firstNotNull, names: []string{"max_completion_tokens", "max_tokens"}},
	limitSGLangChat: {pick: firstPositive, names: []string{"max_completion_tokens", "max_tokens"}},
	limitLlamaCpp:   {pick: firstNumber, names: []string{"n_predict", "max_completion_tokens", "max_tokens"}},
	limitTGIChat:    {pick: firstNotNull, names: []string{"max_tokens", "max_completion_tokens"}},
	limitMaxTokens:  {pick: firstNotNull, names: []string{"max_tokens"}},
	limitMaxOutput:  {pick: firstNotNull, names: []string{"max_output_tokens"}},
	limitLlamaCppRe: {pick: firstNumber, names: []string{"n_predict", "max_completion_tokens", "max_tokens"}, replaced: "max_tokens", by: "max_output_tokens"},
}

// The engines that serve each OpenAI-shaped route (routeLimit).
var (
	chatLimits        = [...]uint8{limitVLLMChat, limitSGLangChat, limitLlamaCpp, limitTGIChat, limitMaxTokens}
	completionsLimits = [...]uint8{limitMaxTokens, limitLlamaCpp}
	responsesLimits   = [...]uint8{limitMaxOutput, limitLlamaCppRe}
	messagesLimits    = [...]uint8{limitMaxTokens, limitLlamaCpp}
)

// routeLimit reads the output limit of a chat, completions, Responses API
// or Messages API request, v, as every engine serving that route reads it,
// since the gateway does not know which one answers: the largest limit any
// of them reads (0 when none reads one), and whether one of them reads
// none and generates to its default. Read one way on every route, a small
// limit in a name the engine ignores ("max_tokens": 1 on the Responses
// API, beside "max_output_tokens": 100000) was charged while the engine
// generated to the large one, or to its default.
func routeLimit(api meter.API, v *fastjson.Value) (most int, someDefault bool) {
	var rules []uint8
	switch api {
	case meter.APIChat:
		rules = chatLimits[:]
	case meter.APICompletions:
		rules = completionsLimits[:]
	case meter.APIResponses:
		rules = responsesLimits[:]
	default:
		rules = messagesLimits[:]
	}
	for _, r := range rules {
		n, dflt := limitRules[r].read(v)
		most, someDefault = max(most, n), someDefault || dflt
	}
	return most, someDefault
}

// chargedLimit is the output limit the admission charges a request
// (ratelimit.EstimateRequest's maxTokens): the largest limit an engine
// reads, or 0, the default allowance (which the limiter may lower to fit
// the tpm), when an engine would generate to its default and every limit
// read is below that allowance, def (0 or less: ratelimit's default).
func chargedLimit(ri *reqInfo, def int64) int64 {
	if def <= 0 {
		def = ratelimit.DefaultMaxTokens
	}
	if ri.someDefault && int64(ri.maxTokens) < def {
		return 0
	}
	return int64(ri.maxTokens)
}

// ollamaLoad reports whether Ollama answers the request, v, by loading the
// model (or with keep_alive 0 unloading it) instead of generating: its
// prompt (/api/generate) or messages (/api/chat) are empty, absent or null,
// as its server's routes.go reads them (Go's encoding/json: a member whose
// name folds to the field's is read as it; then the request is not taken
// for one). Ollama's answer says which it was (meter.ModelOp); the request
// is known as one before, so that it never counts as an inference
// request's arrival.
func ollamaLoad(api meter.API, v *fastjson.Value) bool {
	name := "prompt"
	switch api {
	case meter.APIOllamaChat:
		name = "messages"
	case meter.APIOllamaGenerate:
	default:
		return false
	}
	load := true
	v.GetObject().Visit(func(k []byte, m *fastjson.Value) {
		if !load || !strings.EqualFold(string(k), name) {
			return
		}
		switch {
		case string(k) != name:
			load = false
		case m.Type() == fastjson.TypeNull:
		case m.Type() == fastjson.TypeString && api == meter.APIOllamaGenerate:
			load = len(m.GetStringBytes()) == 0
		case m.Type() == fastjson.TypeArray && api == meter.APIOllamaChat:
			a, _ := m.Array()
			load = len(a) == 0
		default:
			load = false // Ollama refuses it
		}
	})
	return load
}

// echoOf says what a chat or completions request's "echo": true makes the
// engine send back of the request before its output, which the parser must
// not take for output (meter.Echo), as vLLM's code sends it, and that text
// (echoText):
//   - completions with max_tokens 0: the prompt only, nothing generated
//     (OpenAI's API does the same). With max_tokens above 0 the prompt comes
//     in the first token's chunk, which is a token event as it is;
//   - chat (vLLM's extension) whose last message has the reply's role
//     ("assistant", or with add_generation_prompt false the last message's
//     own) and some content: that content, in a chunk of its own for each
//     choice after the role chunk.
//
// vLLM's chat batch (chat_batch) echoes too, each conversation's last
// message's content before its choice's text, but only in its one JSON
// answer (it never streams): nothing is read of it (EchoNone; its
// messages' last element is a conversation, a list, never the message
// the chat rule looks for). Its record's counts come from the answer's
// usage, which vLLM counts without the echo; an answer without usage has
// its OSL estimated from the text, echo included: counted over, never
// under.
//
// The options are read as vLLM's pydantic models read them (pyBool: "echo":
// "yes" is true; a max_tokens of "0" is 0), and content as vLLM joins it
// (echoText). v is the request body, a JSON object, parsed from body (or a
// shallow copy of it: the text is read from body).
func echoOf(api meter.API, v *fastjson.Value, body []byte) (meter.Echo, meter.EchoText) {
	if pyBool(v.Get("echo")) != pyTrue {
		return meter.EchoNone, meter.EchoText{}
	}
	switch api {
	case meter.APICompletions:
		if mt := v.Get("max_tokens"); mt != nil && (mt.Type() == fastjson.TypeNumber && mt.GetFloat64() == 0 ||
			mt.Type() == fastjson.TypeString && strings.TrimSpace(string(mt.GetStringBytes())) == "0") {
			return meter.EchoOnly, echoText(api, body)
		}
	case meter.APIChat:
		var msgs []*fastjson.Value
		if m := v.Get("messages"); m != nil {
			msgs, _ = m.Array() // nil unless an array (Array of an absent member panics)
		}
		if len(msgs) == 0 || msgs[len(msgs)-1].Type() != fastjson.TypeObject {
			return meter.EchoNone, meter.EchoText{}
		}
		last := msgs[len(msgs)-1]
		role := "assistant" // vLLM's response_role, for add_generation_prompt true (its default)
		if pyBool(v.Get("add_generation_prompt")) == pyFalse {
			role = string(last.GetStringBytes("role"))
		}
		if string(last.GetStringBytes("role")) != role {
			return meter.EchoNone, meter.EchoText{}
		}
		if text := echoText(api, body); !text.Empty() {
			return meter.EchoChunk, text
		}
	}
	return meter.EchoNone, meter.EchoText{}
}

// echoText reads from a request body (a JSON object, whole: a body parsed
// shallow has its long strings emptied) the text its echo sends back:
//   - chat: the last message's content, as vLLM's chat_utils makes it for a
//     template that takes it as a string: a string, or the parts' texts
//     (text, input_text and output_text parts' text, a refusal part's
//     refusal, a thinking part's thinking, a tool_reference part's name,
//     a bare string), the empty ones left out, joined with "\n"; any other
//     part (an image) puts a placeholder line before the text;
//   - completions: the prompt, a string or an array of one string; of
//     several prompts or token ids the text is not known.
//
// A member named twice is read as fastjson reads it (the first), as in v.
// The body is walked, not parsed, and each string is unescaped into the
// digest a piece at a time (echoReader): a body of many megabytes
// costs a few walks over its text and no copy of it, whatever its shape.
func echoText(api meter.API, body []byte) meter.EchoText {
	var r echoReader
	name := "messages"
	if api == meter.APICompletions {
		name = "prompt"
	}
	in := valueOf(jsonwalk.SkipWS(b2s(body)), name)
	if api == meter.APICompletions {
		if len(in) > 0 && in[0] == '[' {
			n, first := 0, ""
			_, _ = jsonwalk.EachElement(in, 0, func(el string) {
				if n == 0 {
					first = el
				}
				n++
			})
			if in = ""; n == 1 {
				in = first
			}
		}
		if len(in) > 0 && in[0] == '"' {
			r.addString(rawValue(in))
		} else {
			r.t.SetUnknown()
		}
		return r.t
	}
	last := ""
	if len(in) > 0 && in[0] == '[' {
		_, _ = jsonwalk.EachElement(in, 0, func(el string) { last = el })
	}
	content := valueOf(last, "content")
	switch {
	case content == "":
	case content[0] == '"':
		r.addString(rawValue(content))
	case content[0] == '[':
		_, _ = jsonwalk.EachElement(content, 0, func(el string) {
			switch el[0] {
			case '"':
				r.addString(el)
			case '{':
				p := readEchoPart(el)
				switch {
				case rawIs(p.typ, "text"), rawIs(p.typ, "input_text"), rawIs(p.typ, "output_text"):
					r.addString(p.text)
				case rawIs(p.typ, "refusal"):
					r.addString(p.refusal)
				case rawIs(p.typ, "thinking"):
					r.addString(p.thinking)
				case rawIs(p.typ, "tool_reference"):
					// A tool's name, joined as a text (no placeholder).
					r.addString(p.name)
				default:
					r.t.AddOther()
				}
			default:
				r.t.AddOther()
			}
		})
	}
	return r.t
}

// echoPiece is how much of a string echoReader unescapes at a time.
const echoPiece = 512

// echoReader adds the strings echoText reads to the echo's text (t), each
// unescaped a piece at a time through buf (on echoText's stack, cleared
// once a body rather than once a string).
type echoReader struct {
	t   meter.EchoText
	buf [echoPiece + 8]byte // an escape ends at most 5 bytes past echoPiece
}

// addString adds, as a text part, the string whose raw JSON text (quotes
// included) is raw, unescaped as fastjson reads it; nothing when raw is no
// string or an empty one (an escape always makes at least a byte).
func (r *echoReader) addString(raw string) {
	if len(raw) < 2 || raw[0] != '"' {
		return
	}
	piece, rest := jsonwalk.UnescapeSome(r.buf[:0], raw[1:len(raw)-1], echoPiece)
	r.t.AddText(piece)
	for rest != "" {
		piece, rest = jsonwalk.UnescapeSome(r.buf[:0], rest, echoPiece)
		r.t.MoreText(piece)
	}
}

// echoPart is what echoText reads of a content part, in one walk over it:
// the raw values of the first members named type, text, refusal, thinking
// and name ("" for those it does not have).
type echoPart struct{ typ, text, refusal, thinking, name string }

func readEchoPart(el string) echoPart {
	var p echoPart
	_, _ = jsonwalk.EachMember(el, 0, func(key, val string, _ int) {
		var at *string
		switch {
		case keyIs(key, "type"):
			at = &p.typ
		case keyIs(key, "text"):
			at = &p.text
		case keyIs(key, "refusal"):
			at = &p.refusal
		case keyIs(key, "thinking"):
			at = &p.thinking
		case keyIs(key, "name"):
			at = &p.name
		default:
			return
		}
		if *at == "" {
			*at = val
		}
	})
	return p
}

// rawIs reports whether val, a raw JSON value, is the string s.
func rawIs(val, s string) bool {
	return len(val) >= 2 && val[0] == '"' && keyIs(val[1:len(val)-1], s)
}

// valueOf is the text of s from the value of the first member named name
// of the object at its start, to the end of s ("" when there is none, or s
// is no object): rawValue is that value alone. For a text known to parse
// (the request body, which fastjson or the shallow walk read whole).
func valueOf(s, name string) string {
	if len(s) == 0 || s[0] != '{' {
		return ""
	}
	return jsonwalk.ValueOf(s, func(key string) bool { return keyIs(key, name) })
}

// rawValue is the text of the JSON value at the start of s ("" when s
// starts none).
func rawValue(s string) string {
	tail, err := jsonwalk.Skip(s, 0)
	if err != nil {
		return ""
	}
	return s[:len(s)-len(tail)]
}

// A boolean as pydantic reads one in lax mode (vLLM's and SGLang's request
// models): true, 1, 1.0, or a string that is, lowercased, "1", "on", "t",
// "true", "y" or "yes"; false, 0, 0.0, or "0", "off", "f", "false", "n",
// "no"; anything else (absent, null, 2, "sure") is neither (absent: the
// default; otherwise the engine refuses the request).
const (
	pyNeither = iota
	pyTrue
	pyFalse
)

func pyBool(v *fastjson.Value) int {
	if v == nil {
		return pyNeither
	}
	switch v.Type() {
	case fastjson.TypeTrue:
		return pyTrue
	case fastjson.TypeFalse:
		return pyFalse
	case fastjson.TypeNumber:
		switch v.GetFloat64() {
		case 1:
			return pyTrue
		case 0:
			return pyFalse
		}
	case fastjson.TypeString:
		switch strings.ToLower(string(v.GetStringBytes())) {
		case "1", "on", "t", "true", "y", "yes":
			return pyTrue
		case "0", "off", "f", "false", "n", "no":
			return pyFalse
		}
	}
	return pyNeither
}

// fastjson's error for a value nested deeper than fastjson.MaxDepth, and
// the prefixes the parser puts before an error from inside an object or an
// array, one per level. Its errors have no type or value to test (they are
// made with fmt.Errorf, without %w), so the text is read, from its start:
// every part of the message before the innermost error is one of these
// fixed prefixes, while a part after it, or inside another error, may quote
// the body, which could hold the same words. TestDepthErrorText pins them.
const (
	fastjsonPrefix   = "cannot parse JSON: "
	fastjsonDepthErr = "too big depth for the nested JSON"
)

var fastjsonNesting = [...]string{"cannot parse object: ", "cannot parse object value: ", "cannot parse array: ", "cannot parse array value: "}

// isDepthError reports whether err, from fastjson's Parse, says the value
// nests too deeply, and nothing else.
func isDepthError(err error) bool {
	msg, ok := strings.CutPrefix(err.Error(), fastjsonPrefix)
	for ok {
		if strings.HasPrefix(msg, fastjsonDepthErr) {
			return true
		}
		ok = false
		for _, n := range fastjsonNesting {
			if rest, found := strings.CutPrefix(msg, n); found {
				msg, ok = rest, true
				break
			}
		}
	}
	return false
}

// usageOf classifies a request's stream_options (nil when absent).
func usageOf(so *fastjson.Value) usageAsk {
	if so == nil || so.Type() == fastjson.TypeNull {
		return usageNotAsked
	}
	if so.Type() != fastjson.TypeObject {
		return usageUnclear
	}
	if c := so.Get("continuous_usage_stats"); c != nil && !isBoolOrNull(c) {
		return usageUnclear
	}
	inc := so.Get("include_usage")
	switch {
	case inc == nil || inc.Type() == fastjson.TypeTrue:
		return usageAsked
	case inc.Type() == fastjson.TypeFalse || inc.Type() == fastjson.TypeNull:
		return usageNotAsked
	}
	return usageUnclear
}

func isBoolOrNull(v *fastjson.Value) bool {
	switch v.Type() {
	case fastjson.TypeTrue, fastjson.TypeFalse, fastjson.TypeNull:
		return true
	}
	return false
}

var includeUsageMember = []byte(`"stream_options":{"include_usage":true},`)

// injectUsage returns a body that asks the engine for a usage chunk
// (stream_options.include_usage=true), appended to dst, for a body whose
// usage is usageNotAsked. The common case, a body without stream_options,
// is edited in place of its bytes (one member inserted after the opening
// brace) so the engine sees the client's JSON otherwise unchanged; a body
// that has stream_options has that member's value edited in its text
// (spliceUsage). A continuous_usage_stats: true
// is turned to false: without include_usage the engine ignored it, and with
// it the engine would put usage on every chunk, which the client never
// asked for.
func injectUsage(dst, body []byte, v *fastjson.Value) []byte {
	if v.Get("stream_options") == nil {
		i := bytes.IndexByte(body, '{')
		if i < 0 {
			return append(dst, body...)
		}
		dst = append(dst, body[:i+1]...)
		rest := body[i+1:]
		if len(bytes.TrimSpace(rest)) > 0 && bytes.TrimSpace(rest)[0] == '}' {
			// "{}": no member follows, so no comma.
			dst = append(dst, includeUsageMember[:len(includeUsageMember)-1]...)
		} else {
			dst = append(dst, includeUsageMember...)
		}
		return append(dst, rest...)
	}
	// The body's own text is edited, whatever its size (v may be a
	// shallow copy of it: shallow.go). Written again by fastjson, a string
	// the parse had unescaped was quoted in Go's syntax where it holds a
	// control character or a character Go does not print (\x00, \v, \a,
	// \U000f0000), which is not JSON: the engine refused the request.
	return spliceUsage(dst, body, v.Get("stream_options"))
}

// stripNullUsage removes a top-level `"usage":null` member (and the comma
// that joins it to its neighbour) from a single-line SSE data event, in
// place, and returns the shortened slice.
//
// Some engines (OpenAI, several simulators) add "usage":null to every chunk
// once stream_options.include_usage is set. When the gateway, not the
// client, asked for usage, the client must still receive the bytes it would
// have received without the gateway, so the member is taken out again.
func stripNullUsage(ev []byte) []byte {
	start := bytes.IndexByte(ev, '{')
	if start < 0 {
		return ev
	}
	depth := 0
	inStr := false
	lastComma := -1 // index of the last depth-1 comma before the current key
	for i := start; i < len(ev); i++ {
		c := ev[i]
		if inStr {
			switch c {
			case '\\':
				i++
			case '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			if depth == 1 {
				if end, ok := matchNullUsage(ev, i); ok {
					return cutMember(ev, i, end, lastComma)
				}
			}
			inStr = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return ev
			}
		case ',':
			if depth == 1 {
				lastComma = i
			}
		}
	}
	return ev
}

// matchNullUsage reports whether ev[i:] starts with "usage" : null (spaces
// allowed) and returns the index just past "null".
func matchNullUsage(ev []byte, i int) (int, bool) {
	const key = `"usage"`
	if !bytes.HasPrefix(ev[i:], []byte(key)) {
		return 0, false
	}
	j := skipSpace(ev, i+len(key))
	if j >= len(ev) || ev[j] != ':' {
		return 0, false
	}
	j = skipSpace(ev, j+1)
	if !bytes.HasPrefix(ev[j:], []byte("null")) {
		return 0, false
	}
	return j + 4, true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	return i
}

// cutMember removes ev[keyStart:valEnd] plus one joining comma.
func cutMember(ev []byte, keyStart, valEnd, lastComma int) []byte {
	from, to := keyStart, valEnd
	if lastComma >= 0 && bytes.IndexAny(ev[lastComma:keyStart], "\r\n") < 0 {
		// Not the first member: take the comma before it (and the spaces
		// between comma and key, which belonged to this member).
		from = lastComma
	} else {
		// First member: take the comma after it and the spaces that follow.
		j := skipSpace(ev, to)
		if j < len(ev) && ev[j] == ',' {
			to = skipSpace(ev, j+1)
		}
	}
	n := copy(ev[from:], ev[to:])
	return ev[:from+n]
}
