package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
	"github.com/valyala/fasthttp"
)

// The OpenAI routes without /v1, as llama.cpp serves them, are metered.
func TestRouteAliasesMetered(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g := startGateway(t, Config{Upstream: up.URL()})
	for _, c := range []struct{ path, route string }{
		{"/chat/completions", "chat"},
		{"/v1/chat/completions", "chat"},
		{"/completions", "completions"},
		{"/v1/completions", "completions"},
		{"/v1/chat/completionsX", "other"},
	} {
		status, _, _, err := post(t, g.URL()+c.path, chatBody, nil)
		if err != nil || status != 200 {
			t.Fatalf("%s: status %d err %v", c.path, status, err)
		}
		rec := g.record(t)
		if rec.Route != c.route {
			t.Fatalf("%s: route %q, want %q", c.path, rec.Route, c.route)
		}
		if c.route != "other" && (rec.OSL <= 0 || rec.TTFT <= 0) {
			t.Fatalf("%s: not metered: %+v", c.path, rec)
		}
	}
}

// A client's X-Request-Id is kept when it is 1-128 visible ASCII
// characters, and replaced by a generated one otherwise, consistently in
// the record, the response and the upstream request.
func TestRequestIDBoundedAndSanitised(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g := startGateway(t, Config{Upstream: up.URL()})
	for _, c := range []struct {
		id   string
		keep bool
	}{
		{"req-1_ab.C:9/x", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"has space", false},
		{"caf\xc3\xa9", false},
		{"tab\there", false},
	} {
		conn := rawPost(t, g.addr, chatBody, "X-Request-Id: "+c.id+"\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		conn.Close()
		rec := g.record(t)
		got := resp.Header.Get("X-Request-Id")
		if got != rec.RequestID {
			t.Fatalf("%q: response id %q, record id %q", c.id, got, rec.RequestID)
		}
		if !strings.Contains(up.lastHeaders(), "X-Request-Id: "+rec.RequestID+"\r\n") {
			t.Fatalf("%q: upstream headers %q lack the record's id %q", c.id, up.lastHeaders(), rec.RequestID)
		}
		if kept := rec.RequestID == c.id; kept != c.keep {
			t.Fatalf("%q: kept=%v, want %v (record id %q)", c.id, kept, c.keep, rec.RequestID)
		}
		if !c.keep && len(rec.RequestID) != 32 {
			t.Fatalf("%q: replacement id %q is not a generated one", c.id, rec.RequestID)
		}
	}
}

// A metered body with a duplicate member is refused before it reaches the
// engine: the gateway would read the first value, the engine the last.
func TestDuplicateKeysRejected(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g := startGateway(t, Config{Upstream: up.URL()})
	for _, c := range []struct{ body, key string }{
		{`{"model":"cheap","model":"expensive","max_tokens":1,"stream":true,"messages":[]}`, `"model"`},
		{`{"model":"m","max_tokens":1,"messages":[],"max_tokens":5000}`, `"max_tokens"`},
		{`{"model":"m","mod\u0065l":"x","messages":[]}`, `"model"`},
		{`{"model":"m","stream":true,"stream_options":{"include_usage":false,"include_usage":true},"messages":[]}`, `"stream_options.include_usage"`},
	} {
		status, _, resp, err := post(t, g.URL()+"/v1/chat/completions", c.body, nil)
		if err != nil || status != 400 || !strings.Contains(resp, "duplicate key") || !strings.Contains(resp, strings.ReplaceAll(c.key, `"`, `\"`)) {
			t.Fatalf("%s: status %d body %s err %v", c.body, status, resp, err)
		}
		rec := g.record(t)
		if rec.Outcome != meter.OutcomeRejected || rec.Status != 400 {
			t.Fatalf("%s: record %+v", c.body, rec)
		}
	}
	if n := up.accepts.Load(); n != 0 {
		t.Fatalf("the engine was contacted %d times", n)
	}
	// Same names at different depths are fine.
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"a","model":"x"}]}`
	if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", body, nil); err != nil || status != 200 {
		t.Fatalf("nested name: status %d err %v", status, err)
	}
	g.record(t)
}

// On TGI's and SGLang's native routes a member named twice in parameters
// or sampling_params (or one of its list) is refused too: SGLang reads
// sampling_params as a dict (the last value wins) and the gateway the
// first, so that "n": 1, "n": 8 made 8 outputs charged as one, and a
// first max_new_tokens of 1 hid the one generated. TGI refuses such a
// body itself.
func TestNativeParamsDuplicateRejected(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g := startGateway(t, Config{Upstream: up.URL()})
	for _, c := range []struct{ path, body, key string }{
		{"/generate", `{"text":"a","sampling_params":{"max_new_tokens":300,"n":1,"n":8}}`, `"sampling_params.n"`},
		{"/generate", `{"text":["a","b"],"sampling_params":[{"n":2},{"max_new_tokens":1,"m\u0061x_new_tokens":900}]}`, `"sampling_params[1].max_new_tokens"`},
		{"/generate", `{"inputs":"a","parameters":{"best_of":1,"max_new_tokens":9,"best_of":4}}`, `"parameters.best_of"`},
		{"/generate_stream", `{"inputs":"a","parameters":{"x":1,"x":2}}`, `"parameters.x"`},
		{"/", `{"inputs":"a","stream":true,"parameters":{"max_new_tokens":9,"max_new_tokens":90}}`, `"parameters.max_new_tokens"`},
	} {
		status, _, resp, err := post(t, g.URL()+c.path, c.body, nil)
		if err != nil || status != 400 || !strings.Contains(resp, "duplicate key") || !strings.Contains(resp, strings.ReplaceAll(c.key, `"`, `\"`)) {
			t.Fatalf("%s: status %d body %s err %v", c.body, status, resp, err)
		}
		if rec := g.record(t); rec.Outcome != meter.OutcomeRejected || rec.Status != 400 {
			t.Fatalf("%s: record %+v", c.body, rec)
		}
	}
	if n := up.accepts.Load(); n != 0 {
		t.Fatalf("the engine was contacted %d times", n)
	}
	// Elsewhere such members are no part of what the engine reads.
	body := `{"model":"m","messages":[],"parameters":{"x":1,"x":2},"sampling_params":[{"n":1,"n":2}]}`
	if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", body, nil); err != nil || status != 200 {
		t.Fatalf("on the chat route: status %d err %v", status, err)
	}
	g.record(t)
}

