package meter

import (
	"sync"
	"unsafe"

	"github.com/goodput/goodput/internal/jsonwalk"
	"github.com/valyala/fastjson"
)

// leanFrom is the size from which an answer (a non-streamed body, or one
// event) is parsed lean: fastjson builds every value, some 140 bytes per
// byte of small values, and the meter reads a few members of an answer,
// never the values that make it large. A memory probe of `goodput serve`:
// an engine's non-streamed answer of 8 MB of small values cost the gateway
// 8 CPU-seconds and a 1.8 GB peak RSS after the client had it; a client
// asks for as much with logprobs and top_logprobs on a long answer, token
// ids (return_token_ids), hidden states, or many choices. A variable for
// tests.
var leanFrom = 64 << 10

// readNames are the member names the meter reads of an answer, on any API
// and at any depth (the lean copy keeps them wherever they are): the
// top level's, a choice's, a delta's or message's, a usage object's, an
// error's. Only choices and TGI's best_of_sequences are read element by
// element; any other array only for whether it is empty.
var readNames = [...]string{
	"choices", "usage", "error", "object", "message", "type", "delta", "response", "status",
	"output", "content", "stop_reason", "done", "done_reason", "prompt_eval_count", "eval_count", "thinking",
	"tool_calls", "tokens_evaluated", "tokens_predicted", "index", "stop", "prompt_progress",
	"finish_reason", "text", "reasoning_content", "reasoning", "refusal", "function_call",
	"partial_json", "prompt_tokens", "completion_tokens", "input_tokens", "output_tokens",
	"cache_creation_input_tokens", "cache_read_input_tokens",
	// llama.cpp's timings, whose presence says an answer of several
	// choices has its first choice's usage alone (llamaCppTimings).
	"timings",
	// TGI's and SGLang's native answers.
	"token", "special", "generated_text", "details", "generated_tokens", "input_length",
	"meta_info", "output_ids", "best_of_sequences",
}

// readIndex is a name's place in readNames, or -1.
func readIndex(name string) int {
	for i, n := range readNames {
		if n == name {
			return i
		}
	}
	return -1
}

// leanFilter keeps what the meter reads of an answer: the members of
// readNames; the choices and best_of_sequences arrays (and an answer that
// is an array: llama.cpp's to several prompts) are left as where they are
// in the answer, for elements to read one element at a time.
var leanFilter = jsonwalk.Filter{Index: readIndex, Walked: 1<<0 | 1<<readIndex("best_of_sequences")}

// parseLean parses an answer with p: one larger than leanFrom as a copy
// of it with only what the meter reads (leanFilter), so it reads the
// same, and returns where the copy's walked arrays are (for elements; the
// zero leanText for an answer parsed whole). Text fastjson would not parse
// is parsed whole, for fastjson's own error.
func parseLean(p *fastjson.Parser, data []byte) (*fastjson.Value, leanText, error) {
	if len(data) > leanFrom {
		text := unsafe.String(unsafe.SliceData(data), len(data))
		lean, err := leanFilter.Copy(make([]byte, 0, 4<<10), text)
		if err == nil {
			v, err := p.ParseBytes(lean)
			return v, leanText{s: text}, err
		}
	}
	v, err := p.ParseBytes(data)
	return v, leanText{}, err
}

// leanText is where the walked arrays of a value parsed lean are: the
// text it was copied from (an answer's, or an element's), and for an
// element's the scratch a walk of its arrays uses. The zero value is a
// value parsed whole.
type leanText struct {
	s  string
	sc *elementScratch // nil: one is lent from elementScratches
}

// elementScratch is a parser and a buffer for the elements of one walk,
// and the scratch for the walks within its elements (a result's choices).
type elementScratch struct {
	p     fastjson.Parser
	buf   []byte
	inner *elementScratch
}

var elementScratches = sync.Pool{New: func() any { return new(elementScratch) }}

// elements calls fn with each element of arr, an array of a value
// parseLean parsed (an answer's choices, or the answer itself when an
// array), and with where the element's own walked arrays are, and returns
// how many elements arr has. Of a value parsed lean, arr is [] or [off],
// and its elements are at off in at.s: each is copied lean and parsed
// alone, valid until fn returns. fastjson so builds one element at a
// time: an answer of 500,000 choices {} built whole cost some 160 times
// its size, and kept a pooled parser's cache of as many values.
func elements(arr *fastjson.Value, at leanText, fn func(e *fastjson.Value, at leanText)) int {
	a, _ := arr.Array()
	if at.s == "" || len(a) == 0 {
		for _, e := range a {
			fn(e, leanText{})
		}
		return len(a)
	}
	sc := at.sc
	if sc == nil {
		sc = elementScratches.Get().(*elementScratch)
	}
	if sc.inner == nil {
		sc.inner = new(elementScratch)
	}
	n := 0
	// The answer was walked whole, depth included: its elements copy and
	// parse alone.
	_, _ = jsonwalk.EachElement(at.s[a[0].GetInt():], 0, func(s string) {
		n++
		var err error
		sc.buf, err = leanFilter.Copy(sc.buf[:0], s)
		if err != nil {
			return
		}
		if e, err := sc.p.ParseBytes(sc.buf); err == nil {
			fn(e, leanText{s: s, sc: sc.inner})
		}
	})
	if at.sc == nil {
		elementScratches.Put(sc)
	}
	return n
}
