package jsonwalk

import (
	"errors"
	"fmt"
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
// depth alone exactly when fastjson does.
func FuzzWalk(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var p fastjson.Parser
		_, perr := p.Parse(s)
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
	})
}

// FuzzUnescape: a string, or a member name, unescapes as fastjson
// unescapes it (escapes it cannot decode kept as written).
func FuzzUnescape(f *testing.F) {
	for _, s := range []string{`a`, `\u0061b`, `\ud83d\ude00`, `\ud83d`, `\ud83dx\ude00`, `\ud83d\u12`, `\u12`, `\u12g4`,
		`\x`, `\"\\\/\b\f\n\r\t`, `\ud83d\ud83d`, `\ude00\ud83d`, `\uDFFF\uD800`, `\uD800\uDC00\u0000`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		var p fastjson.Parser
		v, err := p.Parse(`{"` + raw + `":"` + raw + `"}`)
		if err != nil {
			return // not one string: no raw name or string is so
		}
		o, _ := v.Object()
		var name []byte
		o.Visit(func(k []byte, _ *fastjson.Value) { name = k })
		got := Unescape(nil, raw)
		if string(got) != string(name) {
			t.Fatalf("%q: unescaped %q, fastjson's name %q", raw, got, name)
		}
		if s := v.GetStringBytes(string(got)); string(s) != string(got) {
			t.Fatalf("%q: unescaped %q, fastjson's string %q", raw, got, s)
		}
	})
}

// FuzzUnescapeSome: a string read a piece at a time, in pieces of any
// size, unescapes as it does whole, each piece at most 5 bytes past its
// size and none empty while text remains.
func FuzzUnescapeSome(f *testing.F) {
	for _, s := range []string{`a`, `abc\u0061b`, `\ud83d\ude00x`, `\ud83d`, `ab\ud83dx\ude00`, `\ud83d\u12`, `\u12`, `\u12g4`,
		`\x`, `\"\\\/\b\f\n\r\t`, `\ud83d\ud83d`, `\ude00\ud83d`, `\uDFFF\uD800`, `x\uD800\uDC00\u0000`, `a\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		want := Unescape(nil, raw)
		for n := 1; n <= len(raw)+1; n++ {
			var got []byte
			for rest := raw; rest != ""; {
				var piece []byte
				piece, rest = UnescapeSome(nil, rest, n)
				if len(piece) == 0 && rest != "" || len(piece) > n+5 || rest != "" && len(piece) < n {
					t.Fatalf("%q in pieces of %d: a piece of %d bytes, %q left", raw, n, len(piece), rest)
				}
				got = append(got, piece...)
			}
			if string(got) != string(want) {
				t.Fatalf("%q in pieces of %d: %q, whole %q", raw, n, got, want)
			}
		}
	})
}

// FuzzFilter: a filtered copy parses exactly when the text does (too deep
// exactly when fastjson says so), and every name lookup it keeps finds
// what it finds in the text, written or escaped, before and after the
// names are unescaped; an array it walks has the same elements, each
// copied alone where the copy says it is.
func FuzzFilter(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Add(`{"a":1,"\u0061":2,"a":3,"b":[1,{"a":[4,5]}],"c":{"a":[]}}`)
	f.Add(`[{"\u0062":[1],"b":[],"a":{"x":1,"a":2}},{"c":3}]`)
	f.Add(` [ {"a": [ [1] , {"a":[{}, 2]} ] } , 7 ] `)
	f.Fuzz(func(t *testing.T, s string) {
		var p fastjson.Parser
		v, perr := p.Parse(s)
		lean, err := testFilter.Copy(nil, s)
		if (err == nil) != (perr == nil) {
			t.Fatalf("%q: filter %v, fastjson %v", s, err, perr)
		}
		if perr != nil {
			if deep := strings.Contains(perr.Error(), "too big depth"); errors.Is(err, ErrTooDeep) && !deep {
				t.Fatalf("%q: filter says too deep, fastjson %v", s, perr)
			}
			return
		}
		whole := read(v, "")
		var q fastjson.Parser
		w, err := q.ParseBytes(lean)
		if err != nil {
			t.Fatalf("%q: filtered %q does not parse: %v", s, lean, err)
		}
		if filtered := read(w, s); whole != filtered {
			t.Fatalf("%q, filtered %q:\nwhole %s\nlean  %s", s, lean, whole, filtered)
		}
	})
}

// testFilter keeps a and b, and walks a's arrays.
var testFilter = Filter{Index: func(name string) int {
	switch name {
	case "a":
		return 0
	case "b":
		return 1
	}
	return -1
}, Walked: 1}

// read is what FuzzFilter's filter keeps of v: a and b, at any depth along
// them, a's elements, looked up before the names are unescaped (a lookup
// of a name not written so unescapes them), then after (a value found
// again is not walked again; at most 10,000 values are). With text, v is
// text's filtered copy, whose walked arrays are read from text, each
// element copied alone.
func read(v *fastjson.Value, text string) string {
	var b strings.Builder
	budget := 10_000
	var walk func(v *fastjson.Value, text string, elements bool)
	walk = func(v *fastjson.Value, text string, elements bool) {
		if budget--; budget < 0 {
			b.WriteString("...")
			return
		}
		switch v.Type() {
		case fastjson.TypeObject:
			b.WriteString("{")
			var before [2]*fastjson.Value
			for i, name := range [...]string{"b", "a", "zz", "b", "a"} {
				m := v.Get(name)
				if m == nil {
					continue
				}
				b.WriteString(name + ":")
				switch {
				case i < 2:
					before[i] = m
				case m == before[i-3]:
					b.WriteString("same,")
					continue
				}
				walk(m, text, name == "a")
				b.WriteString(",")
			}
			b.WriteString("}")
		case fastjson.TypeArray:
			a, _ := v.Array()
			if !elements {
				b.WriteString(fmt.Sprintf("[%v]", len(a) > 0))
				return
			}
			b.WriteString("[")
			if text == "" || len(a) == 0 {
				for _, e := range a {
					walk(e, "", false)
					b.WriteString(",")
				}
			} else {
				_, err := EachElement(text[a[0].GetInt():], 0, func(e string) {
					lean, err := testFilter.Copy(nil, e)
					var p fastjson.Parser
					v, perr := p.ParseBytes(lean)
					if err != nil || perr != nil {
						b.WriteString(fmt.Sprintf("(%v %v)", err, perr))
						return
					}
					walk(v, e, false)
					b.WriteString(",")
				})
				if err != nil {
					b.WriteString(err.Error())
				}
			}
			b.WriteString("]")
		default:
			b.Write(v.MarshalTo(nil))
		}
	}
	walk(v, text, true)
	return b.String()
}
