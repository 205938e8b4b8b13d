package proxy

import (
	"bytes"

	"github.com/goodput/goodput/internal/jsonwalk"
	"github.com/goodput/goodput/meter"
	"github.com/valyala/fastjson"
)

// A request may make the engine generate several outputs, each up to its
// output limit: n choices (OpenAI's chat and completions, vLLM, SGLang,
// llama.cpp's n_cmpl), best_of candidates (TGI's parameters; OpenAI's
// completions and vLLM before its V1 engine, both routes; current vLLM
// drops best_of as a member it does not know, and some V1 releases refuse
// it above 1), several prompts (a completions prompt that is a list of
// strings or of token lists, vLLM's prompt_embeds list, llama.cpp's
// /completion, SGLang's text, input_ids or input_embeds lists), and both
// at once: vLLM generates n for each prompt, llama.cpp n_cmpl for each,
// SGLang sampling_params.n for each. Charged at admission for one output,
// such a request took n times the tokens its tenant's tpm allows before
// the limit saw them. outputsOf counts them; ratelimit.EstimateRequest
// charges max_tokens (or the default) for each.
//
// Where the engines behind a route read a body differently, the count is
// the largest any of them would generate (a body of n_cmpl 1 and n 8 is 8
// on /v1/completions: llama.cpp reads n_cmpl, vLLM n): the admission
// charge is an upper bound, and the reconcile refunds what was not
// generated. Ollama reads no n, nor do the Responses and Messages APIs:
// one output. vLLM's chat batch generates each conversation as a chat
// request: its conversations times n (vLLM refuses an n above 1 there,
// counted all the same).

// maxCount bounds every count outputsOf reads, and their products: far
// more than any tpm (ratelimit counts at most one more output than its
// largest tpm allows tokens), far from what an int64 holds.
const maxCount = 1 << 50

// outputsOf returns how many outputs the engine generates for a request
// to api whose body is body, v its parse (or shallow copy: shallow.go);
// at least 1.
func outputsOf(api meter.API, v *fastjson.Value, body []byte) int64 {
	switch api {
	case meter.APIChat:
		return choices(v)
	case meter.APIChatBatch:
		return mulCount(conversations(v, body), choices(v))
	case meter.APICompletions:
		return mulCount(max(prompts(v, body, "prompt")+prompts(v, body, "prompt_embeds"), 1), choices(v))
	case meter.APILlamaCpp:
		return mulCount(max(prompts(v, body, "prompt"), 1), llamaChoices(v))
	case meter.APITGI, meter.APISGLang:
		switch {
		case notNull(v.Get("inputs")) && sglangInput(v):
			// Either engine may run it: the larger count (as its output
			// limit is the larger: nativeRequest).
			return max(tgiOutputs(v), sglangOutputs(v, body))
		case api == meter.APISGLang:
			return sglangOutputs(v, body)
		}
		return tgiOutputs(v)
	}
	return 1
}

// streamChoices returns how many choices a chat or completions stream of
// the request carries, as few as any engine serving the route that reads
// n would send (vLLM, SGLang and OpenAI read n, llama.cpp n_cmpl, else n:
// the smaller; TGI's completions route reads none, and its finish_reason
// of "" ends every choice, meter.EventInfo.ChoicesEnded;
// best_of is no stream's: OpenAI streams nothing with it, vLLM's V0
// engine only when it is n), times the prompts of a completions request's
// "prompt" (else of vLLM's "prompt_embeds"); 1 for any other API. The
// meter waits for each of them to end before it takes a stream without
// [DONE] for whole (meter.Meter.SetStreamChoices): a count too large
// would judge a whole stream cut, one too small only leaves some cut
// stream whole, as before. The engines number the choices from 0, a
// prompt's n one after the other: vLLM's completions prompt i's choice j
// i·n + j, llama.cpp's server each task in turn (server-queue.cpp,
// server_response_reader::post_tasks: a prompt's task, then its n_cmpl −
// 1 children), SGLang's each output by its place in the batch
// (tokenizer_manager.py, _stream_batch_responses).
func streamChoices(api meter.API, v *fastjson.Value, body []byte) int64 {
	if api != meter.APIChat && api != meter.APICompletions {
		return 1
	}
	n := int64(1)
	if c, ok := countOf(v.Get("n")); ok {
		n = c
	}
	n = min(n, int64(choicesPerPrompt(v)))
	if api == meter.APIChat {
		return n
	}
	p := prompts(v, body, "prompt")
	if p == 0 {
		p = prompts(v, body, "prompt_embeds")
	}
	return mulCount(max(p, 1), n)
}

