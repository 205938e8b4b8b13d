// Package jsonwalk walks JSON text as fastjson's parser walks it (the same
// values accepted, the same depth counted, fastjson.MaxDepth, the first
// failure at the same place) without building anything: fastjson builds
// every value, some 80 bytes each plus the slices that hold them, grown by
// appending, so that a text of small values costs about 140 times its size
// to parse (a request body of [0,0,0,...], an answer's logprobs). Its
// callers walk a large text first and have fastjson parse only what they
// read of it.
package jsonwalk

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/valyala/fastjson"
)

var (
	// ErrJSON: fastjson would not parse the text.
	ErrJSON = errors.New("not JSON as fastjson reads it")
	// ErrTooDeep: fastjson would not parse it only for nesting deeper than
	// fastjson.MaxDepth.
	ErrTooDeep = errors.New("nests deeper than fastjson reads")
)

// EachMember walks the object at the start of s (its '{' first), whose
// depth is depth (0 for the whole text's), as fastjson's parseObject does,
// calling fn with each member's raw name (as in the text, between its
// quotes), its value's text and where that starts in s; it returns the
// text after the object.
func EachMember(s string, depth int, fn func(key, val string, off int)) (string, error) {
	return EachMemberAt(s, depth, func(key string, _ int, val string, off int) { fn(key, val, off) })
}

// EachMemberAt is EachMember, calling fn also with where the member's raw
// name starts in s (after its opening quote).
func EachMemberAt(s string, depth int, fn func(key string, keyOff int, val string, off int)) (string, error) {
	in := s
	depth++
	s, empty, err := open(s, depth, '}')
	if err != nil || empty {
		return s, err
	}
	for {
		s = SkipWS(s)
		if len(s) == 0 || s[0] != '"' {
			return s, ErrJSON
		}
		keyOff := len(in) - len(s) + 1
		key, rest, err := rawKey(s[1:])
		if err != nil {
			return rest, err
		}
		s = SkipWS(rest)
		if len(s) == 0 || s[0] != ':' {
			return s, ErrJSON
		}
		s = SkipWS(s[1:])
		tail, err := Skip(s, depth)
		if err != nil {
			return tail, err
		}
		fn(key, keyOff, s[:len(s)-len(tail)], len(in)-len(s))
		rest, more, err := next(tail, '}')
		if err != nil || !more {
			return rest, err
		}
		s = rest
	}
}

// ValueOf returns the text of s from the value of the first member of the
// object at its start (its '{' first) whose raw name match accepts, to the
// end of s, having walked only the members before it (so that the caller
// walks that value once, not once to skip it and again to read it); ""
// when no member is accepted, or the text fails before one is. For a text
// known to parse: the members before it are walked as at depth 1.
func ValueOf(s string, match func(key string) bool) string {
	s = SkipWS(s[1:])
	if len(s) == 0 || s[0] == '}' {
		return ""
	}
	for {
		s = SkipWS(s)
		if len(s) == 0 || s[0] != '"' {
			return ""
		}
		key, rest, err := rawKey(s[1:])
		if err != nil {
			return ""
		}
		s = SkipWS(rest)
		if len(s) == 0 || s[0] != ':' {
			return ""
		}
		s = SkipWS(s[1:])
		if match(key) {
			return s
		}
		tail, err := Skip(s, 1)
		if err != nil {
			return ""
		}
		rest, more, err := next(tail, '}')
		if err != nil || !more {
			return ""
		}
		s = rest
	}
}

// Skip returns the text after the value at the start of s, which is at
// depth depth+1, walked as fastjson's parseValue walks it.
func Skip(s string, depth int) (string, error) {
	if len(s) == 0 {
		return s, ErrJSON
	}
	if depth+1 > fastjson.MaxDepth {
		return s, ErrTooDeep
	}
	switch s[0] {
	case '{':
		return EachMemberAt(s, depth, func(string, int, string, int) {})
	case '[':
		return EachElement(s, depth, func(string) {})
	case '"':
		_, tail, err := rawString(s[1:])
		return tail, err
	}
	return scalar(s)
}

