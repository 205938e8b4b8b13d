package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
)

// The engine's own X-Request-Id, when it differs from the gateway's, is
// kept in the record (upstream_request_id) so that the engine's log can be
// joined with the gateway's; the client still gets the gateway's id. One
// that is the gateway's, is not 1–128 visible ASCII, or holds a gateway
// key, is not kept (and reaches the client nowhere).
func TestUpstreamRequestIDRecorded(t *testing.T) {
	const answer = `{"id":"cmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
	up := startRawUpstream(t, func(c *scriptConn) {
		// The test names the engine's id in a header of its own, which
		// reaches the engine as any other ("=": the id the gateway sent).
		id := string(c.Req.Header.Peek("X-Test-Engine-Id"))
		if id == "=" {
			id = string(c.Req.Header.Peek("X-Request-Id"))
		}
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Request-Id: %s\r\nContent-Length: %d\r\n\r\n%s", id, len(answer), answer)
		c.BW.Flush()
	})
	acme, key := tenantWithKey(t, "acme", ratelimit.Limits{})
	beta, betaKey := tenantWithKey(t, "beta", ratelimit.Limits{})
	store, _ := newKeysAndGate(t, ratelimit.BackendConfig{}, acme, beta)
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store})
	body := `{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}`
	for _, c := range []struct{ engine, want string }{
		{"cmpl-7f3a9c", "cmpl-7f3a9c"},
		{"=", ""},
		{"two words", ""},
		{strings.Repeat("x", 129), ""},
		{key, ""},
		{betaKey, ""},
		{"eng-" + key, ""},
	} {
		status, hdr, text, err := post(t, g.URL()+"/v1/chat/completions", body,
			map[string]string{"Authorization": "Bearer " + key, "X-Request-Id": "req-1", "X-Test-Engine-Id": c.engine})
		if err != nil || status != 200 {
			t.Fatalf("%q: status %d err %v", c.engine, status, err)
		}
		rec := g.record(t)
		if rec.Outcome != meter.OutcomeOK || rec.RequestID != "req-1" || rec.UpstreamRequestID != c.want {
			t.Errorf("engine id %q: record %s, request id %q, upstream request id %q; want %q", c.engine, rec.Outcome, rec.RequestID, rec.UpstreamRequestID, c.want)
		}
		if got := hdr.Get("X-Request-Id"); got != "req-1" {
			t.Errorf("engine id %q: the client got X-Request-Id %q", c.engine, got)
		}
		if strings.Contains(text, key) || strings.Contains(text, betaKey) {
			t.Errorf("engine id %q: a key in the answer %q", c.engine, text)
		}
		line := string(rec.AppendJSON(nil))
		if c.want != "" && !strings.Contains(line, `"request_id":"req-1","upstream_request_id":"`+c.want+`",`) {
			t.Errorf("log line %s", line)
		}
		if c.want == "" && (strings.Contains(line, "upstream_request_id") || strings.Contains(line, key[3:]) || strings.Contains(line, betaKey[3:])) {
			t.Errorf("log line %s", line)
		}
	}
	g.noMoreRecords(t)
}
