package proxy

import (
	"bytes"
	"strconv"
	"strings"
	"unicode"

	"github.com/goodput/goodput/meter"
	"github.com/valyala/fastjson"
)

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

// paramsDuplicateKey returns, of a body on TGI's or SGLang's routes, the
// first member name that its parameters (TGI's) or sampling_params
// (SGLang's: an object, or a list of them, one a prompt) holds twice,
// with where it is ("sampling_params.n", "sampling_params[1].n"), or "".
// The gateway reads their max_new_tokens (charged at admission), best_of
// and n (which outputs are a prompt's first, its count taken once:
// nativeRequest) as fastjson does, the first value; SGLang, Python's json,
// reads the last (TGI refuses a duplicate field): so, as duplicateKey's,
// such a body is refused. With "n":2,"n":1 SGLang ran one sample a prompt,
// each second prompt counted as a sample of the first; with
// "max_new_tokens":1,"max_new_tokens":8000, 1 was charged.
//
// dupAt is reqInfo.paramsDupAt: of a large body's shallow copy, which keeps
// a few of a long list's elements, 1 + the body's place of the first
// element naming a member twice, the place said (it had said the copy's).
func paramsDuplicateKey(v *fastjson.Value, dupAt int) string {
	for _, name := range [...]string{"parameters", "sampling_params"} {
		ps := v.Get(name)
		if ps == nil {
			continue
		}
		switch ps.Type() {
		case fastjson.TypeObject:
			if k := dupIn(ps.GetObject()); k != "" {
				return name + "." + k
			}
		case fastjson.TypeArray:
			if name != "sampling_params" {
				continue // TGI's parameters is an object: a list, TGI refuses
			}
			for i, p := range ps.GetArray() {
				if o, err := p.Object(); err == nil {
					if k := dupIn(o); k != "" {
						if dupAt > 0 {
							i = dupAt - 1
						}
						return name + "[" + strconv.Itoa(i) + "]." + k
					}
				}
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

// foldedKey returns a member name of a request body on a route Ollama
// serves (foldedRoute) that Ollama reads otherwise than the gateway does,
// or "". Ollama decodes its requests (and, in its OpenAI and Anthropic
// middleware, those of the OpenAI-shaped routes) with Go's encoding/json,
// which matches a member to a field whatever its case, under Unicode's
// simple folding ("MODEL", "ſtream"), the last such member winning, while
// the gateway reads members as written. So these are refused, as a
// duplicate is:
//   - a top-level name that folds to another's ("Foo" after "foo"): Ollama
//     would read the one the gateway did not, or merge both objects
//     ("options" and "Options");
//   - a top-level name that folds to a member the gateway reads
//     (foldedNames) without being spelled so ("Model" alone: the model
//     Ollama runs, which the gateway's per-model limits never saw;
//     "MAX_TOKENS": 100000 on /v1/chat/completions, Ollama's limit, no
//     limit to the gateway);
//   - a name options holds twice (Go's map keeps the last num_predict, the
//     gateway the first).
func foldedKey(v *fastjson.Value) string {
	o, err := v.Object()
	if err != nil {
		return ""
	}
	k := ""
	o.Visit(func(name []byte, _ *fastjson.Value) {
		if k != "" {
			return
		}
		for _, read := range foldedNames {
			if string(name) != read && bytes.EqualFold(name, []byte(read)) {
				k = string(name)
				return
			}
		}
	})
	if k != "" {
		return k
	}
	if k := foldDupIn(o); k != "" {
		return k
	}
	if opts := v.Get("options"); opts != nil {
		if o, err := opts.Object(); err == nil {
			if k := dupIn(o); k != "" {
				return "options." + k
			}
		}
	}
	return ""
}

// foldedNames are the top-level members the gateway reads that Ollama
// reads too, whatever their case (foldedKey): the model, stream, Ollama's
// options, and what its OpenAI and Anthropic middleware read of the usage
// asked for and the output limit.
var foldedNames = [...]string{"model", "stream", "options", "stream_options", "max_tokens", "max_output_tokens"}

// foldedRoute reports whether Ollama serves api's route, and so reads its
// member names as foldedKey says: its own routes, and the OpenAI-shaped
// ones its middleware serves.
func foldedRoute(api meter.API) bool {
	switch api {
	case meter.APIOllamaChat, meter.APIOllamaGenerate, meter.APIChat, meter.APICompletions, meter.APIResponses, meter.APIMessages:
		return true
	}
	return false
}

// foldDupIn finds, in o, a member name that folds (bytes.EqualFold, as Go's
// encoding/json matches names) to an earlier one's: the later one. A large
// object is compared by each name's fold, not pair by pair.
func foldDupIn(o *fastjson.Object) string {
	n := o.Len()
	if n < 2 {
		return ""
	}
	dup := ""
	if n > 64 {
		seen := make(map[string]struct{}, n)
		o.Visit(func(k []byte, _ *fastjson.Value) {
			if dup != "" {
				return
			}
			f := foldName(k)
			if _, ok := seen[f]; ok {
				dup = string(k)
				return
			}
			seen[f] = struct{}{}
		})
		return dup
	}
	var keys [64][]byte
	i := 0
	o.Visit(func(k []byte, _ *fastjson.Value) {
		if dup != "" {
			return
		}
		for _, prev := range keys[:i] {
			if bytes.EqualFold(prev, k) {
				dup = string(k)
				return
			}
		}
		keys[i] = k
		i++
	})
	return dup
}

// foldName maps a name to one rune of each rune's simple-folding orbit (the
// smallest), so that two names are equal under bytes.EqualFold exactly when
// their foldNames are equal.
func foldName(k []byte) string {
	var b strings.Builder
	for _, r := range string(k) {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			m = min(m, f)
		}
		b.WriteRune(m)
	}
	return b.String()
}
