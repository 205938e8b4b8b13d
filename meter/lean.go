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
// error's. Only choices is read element by element; any other array only
// for whether it is empty.
var readNames = [...]string{
	"choices", "usage", "error", "object", "message", "type", "delta", "response", "status",
	"output", "content", "stop_reason", "done", "done_reason", "prompt_eval_count", "eval_count", "thinking",
	"tool_calls", "tokens_evaluated", "tokens_predicted", "index", "stop", "prompt_progress",
	"finish_reason", "text", "reasoning_content", "reasoning", "refusal", "function_call",
	"partial_json", "prompt_tokens", "completion_tokens", "input_tokens", "output_tokens",
	"cache_creation_input_tokens", "cache_read_input_tokens",
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
// readNames; the choices arrays (and an answer that is an array:
// llama.cpp's to several prompts) are left as where they are in the
// answer, for elements to read one element at a time.
var leanFilter = jsonwalk.Filter{Index: readIndex, Walked: 1 << 0}

// parseLean parses an answer with p: one larger than leanFrom as a copy
// of it with only what the meter reads (leanFilter), so it reads the
// same, and returns the answer's text then (for elements), else "". Text
// fastjson would not parse is parsed whole, for fastjson's own error.
func parseLean(p *fastjson.Parser, data []byte) (*fastjson.Value, string, error) {
	if len(data) > leanFrom {
		text := unsafe.String(unsafe.SliceData(data), len(data))
		lean, err := leanFilter.Copy(make([]byte, 0, 4<<10), text)
		if err == nil {
			v, err := p.ParseBytes(lean)
			return v, text, err
		}
	}
	v, err := p.ParseBytes(data)
	return v, "", err
}

// elementScratch: a parser and a buffer for elements, lent for one walk.
type elementScratch struct {
	p   fastjson.Parser
	buf []byte
}

var elementScratches = sync.Pool{New: func() any { return new(elementScratch) }}

// elements calls fn with each element of arr, an array of an answer
// parseLean parsed (its choices, or the answer itself when an array), and
// with the text the element's own choices are in (for elements, "" when
// the answer was parsed whole), and returns how many elements arr has. Of
// an answer parsed lean, arr is [] or [off], and its elements are at off
// in text: each is copied lean and parsed alone, valid until fn returns.
// fastjson so builds one element at a time: an answer of 500,000 choices
// {} built whole cost some 160 times its size, and kept a pooled parser's
// cache of as many values.
func elements(arr *fastjson.Value, text string, fn func(e *fastjson.Value, text string)) int {
	a, _ := arr.Array()
	if text == "" || len(a) == 0 {
		for _, e := range a {
			fn(e, "")
		}
		return len(a)
	}
	sc := elementScratches.Get().(*elementScratch)
	n := 0
	// The answer was walked whole, depth included: its elements copy and
	// parse alone.
	_, _ = jsonwalk.EachElement(text[a[0].GetInt():], 0, func(s string) {
		n++
		var err error
		sc.buf, err = leanFilter.Copy(sc.buf[:0], s)
		if err != nil {
			return
		}
		if e, err := sc.p.ParseBytes(sc.buf); err == nil {
			fn(e, s)
		}
	})
	elementScratches.Put(sc)
	return n
}
