package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
	"github.com/valyala/fasthttp"
)

// sendRaw writes s on a connection of its own and returns what the gateway
// answers until it closes the connection; with leave, the client closes
// its side once s is written and nothing is read.
func sendRaw(t *testing.T, addr, s string, leave bool) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, s); err != nil {
		t.Fatal(err)
	}
	if leave {
		return ""
	}
	answer, took, closed := readAnswer(t, conn, 10*time.Second)
	if !closed {
		t.Fatalf("no answer after %v: %q", took, answer)
	}
	return answer
}

// A request whose body fails while it is read (too slow, chunked over the
// limit, a malformed chunk, its client gone) is recorded under the tenant,
// key, route and request id its headers gave, though fasthttp has reset
// the request by the time errorHandler sees it; a request whose head
// failed is not given the last one's.
func TestFailedBodyKeepsItsIdentity(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		t.Errorf("the engine got a request: %q", c.Req.Body())
		c.Conn.Close()
	})
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{})
	store, _ := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	const bodyTimeout = 200 * time.Millisecond
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store, MaxBodyBytes: 1000, ReadBodyTimeout: bodyTimeout})
	head := func(path, id, framing string) string {
		return "POST " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key + "\r\nX-Request-Id: " + id +
			"\r\nContent-Type: application/json\r\n" + framing + "\r\n\r\n"
	}
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", 2000) + `"}]}`
	for _, c := range []struct {
		name, send string
		leave      bool
		id, route  string
		outcome    meter.Outcome
		status     int
	}{
		{"too slow", head("/v1/messages", "slow-1", "Content-Length: 100") + `{"model":`, false, "slow-1", "messages", meter.OutcomeRejected, 408},
		{"chunked over the limit", head("/v1/chat/completions", "big-2", "Transfer-Encoding: chunked") + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big), big), false, "big-2", "chat", meter.OutcomeRejected, 413},
		{"malformed chunk", head("/chat/completions", "bad-3", "Transfer-Encoding: chunked") + "zz\r\n", false, "bad-3", "chat", meter.OutcomeRejected, 400},
		// Too slow in a chunked body's last lines: fasthttp's trailer read
		// says fasthttp.ErrTimeout, no net.Error (found by an HTTP-level
		// probe: a client that stalled after "0\r\n" got 400, "malformed
		// HTTP request", its record a client's mistake rather than a 408).
		{"too slow in a chunk's data", head("/v1/chat/completions", "slow-5", "Transfer-Encoding: chunked") + "10\r\n{\"model\"", false, "slow-5", "chat", meter.OutcomeRejected, 408},
		{"too slow in the last chunk", head("/v1/chat/completions", "slow-6", "Transfer-Encoding: chunked") + "2\r\n{}\r\n0", false, "slow-6", "chat", meter.OutcomeRejected, 408},
		{"too slow before the trailer's end", head("/v1/chat/completions", "slow-7", "Transfer-Encoding: chunked") + "2\r\n{}\r\n0\r\n", false, "slow-7", "chat", meter.OutcomeRejected, 408},
		{"too slow in the trailer's end", head("/v1/chat/completions", "slow-8", "Transfer-Encoding: chunked") + "2\r\n{}\r\n0\r\n\r", false, "slow-8", "chat", meter.OutcomeRejected, 408},
		{"too slow in a trailer field", head("/v1/chat/completions", "slow-9", "Transfer-Encoding: chunked") + "2\r\n{}\r\n0\r\nX-A: b", false, "slow-9", "chat", meter.OutcomeRejected, 408},
		{"client gone", head("/v1/completions", "gone-4", "Content-Length: 100") + `{"model":`, true, "gone-4", "completions", meter.OutcomeClientAbort, meter.StatusClientClosed},
		{"absolute target", strings.Replace(head("http://x/v1/responses?v=1", "abs-5", "Content-Length: 100"), "Host: x", "Host: y", 1) + `{`, false, "abs-5", "responses", meter.OutcomeRejected, 408},
	} {
		t.Run(c.name, func(t *testing.T) {
			answer := sendRaw(t, g.addr, c.send, c.leave)
			if !c.leave && (!strings.HasPrefix(answer, fmt.Sprintf("HTTP/1.1 %d ", c.status)) || !strings.Contains(answer, "X-Request-Id: "+c.id+"\r\n")) {
				t.Errorf("answer %q", answer)
			}
			if c.route == "messages" && !strings.Contains(answer, `{"type":"error","error":{"type":`) {
				t.Errorf("the Messages API's answer is not in Anthropic's shape: %q", answer)
			}
			rec := g.record(t)
			if rec.Tenant != "acme" || rec.KeyID != "acme-key" || rec.Route != c.route || rec.RequestID != c.id ||
				rec.Outcome != c.outcome || rec.Status != c.status {
				t.Errorf("record: tenant %q key %q route %q id %q outcome %s status %d (%s)",
					rec.Tenant, rec.KeyID, rec.Route, rec.RequestID, rec.Outcome, rec.Status, rec.ErrorMessage)
			}
			if c.status == 408 && rec.E2E < bodyTimeout {
				t.Errorf("e2e %v: not counted from the headers' t0", rec.E2E)
			}
			g.noMoreRecords(t)
		})
	}

	// The request id obeys the usual rules: one that holds the presented
	// key is replaced.
	sendRaw(t, g.addr, head("/v1/chat/completions", "req-"+key, "Content-Length: 100")+"{", false)
	if rec := g.record(t); rec.Tenant != "acme" || rec.RequestID == "" || strings.Contains(rec.RequestID, key[3:]) {
		t.Errorf("record: tenant %q id %q", rec.Tenant, rec.RequestID)
	}

	// A head that fails after a body that failed (on a connection of its
	// own, and on the same connection) is a request nothing is known of.
	badHead := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key + "\r\nX-Request-Id: head-6\r\nNo colon\r\n\r\n"
	for _, send := range []string{
		badHead,
		// Pipelined after a request with a body, which keeps its head in
		// the same fasthttp context.
		"OPTIONS * HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key + "\r\nX-Request-Id: ok-7\r\nContent-Length: 2\r\n\r\n{}" + badHead,
	} {
		sendRaw(t, g.addr, head("/v1/chat/completions", "slow-9", "Content-Length: 100")+"{", false)
		if rec := g.record(t); rec.RequestID != "slow-9" || rec.Tenant != "acme" {
			t.Fatalf("record: tenant %q id %q", rec.Tenant, rec.RequestID)
		}
		sendRaw(t, g.addr, send, false)
		rec := g.record(t)
		if strings.HasPrefix(send, "OPTIONS") {
			if rec.RequestID != "ok-7" || rec.Status != 200 {
				t.Fatalf("OPTIONS *: id %q status %d", rec.RequestID, rec.Status)
			}
			rec = g.record(t)
		}
		if rec.Outcome != meter.OutcomeRejected || rec.Status != 400 || rec.Tenant != "" || rec.KeyID != "" || rec.Route != "other" ||
			strings.HasPrefix(rec.RequestID, "head-") || rec.RequestID == "slow-9" {
			t.Errorf("a failed head: tenant %q key %q route %q id %q outcome %s status %d",
				rec.Tenant, rec.KeyID, rec.Route, rec.RequestID, rec.Outcome, rec.Status)
		}
		g.noMoreRecords(t)
	}
}

// Without gateway keys, the tenant is the tenant header's, else the
// default one.
func TestFailedBodyKeepsItsTenantHeader(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g := startGateway(t, Config{Upstream: up.URL(), ReadBodyTimeout: 100 * time.Millisecond})
	for _, c := range []struct{ hdr, tenant string }{{"X-Tenant: beta\r\n", "beta"}, {"", DefaultTenant}} {
		sendRaw(t, g.addr, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"+c.hdr+"X-Request-Id: t-1\r\nContent-Length: 50\r\n\r\n{", false)
		if rec := g.record(t); rec.Tenant != c.tenant || rec.RequestID != "t-1" || rec.Route != "chat" || rec.Status != 408 {
			t.Errorf("record: tenant %q id %q route %q status %d; want tenant %q", rec.Tenant, rec.RequestID, rec.Route, rec.Status, c.tenant)
		}
	}
}

// What headerReceived keeps is its connection's: many requests awaiting
// their bodies at once, each on a connection of its own, are each
// recorded under their own request id and route when their clients leave.
func TestHeldHeadsPerConnection(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g := startGateway(t, Config{Upstream: up.URL()})
	const n = 16
	read := make(chan struct{}, n)
	testHookHeaders = func() { read <- struct{}{} }
	defer func() { testHookHeaders = nil }()
	routes := []string{"/v1/chat/completions", "/v1/completions"}
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nX-Request-Id: held-%d\r\nContent-Length: 100\r\n\r\n{", routes[i%2], i)
	}
	for range n {
		<-read // its head is read, its body awaited: n requests at once
	}
	for _, c := range conns {
		c.Close()
	}
	seen := map[string]bool{}
	for range n {
		rec := g.record(t)
		var i int
		if _, err := fmt.Sscanf(rec.RequestID, "held-%d", &i); err != nil || i < 0 || i >= n || seen[rec.RequestID] {
			t.Fatalf("record of request id %q (seen: %v)", rec.RequestID, seen)
		}
		seen[rec.RequestID] = true
		if want := []string{"chat", "completions"}[i%2]; rec.Outcome != meter.OutcomeClientAbort || rec.Route != want {
			t.Errorf("request %d: outcome %s route %q, want client_abort %q", i, rec.Outcome, rec.Route, want)
		}
	}
	g.noMoreRecords(t)
}

// A client that resets its connection after a head with Expect:
// 100-continue, before the gateway's 100 Continue goes out, left before
// its body: one record, client_abort, under the identity its head gave.
// fasthttp ends the connection when that write fails, calling neither
// the handler nor the error handler: the request left no record.
func TestExpectContinueClientGoneIsRecorded(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		t.Errorf("the engine got a request: %q", c.Req.Body())
		c.Conn.Close()
	})
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{})
	store, _ := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store})
	read, reset := make(chan struct{}), make(chan struct{})
	testHookHeaders = func() {
		read <- struct{}{}
		<-reset // the client is gone before the 100 Continue is written
	}
	defer func() { testHookHeaders = nil }()
	conn, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+key+
		"\r\nX-Request-Id: cont-1\r\nExpect: 100-continue\r\nContent-Length: 100\r\n\r\n")
	<-read
	conn.(*net.TCPConn).SetLinger(0)
	conn.Close() // a reset, on loopback there before Close returns
	close(reset)
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeClientAbort || rec.Status != meter.StatusClientClosed || rec.Tenant != "acme" ||
		rec.KeyID != "acme-key" || rec.RequestID != "cont-1" || rec.Route != "chat" {
		t.Errorf("record: tenant %q key %q route %q id %q outcome %s status %d (%s)",
			rec.Tenant, rec.KeyID, rec.Route, rec.RequestID, rec.Outcome, rec.Status, rec.ErrorMessage)
	}
	g.noMoreRecords(t)
}

// connOfHead finds a request's connection from the header fasthttp hands
// its HeaderReceived hook, the field of the context serving the request:
// for every request of a connection, pipelined ones and one without a
// body among them, and for each of two connections. It pins what
// connOfHead takes from fasthttp: an upgrade that hands the hook another
// header fails here.
func TestConnOfHeadEveryRequest(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var found []*listenerConn // the hook's and the handler's run on one goroutine per connection, one connection at a time here
	srv := &fasthttp.Server{
		HeaderReceived: func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
			found = append(found, connOfHead(h))
			return fasthttp.RequestConfig{}
		},
		Handler: func(ctx *fasthttp.RequestCtx) {
			lc, _ := ctx.Conn().(*listenerConn)
			if last := found[len(found)-1]; lc == nil || last != lc {
				t.Errorf("request %d: the hook found %p, its connection is %p", len(found), last, lc)
			}
		},
		ReduceMemoryUsage: true,
		Logger:            quietLogger{},
	}
	go srv.Serve(NewListener(ln, 0, nil))
	defer srv.Shutdown()
	post := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, post+post+"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"+post)
		br := bufio.NewReader(c)
		for i := range 4 {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("answer %d: %v", i, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		c.Close()
	}
	if len(found) != 8 || found[0] == found[4] {
		t.Fatalf("%d requests seen, connections %p and %p", len(found), found[0], found[4])
	}
}

// parentTracer is a Tracer that keeps the traceparent each request's span
// started from, by request id.
type parentTracer struct {
	mu      sync.Mutex
	parents map[string]string
}

func (pt *parentTracer) Start(rec *meter.Record, client HeaderCarrier) {
	pt.mu.Lock()
	pt.parents[rec.RequestID] = client.Get("traceparent")
	pt.mu.Unlock()
}
func (pt *parentTracer) Upstream(*meter.Record, int, HeaderCarrier) {}
func (pt *parentTracer) End(*meter.Record)                          {}

// A request whose body fails while it is read continues the client's trace
// as any other does: its span started from the reset request's headers,
// in a new trace, so that the client's trace did not show the gateway's
// refusal. A traceparent past what it could be is not kept.
func TestFailedBodyContinuesTheClientsTrace(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		t.Errorf("the engine got a request: %q", c.Req.Body())
		c.Conn.Close()
	})
	tr := &parentTracer{parents: map[string]string{}}
	g := startGateway(t, Config{Upstream: up.URL(), Trace: tr})
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	head := func(id, traceparent, framing string) string {
		return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: " + id + "\r\nTraceparent: " + traceparent +
			"\r\nContent-Type: application/json\r\n" + framing + "\r\n\r\n"
	}
	for _, c := range []struct {
		name, id, traceparent, framing, body string
		leave                                bool
		want                                 string
	}{
		{"malformed chunk", "bad-1", parent, "Transfer-Encoding: chunked", "zz\r\n", false, parent},
		{"client gone", "gone-2", parent, "Content-Length: 100", `{"model":`, true, parent},
		{"a traceparent too long to be one", "long-3", parent + "-" + strings.Repeat("a", 600), "Transfer-Encoding: chunked", "zz\r\n", false, ""},
	} {
		sendRaw(t, g.addr, head(c.id, c.traceparent, c.framing)+c.body, c.leave)
		rec := g.record(t)
		tr.mu.Lock()
		got := tr.parents[rec.RequestID]
		tr.mu.Unlock()
		if rec.RequestID != c.id || got != c.want {
			t.Errorf("%s: record %q, its span started from traceparent %.80q; want %q, %q", c.name, rec.RequestID, got, c.id, c.want)
		}
	}
}