// scalar returns the text after the literal or number at the start of s
// (s is not empty and starts no object, array or string).
func scalar(s string) (string, error) {
	switch s[0] {
	case 't':
		return literal(s, "true")
	case 'f':
		return literal(s, "false")
	case 'n':
		if len(s) >= 4 && s[:4] == "null" {
			return s[4:], nil
		}
		if len(s) >= 3 && strings.EqualFold(s[:3], "nan") {
			return s[3:], nil
		}
		return s, ErrJSON
	}
	return rawNumber(s)
}

func literal(s, lit string) (string, error) {
	if len(s) < len(lit) || s[:len(lit)] != lit {
		return s, ErrJSON
	}
	return s[len(lit):], nil
}

// next reads what follows a member of an object or an element of an
// array, as fastjson's parser reads it: a comma (more follows; the text
// after it) or the closing byte (the text after it, more false); anything
// else, or nothing, is ErrJSON (with the text from there).
func next(s string, closer byte) (rest string, more bool, err error) {
	s = SkipWS(s)
	switch {
	case len(s) == 0:
		return s, false, ErrJSON
	case s[0] == ',':
		return s[1:], true, nil
	case s[0] == closer:
		return s[1:], false, nil
	}
	return s, false, ErrJSON
}

// rawKey is fastjson's parseRawKey: a member name after its opening quote.
func rawKey(s string) (string, string, error) {
	for i := range len(s) {
		if s[i] == '"' {
			return s[:i], s[i+1:], nil
		}
		if s[i] == '\\' {
			return rawString(s)
		}
	}
	return s, "", ErrJSON
}

// rawString is fastjson's parseRawString: a string after its opening
// quote, up to the first quote not escaped by an odd run of backslashes.
func rawString(s string) (string, string, error) {
	ss := s
	for {
		n := strings.IndexByte(s, '"')
		if n < 0 {
			return ss, "", ErrJSON
		}
		i := n
		for i > 0 && s[i-1] == '\\' {
			i--
		}
		if (n-i)%2 == 0 {
			return ss[:len(ss)-len(s)+n], s[n+1:], nil
		}
		s = s[n+1:]
	}
}

// rawNumber is fastjson's parseRawNumber.
func rawNumber(s string) (string, error) {
	for i := range len(s) {
		ch := s[i]
		if (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == 'e' || ch == 'E' || ch == '+' {
			continue
		}
		if i == 0 || i == 1 && (s[0] == '-' || s[0] == '+') {
			if len(s[i:]) >= 3 {
				xs := s[i : i+3]
				if strings.EqualFold(xs, "inf") || strings.EqualFold(xs, "nan") {
					return s[i+3:], nil
				}
			}
			return s, ErrJSON
		}
		return s[i:], nil
	}
	return "", nil
}

// SkipWS is fastjson's: JSON's four whitespace bytes.
func SkipWS(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != ' ' && c != '\n' && c != '\t' && c != '\r' {
			return s[i:]
		}
	}
	return ""
}

// Unescape appends to dst a member name or string, raw as in the text
// (between its quotes), unescaped as fastjson unescapes it: its escapes
// decoded, and one it cannot decode (an unknown escape, a \u without four
// hex digits, a lone surrogate) kept as written.
func Unescape(dst []byte, raw string) []byte {
	for {
		n := strings.IndexByte(raw, '\\')
		if n < 0 {
			return append(dst, raw...)
		}
		dst, raw = unescapeOne(append(dst, raw[:n]...), raw[n+1:])
	}
}

// UnescapeSome is Unescape a piece at a time, so that a long string is
// read through a buffer of a few hundred bytes rather than copied whole:
// it appends to dst the unescaped text of the start of raw, up to n bytes
// appended (and at most 5 past n, the end of an escape), and returns the
// raw text not yet read. Pieces read in turn until the rest is empty
// append what Unescape appends; the rest is not empty only when dst got at
// least n bytes, so that each call reads something when n > 0.
func UnescapeSome(dst []byte, raw string, n int) ([]byte, string) {
	limit := len(dst) + n
	for len(raw) > 0 && len(dst) < limit {
		plain := raw[:min(len(raw), limit-len(dst))]
		k := strings.IndexByte(plain, '\\')
		if k < 0 {
			dst, raw = append(dst, plain...), raw[len(plain):]
			continue
		}
		dst, raw = unescapeOne(append(dst, raw[:k]...), raw[k+1:])
	}
	return dst, raw
}

