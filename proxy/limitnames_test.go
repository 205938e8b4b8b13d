package proxy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/goodput/goodput/meter"
	"github.com/valyala/fastjson"
)

// The output limit of an OpenAI-shaped request is read on each route as
// every engine serving it reads it, and the largest charged: a small limit
// in a name the engine ignores was charged while the engine generated to
// the large one, or to its default.
func TestRouteLimit(t *testing.T) {
	cases := []struct {
		api  meter.API
		body string
		most int
		dflt bool // an engine reads no limit: its default
	}{
		// The Responses API: vLLM, SGLang and Ollama read max_output_tokens
		// alone, llama.cpp its own names first.
		{meter.APIResponses, `{"max_tokens":1,"max_output_tokens":100000}`, 100000, false},
		{meter.APIResponses, `{"max_output_tokens":300}`, 300, false},
		{meter.APIResponses, `{"max_output_tokens":300,"n_predict":4000}`, 4000, false},
		{meter.APIResponses, `{"max_tokens":300}`, 300, true},
		{meter.APIResponses, `{}`, 0, true},
		// Chat: vLLM's chat reads no max_output_tokens.
		{meter.APIChat, `{"max_output_tokens":1}`, 0, true},
		{meter.APIChat, `{"max_tokens":300}`, 300, false},
		{meter.APIChat, `{"max_tokens":1,"n_predict":4000}`, 4000, false}, // llama.cpp: n_predict first
		// Ollama's chat reads max_tokens alone; vLLM's
		// max_completion_tokens before it.
		{meter.APIChat, `{"max_completion_tokens":300}`, 300, true},
		{meter.APIChat, `{"max_completion_tokens":1,"max_tokens":4000}`, 4000, false},
		// vLLM reads max_completion_tokens 0 (not null) as its default;
		// SGLang skips it for max_tokens.
		{meter.APIChat, `{"max_completion_tokens":0,"max_tokens":300}`, 300, true},
		{meter.APIChat, `{"max_completion_tokens":null,"max_tokens":300}`, 300, false},
		// llama.cpp takes a limit of another type for absent, -1 for none.
		{meter.APIChat, `{"n_predict":"9","max_tokens":300}`, 300, false},
		{meter.APIChat, `{"n_predict":-1,"max_tokens":300}`, 300, true},
		{meter.APIChat, `{"max_tokens":-5}`, 0, true},
		// Completions: vLLM's reads max_tokens alone.
		{meter.APICompletions, `{"max_completion_tokens":1,"max_tokens":4000}`, 4000, false},
		{meter.APICompletions, `{"max_tokens":300}`, 300, false},
		{meter.APICompletions, `{"max_completion_tokens":300}`, 300, true},
		{meter.APICompletions, `{"max_output_tokens":300}`, 0, true},
		// The Messages API: max_tokens, llama.cpp's n_predict first.
		{meter.APIMessages, `{"max_tokens":300}`, 300, false},
		{meter.APIMessages, `{"max_tokens":1,"n_predict":4000}`, 4000, false},
		{meter.APIMessages, `{"max_output_tokens":300}`, 0, true},
		// A limit as pydantic reads it (vLLM, SGLang): a string of digits,
		// a float with no fraction; llama.cpp takes a string for absent
		// (its default) and cuts a float. Read as absent, "4000" was
		// charged the default while vLLM generated 4000.
		{meter.APIChat, `{"max_tokens":"4000"}`, 4000, true},
		{meter.APIChat, `{"max_tokens":" 1_000 "}`, 1000, true},
		{meter.APIChat, `{"max_tokens":4000.0}`, 4000, false},
		{meter.APIChat, `{"max_tokens":1e4}`, 10000, false},
		{meter.APIChat, `{"max_tokens":2.5}`, 3, false},
		{meter.APIChat, `{"max_tokens":"-5"}`, 0, true},
		{meter.APIChat, `{"max_tokens":"lots"}`, 0, true},
		{meter.APICompletions, `{"max_tokens":"+4000.00"}`, 4000, true},
		{meter.APIResponses, `{"max_output_tokens":"4000"}`, 4000, true},
		{meter.APIChatBatch, `{"max_tokens":1,"max_completion_tokens":"4000"}`, 4000, false},
		// llama.cpp's Responses API puts max_output_tokens, when present
		// (null too), in max_tokens' place: a value it cannot read there
		// is its default, never the max_tokens beside it. Read after
		// max_tokens, "9" was charged 9 while llama.cpp generated to its
		// default.
		{meter.APIResponses, `{"max_tokens":1,"max_output_tokens":"9"}`, 9, true},
		{meter.APIResponses, `{"max_tokens":5000,"max_output_tokens":null}`, 0, true},
		{meter.APIResponses, `{"max_tokens":1,"max_output_tokens":[9]}`, 0, true},
		{meter.APIResponses, `{"max_tokens":1,"max_output_tokens":300}`, 300, false},
		{meter.APIResponses, `{"max_completion_tokens":400,"max_output_tokens":300}`, 400, false},
	}
	var p fastjson.Parser
	for _, c := range cases {
		for _, big := range []bool{false, true} {
			body := c.body
			if big {
				// Past shallowFrom: the shallow copy keeps every name read.
				body = `{"pad":"` + strings.Repeat("a", shallowFrom) + `",` + body[1:]
				body = strings.Replace(body, `",}`, `"}`, 1)
			}
			ri, v := parseRequest(&p, []byte(body))
			if !ri.valid {
				t.Fatalf("%s: not read", c.body)
			}
			nativeRequest(c.api, v, &ri)
			if ri.maxTokens != c.most || ri.someDefault != c.dflt {
				t.Errorf("%v %s (large %v): limit %d, default %v; want %d, %v", c.api, c.body, big, ri.maxTokens, ri.someDefault, c.most, c.dflt)
			}
		}
	}
}

