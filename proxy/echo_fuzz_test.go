package proxy

import (
	"testing"

	"github.com/goodput/goodput/meter"
	"github.com/valyala/fastjson"
)

// echoTextOf is the echo's text as the body parsed by fastjson says it
// (what echoText must find by walking the body's text): the same rules,
// read from values, each member the first of its name once unescaped.
func echoTextOf(api meter.API, v *fastjson.Value) meter.EchoText {
	var t meter.EchoText
	get := func(v *fastjson.Value, name string) *fastjson.Value {
		var found *fastjson.Value
		if o, err := v.Object(); err == nil {
			o.Visit(func(k []byte, m *fastjson.Value) {
				if found == nil && string(k) == name {
					found = m
				}
			})
		}
		return found
	}
	isString := func(v *fastjson.Value) bool { return v != nil && v.Type() == fastjson.TypeString }
	addString := func(v *fastjson.Value) {
		if isString(v) {
			t.AddText(v.GetStringBytes())
		}
	}
	if api == meter.APICompletions {
		p := get(v, "prompt")
		if p != nil && p.Type() == fastjson.TypeArray {
			if a, _ := p.Array(); len(a) == 1 {
				p = a[0]
			} else {
				p = nil
			}
		}
		if isString(p) {
			addString(p)
		} else {
			t.SetUnknown()
		}
		return t
	}
	msgs := get(v, "messages")
	if msgs == nil || msgs.Type() != fastjson.TypeArray {
		return t
	}
	a, _ := msgs.Array()
	if len(a) == 0 {
		return t
	}
	content := get(a[len(a)-1], "content")
	switch {
	case content == nil:
	case content.Type() == fastjson.TypeString:
		addString(content)
	case content.Type() == fastjson.TypeArray:
		parts, _ := content.Array()
		for _, part := range parts {
			switch part.Type() {
			case fastjson.TypeString:
				addString(part)
			case fastjson.TypeObject:
				typ := get(part, "type")
				if !isString(typ) {
					t.AddOther()
					break
				}
				switch s := string(typ.GetStringBytes()); s {
				case "text", "input_text", "output_text":
					addString(get(part, "text"))
				case "refusal", "thinking":
					addString(get(part, s))
				case "tool_reference":
					addString(get(part, "name"))
				default:
					t.AddOther()
				}
			default:
				t.AddOther()
			}
		}
	}
	return t
}

var echoTextSeeds = []string{
	`{"messages":[{"role":"assistant","content":"a\u00e9\n"}]}`,
	`{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"b","content":"c"}]}`,
	`{"messages":[{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":""},"b",{"type":"refusal","refusal":"c"},{"type":"thinking","thinking":"d"},{"type":"input_text","text":"e"}]}]}`,
	`{"messages":[{"role":"assistant","content":[{"type":"image_url","image_url":{"url":"u"}},{"type":"text","text":"a"}]}]}`,
	`{"messages":[{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"tool_reference","name":"f"}]}]}`,
	`{"messages":[{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}},{"type":"text","text":"b"}]}]}`,
	`{"messages":[{"role":"assistant","content":[{"t\u0079pe":"te\u0078t","te\u0078t":"a\ud83d\ude00\ud83d","text":"no"},{"type":1},{"text":"x"},{},1,null,[]]}]}`,
	`{"messages":[{"role":"assistant","content":null}]}`,
	`{"messages":"x"}`, `{"messages":[1]}`, `{"messages":[]}`, `{}`,
	`{"prompt":"a\tb"}`, `{"prompt":["a"]}`, `{"prompt":["a","b"]}`, `{"prompt":[1,2,3]}`, `{"prompt":[[1,2,3]]}`, `{"prompt":""}`, `{"prompt":null}`,
	`{"pr\u006fmpt":"\u00e9\\\"x\/","prompt":"no"}`,
}

// FuzzEchoText: the text echoText reads by walking a body's text (its
// digest) is the one the body parsed whole says, for chat and completions.
func FuzzEchoText(f *testing.F) {
	for _, s := range echoTextSeeds {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, body string, completions bool) {
		var p fastjson.Parser
		v, err := p.Parse(body)
		if err != nil || v.Type() != fastjson.TypeObject {
			return // echoText reads a body fastjson parsed, an object
		}
		api := meter.APIChat
		if completions {
			api = meter.APICompletions
		}
		if got, want := echoText(api, []byte(body)), echoTextOf(api, v); got != want {
			t.Fatalf("%v %s: %+v, want %+v", api, body, got, want)
		}
	})
}