// unescapeOne appends to dst the escape at the start of raw (what follows
// its backslash) as Unescape reads it, and returns the text after it. It
// appends at most 6 bytes.
func unescapeOne(dst []byte, raw string) ([]byte, string) {
	if len(raw) == 0 {
		return dst, raw // not in a raw string: its quote would be escaped
	}
	ch := raw[0]
	raw = raw[1:]
	switch ch {
	case '"', '\\', '/':
		dst = append(dst, ch)
	case 'b':
		dst = append(dst, '\b')
	case 'f':
		dst = append(dst, '\f')
	case 'n':
		dst = append(dst, '\n')
	case 'r':
		dst = append(dst, '\r')
	case 't':
		dst = append(dst, '\t')
	case 'u':
		x, ok := hex4(raw)
		if !ok {
			return append(dst, `\u`...), raw
		}
		xs := raw[:4]
		raw = raw[4:]
		if !utf16.IsSurrogate(x) {
			return utf8.AppendRune(dst, x), raw
		}
		var y rune
		if len(raw) >= 6 && raw[0] == '\\' && raw[1] == 'u' {
			y, ok = hex4(raw[2:])
		} else {
			ok = false
		}
		if !ok {
			return append(append(dst, `\u`...), xs...), raw
		}
		return utf8.AppendRune(dst, utf16.DecodeRune(x, y)), raw[6:]
	default:
		dst = append(dst, '\\', ch)
	}
	return dst, raw
}

// hex4 reads the four hex digits at the start of s.
func hex4(s string) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var x rune
	for i := range 4 {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		x = x<<4 | rune(c)
	}
	return x, true
}

// open enters the object or array at the start of s (its '{' or '[' first),
// at depth (counted with it), as fastjson's parseObject and parseArray do:
// it returns the text after the opening bracket and its white space, or,
// when closer ends it there (empty), the text after closer.
func open(s string, depth int, closer byte) (rest string, empty bool, err error) {
	if depth > fastjson.MaxDepth {
		return s, false, ErrTooDeep
	}
	s = SkipWS(s[1:])
	if len(s) == 0 {
		return s, false, ErrJSON
	}
	if s[0] == closer {
		return s[1:], true, nil
	}
	return s, false, nil
}

// EachElement walks the array at the start of s (its '[' first), whose
// depth is depth (0 for the whole text's), as fastjson's parseArray does,
// calling fn with each element's text; it returns the text after the
// array.
func EachElement(s string, depth int, fn func(val string)) (string, error) {
	depth++
	s, empty, err := open(s, depth, ']')
	if err != nil || empty {
		return s, err
	}
	for {
		s = SkipWS(s)
		tail, err := Skip(s, depth)
		if err != nil {
			return tail, err
		}
		fn(s[:len(s)-len(tail)])
		var more bool
		if s, more, err = next(tail, ']'); err != nil || !more {
			return s, err
		}
	}
}

// A Filter copies JSON text keeping only the object members a reader of
// it looks up by name (fastjson's Get), so that fastjson builds only
// those: every object is copied with only the members whose name (once
// unescaped) Index knows, and of each name only the first member and the
// first written as the name (Get finds one or the other, by whether the
// object's names were unescaped before). An array under a name of Walked
// is left as [] when empty and as [off] when not, off the place of its
// '[' in the text copied, for its reader to walk its elements there
// (EachElement) and copy each alone: fastjson then builds one element at
// a time, where a copy of them all would cost it some 100 bytes for each
// small one ({}). Any other array is left as [] or [0] (whether it is
// empty, which is all a reader of it may ask); numbers, strings and
// literals are kept as written. The top value, when an array, is left as
// one under a name of Walked.
type Filter struct {
	// Index returns a name's bit (0 to 63), or -1 for a name never read:
	// such members are left out.
	Index func(name string) int
	// Walked: the names (bit by Index) whose arrays are left as [off].
	Walked uint64
}

