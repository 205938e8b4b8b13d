package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// A success that generated nothing is not an answer: an empty stream, one
// of comments alone, a page or an error text under a success, a body with
// no choice, a redirect (a load balancer's to https) or a 204 on an
// inference route. Each passed as ok, and was judged good on its E2E (a
// hostile-engine probe: an upstream URL pointing at a web UI read as
// goodput). The client still gets the engine's bytes as they came; the
// record says upstream_error. Real answers, and a redirect off the
// inference routes, stay ok.
func TestSuccessWithoutOutputIsTheEnginesFault(t *testing.T) {
	const sse = "text/event-stream"
	chunk := `data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}` + "\n\n" + "data: [DONE]\n\n"
	cases := []struct {
		name, path, status, ctype, body string
		stream                          bool
		want                            meter.Outcome
		msg                             string
	}{
		{"empty stream", "/v1/chat/completions", "200 OK", sse, "", true, meter.OutcomeUpstreamError, errNoEvent},
		{"comments alone", "/v1/chat/completions", "200 OK", sse, ": ping\n\n: ping\n\nevent: x\n", true, meter.OutcomeUpstreamError, errNoEvent},
		{"error text as a stream", "/v1/chat/completions", "200 OK", sse, `{"error":"engine crashed"}`, true, meter.OutcomeUpstreamError, ""},
		{"a page to a stream", "/v1/completions", "200 OK", "text/html", "<html><body>Log in</body></html>", true, meter.OutcomeUpstreamError, "malformed response body"},
		{"a page to a body", "/v1/chat/completions", "200 OK", "text/html", "<html><body>Log in</body></html>", false, meter.OutcomeUpstreamError, "malformed response body"},
		{"text with no type", "/v1/chat/completions", "200 OK", "", "ok", false, meter.OutcomeUpstreamError, "malformed response body"},
		{"an empty object", "/v1/chat/completions", "200 OK", "application/json", "{}", false, meter.OutcomeUpstreamError, errNoChoices},
		{"no choices", "/v1/completions", "200 OK", "application/json", `{"choices":[]}`, false, meter.OutcomeUpstreamError, errNoChoices},
		{"a redirect", "/v1/chat/completions", "301 Moved Permanently", "text/html", "<a href=https://x/>moved</a>", false, meter.OutcomeUpstreamError, "upstream status 301"},
		{"a redirect to a stream", "/v1/chat/completions", "307 Temporary Redirect", "", "", true, meter.OutcomeUpstreamError, "upstream status 307"},
		{"no content", "/v1/chat/completions", "204 No Content", "", "", false, meter.OutcomeUpstreamError, "upstream status 204"},
		// What stays ok.
		{"a stream", "/v1/chat/completions", "200 OK", sse, chunk, true, meter.OutcomeOK, ""},
		{"a mislabelled stream", "/v1/chat/completions", "200 OK", "text/plain", chunk, true, meter.OutcomeOK, ""},
		{"a mislabelled body", "/v1/chat/completions", "200 OK", "text/plain", `{"choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`, false, meter.OutcomeOK, ""},
		{"an empty completion", "/v1/completions", "200 OK", "application/json", `{"choices":[{"index":0,"text":"","finish_reason":"length"}]}`, false, meter.OutcomeOK, ""},
		{"a redirect off the inference routes", "/v1/models", "302 Found", "text/plain", "elsewhere", false, meter.OutcomeOK, ""},
		// What a review found they must not catch: llama.cpp's native
		// answer on /completions with the fields the request picked
		// (response_fields), an engine that ignored "stream" and answered
		// one body under another type, a usage-only stream, a 202
		// acknowledgement, a text answer on TGI's / (a load balancer's
		// check too).
		{"llama.cpp's picked fields", "/v1/completions", "200 OK", "application/json", `{"content":" world"}`, false, meter.OutcomeOK, ""},
		{"nothing to a stream, no type", "/v1/chat/completions", "200 OK", "", "", true, meter.OutcomeUpstreamError, errNoEvent},
		{"a sidecar's text to a stream", "/v1/chat/completions", "200 OK", "text/plain", "upstream connect error or disconnect/reset before headers. reset reason: overflow", true, meter.OutcomeUpstreamError, errNoEvent},
		{"a body to a stream, as text", "/v1/chat/completions", "200 OK", "text/plain", `{"choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}]}`, true, meter.OutcomeOK, ""},
		{"a body to a stream, no type", "/v1/chat/completions", "200 OK", "", `{"choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}]}`, true, meter.OutcomeOK, ""},
		{"usage alone", "/v1/chat/completions", "200 OK", sse, `data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":0}}` + "\n\n", true, meter.OutcomeOK, ""},
		{"an acknowledgement", "/v1/chat/completions", "202 Accepted", "application/json", `{"id":"job-1","status":"queued"}`, false, meter.OutcomeOK, ""},
		{"an empty acknowledgement", "/v1/chat/completions", "202 Accepted", "", "", false, meter.OutcomeOK, ""},
		{"text on TGI's root", "/", "200 OK", "text/plain", "ok", false, meter.OutcomeOK, ""},
		// Media types are case-insensitive: an engine's capitals are the
		// same type (a stream a body request got, read as JSON, was the
		// engine's malformed body).
		{"a stream to a body request", "/v1/chat/completions", "200 OK", sse, chunk, false, meter.OutcomeOK, ""},
		{"a stream in capitals to a body request", "/v1/chat/completions", "200 OK", "Text/Event-Stream; charset=UTF-8", chunk, false, meter.OutcomeOK, ""},
		{"a body in capitals", "/v1/embeddings", "200 OK", "Application/JSON", `{"object":"list","data":[],"usage":{"prompt_tokens":3,"total_tokens":3}}`, false, meter.OutcomeOK, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			up := startRawUpstream(t, func(sc *scriptConn) {
				fmt.Fprintf(sc.BW, "HTTP/1.1 %s\r\n", c.status)
				if c.ctype != "" {
					fmt.Fprintf(sc.BW, "Content-Type: %s\r\n", c.ctype)
				}
				if strings.HasPrefix(c.status, "204") {
					sc.BW.WriteString("\r\n")
				} else {
					fmt.Fprintf(sc.BW, "Content-Length: %d\r\n\r\n%s", len(c.body), c.body)
				}
				sc.BW.Flush()
			})
			g := startGateway(t, Config{Upstream: up.URL()})
			method, body := "GET", ""
			switch c.path {
			case "/v1/models":
			case "/":
				method, body = "POST", "ping" // no JSON: TGI's route, unread
			default:
				method, body = "POST", fmt.Sprintf(`{"model":"m","prompt":"a","messages":[{"role":"user","content":"a"}],"stream":%v}`, c.stream)
			}
			conn, err := net.Dial("tcp", g.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", method, c.path, len(body), body)
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			if err != nil || strconv.Itoa(resp.StatusCode) != c.status[:3] {
				t.Fatalf("the client got %d %q (%v)", resp.StatusCode, got, err)
			}
			if ct := resp.Header.Get("Content-Type"); ct != c.ctype {
				t.Errorf("the client got Content-Type %q, the engine sent %q", ct, c.ctype)
			}
			if string(got) != c.body && c.want != meter.OutcomeOK {
				t.Errorf("the client got %q, not the engine's body %q", got, c.body)
			}
			rec := g.record(t)
			if rec.Outcome != c.want || !strings.Contains(rec.ErrorMessage, c.msg) {
				t.Errorf("record: outcome %s, error %q; want %s with %q", rec.Outcome, rec.ErrorMessage, c.want, c.msg)
			}
		})
	}
}
