package proxy

import (
	"strings"
	"unsafe"

	"github.com/goodput/goodput/internal/jsonwalk"
	"github.com/valyala/fastjson"
)

// A request body is read for a few top-level members (parseRequest), but
// fastjson builds every value of it, some 80 bytes each plus the slices
// that hold them, which it grows by appending: a body of small values
// costs about 140 times its size. Found by a memory probe of `goodput
// serve`: one 16 MiB body holding [0,0,0,...] (8 million values) made the
// gateway hold 2.3 GB and spend a minute of both CPUs in the collector
// (whose work grows with that heap, at gc_percent 10) before the engine saw
// it; a 2 MB body of a million values cost 3.6 CPU-seconds and 8 s of
// latency. A body larger than shallowFrom is therefore parsed shallow:
// its text is walked once without building anything, as fastjson's parser
// walks it (package jsonwalk: so it is valid, or too deep, exactly when
// fastjson says so),
// and fastjson parses a shallow copy of it instead, in which every value
// larger than keepWhole is an empty value of its type ("", [] or {}),
// except the model's string, which is read whole, and the members of a
// stream_options object, which are kept the same way. Every read the gateway
// makes of the body (the model, stream, background, the output limit,
// stream_options and what it says of usage, the member names a duplicate
// is looked for among) reads the same from the copy; a rewritten body
// (injectUsage) is the client's with stream_options edited in place.
// FuzzShallowRequest checks the two ways agree.
var (
	shallowFrom = 64 << 10
	keepWhole   = 4 << 10
)

// parseShallow parses body shallow (see above) with p; tooDeep says when it
// is refused only for nesting deeper than fastjson.MaxDepth.
func parseShallow(p *fastjson.Parser, body []byte) (v *fastjson.Value, err error) {
	s := jsonwalk.SkipWS(b2s(body))
	if len(s) == 0 || s[0] != '{' {
		// Not an object: valid or not, nothing of it is read.
		tail, err := jsonwalk.Skip(s, 0)
		if err == nil && len(jsonwalk.SkipWS(tail)) > 0 {
			err = jsonwalk.ErrJSON
		}
		if err != nil {
			return nil, err
		}
		return p.Parse("null")
	}
	doc := make([]byte, 0, 1024)
	doc = append(doc, '{')
	first := true
	tail, err := jsonwalk.EachMember(s, 0, func(key, val string, _ int) {
		if !first {
			doc = append(doc, ',')
		}
		first = false
		doc = append(append(append(doc, '"'), key...), `":`...)
		doc = shallowValue(doc, val, key, true)
	})
	if err == nil && len(jsonwalk.SkipWS(tail)) > 0 {
		err = jsonwalk.ErrJSON
	}
	if err != nil {
		return nil, err
	}
	return p.ParseBytes(append(doc, '}'))
}

// shallowValue appends val, a member's value under key (raw, as in the
// text), or the empty value of its type when it is larger than keepWhole
// (see above); top: a member of the body's object.
func shallowValue(doc []byte, val, key string, top bool) []byte {
	if len(val) <= keepWhole {
		return append(doc, val...)
	}
	switch val[0] {
	case '"':
		if top && (keyIs(key, "model") || keyIs(key, "max_tokens")) {
			// The model, and a max_tokens echoOf reads as a string.
			return append(doc, val...)
		}
		return append(doc, `""`...)
	case '[':
		if top && keyIs(key, "messages") {
			return shallowMessages(doc, val)
		}
		return append(doc, "[]"...)
	case '{':
		if !top || !keyIs(key, "stream_options") && !keyIs(key, "options") {
			return append(doc, "{}"...)
		}
		// stream_options, and Ollama's options (num_predict, and the
		// names foldedKey looks for a duplicate among).
		doc = append(doc, '{')
		first := true
		_, _ = jsonwalk.EachMember(val, 1, func(k, v string, _ int) {
			if !first {
				doc = append(doc, ',')
			}
			first = false
			doc = append(append(append(doc, '"'), k...), `":`...)
			doc = shallowValue(doc, v, k, false)
		})
		return append(doc, '}')
	}
	return append(doc, val...) // a number or a literal: one value
}

