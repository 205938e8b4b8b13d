package proxy

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/valyala/fastjson"
)

// members lists the top-level members of a JSON object as key=value
// strings (values re-marshalled), in order.
func members(v *fastjson.Value) []string {
	var out []string
	o, _ := v.Object()
	o.Visit(func(k []byte, v *fastjson.Value) {
		out = append(out, string(k)+"="+string(v.MarshalTo(nil)))
	})
	return out
}

var rewriteSeeds = []string{
	`{"id":"a","choices":[{"delta":{}}],"usage":null}`,
	`{"usage":null,"id":"a"}`,
	`{"id": "a", "usage": null, "x": 1}`,
	`{"a":{"usage":null},"b":1}`,
	`{"c":"\"usage\":null","b":1}`,
	`{"usage":{"prompt_tokens":1}}`,
	`{"usage":null}`,
	`{}`,
	`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"m","stream":true,"stream_options":null}`,
	`{"model":"m","stream":true,"stream_options":{"continuous_usage_stats":true}}`,
	` { "stream" : true } `,
	`[1,2]`, `"x"`, `{"a":`,
}

// FuzzStripNullUsage: never panics; a JSON object stays a JSON object with
// the same members, less at most one null member named usage; without such
// a member the event is untouched.
func FuzzStripNullUsage(f *testing.F) {
	for _, s := range rewriteSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		if bytes.ContainsAny(p, "\r\n") {
			return // one data line: the framer splits lines
		}
		ev := append(append([]byte("data: "), p...), "\n\n"...)
		in := append([]byte(nil), ev...)
		out := stripNullUsage(ev)
		var ps fastjson.Parser
		v, err := ps.ParseBytes(p)
		if err != nil || v.Type() != fastjson.TypeObject {
			return
		}
		before := members(v)
		nullUsage := 0
		for _, m := range before {
			if m == "usage=null" {
				nullUsage++
			}
		}
		if !bytes.HasPrefix(out, []byte("data: ")) || !bytes.HasSuffix(out, []byte("\n\n")) {
			t.Fatalf("framing lost: %q -> %q", in, out)
		}
		var ps2 fastjson.Parser
		w, err := ps2.ParseBytes(out[len("data: ") : len(out)-2])
		if err != nil || w.Type() != fastjson.TypeObject {
			t.Fatalf("%q -> %q: no longer a JSON object (%v)", in, out, err)
		}
		after := members(w)
		switch {
		case len(after) == len(before):
			if !bytes.Equal(in, out) {
				t.Fatalf("%q -> %q: changed without removing a member", in, out)
			}
			if nullUsage > 0 && bytes.Contains(p, []byte(`"usage":null`)) && !bytes.Contains(p, []byte(`\`)) {
				t.Fatalf("%q: a top-level \"usage\":null member was kept", in)
			}
		case len(after) == len(before)-1:
			// Exactly one usage=null member gone, the rest in order.
			i := 0
			for i < len(after) && after[i] == before[i] {
				i++
			}
			if before[i] != "usage=null" {
				t.Fatalf("%q -> %q: removed %s", in, out, before[i])
			}
			for ; i < len(after); i++ {
				if after[i] != before[i+1] {
					t.Fatalf("%q -> %q: members changed", in, out)
				}
			}
		default:
			t.Fatalf("%q -> %q: %d members, then %d", in, out, len(before), len(after))
		}
	})
}

// FuzzInjectUsage: a valid request object comes out as a valid object with
// stream_options.include_usage true and every other member unchanged, in
// order.
func FuzzInjectUsage(f *testing.F) {
	for _, s := range rewriteSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !json.Valid(body) {
			// fastjson is lenient (it takes raw control bytes in strings,
			// which it then escapes its own way when it re-serialises); the
			// engine rejects such a body whatever the gateway does.
			return
		}
		var ps fastjson.Parser
		ri, v := parseRequest(&ps, body)
		if !ri.valid {
			return
		}
		before := members(v)
		out := injectUsage(nil, body, v)
		if !json.Valid(out) {
			// fastjson's parse below takes escapes JSON has not (\v, \x00).
			t.Fatalf("%q -> %q: not valid JSON", body, out)
		}
		var ps2 fastjson.Parser
		w, err := ps2.ParseBytes(out)
		if err != nil || w.Type() != fastjson.TypeObject {
			t.Fatalf("%q -> %q: not a JSON object (%v)", body, out, err)
		}
		if !w.Get("stream_options").GetBool("include_usage") {
			t.Fatalf("%q -> %q: include_usage not true", body, out)
		}
		var rest []string
		for _, m := range members(w) {
			if len(m) < len("stream_options=") || m[:len("stream_options=")] != "stream_options=" {
				rest = append(rest, m)
			}
		}
		var want []string
		for _, m := range before {
			if len(m) < len("stream_options=") || m[:len("stream_options=")] != "stream_options=" {
				want = append(want, m)
			}
		}
		if len(rest) != len(want) {
			t.Fatalf("%q -> %q: members %v, want %v", body, out, rest, want)
		}
		for i := range rest {
			if rest[i] != want[i] {
				t.Fatalf("%q -> %q: members %v, want %v", body, out, rest, want)
			}
		}
	})
}
