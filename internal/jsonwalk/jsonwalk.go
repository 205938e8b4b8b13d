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
	"strings"

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
	in := s
	depth++
	if depth > fastjson.MaxDepth {
		return s, ErrTooDeep
	}
	s = SkipWS(s[1:])
	if len(s) == 0 {
		return s, ErrJSON
	}
	if s[0] == '}' {
		return s[1:], nil
	}
	for {
		s = SkipWS(s)
		if len(s) == 0 || s[0] != '"' {
			return s, ErrJSON
		}
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
		fn(key, s[:len(s)-len(tail)], len(in)-len(s))
		s = SkipWS(tail)
		if len(s) == 0 {
			return s, ErrJSON
		}
		if s[0] == ',' {
			s = s[1:]
			continue
		}
		if s[0] == '}' {
			return s[1:], nil
		}
		return s, ErrJSON
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
		return EachMember(s, depth, func(string, string, int) {})
	case '[':
		return skipArray(s[1:], depth+1)
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

// skipArray is fastjson's parseArray, after its '['.
func skipArray(s string, depth int) (string, error) {
	s = SkipWS(s)
	if len(s) == 0 {
		return s, ErrJSON
	}
	if s[0] == ']' {
		return s[1:], nil
	}
	for {
		var err error
		s, err = Skip(SkipWS(s), depth)
		if err != nil {
			return s, err
		}
		s = SkipWS(s)
		if len(s) == 0 {
			return s, ErrJSON
		}
		if s[0] == ',' {
			s = s[1:]
			continue
		}
		if s[0] == ']' {
			return s[1:], nil
		}
		return s, ErrJSON
	}
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

// Without appends to dst the JSON text s, compacted, with the value of
// every object member whose raw name drop reports made null, at any depth:
// what fastjson then parses of it is what it parses of s but for those
// values. It fails where fastjson would fail on s (dst then holds part of
// it).
func Without(dst []byte, s string, drop func(key string) bool) ([]byte, error) {
	dst, tail, err := copyValue(dst, SkipWS(s), 0, drop)
	if err == nil && len(SkipWS(tail)) > 0 {
		err = ErrJSON
	}
	return dst, err
}

// copyValue is Skip, appending the value to dst as Without does.
func copyValue(dst []byte, s string, depth int, drop func(string) bool) ([]byte, string, error) {
	if len(s) == 0 {
		return dst, s, ErrJSON
	}
	depth++
	if depth > fastjson.MaxDepth {
		return dst, s, ErrTooDeep
	}
	switch s[0] {
	case '{':
		return copyObject(append(dst, '{'), s[1:], depth, drop)
	case '[':
		return copyArray(append(dst, '['), s[1:], depth, drop)
	case '"':
		_, tail, err := rawString(s[1:])
		return append(dst, s[:len(s)-len(tail)]...), tail, err
	}
	tail, err := scalar(s)
	return append(dst, s[:len(s)-len(tail)]...), tail, err
}

// copyObject is fastjson's parseObject after its '{', appending to dst.
func copyObject(dst []byte, s string, depth int, drop func(string) bool) ([]byte, string, error) {
	s = SkipWS(s)
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
		dst = append(append(append(dst, '"'), key...), '"', ':')
		if drop(key) {
			s, err = Skip(s, depth)
			dst = append(dst, "null"...)
		} else {
			dst, s, err = copyValue(dst, s, depth, drop)
		}
		if err != nil {
			return dst, s, err
		}
		s = SkipWS(s)
		if len(s) == 0 {
			return dst, s, ErrJSON
		}
		if s[0] == ',' {
			dst = append(dst, ',')
			s = s[1:]
			continue
		}
		if s[0] == '}' {
			return append(dst, '}'), s[1:], nil
		}
		return dst, s, ErrJSON
	}
}

// copyArray is fastjson's parseArray after its '[', appending to dst.
func copyArray(dst []byte, s string, depth int, drop func(string) bool) ([]byte, string, error) {
	s = SkipWS(s)
	if len(s) == 0 {
		return dst, s, ErrJSON
	}
	if s[0] == ']' {
		return append(dst, ']'), s[1:], nil
	}
	for {
		var err error
		dst, s, err = copyValue(dst, SkipWS(s), depth, drop)
		if err != nil {
			return dst, s, err
		}
		s = SkipWS(s)
		if len(s) == 0 {
			return dst, s, ErrJSON
		}
		if s[0] == ',' {
			dst = append(dst, ',')
			s = s[1:]
			continue
		}
		if s[0] == ']' {
			return append(dst, ']'), s[1:], nil
		}
		return dst, s, ErrJSON
	}
}