// The charge's limit: the largest read, but the default allowance (0, which
// the limiter may lower to fit the tpm) when an engine reads none and every
// limit read is below it.
func TestChargedLimit(t *testing.T) {
	cases := []struct {
		most int
		dflt bool
		def  int64
		want int64
	}{
		{300, false, 0, 300},
		{300, true, 0, 0},     // below 1024: the default, lowered to fit
		{4000, true, 0, 4000}, // above it
		{1024, true, 0, 1024}, // the default itself
		{300, true, 200, 300}, // default_max_tokens 200
		{100, true, 200, 0},   // below it
		{0, true, 200, 0},     // none read
		{5000, false, 200, 5000},
	}
	for _, c := range cases {
		ri := reqInfo{maxTokens: c.most, someDefault: c.dflt}
		if got := chargedLimit(&ri, c.def); got != c.want {
			t.Errorf("%+v: %d, want %d", c, got, c.want)
		}
	}
}

// Through the gateway, under a tpm of 1000: a request whose engines read a
// limit larger than the tpm is refused as too large, whatever small limit
// it names beside it; one that an engine generates to its default is
// charged the default (lowered to fit the tpm), kept since the answer
// counts no output, so that the next is refused. With either backend.
func TestLimitNamesChargedPerRoute(t *testing.T) {
	for _, backend := range []string{"local", "redis"} {
		t.Run(backend, func(t *testing.T) { testLimitNames(t, backend) })
	}
}

