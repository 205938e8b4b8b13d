package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
)

// Fields in a chunked request's trailer section are not headers: a key, a
// tenant or a request id sent after the body authenticates nothing, names
// nothing, and never reaches the engine. Such a request is refused (400),
// identified by its headers alone (found by an HTTP-level probe: a key in
// the trailer authenticated the request, and the trailer's fields reached
// the engine as headers).
func TestTrailerFieldsAreNotHeaders(t *testing.T) {
	chunked := func(hdr, trailer string) string {
		body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
		return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n" + hdr +
			"Transfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n0\r\n", len(body), body) + trailer + "\r\n"
	}
	t.Run("no keys", func(t *testing.T) {
		up := startRawUpstream(t, vllmUpstream(0))
		g := startGateway(t, Config{Upstream: up.URL()})
		for _, trailer := range []string{"X-Tenant: evil\r\n", "X-Request-Id: zzz\r\n", "X-Foo: bar\r\n", "x-tenant: evil\r\nX-Foo: bar\r\n"} {
			line := rawExchange(t, g.addr, chunked("", trailer))
			if !strings.Contains(line, " 400 ") {
				t.Fatalf("trailer %q: answer %s", trailer, line)
			}
			rec := g.record(t)
			if rec.Outcome != meter.OutcomeRejected || rec.Tenant != DefaultTenant || rec.RequestID == "zzz" ||
				rec.ErrorMessage != "bad request: trailer fields are not accepted" {
				t.Fatalf("trailer %q: record %+v", trailer, rec)
			}
		}
		// The same requests without a trailer are served: the refusal is
		// the trailer's.
		if line := rawExchange(t, g.addr, chunked("X-Tenant: acme\r\n", "")); !strings.Contains(line, " 200 ") {
			t.Fatalf("without a trailer: %s", line)
		}
		if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.Tenant != "acme" {
			t.Fatalf("without a trailer: record %+v", rec)
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
		// A key only in the trailer: no key.
		if line := rawExchange(t, g.addr, chunked("", "X-Api-Key: "+key+"\r\n")); !strings.Contains(line, " 401 ") {
			t.Fatalf("key in the trailer: answer %s", line)
		}
		if rec := g.record(t); rec.Outcome != meter.OutcomeUnauthorized || rec.Tenant != "" {
			t.Fatalf("key in the trailer: record %+v", rec)
		}
		// A key in the headers and a trailer: the tenant's request, refused.
		if line := rawExchange(t, g.addr, chunked("Authorization: Bearer "+key+"\r\n", "X-Foo: bar\r\n")); !strings.Contains(line, " 400 ") {
			t.Fatalf("key and a trailer: answer %s", line)
		}
		if rec := g.record(t); rec.Outcome != meter.OutcomeRejected || rec.Tenant != "acme" {
			t.Fatalf("key and a trailer: record %+v", rec)
		}
		if n := up.accepts.Load(); n != 0 {
			t.Fatalf("the engine was contacted %d times", n)
		}
	})
}
