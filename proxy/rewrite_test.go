package proxy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

func TestInjectUsage(t *testing.T) {
	cases := []struct {
		name, in string
		want     map[string]any // stream_options after injection
		sameRest bool           // the rest of the body is byte-identical
	}{
		{"no stream_options", `{"model":"m","stream":true,"messages":[]}`, map[string]any{"include_usage": true}, true},
		{"spaces", "  { \"model\" : \"m\", \"stream\": true }", map[string]any{"include_usage": true}, true},
		{"empty object", `{}`, map[string]any{"include_usage": true}, true},
		{"include_usage false", `{"stream":true,"stream_options":{"include_usage":false}}`, map[string]any{"include_usage": true}, false},
		{"include_usage null", `{"stream":true,"stream_options":{"include_usage":null}}`, map[string]any{"include_usage": true}, false},
		{"null options", `{"stream":true,"stream_options":null}`, map[string]any{"include_usage": true}, false},
		// Ignored by the engine without include_usage: it stays off, so no
		// chunk gains a usage object the client never asked for.
		{"continuous without usage", `{"stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":true}}`, map[string]any{"include_usage": true, "continuous_usage_stats": false}, false},
		{"keeps other options", `{"stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":false,"x":1}}`, map[string]any{"include_usage": true, "continuous_usage_stats": false, "x": 1.0}, false},
		// Text as PDF extraction leaves it (a NUL, a vertical tab, a bell, a
		// DEL, a private-use character past U+FFFF) and an escaped member
		// name: the engine must get valid JSON that says the same. fastjson's
		// writer quoted such strings in Go's syntax (\x00, \v, \a, \U000f0000),
		// which JSON has not: vLLM refused the request.
		{"control characters", `{"stream":true,"stream_options":{"include_usage":false},"messages":[{"role":"user","content":"a\u0000b\u000bc\u0007d\u007fe\udb80\udc00f \"q\""}],"\u006eote":"x\u0001"}`, map[string]any{"include_usage": true}, false},
		{"control characters, null options", `{"stream":true,"stream_options":null,"model":"m\u000b","messages":[{"role":"user","content":"\u0000"}]}`, map[string]any{"include_usage": true}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var p fastjson.Parser
			ri, v := parseRequest(&p, []byte(c.in))
			if v == nil {
				t.Fatal("parseRequest rejected a valid body")
			}
			if ri.usage != usageNotAsked {
				t.Fatalf("usage %d: the gateway would not ask for usage", ri.usage)
			}
			out := injectUsage(nil, []byte(c.in), v)
			var got map[string]any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("injected body is not JSON: %v\n%s", err, out)
			}
			so, _ := got["stream_options"].(map[string]any)
			if len(so) != len(c.want) {
				t.Fatalf("stream_options = %v, want %v", so, c.want)
			}
			for k, w := range c.want {
				if so[k] != w {
					t.Fatalf("stream_options[%s] = %v, want %v (body %s)", k, so[k], w, out)
				}
			}
			var orig map[string]any
			_ = json.Unmarshal([]byte(c.in), &orig)
			for k, v := range orig {
				if k == "stream_options" {
					continue
				}
				if b1, _ := json.Marshal(v); string(b1) != mustMarshal(got[k]) {
					t.Fatalf("member %s changed: %v -> %v", k, v, got[k])
				}
			}
			if c.sameRest {
				// Only the inserted member differs.
				if len(out) != len(c.in)+len(includeUsageMember)-boolInt(c.in == "{}") {
					t.Fatalf("body %q -> %q: more than one member inserted", c.in, out)
				}
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func mustMarshal(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestParseRequest(t *testing.T) {
	var p fastjson.Parser
	ri, _ := parseRequest(&p, []byte(`{"model":"llama","stream":true,"stream_options":{"include_usage":true},"max_tokens":12}`))
	if !ri.valid || ri.model != "llama" || !ri.stream || ri.usage != usageAsked || ri.maxTokens != 12 {
		t.Fatalf("got %+v", ri)
	}
	ri, _ = parseRequest(&p, []byte(`{"model":"x","max_completion_tokens":7,"max_tokens":3}`))
	if ri.stream || ri.usage != usageNotAsked || ri.maxTokens != 7 {
		t.Fatalf("got %+v", ri)
	}
	for _, bad := range []string{``, `[1]`, `{"model":`, `"str"`} {
		if ri, _ := parseRequest(&p, []byte(bad)); ri.valid {
			t.Fatalf("%q parsed as a request", bad)
		}
	}
}

// fastjson says a body nests too deeply only in its error's text (made
// with fmt.Errorf, no type or value to test): these pin the text the gateway
// reads, so that a fastjson whose message changed fails here, not in
// production, where a deep body would again be forwarded unchecked. Only
// the depth error counts, not a syntax error whose message quotes a body
// holding the same words.
func TestDepthErrorText(t *testing.T) {
	var p fastjson.Parser
	deep := func(open, close string, n int) string {
		return strings.Repeat(open, n) + strings.Repeat(close, n)
	}
	const words = "too big depth for the nested JSON; it exceeds 300"
	for _, c := range []struct {
		name, body string
		tooDeep    bool
	}{
		{"arrays at the limit", deep("[", "]", fastjson.MaxDepth), false},
		{"arrays over the limit", deep("[", "]", fastjson.MaxDepth+1), true},
		{"objects over the limit", deep(`{"a":`, "}", fastjson.MaxDepth+1), true},
		{"a request", `{"model":"m","stream":true,"metadata":{"x":` + deep("[", "]", 400) + `}}`, true},
		{"mixed", `{"a":[{"b":` + deep(`[{"c":`, "}]", 200) + `}]}`, true},
		{"cut short inside", deep("[", "", 400), true},
		{"a syntax error", `{"model":"m",}`, false},
		{"a syntax error quoting the words", `{"a":1 "` + words + `"}`, false},
		{"an unexpected value quoting the words", `{"a":[tru "` + words + `"]}`, false},
		{"a syntax error before the depth", `{"a":x,"b":` + deep("[", "]", 400) + `}`, false},
	} {
		_, err := p.Parse(c.body)
		if c.name == "arrays at the limit" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Fatalf("%s: parsed", c.name)
		}
		if got := isDepthError(err); got != c.tooDeep {
			t.Errorf("%s: isDepthError = %v, want %v (%.300s)", c.name, got, c.tooDeep, err)
		}
		if ri, _ := parseRequest(&p, []byte(c.body)); ri.tooDeep != c.tooDeep || ri.valid {
			t.Errorf("%s: parseRequest %+v", c.name, ri)
		}
	}
}

// Which bodies asked for the usage chunk themselves, as vLLM reads them
// (StreamOptions.include_usage defaults to true; continuous usage needs
// include_usage). Only what the client did not ask for may be removed.
func TestUsageAsked(t *testing.T) {
	for _, c := range []struct {
		opts string
		want usageAsk
	}{
		{``, usageNotAsked},
		{`,"stream_options":null`, usageNotAsked},
		{`,"stream_options":{"include_usage":false}`, usageNotAsked},
		{`,"stream_options":{"include_usage":null}`, usageNotAsked},
		{`,"stream_options":{"include_usage":false,"continuous_usage_stats":true}`, usageNotAsked},
		{`,"stream_options":{"include_usage":null,"continuous_usage_stats":null}`, usageNotAsked},
		{`,"stream_options":{"include_usage":true}`, usageAsked},
		{`,"stream_options":{}`, usageAsked},
		{`,"stream_options":{"continuous_usage_stats":true}`, usageAsked},
		{`,"stream_options":{"continuous_usage_stats":false}`, usageAsked},
		{`,"stream_options":{"include_usage":true,"continuous_usage_stats":true}`, usageAsked},
		{`,"stream_options":{"other":1}`, usageAsked},
		{`,"stream_options":{"include_usage":"false"}`, usageUnclear},
		{`,"stream_options":{"include_usage":1}`, usageUnclear},
		{`,"stream_options":{"include_usage":false,"continuous_usage_stats":"yes"}`, usageUnclear},
		{`,"stream_options":true`, usageUnclear},
		{`,"stream_options":[]`, usageUnclear},
	} {
		var p fastjson.Parser
		body := `{"model":"m","stream":true` + c.opts + `}`
		if ri, _ := parseRequest(&p, []byte(body)); ri.usage != c.want {
			t.Errorf("%s: usage %d, want %d", body, ri.usage, c.want)
		}
	}
}

func TestStripNullUsage(t *testing.T) {
	cases := []struct{ in, want string }{
		// OpenAI: usage:null as the last member.
		{"data: {\"id\":\"a\",\"choices\":[{\"delta\":{}}],\"usage\":null}\n\n", "data: {\"id\":\"a\",\"choices\":[{\"delta\":{}}]}\n\n"},
		// first member
		{"data: {\"usage\":null,\"id\":\"a\"}\n\n", "data: {\"id\":\"a\"}\n\n"},
		// middle, spaced (Perplexity-style JSON)
		{"data: {\"id\": \"a\", \"usage\": null, \"x\": 1}\r\n\r\n", "data: {\"id\": \"a\", \"x\": 1}\r\n\r\n"},
		// nested usage:null is not the top-level member
		{"data: {\"a\":{\"usage\":null},\"b\":1}\n\n", "data: {\"a\":{\"usage\":null},\"b\":1}\n\n"},
		// inside a string
		{"data: {\"c\":\"\\\"usage\\\":null\",\"b\":1}\n\n", "data: {\"c\":\"\\\"usage\\\":null\",\"b\":1}\n\n"},
		// non-null usage stays
		{"data: {\"usage\":{\"prompt_tokens\":1}}\n\n", "data: {\"usage\":{\"prompt_tokens\":1}}\n\n"},
		// the only member
		{"data: {\"usage\":null}\n\n", "data: {}\n\n"},
		{"data: [DONE]\n\n", "data: [DONE]\n\n"},
	}
	for _, c := range cases {
		got := string(stripNullUsage([]byte(c.in)))
		if got != c.want {
			t.Errorf("stripNullUsage(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestModelNameAsDecoded: the model's name is what a JSON decoder reads,
// a lone surrogate included (fastjson alone left its escape as it came,
// backslash and all), in a small body and in one parsed shallow.
func TestModelNameAsDecoded(t *testing.T) {
	long := strings.Repeat("m", 200)
	pad := strings.Repeat("x", shallowFrom)
	for _, name := range []string{`llama`, `caf\u00e9`, `\ud83d\ude00`, `a\udc80b`, `\udc80`, `a\\udc80b`, `a\\\udc80`, long + `\ud800`, `\u12`} {
		for _, body := range []string{
			`{"model":"` + name + `","messages":[]}`,
			`{"model":"` + name + `","messages":[{"role":"user","content":"` + pad + `"}]}`,
		} {
			var p fastjson.Parser
			ri, _ := parseRequest(&p, []byte(body))
			var want struct{ Model string }
			if err := json.Unmarshal([]byte(body), &want); err != nil {
				// Not JSON (\u12): fastjson reads it as it came, and so does the record.
				want.Model = name
			}
			if ri.model != want.Model {
				t.Errorf("%s (%d bytes): model %q, want %q", name, len(body), ri.model, want.Model)
			}
		}
	}
	var p fastjson.Parser
	if ri, _ := parseRequest(&p, []byte(`{"model":7}`)); ri.model != "" {
		t.Errorf("a number as the model: %q", ri.model)
	}
}

// BenchmarkParseRequestModel: a 64 KiB body (parsed whole) whose model
// holds "\u" once read is read a second time, shallow, for the model's
// name as a JSON decoder reads it (modelOf); against a plain name.
//
//	go test -run '^$' -bench ParseRequestModel -count 3 ./proxy
func BenchmarkParseRequestModel(b *testing.B) {
	pad := strings.Repeat("x", 63<<10)
	for _, c := range []struct{ name, model string }{{"plain", "llama"}, {"escaped", `a\\u`}} {
		body := []byte(`{"model":"` + c.model + `","messages":[{"role":"user","content":"` + pad + `"}]}`)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var p fastjson.Parser
			for range b.N {
				parseRequest(&p, body)
			}
		})
	}
}