func testLimitNames(t *testing.T, backend string) {
	const answer = `{"object":"x"}`
	up := startRawUpstream(t, func(c *scriptConn) {
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
		c.BW.Flush()
	})
	tooLarge, defaulted, small := []int{429, 429}, []int{200, 429}, []int{200, 200}
	cases := []struct {
		name, path, body string
		want             []int
	}{
		{"responses max_tokens beside max_output_tokens", "/v1/responses",
			`{"model":"m","input":"hi","max_tokens":1,"max_output_tokens":100000}`, tooLarge},
		{"chat max_output_tokens alone", "/v1/chat/completions",
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_output_tokens":1}`, defaulted},
		{"completions max_completion_tokens beside max_tokens", "/v1/completions",
			`{"model":"m","prompt":"hi","max_completion_tokens":1,"max_tokens":4000}`, tooLarge},
		{"chat max_tokens beside llama.cpp's n_predict", "/v1/chat/completions",
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1,"n_predict":4000}`, tooLarge},
		{"invocations as completions", "/invocations",
			`{"model":"m","prompt":"hi","max_completion_tokens":1,"max_tokens":4000}`, tooLarge},
		{"messages max_tokens beside n_predict", "/v1/messages",
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1,"n_predict":4000}`, tooLarge},
		{"llama.cpp's /api/chat reads n_predict", "/api/chat",
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false,"options":{"num_predict":1},"n_predict":4000}`, tooLarge},
		// Limits every engine of the route reads: charged as written.
		{"chat max_tokens", "/v1/chat/completions",
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":300}`, small},
		{"responses max_output_tokens", "/v1/responses",
			`{"model":"m","input":"hi","max_output_tokens":300}`, small},
	}
	g, keys := gatewayOfTPMTenants(t, backend, up.URL(), len(cases), 1000)
	for i, c := range cases {
		auth := map[string]string{"Authorization": "Bearer " + keys[i]}
		var got []int
		for j := range c.want {
			status, _, body, err := post(t, g.URL()+c.path, c.body, auth)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, status)
			rec := g.record(t)
			if status == 429 && (rec.Outcome != meter.OutcomeRateLimited ||
				strings.Contains(body, "Request too large for tenant") != slices.Equal(c.want, tooLarge)) {
				t.Errorf("%s: request %d: outcome %s, answer %s", c.name, j+1, rec.Outcome, body)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: statuses %v, want %v", c.name, got, c.want)
		}
	}
}

// A limit written as a string longer than keepWhole (pydantic trims the
// white space around its digits) is read from a large body's shallow copy
// as from the body: emptied there, "max_completion_tokens": "   ...4000"
// was charged the default while vLLM generated 4000.
func TestRouteLimitLongString(t *testing.T) {
	pad := strings.Repeat(" ", keepWhole+1)
	cases := []struct {
		api  meter.API
		name string
	}{
		{meter.APIChat, "max_completion_tokens"},
		{meter.APIChat, "max_tokens"},
		{meter.APICompletions, "max_tokens"},
		{meter.APIResponses, "max_output_tokens"},
	}
	var p fastjson.Parser
	for _, c := range cases {
		for _, big := range []bool{false, true} {
			body := `{"` + c.name + `":"` + pad + `4000"}`
			if big {
				body = `{"pad":"` + strings.Repeat("a", shallowFrom) + `",` + body[1:]
			}
			ri, v := parseRequest(&p, []byte(body))
			if !ri.valid {
				t.Fatalf("%s: not read", c.name)
			}
			nativeRequest(c.api, v, &ri)
			if ri.maxTokens != 4000 {
				t.Errorf("%v %s (large %v): limit %d, want 4000", c.api, c.name, big, ri.maxTokens)
			}
		}
	}
}

// Ollama reads options.num_predict from a JSON number as a float64 cut to
// an int (Options.FromMap): 4000.0 and 1e4 are limits, 4000.5 is 4000, and
// 0.5 is 0, its default. Read as fastjson's GetInt reads them (0 for a
// number not written as an integer), 4000.0 was charged the default while
// Ollama generated 4000.
func TestOllamaNumPredictFloat(t *testing.T) {
	cases := []struct {
		body string
		most int
		dflt bool
	}{
		{`{"options":{"num_predict":4000}}`, 4000, false},
		{`{"options":{"num_predict":4000.0}}`, 4000, false},
		{`{"options":{"num_predict":1e4}}`, 10000, false},
		{`{"options":{"num_predict":4000.5}}`, 4000, false},
		{`{"options":{"num_predict":0.5}}`, 0, true},
		{`{"options":{"num_predict":-1}}`, 0, true},
		{`{"options":{"num_predict":"4000"}}`, 0, true}, // refused by Ollama
		{`{"options":{"num_predict":1e300}}`, maxCount, false},
	}
	var p fastjson.Parser
	for _, api := range []meter.API{meter.APIOllamaGenerate, meter.APIOllamaChat} {
		for _, c := range cases {
			ri, v := parseRequest(&p, []byte(c.body))
			nativeRequest(api, v, &ri)
			// llama.cpp, which serves /api/chat too, reads no limit here.
			dflt := c.dflt || api == meter.APIOllamaChat
			if ri.maxTokens != c.most || ri.someDefault != dflt {
				t.Errorf("%v %s: limit %d, default %v; want %d, %v", api, c.body, ri.maxTokens, ri.someDefault, c.most, dflt)
			}
		}
	}
}
