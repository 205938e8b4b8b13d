package bench

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/goodput/goodput/meter"
)

func TestNormalizeEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"": EndpointCompletions, "completions": EndpointCompletions, "chat": EndpointChat,
		"responses": EndpointResponses, "/v1/responses": EndpointResponses,
		"messages": EndpointMessages, " /v1/messages ": EndpointMessages,
	} {
		if got, err := NormalizeEndpoint(in); err != nil || got != want {
			t.Errorf("NormalizeEndpoint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"/v1/responses/abc", "/v1/messages/count_tokens", "anthropic"} {
		if _, err := NormalizeEndpoint(bad); err == nil {
			t.Errorf("NormalizeEndpoint(%q) accepted", bad)
		}
	}
}

// Each API gets its own request body: its prompt field, its output limit
// and, where its schema has them, ignore_eos and stream_options.
func TestRequestBodies(t *testing.T) {
	for _, c := range []struct {
		api        meter.API
		max        int
		want       string
		backend    string
		endpointOf string
	}{
		{meter.APIChat, 8, `{"model":"m","messages":[{"role":"user","content":"a \"b\""}],"max_tokens":8,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`, "openai-chat", EndpointChat},
		{meter.APICompletions, 0, `{"model":"m","prompt":"a \"b\"","stream":true,"stream_options":{"include_usage":true}}`, "openai", EndpointCompletions},
		{meter.APIResponses, 8, `{"model":"m","input":"a \"b\"","max_output_tokens":8,"ignore_eos":true,"stream":true}`, "openai-responses", EndpointResponses},
		{meter.APIResponses, 0, `{"model":"m","input":"a \"b\"","stream":true}`, "openai-responses", EndpointResponses},
		{meter.APIMessages, 8, `{"model":"m","messages":[{"role":"user","content":"a \"b\""}],"max_tokens":8,"stream":true}`, "anthropic-messages", EndpointMessages},
		{meter.APIMessages, 0, `{"model":"m","messages":[{"role":"user","content":"a \"b\""}],"max_tokens":4096,"stream":true}`, "anthropic-messages", EndpointMessages},
	} {
		c2 := &client{model: "m", api: c.api}
		if got := string(c2.body(Request{Prompt: `a "b"`, MaxTokens: c.max})); got != c.want {
			t.Errorf("%v max %d:\n%s\nwant\n%s", c.api, c.max, got, c.want)
		}
		if endpointAPI(c.endpointOf) != c.api || backendName(c.endpointOf) != c.backend {
			t.Errorf("%s: API %v backend %q", c.endpointOf, endpointAPI(c.endpointOf), backendName(c.endpointOf))
		}
	}
}

// When /v1/models gives no model, the error's hint names the fix by its
// cause: a key for 401 and 403, a base URL without its /v1 when it ends in
// one, else --model (found by a new-user probe: every failure said "give
// --model").
func TestModelsHint(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/models" && r.Header.Get("Authorization") == "":
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":{"message":"missing gateway key: send Authorization: Bearer <key> or x-api-key"}}`)
		case r.URL.Path == "/v1/models" && r.Header.Get("Authorization") == "Bearer forbidden-key":
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `{"error":{"message":"forbidden"}}`)
		case r.URL.Path == "/v1/models":
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"error":{"message":"boom"}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	for _, c := range []struct {
		name    string
		o       Options
		want    string
		notWant string
	}{
		{"no key", Options{BaseURL: srv.URL}, "answered HTTP 401: {\"error\":{\"message\":\"missing gateway key: send Authorization: Bearer <key> or x-api-key\"}} (the server wants a key: give --api-key KEY or set OPENAI_API_KEY, a goodput gateway's key too)", "--model"},
		{"a refused key", Options{BaseURL: srv.URL, APIKey: "forbidden-key"}, "answered HTTP 403: {\"error\":{\"message\":\"forbidden\"}} (the server refused the key given by --api-key, OPENAI_API_KEY or a --header)", "--model"},
		{"a refused key in a header", Options{BaseURL: srv.URL, Headers: []Header{{"Authorization", "Bearer forbidden-key"}}}, "(the server refused the key given by", "wants a key"},
		{"a base URL ending in /v1", Options{BaseURL: srv.URL + "/v1/", APIKey: "k1234"}, "/v1/v1/models answered HTTP 404: 404 page not found (the base URL ends in /v1, which the API paths bring themselves: give --base-url " + srv.URL + ")", "--model"},
		{"a server error", Options{BaseURL: srv.URL, APIKey: "k1234"}, "answered HTTP 500: {\"error\":{\"message\":\"boom\"}} (give --model)", "--api-key"},
	} {
		c.o.Requests = []Request{{Prompt: "a", MaxTokens: 1}}
		_, err := Run(context.Background(), c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), c.notWant) {
			t.Errorf("%s: %v\nwant %q, without %q", c.name, err, c.want, c.notWant)
		}
	}
	// With --model, no /v1/models is asked: each request's 404 says it
	// (found by a new-user probe: plain 404s).
	res, err := Run(context.Background(), Options{BaseURL: srv.URL + "/v1", APIKey: "k1234", Model: "m", Requests: []Request{{Prompt: "a", MaxTokens: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) != 1 || !strings.Contains(res.Errors[0], "HTTP 404") || !strings.Contains(res.Errors[0], "give --base-url without it") {
		t.Fatalf("errors %q, want a 404 that says to drop /v1", res.Errors)
	}
}

// What a server sends in an error body or an error event is printed with
// what a terminal would act on escaped: an ESC[2J in an engine's message
// cleared the operator's screen.
func TestServerErrorsEscaped(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.RawQuery, "stream") || r.Header.Get("X-Stream") != "" {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"error\":{\"message\":\"over\\u001b[2Jload\"}}\n\ndata: [DONE]\n\n")
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, "boom\x1b[2J\x07 \xff")
	}))
	defer srv.Close()
	for _, h := range [][]Header{nil, {{"X-Stream", "1"}}} {
		res, err := Run(context.Background(), Options{BaseURL: srv.URL, Model: "m", Headers: h, Requests: []Request{{Prompt: "a", MaxTokens: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Errors) != 1 {
			t.Fatalf("errors %q", res.Errors)
		}
		e := res.Errors[0]
		if strings.ContainsAny(e, "\x1b\x07") || !utf8.ValidString(e) || !strings.Contains(e, `\x1b[2J`) {
			t.Errorf("error %q: control bytes or invalid UTF-8 not escaped", e)
		}
	}
}

// A stream under another type than text/event-stream (text/plain, or none:
// engines that mislabel their SSE) is read as the stream it is, as the
// gateway and vLLM's client read it (found by a probe: bench failed what
// the gateway recorded as ok). A JSON answer or a web page to a streamed
// request still fails, saying what came; a body of another type that holds
// no event fails with its type named.
func TestRunReadsAStreamUnderAnotherType(t *testing.T) {
	const stream = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":null}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"},\"finish_reason\":\"stop\"}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n"
	for _, c := range []struct {
		ct, body string
		want     string // "" for a completed request, else part of its error
	}{
		{"text/event-stream", stream, ""},
		{"text/plain; charset=utf-8", stream, ""},
		{"", stream, ""},
		{"application/octet-stream", stream, ""},
		{"application/json", `{"choices":[{"message":{"content":"ab"}}]}`, "the response is not a stream (Content-Type \"application/json\")"},
		{"text/html; charset=utf-8", "<html>sign in</html>", "the response is not a stream (Content-Type \"text/html; charset=utf-8\")"},
		{"text/plain", "hello", "the stream carried no token event (Content-Type \"text/plain\")"},
		// Media types are case-insensitive, and +json is JSON (a review:
		// these were read as streams, and the engine's message lost).
		{"Application/JSON", `{"error":{"message":"model overloaded"}}`, "the response is not a stream (Content-Type \"Application/JSON\"): "},
		{"application/problem+json", `{"title":"overloaded"}`, "overloaded"},
		{"TEXT/HTML", "<html>sign in</html>", "sign in"},
		{"Text/Event-Stream; charset=utf-8", stream, ""},
		{"", "hello", "the stream carried no token event (no Content-Type)"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Type"] = nil // no sniffing: none means none
			if c.ct != "" {
				w.Header().Set("Content-Type", c.ct)
			}
			io.WriteString(w, c.body)
		}))
		res, err := Run(context.Background(), Options{BaseURL: srv.URL, Model: "m", Requests: []Request{{Prompt: "a", MaxTokens: 2}}})
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case c.want == "" && (res.Completed != 1 || res.TotalOutputTokens != 2):
			t.Errorf("%q: completed %d, output %d, errors %q; want 1 completed with 2 tokens", c.ct, res.Completed, res.TotalOutputTokens, res.Errors)
		case c.want != "" && (res.Failed != 1 || !strings.Contains(res.Errors[0], c.want)):
			t.Errorf("%q: failed %d, errors %q; want %q", c.ct, res.Failed, res.Errors, c.want)
		}
	}
}

// The model's lookup (no --model) keeps to a request's time limit when it
// is shorter than its own 30 s (a probe: --timeout 3s against a server that
// never answered waited 30 s).
func TestModelLookupKeepsTheTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	held := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held <- c // accepted, never answered
		}
	}()
	defer func() {
		for len(held) > 0 {
			(<-held).Close()
		}
	}()
	start := time.Now()
	_, err = Run(context.Background(), Options{BaseURL: "http://" + ln.Addr().String(), Timeout: 200 * time.Millisecond,
		Requests: []Request{{Prompt: "a", MaxTokens: 1}}})
	if err == nil || !strings.Contains(err.Error(), "/v1/models") || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("error %v, want the model list's timeout", err)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("the lookup took %v under a 200ms time limit", took)
	}
	// The warm-up is capped as the measured requests are.
	if _, err := Run(context.Background(), Options{BaseURL: "http://" + ln.Addr().String(), Model: "m", Warmup: MaxRequests + 1,
		Requests: []Request{{Prompt: "a", MaxTokens: 1}}}); err == nil || !strings.Contains(err.Error(), "warmup must be from 0 to") {
		t.Fatalf("a warm-up past the cap: %v", err)
	}
}