// conversations returns how many conversations a request to vLLM's chat
// batch holds: the elements of its messages, a list of conversations
// (each a list of messages), each generated as a chat request of its own
// (BatchChatCompletionRequest.to_chat_completion_request); at least 1.
// vLLM refuses an element that is not a list (or, in later releases, an
// empty one): it is counted all the same, as the charge is an upper bound
// and the reconcile refunds what was not generated. Of a body parsed
// whole, from the parse; of one parsed shallow, whose messages the copy
// cut to their last element (shallow.messages), from the body's text,
// walked once without building anything (a million empty conversations,
// 3 MB, cost one walk and are charged each).
func conversations(v *fastjson.Value, body []byte) int64 {
	x := v.Get("messages")
	if x == nil || x.Type() != fastjson.TypeArray {
		return 1 // refused by vLLM (messages is required, a list)
	}
	if !parsedShallow(body) {
		arr, _ := x.Array()
		return max(min(int64(len(arr)), maxCount), 1)
	}
	raw := member(body, "messages")
	if len(raw) == 0 || raw[0] != '[' {
		return 1
	}
	n, _, _ := elements(raw)
	return max(n, 1)
}

// choices is the outputs a chat or completions request asks for each
// prompt: the largest of n (OpenAI, vLLM, SGLang), n_cmpl (llama.cpp's,
// before its alias n) and best_of (OpenAI's completions, vLLM V0).
func choices(v *fastjson.Value) int64 {
	n := int64(1)
	for _, name := range [...]string{"n", "n_cmpl", "best_of"} {
		if c, ok := countOf(v.Get(name)); ok {
			n = max(n, c)
		}
	}
	return n
}

// llamaChoices is the completions llama.cpp's server generates for each
// prompt: n_cmpl, else its alias n, else 1 (as choicesPerPrompt reads
// them, but not capped: the charge counts them all). An n_cmpl that is
// not a number is no count to llama.cpp (older servers read n in its
// place, json_value's default; newer ones refuse the request): then the
// largest of both.
func llamaChoices(v *fastjson.Value) int64 {
	x := v.Get("n_cmpl")
	if x != nil && x.Type() == fastjson.TypeNumber {
		c, _ := countOf(x) // NaN, which llama.cpp's parser refuses: 0
		return max(c, 1)
	}
	n := int64(1)
	for _, x := range [...]*fastjson.Value{x, v.Get("n")} {
		if c, ok := countOf(x); ok {
			n = max(n, c)
		}
	}
	return n
}

// tgiOutputs is the sequences TGI generates for its native body:
// parameters.best_of, else 1 (one input: "inputs" is a string).
func tgiOutputs(v *fastjson.Value) int64 {
	if c, ok := countOf(v.Get("parameters", "best_of")); ok {
		return c
	}
	return 1
}

// sglangOutputs is the outputs SGLang's /generate makes of a body: its
// prompts (GenerateReqInput's batch: text, else input_ids, else
// input_embeds), each sampling_params.n times (of a list of them, one a
// prompt, the largest: SGLang refuses a list whose n differ).
func sglangOutputs(v *fastjson.Value, body []byte) int64 {
	var batch int64 = 1
	switch {
	case notNull(v.Get("text")):
		// A string is one; a list, one an element.
		if l, ok := listIn(v, body, "text"); ok {
			batch = l.n
		}
	case notNull(v.Get("input_ids")):
		// A list of ids is one; a list of lists, one a list.
		if l, ok := listIn(v, body, "input_ids"); ok && !l.firstNumber {
			batch = l.n
		}
	case notNull(v.Get("input_embeds")):
		// A list of vectors is one; a list of lists of them, one a list.
		if l, ok := listIn(v, body, "input_embeds"); ok && l.firstList && !l.firstFirstNumber {
			batch = l.n
		}
	}
	n := int64(1)
	ps := v.Get("sampling_params")
	if ps != nil && ps.Type() == fastjson.TypeArray {
		arr, _ := ps.Array()
		for _, one := range arr {
			if c, ok := countOf(one.Get("n")); ok {
				n = max(n, c)
			}
		}
	} else if c, ok := countOf(v.Get("sampling_params", "n")); ok {
		n = c
	}
	return mulCount(max(batch, 1), n)
}

// prompts returns how many prompts the body's member name (a completions
// prompt, or vLLM's prompt_embeds) holds, as vLLM and llama.cpp's server
// read it: none when absent or null; one for a string, an object
// (llama.cpp's prompt with multimodal data) or a list that holds a number
// (token ids, or llama.cpp's mix of ids and strings); else one for each
// element of the list (strings, token lists, vLLM's prompt_embeds).
func prompts(v *fastjson.Value, body []byte, name string) int64 {
	x := v.Get(name)
	if !notNull(x) {
		return 0
	}
	l, ok := listIn(v, body, name)
	if !ok || l.number {
		return 1
	}
	return l.n
}

// A list: what outputsOf reads of one.
type list struct {
	n                int64 // its elements, at most maxCount
	number           bool  // whether one of them is a number
	firstNumber      bool  // whether the first is a number
	firstList        bool  // whether the first is a list
	firstFirstNumber bool  // whether that list's first element is a number
}