// shallowMessages appends a shallow copy of a messages array larger than
// keepWhole: its last message alone, whose role echoOf reads (it reads
// the content from the body's text), the rest emptied.
func shallowMessages(doc []byte, val string) []byte {
	last := ""
	_, _ = eachElement(val, func(el string) { last = el })
	doc = append(doc, '[')
	switch {
	case last == "":
	case len(last) <= keepWhole || last[0] != '{':
		doc = shallowValue(doc, last, "", false)
	default:
		doc = append(doc, '{')
		first := true
		_, _ = jsonwalk.EachMember(last, 0, func(k, v string, _ int) {
			if !first {
				doc = append(doc, ',')
			}
			first = false
			doc = append(append(append(doc, '"'), k...), `":`...)
			if v[0] == '"' && keyIs(k, "role") {
				doc = append(doc, v...) // one string, compared whole
			} else {
				doc = shallowValue(doc, v, k, false)
			}
		})
		doc = append(doc, '}')
	}
	return append(doc, ']')
}

// eachElement walks the array at the start of s (its '[' first), calling
// fn with each element's text; the text was walked whole before (depth is
// not counted again).
func eachElement(s string, fn func(el string)) (string, error) {
	s = jsonwalk.SkipWS(s[1:])
	if len(s) > 0 && s[0] == ']' {
		return s[1:], nil
	}
	for {
		s = jsonwalk.SkipWS(s)
		tail, err := jsonwalk.Skip(s, 0)
		if err != nil {
			return tail, err
		}
		fn(s[:len(s)-len(tail)])
		s = jsonwalk.SkipWS(tail)
		if len(s) == 0 {
			return s, jsonwalk.ErrJSON
		}
		if s[0] == ',' {
			s = s[1:]
			continue
		}
		if s[0] == ']' {
			return s[1:], nil
		}
		return s, jsonwalk.ErrJSON
	}
}

// keyIs reports whether a member name, raw as in the text, is name once
// unescaped as fastjson unescapes it.
func keyIs(raw, name string) bool {
	if strings.IndexByte(raw, '\\') < 0 {
		return raw == name
	}
	var p fastjson.Parser
	v, err := p.Parse(`"` + raw + `"`)
	return err == nil && string(v.GetStringBytes()) == name
}

// b2s is body as a string, without a copy: the body is not written while
// the string is read.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// spliceUsage is injectUsage for a body parsed shallow whose stream_options
// is there: the client's text with that member's value edited in place, as
// fastjson's Set would have it (include_usage true, replacing the first
// one or added; a continuous_usage_stats true made false; any other
// stream_options replaced by an object that asks for usage).
func spliceUsage(dst, body []byte, so *fastjson.Value) []byte {
	text := b2s(body)
	s := jsonwalk.SkipWS(text)
	at, end := -1, -1
	_, _ = jsonwalk.EachMember(s, 0, func(key, val string, off int) {
		if at < 0 && keyIs(key, "stream_options") {
			at = len(text) - len(s) + off
			end = at + len(val)
		}
	})
	if at < 0 {
		return append(dst, body...) // not reached: stream_options was read from body
	}
	if so.Type() != fastjson.TypeObject {
		dst = append(dst, body[:at]...)
		dst = append(dst, `{"include_usage":true}`...)
		return append(dst, body[end:]...)
	}
	val := text[at:end]
	inc, cus := [2]int{-1, -1}, [2]int{-1, -1}
	_, _ = jsonwalk.EachMember(val, 1, func(key, v string, off int) {
		switch {
		case inc[0] < 0 && keyIs(key, "include_usage"):
			inc = [2]int{at + off, at + off + len(v)}
		case cus[0] < 0 && keyIs(key, "continuous_usage_stats"):
			cus = [2]int{at + off, at + off + len(v)}
		}
	})
	// The edits, in the order of the text.
	type edit struct {
		from, to int
		with     string
	}
	var edits [2]edit
	n := 0
	if inc[0] >= 0 {
		edits[n] = edit{inc[0], inc[1], "true"}
	} else {
		with := `"include_usage":true`
		if len(jsonwalk.SkipWS(val[1:])) > 0 && jsonwalk.SkipWS(val[1:])[0] != '}' {
			with += ","
		}
		edits[n] = edit{at + 1, at + 1, with}
	}
	n++
	if c := so.Get("continuous_usage_stats"); c != nil && c.Type() == fastjson.TypeTrue {
		edits[n] = edit{cus[0], cus[1], "false"}
		n++
	}
	if n == 2 && edits[1].from < edits[0].from {
		edits[0], edits[1] = edits[1], edits[0]
	}
	last := 0
	for _, e := range edits[:n] {
		dst = append(dst, body[last:e.from]...)
		dst = append(dst, e.with...)
		last = e.to
	}
	return append(dst, body[last:]...)
}