// copier is the state of one Copy.
type copier struct {
	*Filter
	name []byte // scratch for unescaping names
	end  int    // the copied text's length: the place of a rest r is end-len(r)
}

// Copy appends to dst the text s filtered (see Filter), compacted. It
// fails where fastjson would fail on s (dst then holds part of it).
func (f *Filter) Copy(dst []byte, s string) ([]byte, error) {
	c := copier{Filter: f, end: len(s)}
	dst, tail, err := c.copyValue(dst, SkipWS(s), 0, true)
	if err == nil && len(SkipWS(tail)) > 0 {
		err = ErrJSON
	}
	return dst, err
}

// copyValue copies the value at the start of s, at depth depth+1, left as
// [off] when it is an array and walked is true.
func (c *copier) copyValue(dst []byte, s string, depth int, walked bool) ([]byte, string, error) {
	if len(s) == 0 {
		return dst, s, ErrJSON
	}
	switch s[0] {
	case '{':
		return c.copyObject(dst, s, depth)
	case '[':
		tail, err := Skip(s, depth)
		if err != nil {
			return dst, tail, err
		}
		switch {
		case SkipWS(s[1:])[0] == ']':
			return append(dst, "[]"...), tail, nil
		case walked:
			dst = strconv.AppendInt(append(dst, '['), int64(c.end-len(s)), 10)
			return append(dst, ']'), tail, nil
		}
		return append(dst, "[0]"...), tail, nil
	}
	tail, err := Skip(s, depth)
	return append(dst, s[:len(s)-len(tail)]...), tail, err
}

// copyObject copies the object at the start of s (its '{' first), at
// depth depth+1, with only the members Index knows (see Filter).
func (c *copier) copyObject(dst []byte, s string, depth int) ([]byte, string, error) {
	depth++
	if depth > fastjson.MaxDepth {
		return dst, s, ErrTooDeep
	}
	dst = append(dst, '{')
	first := true
	var asWritten, unescaped uint64 // the names met: written so, and once unescaped
	s = SkipWS(s[1:])
	if len(s) == 0 {
		return dst, s, ErrJSON
	}
	if s[0] == '}' {
		return append(dst, '}'), s[1:], nil
	}
	for {
		s = SkipWS(s)
		if len(s) == 0 || s[0] != '"' {
			return dst, s, ErrJSON
		}
		key, rest, err := rawKey(s[1:])
		if err != nil {
			return dst, rest, err
		}
		s = SkipWS(rest)
		if len(s) == 0 || s[0] != ':' {
			return dst, s, ErrJSON
		}
		s = SkipWS(s[1:])
		i, written := -1, strings.IndexByte(key, '\\') < 0
		if written {
			i = c.Index(key)
		} else {
			c.name = Unescape(c.name[:0], key)
			i = c.Index(unsafe.String(unsafe.SliceData(c.name), len(c.name)))
		}
		keep := false
		if i >= 0 {
			bit := uint64(1) << i
			keep = unescaped&bit == 0 || written && asWritten&bit == 0
			unescaped |= bit
			if written {
				asWritten |= bit
			}
		}
		if keep {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = append(append(append(dst, '"'), key...), '"', ':')
			dst, s, err = c.copyValue(dst, s, depth, c.Walked&(1<<i) != 0)
		} else {
			s, err = Skip(s, depth)
		}
		if err != nil {
			return dst, s, err
		}
		var more bool
		if s, more, err = next(s, '}'); err != nil {
			return dst, s, err
		}
		if !more {
			return append(dst, '}'), s, nil
		}
	}
}

// KeyAt returns the raw name of the member whose name starts at off in s
// (as EachMemberAt reports it), in a text walked before.
func KeyAt(s string, off int) string {
	key, _, _ := rawKey(s[off:])
	return key
}