// listIn reads the list that is the body's member name, from v, the
// parse, when v holds it (read whole, or kept by the shallow copy: a list
// not empty), else from the body's text (a list the shallow copy emptied,
// or an empty one), so that an ordinary request walks no text. ok is
// false when the member is no list. The body is known to parse, with no
// member named twice (duplicateKey): v's member is the text's.
func listIn(v *fastjson.Value, body []byte, name string) (l list, ok bool) {
	x := v.Get(name)
	if x == nil || x.Type() != fastjson.TypeArray {
		return l, false
	}
	if arr, _ := x.Array(); len(arr) > 0 {
		l.n = min(int64(len(arr)), maxCount)
		for _, el := range arr {
			if el.Type() == fastjson.TypeNumber {
				l.number = true
				break
			}
		}
		l.firstNumber = arr[0].Type() == fastjson.TypeNumber
		if arr[0].Type() == fastjson.TypeArray {
			inner, _ := arr[0].Array() // (Array of another type allocates its error)
			l.firstList = true
			l.firstFirstNumber = len(inner) > 0 && inner[0].Type() == fastjson.TypeNumber
		}
		return l, true
	}
	raw := member(body, name)
	if len(raw) == 0 || raw[0] != '[' {
		return l, true // read whole, an empty list
	}
	var first string
	l.n, first, l.number = elements(raw)
	l.firstNumber = isNumber(first)
	if len(first) > 0 && first[0] == '[' {
		_, inner, _ := elements(first)
		l.firstList, l.firstFirstNumber = true, isNumber(inner)
	}
	return l, true
}

// elements walks the array at the start of raw (from a body known to
// parse) and returns its elements' count (at most maxCount), its first
// element's text and whether any element is a number.
func elements(raw string) (n int64, first string, number bool) {
	_, _ = jsonwalk.EachElement(raw, 1, func(el string) {
		if n == 0 {
			first = el
		}
		n = min(n+1, maxCount)
		number = number || isNumber(el)
	})
	return n, first, number
}

// isNumber reports whether el, a JSON value's text from a body known to
// parse, is a number (fastjson's: NaN and Inf too).
func isNumber(el string) bool {
	if el == "" {
		return false
	}
	switch el[0] {
	case '"', '[', '{':
		return false
	case 't', 'f':
		return false // true, false
	case 'n':
		return !isNull(el)
	}
	return true
}

func isNull(raw string) bool { return len(raw) >= 4 && raw[:4] == "null" }

// member is the JSON text of the body's first top-level member named name,
// from its value to the end of the body ("" when there is none), read from
// the body's text: a body parsed shallow has its large lists emptied
// (shallow.go). The body is known to parse, with no member named twice
// (duplicateKey).
func member(body []byte, name string) string {
	return valueOf(jsonwalk.SkipWS(b2s(body)), name)
}

// countOf reads a count as the engines read an int: a number (a fraction
// cut, as llama.cpp's server does; vLLM's pydantic refuses one), or a
// string as pydantic's lax mode reads one (laxCount: vLLM and SGLang read
// " +8.0 " as 8, "1_000" as 1000); below 1, one (vLLM refuses n 0,
// llama.cpp raises it to its least); above maxCount, maxCount. ok is false
// for anything else: absent, null, another type (read as absent, or
// refused by the engine).
func countOf(x *fastjson.Value) (n int64, ok bool) {
	if x == nil {
		return 0, false
	}
	switch x.Type() {
	case fastjson.TypeNumber:
		f := x.GetFloat64()
		switch {
		case f != f:
			return 0, false // NaN
		case f < 1:
			return 1, true
		case f >= maxCount:
			return maxCount, true
		}
		return int64(f), true
	case fastjson.TypeString:
		return laxCount(x.GetStringBytes())
	}
	return 0, false
}

// laxCount reads a string as pydantic-core's str_as_int does (laxInt), as
// a count: below 1, one; above maxCount, maxCount. ok is false for any
// other string.
func laxCount(s []byte) (n int64, ok bool) {
	n, neg, ok := laxInt(s)
	if !ok {
		return 0, false
	}
	if neg {
		return 1, true
	}
	return max(n, 1), true
}

// laxInt reads a string as pydantic-core's str_as_int does (trimmed of
// Unicode's white space, a sign, digits with single underscores between
// them, a fraction of zeros only: "8.0", and "8." in older releases): its
// magnitude, at most maxCount, and whether it is negative. It reads more
// than pydantic does (underscores anywhere after a digit): a count or a
// limit read too large only charges a request the engine refuses anyway,
// one read too small would let it pass the tpm. ok is false for any other
// string.
func laxInt(s []byte) (n int64, neg, ok bool) {
	s = bytes.TrimSpace(s) // Unicode's White_Space, as Rust's str::trim
	if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if len(s) == 0 || s[0] < '0' || s[0] > '9' {
		return 0, false, false
	}
	i := 0
	for ; i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '_'); i++ {
		if s[i] != '_' {
			n = min(n*10+int64(s[i]-'0'), maxCount)
		}
	}
	if i < len(s) {
		if s[i] != '.' {
			return 0, false, false
		}
		for _, c := range s[i+1:] {
			if c != '0' {
				return 0, false, false
			}
		}
	}
	return n, neg && n > 0, true
}

// mulCount is a × b (both at least 1), at most maxCount.
func mulCount(a, b int64) int64 {
	if a > maxCount/b {
		return maxCount
	}
	return min(a*b, maxCount)
}
