package proxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
)

// Fields in a chunked request's trailer section are not headers: a key, a
// tenant or a request id sent after the body authenticates nothing, names
// nothing, and never reaches the engine. Such a request is refused (400)
// before any of its headers is trusted, as one the server could not
// parse: a generated id, no tenant under gateway keys (found by an
// HTTP-level probe: a key in the trailer authenticated the request, and
// the trailer's fields reached the engine as headers).
func TestTrailerFieldsAreNotHeaders(t *testing.T) {
	chunked := func(hdr, trailer string) string {
		body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
		return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n" + hdr +
			"Transfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n0\r\n", len(body), body) + trailer + "\r\n"
	}
	refused := func(t *testing.T, g *gateway, req, tenant string) {
		t.Helper()
		if line := rawExchange(t, g.addr, req); !strings.Contains(line, " 400 ") {
			t.Fatalf("%q: answer %s", req, line)
		}
		rec := g.record(t)
		if rec.Outcome != meter.OutcomeRejected || rec.Tenant != tenant || rec.RequestID == "zzz" || rec.RequestID == "mine" ||
			rec.ErrorMessage != "bad request: trailer fields are not accepted" {
			t.Fatalf("%q: record %+v", req, rec)
		}
	}
	t.Run("no keys", func(t *testing.T) {
		up := startRawUpstream(t, vllmUpstream(0))
		g := startGateway(t, Config{Upstream: up.URL()})
		for _, trailer := range []string{"X-Tenant: evil\r\n", "X-Request-Id: zzz\r\n", "X-Foo: bar\r\n", "x-tenant: evil\r\nX-Foo: bar\r\n"} {
			refused(t, g, chunked("X-Request-Id: mine\r\n", trailer), DefaultTenant)
		}
		// Announced, not sent: refused too.
		refused(t, g, chunked("Trailer: X-Tenant\r\nX-Tenant: acme\r\n", ""), DefaultTenant)
		// The same request without a trailer is served: the refusal is
		// the trailer's; so is one whose Trailer header announces fields
		// a body of known length cannot have.
		if line := rawExchange(t, g.addr, chunked("X-Tenant: acme\r\n", "")); !strings.Contains(line, " 200 ") {
			t.Fatalf("without a trailer: %s", line)
		}
		if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.Tenant != "acme" {
			t.Fatalf("without a trailer: record %+v", rec)
		}
		body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
		known := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTrailer: X-Checksum\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		if line := rawExchange(t, g.addr, known); !strings.Contains(line, " 200 ") {
			t.Fatalf("a Trailer header on a body of known length: %s", line)
		}
		if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
			t.Fatalf("a Trailer header on a body of known length: record %+v", rec)
		}
		if n := up.accepts.Load(); n != 1 {
			t.Fatalf("the engine was contacted %d times, want once", n)
		}
	})
	t.Run("keys", func(t *testing.T) {
		up := startRawUpstream(t, vllmUpstream(0))
		tc, key := tenantWithKey(t, "acme", ratelimit.Limits{})
		keys, _ := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
		g := startGateway(t, Config{Upstream: up.URL(), Keys: keys})
		for _, req := range []string{
			chunked("Authorization: Bearer "+key+"\r\n", "X-Foo: bar\r\n"), // a key in the head, a trailer
			chunked("X-Api-Key: "+key+"\r\n", "X-Api-Key: junk\r\n"),       // the same name in both
			chunked("Trailer: X-Api-Key\r\nX-Api-Key: "+key+"\r\n", ""),    // announced only
		} {
			refused(t, g, req, "")
		}
		// A key only in the trailer is no key: refused once the headers
		// are read, before the body (TestRefusedBeforeTheBody).
		if line := rawExchange(t, g.addr, chunked("", "X-Api-Key: "+key+"\r\n")); !strings.Contains(line, " 401 ") {
			t.Fatalf("a key only in the trailer: answer %s", line)
		}
		if rec := g.record(t); rec.Outcome != meter.OutcomeUnauthorized || rec.Tenant != "" {
			t.Fatalf("a key only in the trailer: record %+v", rec)
		}
		if n := up.accepts.Load(); n != 0 {
			t.Fatalf("the engine was contacted %d times", n)
		}
	})
}

// An engine that stalls after its last chunk's size line, before its
// trailer section (or the blank line that ends the body), is an idle
// timeout whichever reader reads its body: the stream's own decoder (a
// small head), or fasthttp's (a head over the connection's small reader,
// and a gzip body), whose trailer read returns fasthttp.ErrTimeout, no
// net.Error. That one was recorded as upstream_error, "upstream read:
// fasthttp: timeout" (found by the hostile-engine probe).
func TestStallBeforeTheTrailerIsATimeout(t *testing.T) {
	ev := strings.Join(vllmEvents, "") + done
	for _, c := range []struct{ name, pad string }{
		{"small head", ""},
		{"large head", "X-Pad: " + strings.Repeat("p", 3000) + "\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			stall := make(chan struct{})
			up := startRawUpstream(t, func(s *scriptConn) {
				fmt.Fprintf(s.BW, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n%s\r\n%x\r\n%s\r\n0\r\n", c.pad, len(ev), ev)
				s.BW.Flush()
				<-stall
			})
			t.Cleanup(func() { close(stall) })
			g := startGateway(t, Config{Upstream: up.URL(), IdleTimeout: 300 * time.Millisecond})
			status, _, body, _ := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
			rec := g.record(t)
			if status != 200 || body != ev {
				t.Fatalf("client got %d %q", status, body)
			}
			if rec.Outcome != meter.OutcomeTimeout || rec.ErrorMessage != errIdleTimeout.Error() {
				t.Fatalf("record %s %q, want an idle timeout", rec.Outcome, rec.ErrorMessage)
			}
		})
	}
}
