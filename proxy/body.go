package proxy

import "github.com/valyala/fastjson"

// duplicateKey returns the first member name that a request body's
// top-level object (or its stream_options object) holds twice, or "".
//
// JSON parsers disagree on duplicates: fastjson, and so the gateway's
// limits, read the first value, while the engines' Python json reads the
// last. A body with a duplicate could be charged as one request and run as
// another, so the gateway refuses it.
func duplicateKey(v *fastjson.Value) string {
	o, err := v.Object()
	if err != nil {
		return ""
	}
	if k := dupIn(o); k != "" {
		return k
	}
	if so := v.Get("stream_options"); so != nil {
		if o, err := so.Object(); err == nil {
			if k := dupIn(o); k != "" {
				return "stream_options." + k
			}
		}
	}
	return ""
}

// dupIn finds a repeated member name in o. Request bodies have a few dozen
// members at most, so a quadratic scan without a map costs less than
// hashing; a larger object falls back to a set.
func dupIn(o *fastjson.Object) string {
	n := o.Len()
	if n < 2 {
		return ""
	}
	if n > 64 {
		seen := make(map[string]struct{}, n)
		dup := ""
		o.Visit(func(k []byte, _ *fastjson.Value) {
			if dup != "" {
				return
			}
			if _, ok := seen[string(k)]; ok {
				dup = string(k)
				return
			}
			seen[string(k)] = struct{}{}
		})
		return dup
	}
	var keys [64][]byte
	i := 0
	dup := ""
	o.Visit(func(k []byte, _ *fastjson.Value) {
		if dup != "" {
			return
		}
		for _, prev := range keys[:i] {
			if string(prev) == string(k) {
				dup = string(k)
				return
			}
		}
		keys[i] = k
		i++
	})
	return dup
}