// A metered body nested deeper than the gateway's parser reads
// (fastjson.MaxDepth, 300) is refused before the engine is contacted:
// Python's json (vLLM, SGLang) reads it, so it was forwarded with none of
// the body's checks (a gateway key as the model, a duplicate member, the
// tokens charged, per-model limits). A body with a syntax error is still
// the engine's to answer. Found by a hostile-engine probe.
func TestDeepBodyRejected(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{RPM: 600, TPM: 100000})
	store, gate := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate})
	auth := map[string]string{"Authorization": "Bearer " + key}
	nest := strings.Repeat("[", 400) + strings.Repeat("]", 400)
	for _, c := range []struct{ path, body string }{
		{"/v1/responses", `{"model":"` + key + `","input":"x","stream":false,"stream":true,"max_output_tokens":5000000,"metadata":{"x":` + nest + `}}`},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"x":` + nest + `}`},
	} {
		status, _, text, err := post(t, g.URL()+c.path, c.body, auth)
		if err != nil || status != 400 || !strings.Contains(text, "nests arrays and objects more than 300 levels deep") || strings.Contains(text, key) {
			t.Fatalf("%s: status %d err %v answer %.300s", c.path, status, err, text)
		}
		rec := g.record(t)
		if rec.Outcome != meter.OutcomeRejected || rec.Status != 400 || rec.Model != "" || !strings.Contains(rec.ErrorMessage, "more than 300 levels deep") {
			t.Fatalf("%s: record outcome %s status %d model %.40q error %q", c.path, rec.Outcome, rec.Status, rec.Model, rec.ErrorMessage)
		}
	}
	g.noMoreRecords(t)
	if n := up.accepts.Load(); n != 0 {
		t.Fatalf("the engine was contacted %d times", n)
	}
	// With gateway keys, neither is a body the gateway cannot read for
	// another reason, which Python's json reads (found by a review of the
	// fix above): its model, limits and keys would pass unchecked.
	broken := `{"model":"m","messages":[],"x":` + nest[:250] + `}` // 251 levels, then a brace for a bracket
	for _, body := range []string{broken, `{"model":"` + key + `","messages":[],"x":Infinity}`, "\xef\xbb\xbf" + `{"model":"m","messages":[]}`, `["not an object"]`, ``} {
		status, _, text, err := post(t, g.URL()+"/v1/chat/completions", body, auth)
		if err != nil || status != 400 || !strings.Contains(text, "not a JSON object the gateway can read") || strings.Contains(text, key) {
			t.Fatalf("an unreadable body %.40q: status %d err %v answer %.300s", body, status, err, text)
		}
		if rec := g.record(t); rec.Outcome != meter.OutcomeRejected || rec.Model != "" {
			t.Fatalf("an unreadable body %.40q: record %s model %.40q", body, rec.Outcome, rec.Model)
		}
	}
	if n := up.accepts.Load(); n != 0 {
		t.Fatalf("the engine was contacted %d times", n)
	}
	// Without keys it is the engine's to answer.
	g2 := startGateway(t, Config{Upstream: up.URL()})
	if status, _, _, err := post(t, g2.URL()+"/v1/chat/completions", broken, nil); err != nil || status != 200 {
		t.Fatalf("a malformed body without keys: status %d err %v", status, err)
	}
	if rec := g2.record(t); rec.Outcome == meter.OutcomeRejected {
		t.Fatalf("a malformed body without keys was rejected: %q", rec.ErrorMessage)
	}
	// So is a deep body on a route the gateway does not parse.
	if status, _, _, err := post(t, g.URL()+"/v1/embeddings", `{"input":`+nest+`}`, auth); err != nil || status != 200 {
		t.Fatalf("a deep body on a pass-through route: status %d err %v", status, err)
	}
	if rec := g.record(t); rec.Outcome == meter.OutcomeRejected {
		t.Fatalf("a deep body on a pass-through route was rejected: %q", rec.ErrorMessage)
	}
}

// With gateway keys the tenant comes from the key: a client's tenant
// header is not passed on to the engine.
func TestTenantHeaderNotForwardedWithKeys(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{})
	store, _ := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store})
	status, _, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, map[string]string{"Authorization": "Bearer " + key, "X-Tenant": "other-tenant"})
	if err != nil || status != 200 {
		t.Fatalf("status %d err %v", status, err)
	}
	if rec := g.record(t); rec.Tenant != "acme" {
		t.Fatalf("tenant %q", rec.Tenant)
	}
	if h := up.lastHeaders(); strings.Contains(strings.ToLower(h), "x-tenant") {
		t.Fatalf("the engine got the client's tenant header:\n%s", h)
	}
}

// Requests fasthttp cannot parse get a fixed message: its own error text
// quotes the raw request, gateway key included.
func TestMalformedRequestsLeakNoKey(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{})
	store, _ := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	var logged strings.Builder
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Logf: func(f string, a ...any) { fmt.Fprintf(&logged, f, a...) }})
	auth := "Authorization: Bearer " + key + "\r\n"
	for _, c := range []struct {
		name, raw string
		status    int
	}{
		{"header line without colon", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + auth + "NoColonHere\r\n\r\n", 400},
		{"bad content-length", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: abc\r\n\r\n", 400},
		{"bad chunking", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + auth + "Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
		{"headers too large", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + auth + "X-Big: " + strings.Repeat("b", 17<<10) + "\r\n\r\n", 431},
		// A client that ends its request early went away: nothing is
		// answered (TestClientGoneWhileSendingTheRequest).
		{"truncated body", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: 100\r\n\r\n{\"model\"", meter.StatusClientClosed},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", g.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, c.raw); err != nil {
				t.Fatal(err)
			}
			if c.name == "truncated body" {
				conn.(*net.TCPConn).CloseWrite()
			}
			resp, err := io.ReadAll(conn)
			if err != nil && c.status != 431 {
				// The gateway closes a connection whose headers it did not
				// read: the rest of them may turn its close into a reset
				// that overtakes the answer.
				t.Fatal(err)
			}
			want := meter.OutcomeRejected
			if c.status == meter.StatusClientClosed {
				want = meter.OutcomeClientAbort
				if len(resp) > 0 {
					t.Fatalf("response %q to a client that went away", resp)
				}
			}
			if len(resp) > 0 && !strings.HasPrefix(string(resp), fmt.Sprintf("HTTP/1.1 %d ", c.status)) {
				t.Fatalf("response %q, want status %d", resp, c.status)
			}
			rec := g.record(t)
			if rec.Status != c.status || rec.Outcome != want {
				t.Fatalf("record %+v", rec)
			}
			for what, s := range map[string]string{"response": string(resp), "record": fmt.Sprintf("%+v", rec), "log": logged.String()} {
				if strings.Contains(s, key) || strings.Contains(s, key[len(key)-8:]) {
					t.Fatalf("the gateway key is in the %s: %q", what, s)
				}
			}
		})
	}
}

// A connection that sends nothing before the read deadline is no request:
// it gets no record.
func TestSilentConnectionNoRecord(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g := startGatewayWith(t, Config{Upstream: up.URL()}, func(s *fasthttp.Server) { s.ReadTimeout = 50 * time.Millisecond })
	conn, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.ReadAll(conn) // the gateway closes it at its read deadline
	// A half-sent request line under the same deadline is one.
	conn2, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	io.WriteString(conn2, "POST /v1/chat/comp")
	resp, _ := io.ReadAll(conn2)
	if !strings.HasPrefix(string(resp), "HTTP/1.1 408 ") {
		t.Fatalf("half-sent request: response %q", resp)
	}
	if rec := g.record(t); rec.Status != 408 || rec.Outcome != meter.OutcomeRejected {
		t.Fatalf("record %+v", rec)
	}
	g.noMoreRecords(t)
}

// A panic while the handler owns the request ends that request with one
// record and a 500; the gateway goes on serving.
func TestHandlerPanicIsContained(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	var logged strings.Builder
	g := startGateway(t, Config{Upstream: up.URL(), Logf: func(f string, a ...any) { fmt.Fprintf(&logged, f, a...) }})
	testHookRequest = func() { panic("test: a handler bug") }
	status, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	testHookRequest = nil
	if err != nil || status != 500 || !strings.Contains(body, "internal_error") {
		t.Fatalf("status %d body %q err %v", status, body, err)
	}
	rec := g.record(t)
	if rec.Status != 500 || rec.Outcome != meter.OutcomeUpstreamError {
		t.Fatalf("record %+v", rec)
	}
	g.noMoreRecords(t)
	if !strings.Contains(logged.String(), "a handler bug") {
		t.Fatalf("log %q", logged.String())
	}
	if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil); err != nil || status != 200 {
		t.Fatalf("after the panic: status %d err %v", status, err)
	}
	g.record(t)
	if n := g.p.InFlight(); n != 0 {
		t.Fatalf("in flight %d", n)
	}
}

// A panic once the engine has the request (its response head read, no
// stream yet) ends it with a 500 that says X-Should-Retry: false: the
// openai SDKs retry a 500 twice, and the engine may be generating it; the
// engine's connection is closed. A panic before it was sent leaves the
// 500 retryable.
func TestHandlerPanicAfterSendingIsNotRetried(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g := startGateway(t, Config{Upstream: up.URL(), Logf: func(string, ...any) {}})
	for _, c := range []struct {
		name  string
		hook  *func()
		retry string
	}{
		{"after sending", &testHookResponseHead, "false"},
		{"before sending", &testHookRequest, ""},
	} {
		*c.hook = func() { panic("test: a handler bug") }
		status, hdr, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
		*c.hook = nil
		if err != nil || status != 500 || hdr.Get("X-Should-Retry") != c.retry {
			t.Errorf("%s: status %d, X-Should-Retry %q, err %v; want 500 and %q", c.name, status, hdr.Get("X-Should-Retry"), err, c.retry)
		}
		if rec := g.record(t); rec.Status != 500 || rec.Outcome != meter.OutcomeUpstreamError {
			t.Errorf("%s: record %+v", c.name, rec)
		}
		// The engine's connection is closed, not left busy with the
		// engine generating into it (it was, and the test hung on it).
		g.p.up.mu.Lock()
		busy := len(g.p.up.busy)
		for c := range g.p.up.busy {
			c.Close() // so that the upstream's cleanup does not wait on it
		}
		g.p.up.mu.Unlock()
		if busy != 0 {
			t.Fatalf("%s: %d upstream connections still busy", c.name, busy)
		}
	}
	g.noMoreRecords(t)
}

// A sink that panics does not take the process down, and the request's
// bookkeeping (InFlight, Wait) is still done.
func TestSinkPanicIsContained(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	calls := make(chan struct{}, 8)
	p, err := New(Config{Upstream: up.URL(), Sink: RecordFunc(func(*meter.Record) {
		calls <- struct{}{}
		panic("test: a sink bug")
	})})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := p.Server()
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown(); p.Wait(); p.CloseIdle() })
	for i := 0; i < 2; i++ {
		status, _, _, err := post(t, "http://"+ln.Addr().String()+"/v1/chat/completions", chatBody, nil)
		if err != nil || status != 200 {
			t.Fatalf("status %d err %v", status, err)
		}
		<-calls
	}
	p.Wait()
	if n := p.InFlight(); n != 0 {
		t.Fatalf("in flight %d", n)
	}
}

// A panic while a stream ends (which fasthttp would swallow) still ends the
// request with one record, so Wait and a shutdown do not hang.
func TestFinishStreamPanicIsContained(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g, logged := startLoggedGateway(t, Config{Upstream: up.URL()})
	testHookFinishStream = func() { panic("test: a bug at the end of a stream") }
	post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	rec := g.record(t)
	testHookFinishStream = nil
	if rec.Outcome != meter.OutcomeUpstreamError || !strings.Contains(rec.ErrorMessage, "internal error") {
		t.Fatalf("record %+v", rec)
	}
	g.p.Wait()
	if log := logged(); !strings.Contains(log, "a bug at the end of a stream") {
		t.Fatalf("log %q", log)
	}
}

// A panic in a stream's WriteTo outside its reader (before the reader
// starts, with the writer goroutine running for a body of known length or
// not for a stream) ends the request with one record, and Wait returns:
// fasthttp recovers a body writer's panic quietly, and Close then waited
// for a reader that never ran (a review found it).
func TestWriteToPanicIsContained(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g, logged := startLoggedGateway(t, Config{Upstream: up.URL()})
	testHookWriteTo = func() { panic("test: a bug on the way to the reader") }
	defer func() { testHookWriteTo = nil }()
	for _, body := range []string{chatBody, strings.Replace(chatBody, `"stream":true`, `"stream":false`, 1)} {
		post(t, g.URL()+"/v1/chat/completions", body, nil)
		rec := g.record(t)
		if rec.Outcome != meter.OutcomeUpstreamError || !strings.Contains(rec.ErrorMessage, "internal error while streaming the answer") {
			t.Fatalf("%s: record %+v", body, rec)
		}
	}
	g.p.Wait()
	g.noMoreRecords(t)
	if log := logged(); !strings.Contains(log, "a bug on the way to the reader") {
		t.Fatalf("log %q", log)
	}
}

// The names of a head that the upstream head treats apart are found in any
// case, each as its own bit (removeHopRequest takes hopHeaders' by their
// place in it); a name in a folded line's text, or a name that only
// starts like one, is not one.
func TestHeadNames(t *testing.T) {
	for i, k := range hopHeaders {
		for _, name := range []string{k, strings.ToLower(k), strings.ToUpper(k)} {
			if got, bad := scanHeadNames([]byte("Host: x\r\n"+name+": v\r\n"), "X-Tenant"); bad || got != 1<<i {
				t.Errorf("%s: names %b bad %v, want %b", name, got, bad, 1<<i)
			}
		}
	}
	for _, c := range []struct {
		raw  string
		want headNames
	}{
		{"Host: x\r\nExpect: 100-continue\r\n", nameExpect},
		{"Host: x\r\nauthorization: Bearer k\r\nX-API-KEY: k\r\n", nameAuthorization | nameAPIKey},
		{"Host: x\r\nx-tenant: acme\r\nX-Forwarded-For: 1.2.3.4\r\n", nameTenant | nameForwardedFor},
		{"Host: x\r\nConnection: keep-alive, Te\r\nTE: trailers\r\n", nameConnection | nameTE},
		{"Host: x\r\nX-A: a\r\n Upgrade: h2c\r\n", 0},
		{"Host: x\r\nUpgrades: 1\r\nConnectio: 1\r\nX-Tenants: 1\r\n", 0},
		{"", allNames},
	} {
		if got, bad := scanHeadNames([]byte(c.raw), "X-Tenant"); bad || got != c.want {
			t.Errorf("%q: names %b bad %v, want %b", c.raw, got, bad, c.want)
		}
	}
}

// A header name that is not an HTTP token (fasthttp takes a space inside
// one) is refused, never forwarded; a folded header is forwarded unfolded.
func TestBadHeaderNameRefused(t *testing.T) {
	for _, c := range []struct {
		raw string
		bad bool
	}{
		{"Host: x\r\nX-A: 1\r\n", false},
		{"Host: x\r\nX Bad: 1\r\n", true},
		{"Host: x\r\nX-A: a\r\n folded\r\n", false},
		{"Host: x\r\nX\"Q: 1\r\n", true},
		{"Host: x\nX-A: 1\n", false},
		{"Host: x\r\n: empty\r\n", true},
		{"", false},
	} {
		if _, got := scanHeadNames([]byte(c.raw), "X-Tenant"); got != c.bad {
			t.Errorf("%q: bad %v, want %v", c.raw, got, c.bad)
		}
	}
	up := startRawUpstream(t, vllmUpstream(0))
	g := startGateway(t, Config{Upstream: up.URL()})
	raw := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX Bad: 1\r\nContent-Length: %d\r\n\r\n%s", len(chatBody), chatBody)
	if line := rawExchange(t, g.addr, raw); !strings.Contains(line, " 400 ") {
		t.Fatalf("answer %s", line)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeRejected || rec.Tenant != DefaultTenant || rec.Route != "chat" {
		t.Fatalf("record %+v", rec)
	}
	if n := up.accepts.Load(); n != 0 {
		t.Fatalf("the engine was contacted %d times", n)
	}
}

// CONNECT and TRACE never reach the engine: 405 with Allow, one record
// (rejected), and the connection closes.
func TestConnectAndTraceRefused(t *testing.T) {
	refusedAtTheDoor(t, 405, "\r\nAllow: GET, HEAD, POST", "CONNECT 127.0.0.1:6379 HTTP/1.1", "TRACE /v1/models HTTP/1.1")
}

// So is a method no OpenAI-compatible API serves: methods are
// case-sensitive, and "post" to a generation route went to the engine
// unmetered, as a route the gateway does not read (found by an HTTP-level
// probe).
func TestOtherMethodsRefused(t *testing.T) {
	refusedAtTheDoor(t, 405, "\r\nAllow: GET, HEAD, POST", "post /v1/chat/completions HTTP/1.1", "Post /v1/completions HTTP/1.1", "PROPFIND /v1/models HTTP/1.1")
}

// A request line in another version than HTTP/1.0 or 1.1 (an HTTP/2
// client that skipped the upgrade, a typo) gets 505 and is not served as
// an HTTP/1 request; the engine is not contacted.
func TestOtherHTTPVersionRefused(t *testing.T) {
	refusedAtTheDoor(t, 505, "", "GET /v1/models HTTP/2.0", "GET /v1/models HTTP/1.2")
}

// refusedAtTheDoor sends each request line (with a Host header) on a
// connection of its own, and checks that the gateway answers status, with
// want in its head, records it as rejected, closes the connection, and
// never contacts the engine.
func refusedAtTheDoor(t *testing.T, status int, want string, lines ...string) {
	t.Helper()
	up := startRawUpstream(t, vllmUpstream(0))
	g := startGateway(t, Config{Upstream: up.URL()})
	for _, line := range lines {
		conn, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, line+"\r\nHost: x\r\n\r\n")
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(conn)
		conn.Close()
		if err != nil || !strings.HasPrefix(string(b), "HTTP/1.1 "+strconv.Itoa(status)+" ") || !strings.Contains(string(b), want) {
			t.Fatalf("%s: %v %q", line, err, b)
		}
		if rec := g.record(t); rec.Outcome != meter.OutcomeRejected || rec.Status != status {
			t.Fatalf("%s: record %+v", line, rec)
		}
	}
	if n := up.accepts.Load(); n != 0 {
		t.Fatalf("the engine was contacted %d times", n)
	}
}

// "OPTIONS *" asks about the server, not a resource: the gateway answers
// it (200, Allow, no body), as Go's net/http server does, and records it;
// the engine is not asked (passed on, it reached the engine as "OPTIONS
// /%2A", a path). The asterisk with another method is refused.
func TestOptionsAsterisk(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g := startGateway(t, Config{Upstream: up.URL()})
	conn, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	for i := 0; i < 2; i++ { // the connection stays open
		io.WriteString(conn, "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n")
		var resp fasthttp.Response
		if err := resp.Read(br); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode() != 200 || string(resp.Header.Peek("Allow")) != string(allowedMethods) || len(resp.Body()) != 0 || resp.ConnectionClose() {
			t.Fatalf("OPTIONS *: %s", resp.String())
		}
		if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.Status != 200 || rec.UpstreamStatus != 0 {
			t.Fatalf("record %+v", rec)
		}
	}
	if n := up.accepts.Load(); n != 0 {
		t.Fatalf("the engine was contacted %d times", n)
	}
	refusedAtTheDoor(t, 400, "", "GET * HTTP/1.1", "POST * HTTP/1.1")
}

// A panic after a stream's record is settled (in the stream's release)
// is logged under the request's own id: the record went back to its pool
// when it was emitted, and may already be another request's (the hook
// stands in for that request, which has taken the record and named it).
func TestFinishStreamPanicAfterRecordNamesItsRequest(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	var emitted atomic.Pointer[meter.Record]
	g, logged := startLoggedGateway(t, Config{Upstream: up.URL(), Sink: RecordFunc(func(rec *meter.Record) { emitted.Store(rec) })})
	testHookStreamSettled = func() {
		emitted.Load().RequestID = "another-request" // the pool's next owner
		panic("test: a bug as a stream is released")
	}
	defer func() { testHookStreamSettled = nil }()
	post(t, g.URL()+"/v1/chat/completions", chatBody, map[string]string{"X-Request-Id": "req-own-id"})
	rec := g.record(t)
	g.p.Wait()
	if rec.RequestID != "req-own-id" {
		t.Fatalf("record %+v", rec)
	}
	log := logged()
	if !strings.Contains(log, "a bug as a stream is released") || !strings.Contains(log, "request req-own-id:") || strings.Contains(log, "another-request") {
		t.Fatalf("log %q", log)
	}
}

// A client's X-Request-Id that is the id of a request still in flight is
// replaced by a generated one, in the record, the answer and the engine's
// request: vLLM takes the X-Request-Id it is sent as its own request id,
// which it assumes unique (vLLM issues 10583 and 27711: a second request
// under the id of one running is refused, or disturbs the engine), so that
// a tenant who reused an id, its own or another tenant's, reached the
// engine with two requests of one id (found by an HTTP-level probe: two
// tenants' concurrent requests, both sent as "shared-id-1"; and two log
// lines of one request_id). Once the first request's record is out, the
// id is free again.
func TestRequestIDInFlightNotReused(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	unhold := func() { once.Do(func() { close(release) }) }
	up := startRawUpstream(t, func(c *scriptConn) {
		if strings.Contains(string(c.Req.Body()), "hold") {
			writeHeldStream(c, release)
			return
		}
		vllmUpstream(0)(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	t.Cleanup(unhold) // a failure below still lets the held stream end (before the upstream's cleanup waits for it)
	held := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hold"}]}`
	first := startStream(t, g.URL()+"/v1/chat/completions", held, map[string]string{"X-Tenant": "a", "X-Request-Id": "dup-1"})

	// The first is at the engine, its stream begun: the same id again.
	status, hdr, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, map[string]string{"X-Tenant": "b", "X-Request-Id": "dup-1"})
	if err != nil || status != 200 {
		t.Fatalf("second: status %d, %v", status, err)
	}
	second := g.record(t)
	if second.RequestID == "dup-1" || len(second.RequestID) != 32 || second.ClientRequestID != "dup-1" {
		t.Fatalf("second request, sent while dup-1 was in flight, recorded as %q (client's %q); want a generated id, and the client's dup-1 kept", second.RequestID, second.ClientRequestID)
	}
	if got := hdr.Get("X-Request-Id"); got != second.RequestID {
		t.Fatalf("second: answered with id %q, recorded %q", got, second.RequestID)
	}
	if !strings.Contains(up.lastHeaders(), "X-Request-Id: "+second.RequestID+"\r\n") {
		t.Fatalf("second: the engine got %q, not the record's id %q", up.lastHeaders(), second.RequestID)
	}

	unhold()
	if e := first.end(t); e.err != nil {
		t.Fatal(e.err)
	}
	if rec := g.record(t); rec.RequestID != "dup-1" || rec.ClientRequestID != "" {
		t.Fatalf("first request recorded as %q (client's %q), want dup-1 alone", rec.RequestID, rec.ClientRequestID)
	}
	// Its record out, the id is the client's to use again.
	if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, map[string]string{"X-Request-Id": "dup-1"}); err != nil || status != 200 {
		t.Fatalf("third: status %d, %v", status, err)
	}
	if rec := g.record(t); rec.RequestID != "dup-1" {
		t.Fatalf("third request, sent after the first ended, recorded as %q, want dup-1", rec.RequestID)
	}
}
