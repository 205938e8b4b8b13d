package proxy

import (
	"hash/maphash"
	"math/bits"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
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
// except the model's string, an output limit's (max_tokens,
// max_completion_tokens, max_output_tokens) and a count's (n, n_cmpl,
// best_of), which are read whole, a prompt's string,
// which is kept only as empty or not, and the objects the gateway reads
// members of (the body's, stream_options, options, the last message),
// which keep only those members (and those that make a duplicate, or
// that Ollama's server reads as the prompt or the messages:
// shallow.object). Every read the gateway
// makes of the body (the model, stream, background, the output limit,
// the outputs asked for, stream_options and what it says of usage, the
// member names a duplicate is looked for among, whether Ollama answers it
// by loading the model) reads the same from the copy (the number of
// prompts, from lists the copy empties, is read from the body's own text:
// outputsOf); a rewritten body
// (injectUsage) is the client's with stream_options edited in place.
// FuzzShallowRequest checks the two ways agree.
var (
	shallowFrom = 64 << 10
	keepWhole   = 4 << 10
)

// parsedShallow reports whether parseRequest parses body shallow.
func parsedShallow(body []byte) bool { return len(body) > shallowFrom }

// parseShallow parses body shallow (see above) with p; tooDeep says when it
// is refused only for nesting deeper than fastjson.MaxDepth. dupAt is 1 +
// the place in the body's sampling_params list of its first element that
// names a member twice, when the copy keeps the list's elements in part
// (samplingParams), else 0: paramsDuplicateKey's argument.
func parseShallow(p *fastjson.Parser, body []byte) (v *fastjson.Value, dupAt int, err error) {
	s := jsonwalk.SkipWS(b2s(body))
	if len(s) == 0 || s[0] != '{' {
		// Not an object: valid or not, nothing of it is read.
		tail, err := jsonwalk.Skip(s, 0)
		if err == nil && len(jsonwalk.SkipWS(tail)) > 0 {
			err = jsonwalk.ErrJSON
		}
		if err != nil {
			return nil, 0, err
		}
		v, err := p.Parse("null")
		return v, 0, err
	}
	if uint64(len(s)) >= 1<<32-1 {
		// A duplicate's place is kept in 32 bits (dupFinder); no body
		// the gateway takes is so large.
		v, err := p.ParseBytes(body)
		return v, 0, err
	}
	sh := shallow{doc: make([]byte, 0, 1024)}
	tail, err := sh.object(s, 0, topNames[:], dupsFolded)
	if err == nil && len(jsonwalk.SkipWS(tail)) > 0 {
		err = jsonwalk.ErrJSON
	}
	if err != nil {
		return nil, 0, err
	}
	v, err = p.ParseBytes(sh.doc)
	return v, sh.dupAt, err
}

// The members the gateway reads of a body's object (parseRequest,
// choicesPerPrompt, nativeRequest, outputsOf, echoOf, injectUsage,
// invocationAPI, ollamaLoad), of its stream_options and Ollama's options,
// of TGI's parameters and SGLang's sampling_params, and of the last
// message (echoOf). A shallow copy keeps, of an object larger than
// keepWhole, only those (see shallow.object).
var (
	topNames = [...]string{"model", "stream", "background", "stream_options", "max_completion_tokens", "max_tokens",
		"max_output_tokens", "n_predict", "options", "echo", "add_generation_prompt", "messages", "n_cmpl", "n", "best_of", // choices
		"prompt", "prompt_embeds", // prompt: invocationAPI, ollamaLoad; prompt_embeds: invocationAPI
		"inputs", "parameters", "text", "input_ids", "input_embeds", "sampling_params", // generateAPI, newTokens
		"lora_path"} // sglangAdapter
	paramsNames        = [...]string{"max_new_tokens", "best_of", "n", "adapter_id"} // newTokens, tgiOutputs, sglangOutputs; best_of: TGI's, n: SGLang's (nativeRequest); adapter_id: TGI's (adapterOf)
	streamOptionsNames = [...]string{"include_usage", "continuous_usage_stats"}
	optionsNames       = [...]string{"num_predict"}
	messageNames       = [...]string{"role"}
)

// shallow builds the shallow copy of one body.
type shallow struct {
	doc         []byte
	p           *fastjson.Parser // reads a sampling_params list's elements (samplingParams)
	name, other []byte           // scratch: names unescaped
	fold        []byte           // scratch: a name's fold
	// dupAt: 1 + the place in sampling_params of its first element naming
	// a member twice, when samplingParams copied the list in part; else 0.
	dupAt int
}

// A member of an object kept in its shallow copy.
type keptMember struct {
	keyOff   int    // where its raw name starts in the object's text
	key, val string // raw name, and value ("" for one kept for a duplicate: null)
	name     string // its name among the names read, or "" (a duplicate)
}

// dups says which duplicate member names an object's shallow copy keeps
// (shallow.object).
type dups uint8

const (
	dupsNone   dups = iota // none: the object's names are not checked
	dupsExact              // duplicateKey's (dupIn)
	dupsFolded             // and foldedKey's (foldDupIn; names that fold to foldedNames)
)

// object appends to sh.doc a shallow copy of the object at the start of s
// (its '{' first; depth as jsonwalk.EachMember's), whose members the
// gateway reads by the names names, and returns the text after it. An
// object no larger than keepWhole is copied whole. Of a larger one, only
// the members a lookup by name (fastjson's Get) finds are kept: of each
// name read, the first member and the first written as the name (Get
// finds one or the other, by whether the object's names were unescaped
// before), each value copied as value does; and, when the object's names
// are checked for duplicates (d), the members that make the first
// duplicate (and with dupsFolded, the first pair of names that fold alike
// and the first name that folds to a name read but is not it, and the
// first that folds to prompt, and to messages, but is not it), their
// values null, so that the checks (and ollamaLoad) find in the copy what
// they find in the body. The rest is left out: a body of a hundred thousand small members
// cost 66 MB to parse for 1 MiB.
func (sh *shallow) object(s string, depth int, names []string, d dups) (string, error) {
	if len(s) <= keepWhole {
		tail, err := jsonwalk.Skip(s, depth)
		if err == nil {
			sh.doc = append(sh.doc, s[:len(s)-len(tail)]...)
		}
		return tail, err
	}
	var buf [2*len(topNames) + 8]keptMember
	kept := buf[:0]
	var asWritten, unescaped uint64
	f := dupFinder{s: s, sh: sh, folded: d == dupsFolded, foldsRead: d == dupsFolded, iE: -1, jE: -1, iF: -1, jF: -1, m: -1, load: [2]int{-1, -1}}
	tail, err := jsonwalk.EachMemberAt(s, depth, func(key string, keyOff int, val string, _ int) {
		name, written := key, strings.IndexByte(key, '\\') < 0
		if !written {
			sh.name = jsonwalk.Unescape(sh.name[:0], key)
			name = b2s(sh.name)
		}
		if d != dupsNone {
			f.add(keyOff, name)
		}
		for i, n := range names {
			if name != n {
				continue
			}
			bit := uint64(1) << i
			if unescaped&bit == 0 || written && asWritten&bit == 0 {
				kept = append(kept, keptMember{keyOff: keyOff, key: key, val: val, name: n})
			}
			unescaped |= bit
			if written {
				asWritten |= bit
			}
			break
		}
	})
	if err != nil {
		return tail, err
	}
	for _, at := range [...]int{f.iE, f.jE, f.iF, f.jF, f.m, f.load[0], f.load[1]} {
		if at < 0 || slices.ContainsFunc(kept, func(m keptMember) bool { return m.keyOff == at }) {
			continue
		}
		kept = append(kept, keptMember{keyOff: at, key: jsonwalk.KeyAt(s, at)})
	}
	slices.SortFunc(kept, func(a, b keptMember) int { return a.keyOff - b.keyOff })
	sh.doc = append(sh.doc, '{')
	for i, m := range kept {
		if i > 0 {
			sh.doc = append(sh.doc, ',')
		}
		sh.doc = append(append(append(sh.doc, '"'), m.key...), `":`...)
		if m.val == "" {
			sh.doc = append(sh.doc, "null"...)
			continue
		}
		sh.value(m.val, m.name, depth+1)
	}
	sh.doc = append(sh.doc, '}')
	return tail, nil
}

// value appends to sh.doc a shallow copy of val, the value of the member
// name (one of the names read) of an object at depth depth-1: whole when no
// larger than keepWhole, else the empty value of its type ("", [] or {}),
// but for what the gateway reads of it: the model's string, a limit's
// string (echoOf, limitValue: pydantic reads one with white space around
// its digits) and a count's string (countOf) whole, a
// prompt's string as "-" (only whether it is empty is read: ollamaLoad;
// echoOf reads the prompt from the body's own text), the messages' last
// one, stream_options' and options' members, TGI's parameters' and
// SGLang's sampling_params' max_new_tokens, best_of and n (of a list,
// those of the elements that decide the reads: samplingParams), a role's
// string whole
// (echoOf reads the last message's content from the body's own text:
// echoText).
// A number or a literal is one value, kept whole.
func (sh *shallow) value(val, name string, depth int) {
	if len(val) <= keepWhole {
		sh.doc = append(sh.doc, val...)
		return
	}
	switch val[0] {
	case '"':
		switch name {
		case "model", "max_tokens", "max_completion_tokens", "max_output_tokens", "role", "n", "n_cmpl", "best_of", "adapter_id", "lora_path":
			sh.doc = append(sh.doc, val...)
		case "prompt":
			sh.doc = append(sh.doc, `"-"`...) // the text is longer than its quotes
		default:
			sh.doc = append(sh.doc, `""`...)
		}
	case '[':
		switch name {
		case "messages":
			sh.messages(val, depth)
		case "sampling_params":
			sh.samplingParams(val, depth)
		case "lora_path":
			sh.loraPaths(val, depth)
		default:
			sh.doc = append(sh.doc, "[]"...)
		}
	case '{':
		switch name {
		case "stream_options":
			_, _ = sh.object(val, depth, streamOptionsNames[:], dupsExact)
		case "options":
			// Ollama's num_predict, and the names foldedKey looks for a
			// duplicate among.
			_, _ = sh.object(val, depth, optionsNames[:], dupsExact)
		case "parameters", "sampling_params":
			// TGI's and SGLang's max_new_tokens (newTokens), TGI's
			// best_of and SGLang's n (outputsOf, nativeRequest).
			_, _ = sh.object(val, depth, paramsNames[:], dupsExact)
		default:
			sh.doc = append(sh.doc, "{}"...)
		}
	default:
		sh.doc = append(sh.doc, val...)
	}
}

// samplingParams appends a shallow copy of SGLang's sampling_params list
// (one a prompt) larger than keepWhole: of its elements (each object with
// its max_new_tokens and n alone, paramsNames), those that decide what is
// read of the whole list, in their order: the first (samplesPerPrompt
// reads its n), the first without a limit (maxNewTokens), the first with
// the largest, the first with the largest n (countOf), the first naming a
// member twice (paramsDuplicateKey). So newTokens reads the largest limit
// (or none), sglangOutputs the largest n, samplesPerPrompt the first's,
// and paramsDuplicateKey the first duplicate, as they do of the whole
// body (a copy of [] read as none charged the default, however large the
// prompts' limits), and fastjson builds five elements, not each of a list
// of millions (a copy of every one cost 147 times the body: 1.7 GB for 12
// MB of {}). Each element's copy is read alone, with a parser of its own.
func (sh *shallow) samplingParams(val string, depth int) {
	const first, none, largest, mostN, dup = 0, 1, 2, 3, 4
	var picks [5]pickedElement
	for i := range picks {
		picks[i].at = -1
	}
	if sh.p == nil {
		sh.p = new(fastjson.Parser)
	}
	var most, mostCount int64 = -1, -1
	at := 0
	_, _ = jsonwalk.EachElement(val, 0, func(el string) {
		start := len(sh.doc)
		if el[0] == '{' {
			_, _ = sh.object(el, depth+1, paramsNames[:], dupsExact)
		} else {
			sh.value(el, "", depth+1)
		}
		text := sh.doc[start:]
		pick := func(i int) { picks[i].at, picks[i].text = at, append(picks[i].text[:0], text...) }
		if one, err := sh.p.ParseBytes(text); err == nil {
			// As samplesPerPrompt, newTokens, sglangOutputs and
			// paramsDuplicateKey read it.
			if at == 0 {
				pick(first)
			}
			switch m := int64(maxNewTokens(one)); {
			case m < 0 && picks[none].at < 0:
				pick(none)
			case m > most:
				most = m
				pick(largest)
			}
			if c, ok := countOf(one.Get("n")); ok && c > mostCount {
				mostCount = c
				pick(mostN)
			}
			if one.Type() == fastjson.TypeObject && picks[dup].at < 0 && dupIn(one.GetObject()) != "" {
				pick(dup)
			}
		}
		sh.doc = sh.doc[:start]
		at++
	})
	if picks[dup].at >= 0 {
		// The copy's first such element, its place in the copy fewer
		// (only the picks before it are kept): paramsDuplicateKey names
		// the body's.
		sh.dupAt = picks[dup].at + 1
	}
	slices.SortFunc(picks[:], func(a, b pickedElement) int { return a.at - b.at })
	sh.doc = append(sh.doc, '[')
	last := -1
	for _, p := range picks {
		if p.at < 0 || p.at == last {
			continue
		}
		if last >= 0 {
			sh.doc = append(sh.doc, ',')
		}
		sh.doc = append(sh.doc, p.text...)
		last = p.at
	}
	sh.doc = append(sh.doc, ']')
}

// loraPaths appends a shallow copy of SGLang's lora_path list (one
// adapter a prompt) larger than keepWhole: of its elements, those that
// decide what sglangAdapter and loraNames read of the whole list, in their
// order: the first naming each different adapter (its string unescaped;
// null and "" alike), up to maxBatchAdapters+1 of them, and the first that
// is neither a string nor null. So sglangAdapter reads one adapter,
// several, or none, and loraNames the same names, as of the whole body,
// and fastjson builds a few elements, not each of a list of millions. A
// string is kept whole: it is the adapter's name.
func (sh *shallow) loraPaths(val string, depth int) {
	type pick struct {
		el     string
		named  bool // a string or null, its name sh.other[lo:hi]
		lo, hi int
	}
	var picks [maxBatchAdapters + 2]pick
	n, distinct, odd := 0, 0, false
	sh.other = sh.other[:0]
	_, _ = jsonwalk.EachElement(val, 0, func(el string) {
		var name []byte
		switch el[0] {
		case '"':
			sh.name = jsonwalk.Unescape(sh.name[:0], el[1:len(el)-1])
			name = sh.name
		case 'n':
		default:
			if !odd {
				odd = true
				picks[n] = pick{el: el}
				n++
			}
			return
		}
		if distinct > maxBatchAdapters {
			return
		}
		for _, p := range picks[:n] {
			if p.named && string(sh.other[p.lo:p.hi]) == string(name) {
				return
			}
		}
		lo := len(sh.other)
		sh.other = append(sh.other, name...)
		picks[n] = pick{el: el, named: true, lo: lo, hi: len(sh.other)}
		n++
		distinct++
	})
	sh.doc = append(sh.doc, '[')
	for i, p := range picks[:n] {
		if i > 0 {
			sh.doc = append(sh.doc, ',')
		}
		if p.named {
			sh.doc = append(sh.doc, p.el...)
		} else {
			sh.value(p.el, "", depth+1)
		}
	}
	sh.doc = append(sh.doc, ']')
}

// pickedElement is an element samplingParams keeps: its place in the list
// (-1 for none) and its copy.
type pickedElement struct {
	at   int
	text []byte
}

// messages appends a shallow copy of a messages array larger than
// keepWhole: its last message alone, whose role echoOf reads (it reads the
// content from the body's text: echoText).
func (sh *shallow) messages(val string, depth int) {
	last := ""
	_, _ = jsonwalk.EachElement(val, 0, func(el string) { last = el })
	sh.doc = append(sh.doc, '[')
	switch {
	case last == "":
	case last[0] == '{':
		_, _ = sh.object(last, depth+1, messageNames[:], dupsNone)
	default:
		sh.value(last, "", depth+1)
	}
	sh.doc = append(sh.doc, ']')
}

// dupFinder finds, in one walk of an object's members, the first member
// whose name (unescaped) another before it has (iE, jE: the pair that
// dupIn finds), and with folded the first whose name folds to another's
// before it as bytes.EqualFold folds (iF, jF: foldDupIn's), and the first
// that folds to one of foldedNames but is not it (m), and the first
// that folds to prompt, and to messages, but is not it (load, read by
// ollamaLoad): each a member's name's place in the object's text s, or
// -1. The names met are
// kept in an open-addressed table of their places, hashed by their fold
// until a pair that folds alike is found (so far all names are different),
// then by the name, until a duplicate: at most 4 bytes a name, and every
// name compared with few others.
type dupFinder struct {
	s                 string
	sh                *shallow
	folded            bool     // names hashed by their fold: no pair folds alike yet
	foldsRead         bool     // m is looked for
	table             []uint32 // places+1 (and hash bits from shift on), 0 for none
	shift             uint
	n                 int
	iE, jE, iF, jF, m int
	load              [2]int
}

// seed keys the table's hash: a client cannot choose names that collide.
var seed = maphash.MakeSeed()

// add notes the member whose raw name starts at off and whose name,
// unescaped, is name.
func (f *dupFinder) add(off int, name string) {
	if f.foldsRead && f.m < 0 {
		// Looked for after a pair that folds alike, or a duplicate, too:
		// foldedKey names this one before those.
		for _, read := range foldedNames {
			if name != read && strings.EqualFold(name, read) {
				f.m = off
				break
			}
		}
	}
	if f.foldsRead {
		for i, read := range [...]string{"prompt", "messages"} {
			if f.load[i] < 0 && name != read && strings.EqualFold(name, read) {
				f.load[i] = off
			}
		}
	}
	if f.jE >= 0 || name == "" {
		// Found: the rest is not looked at. A repeated empty name is
		// passed over, as dupIn and foldDupIn pass over it (the gateway
		// reads no member so named), to find the duplicate after it.
		return
	}
	if f.table == nil {
		f.table = make([]uint32, 64)
		// A place takes the low bits of an entry, and the name's hash's
		// high bits the rest: most names met are told apart by them.
		f.shift = uint(bits.Len(uint(len(f.s) + 1)))
	}
	h := f.hash(name)
	e := f.entry(off, h)
	mask := uint64(len(f.table) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		got := f.table[i]
		if got == 0 {
			f.table[i] = e
			break
		}
		if got>>f.shift != e>>f.shift {
			continue // another hash
		}
		at := int(got&(1<<f.shift-1)) - 1
		other := f.nameAt(at)
		if f.folded && strings.EqualFold(other, name) {
			f.iF, f.jF = at, off
			f.folded = false
			if other == name {
				f.iE, f.jE = at, off
				f.table = nil
				return
			}
			f.rehash()
			f.add(off, name)
			return
		}
		if !f.folded && other == name {
			f.iE, f.jE = at, off
			f.table = nil
			return
		}
	}
	if f.n++; f.n*4 > len(f.table)*3 {
		f.rehash()
	}
}

// entry is the table's entry for the member whose name starts at off and
// hashes to h.
func (f *dupFinder) entry(off int, h uint64) uint32 {
	e := uint32(off + 1)
	if f.shift < 32 {
		e |= uint32(h>>(32+f.shift)) << f.shift
	}
	return e
}

// rehash puts the table's names in a new table, hashed as they are now
// (by fold or by name), twice as large when it is three quarters full.
func (f *dupFinder) rehash() {
	old := f.table
	size := len(old)
	if f.n*4 > size*3 {
		size *= 2
	}
	f.table = make([]uint32, size)
	mask := uint64(size - 1)
	for _, e := range old {
		if e == 0 {
			continue
		}
		off := int(e&(1<<f.shift-1)) - 1
		h := f.hash(f.nameAt(off))
		i := h & mask
		for f.table[i] != 0 {
			i = (i + 1) & mask
		}
		f.table[i] = f.entry(off, h)
	}
}

// nameAt is the name, unescaped, of the member whose raw name starts at
// off (valid until the next call).
func (f *dupFinder) nameAt(off int) string {
	key := jsonwalk.KeyAt(f.s, off)
	if strings.IndexByte(key, '\\') < 0 {
		return key
	}
	f.sh.other = jsonwalk.Unescape(f.sh.other[:0], key)
	return b2s(f.sh.other)
}

// hash hashes a name, or its fold: each rune the least of those it folds
// to (foldName), so that names equal under strings.EqualFold hash alike.
func (f *dupFinder) hash(name string) uint64 {
	if !f.folded {
		return maphash.String(seed, name)
	}
	b := f.sh.fold[:0]
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z':
			r -= 'a' - 'A' // the least of its orbit ('K' before 'k' and the Kelvin sign)
		case r >= utf8.RuneSelf:
			least := r
			for g := unicode.SimpleFold(r); g != r; g = unicode.SimpleFold(g) {
				least = min(least, g)
			}
			r = least
		}
		b = utf8.AppendRune(b, r)
	}
	f.sh.fold = b
	return maphash.Bytes(seed, b)
}

// keyIs reports whether a member name, raw as in the text, is name once
// unescaped as fastjson unescapes it.
func keyIs(raw, name string) bool {
	if strings.IndexByte(raw, '\\') < 0 {
		return raw == name
	}
	if len(raw) > 6*len(name) {
		return false // an escape is at most 6 bytes for 1 unescaped: too long to be name, and not unescaped
	}
	var buf [96]byte
	return string(jsonwalk.Unescape(buf[:0], raw)) == name
}

// b2s is body as a string, without a copy: the body is not written while
// the string is read.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// spliceUsage is injectUsage for a body whose stream_options is there (so
// is its value, of the whole parse or of a shallow copy): the client's
// text with that member's value edited in place, as
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
