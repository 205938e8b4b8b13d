package jsonwalk

import (
	"errors"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

var seeds = []string{
	`{"a":1}`, `[1,2,[3]]`, `"x"`, `nan`, `-Inf`, `+inf`, `1e5`, `true`, `nul`, `{"a":1} x`, `{"a":1,}`,
	`{"a" 1}`, `{"a":1`, `{"a":tru}`, `{,}`, `{`, `}`, ` `, ``, `{"a\"b":"c\\\\\"d"}`, `{"mo\u0064el":"x"}`,
	`{"logprobs":[1,2,{"a":3}],"b":{"logprobs":null,"c":[{"token_ids":[1]}]}}`,
	`[` + strings.Repeat(`[`, 298) + strings.Repeat(`]`, 299),
	`[` + strings.Repeat(`[`, 299) + strings.Repeat(`]`, 300),
	`{"a":` + strings.Repeat(`{"a":`, 299) + `1` + strings.Repeat(`}`, 300),
	`{"a":[1,2,` + strings.Repeat(`[`, 310),
}

// FuzzWalk: the walk accepts exactly what fastjson parses, fails for
// depth alone exactly when fastjson does, and Without leaves a text
// fastjson parses to the same value, but for the members it drops.
func FuzzWalk(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var p fastjson.Parser
		v, perr := p.Parse(s)
		tail, err := Skip(SkipWS(s), 0)
		if err == nil && len(SkipWS(tail)) > 0 {
			err = ErrJSON
		}
		if (err == nil) != (perr == nil) {
			t.Fatalf("%q: walk %v, fastjson %v", s, err, perr)
		}
		if perr != nil {
			if deep := strings.Contains(perr.Error(), "too big depth"); errors.Is(err, ErrTooDeep) && !deep {
				t.Fatalf("%q: walk says too deep, fastjson %v", s, perr)
			}
			return
		}
		want := string(v.MarshalTo(nil))
		same, err := Without(nil, s, func(string) bool { return false })
		if err != nil {
			t.Fatalf("%q: Without failed: %v", s, err)
		}
		var q fastjson.Parser
		w, err := q.ParseBytes(same)
		if err != nil || string(w.MarshalTo(nil)) != want {
			t.Fatalf("%q: Without gave %q (%v), want %s", s, same, err, want)
		}
		dropped, err := Without(nil, s, func(k string) bool { return k == "a" })
		if err != nil {
			t.Fatalf("%q: Without failed: %v", s, err)
		}
		if _, err := q.ParseBytes(dropped); err != nil {
			t.Fatalf("%q: Without dropping gave %q: %v", s, dropped, err)
		}
	})
}

// Without makes the dropped members null at any depth, and keeps the rest.
func TestWithout(t *testing.T) {
	got, err := Without(nil, ` {"a" : [1, {"logprobs": [1,2,3], "b": "x"}], "logprobs": {"c": 1}, "d": nan } `, func(k string) bool { return k == "logprobs" })
	if want := `{"a":[1,{"logprobs":null,"b":"x"}],"logprobs":null,"d":nan}`; err != nil || string(got) != want {
		t.Fatalf("%s %v, want %s", got, err, want)
	}
}
