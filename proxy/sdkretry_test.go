package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
)

// sdkHead is the head the openai Node SDK (5.x, on Node's fetch) sends
// with a chat completions request, after its request line and Host: the
// tests below send what it sends, and read the answer as it decides
// whether to retry (X-Should-Retry over its own rule, which retries 408,
// 409, 429 and every 5xx, twice by default).
const sdkHead = "connection: keep-alive\r\nAccept: application/json\r\nUser-Agent: OpenAI/JS 5.23.2\r\n" +
	"X-Stainless-Retry-Count: 0\r\nX-Stainless-Lang: js\r\nX-Stainless-Package-Version: 5.23.2\r\n" +
	"X-Stainless-OS: Linux\r\nX-Stainless-Arch: x64\r\nX-Stainless-Runtime: node\r\n" +
	"X-Stainless-Runtime-Version: v20.20.2\r\nauthorization: Bearer %s\r\ncontent-type: application/json\r\n" +
	"accept-language: *\r\nsec-fetch-mode: cors\r\naccept-encoding: gzip, deflate\r\n"

// sdkPost sends body as the openai Node SDK does, with id as its
// X-Request-Id, and returns the answer once it has come whole.
func sdkPost(t *testing.T, addr, key, id, body string) <-chan *http.Response {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nhost: %s\r\n"+sdkHead+"X-Request-Id: %s\r\ncontent-length: %d\r\n\r\n%s",
		addr, key, id, len(body), body); err != nil {
		t.Fatal(err)
	}
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			done <- nil
			return
		}
		io.Copy(io.Discard, resp.Body)
		done <- resp
	}()
	return done
}

// A shutdown's cut answers 503 what is still waiting. The openai SDK
// retries a 503 twice (behind a load balancer, on another replica), so the
// one the engine already has, whose prompt it may be generating, says
// X-Should-Retry: false, as every 502 and 504 the gateway sends once the
// engine has the request does: measured with the SDK, a request cut while
// the engine generated its answer got a 503 without it and was sent again
// twice. One cut in the limits' queue never reached the engine and stays
// retryable.
func TestCutTellsTheSDKNotToRetryWhatTheEngineHas(t *testing.T) {
	atEngine := make(chan struct{}, 4)
	up := startRawUpstream(t, func(c *scriptConn) {
		atEngine <- struct{}{}
		// Generating a long answer: nothing comes before the cut, which
		// closes the connection.
		c.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		var b [1]byte
		c.Conn.Read(b[:])
	})
	store, gate, key, reg := oneSlotLimits(t, 30*time.Second)
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate})
	const body = `{"model":"sim-llama","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`
	sent := sdkPost(t, g.addr, key, "sdk-at-engine", body)
	<-atEngine
	queued := sdkPost(t, g.addr, key, "sdk-queued", body)
	waitQueuedIn(t, reg, 1)
	g.p.Cut()
	for _, c := range []struct {
		id    string
		done  <-chan *http.Response
		retry []string
	}{
		{"sdk-at-engine", sent, []string{"false"}},
		{"sdk-queued", queued, nil},
	} {
		var resp *http.Response
		select {
		case resp = <-c.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer 10s after the cut", c.id)
		}
		if resp == nil || resp.StatusCode != 503 {
			t.Fatalf("%s: %v, want 503", c.id, resp)
		}
		if got := resp.Header.Values("X-Should-Retry"); strings.Join(got, ",") != strings.Join(c.retry, ",") {
			t.Errorf("%s: X-Should-Retry %q, want %q", c.id, got, c.retry)
		}
	}
	got := map[string]meter.Record{}
	for range 2 {
		rec := g.record(t)
		got[rec.RequestID] = rec
	}
	for _, id := range []string{"sdk-at-engine", "sdk-queued"} {
		if rec, ok := got[id]; !ok || rec.Outcome != meter.OutcomeTimeout || rec.Status != 503 || !strings.Contains(rec.ErrorMessage, "shutting down") {
			t.Errorf("%s: record %+v", id, rec)
		}
	}
	g.noMoreRecords(t)
	if n := len(atEngine); n != 0 {
		t.Errorf("%d more requests at the engine", n)
	}
}

// A request too large for its tenant's tpm gets 429 without Retry-After:
// no wait admits it. The openai SDK retries a 429 unless told not to, so
// it says X-Should-Retry: false; measured with the SDK, such a call was
// sent three times (three records) before the error reached its caller.
// A 429 that a wait does admit keeps the SDK's retry, after Retry-After.
func TestTooLargeTellsTheSDKNotToRetry(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{RPM: 1, TPM: 1000})
	store, gate := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate})
	for _, c := range []struct {
		id, body   string
		status     int
		retry      string // X-Should-Retry
		retryAfter bool
	}{
		{"sdk-too-large", `{"model":"sim-llama","messages":[{"role":"user","content":"hi"}],"max_tokens":5000}`, 429, "false", false},
		{"sdk-first", `{"model":"sim-llama","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`, 200, "", false},
		{"sdk-over-rpm", `{"model":"sim-llama","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`, 429, "", true},
	} {
		var resp *http.Response
		select {
		case resp = <-sdkPost(t, g.addr, key, c.id, c.body):
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer", c.id)
		}
		if resp == nil || resp.StatusCode != c.status {
			t.Fatalf("%s: %v, want %d", c.id, resp, c.status)
		}
		if got := resp.Header.Get("X-Should-Retry"); got != c.retry {
			t.Errorf("%s: X-Should-Retry %q, want %q", c.id, got, c.retry)
		}
		if got := resp.Header.Get("Retry-After") != ""; got != c.retryAfter {
			t.Errorf("%s: Retry-After %q", c.id, resp.Header.Get("Retry-After"))
		}
		rec := g.record(t)
		want := meter.OutcomeRateLimited
		if c.status == 200 {
			want = meter.OutcomeOK
		}
		if rec.RequestID != c.id || rec.Outcome != want || rec.Status != c.status {
			t.Errorf("%s: record %+v", c.id, rec)
		}
	}
	g.noMoreRecords(t)
	if n := up.accepts.Load(); n != 1 {
		t.Errorf("%d engine connections, want 1 (the request admitted)", n)
	}
}
