package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The whole suite with the I/O loops on (Config.IOLoop), as CI runs
	// it too.
	testIOLoop = testenv.IOLoop()
	goleak.VerifyTestMain(m,
		// fasthttp's worker pool cleaner sleeps out its interval after Shutdown.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		// fasthttp's process-wide Date header ticker.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		// The I/O loops, started at the first stream that joins one, run
		// for as long as the process (ioloop_linux.go).
		goleak.IgnoreAnyFunction("github.com/goodput/goodput/proxy.(*ioLoop).run"))
}

// vllmEvents is a vLLM-shaped chat stream (no "usage":null members).
var vllmEvents = []string{
	`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n",
	`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}]}` + "\n\n",
	`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" world"},"logprobs":null,"finish_reason":null}]}` + "\n\n",
	`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}` + "\n\n",
}

const vllmUsage = `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":9,"total_tokens":11,"completion_tokens":2}}` + "\n\n"
const done = "data: [DONE]\n\n"

// wantsUsage reports whether the request asked for include_usage.
func wantsUsage(body []byte) bool {
	var r struct {
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	_ = json.Unmarshal(body, &r)
	return r.StreamOptions != nil && r.StreamOptions.IncludeUsage
}

// vllmUpstream streams vllmEvents with gap between events, and the usage
// chunk when asked, as vLLM does.
func vllmUpstream(gap time.Duration) func(c *scriptConn) {
	return func(c *scriptConn) {
		writeSSEHead(c)
		for _, e := range vllmEvents {
			time.Sleep(gap)
			writeChunk(c, e)
		}
		if wantsUsage(c.Req.Body()) {
			writeChunk(c, vllmUsage)
		}
		writeChunk(c, done)
		endChunks(c)
	}
}

const chatBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`

func TestStreamBytesExactWithInjectedUsage(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(5*time.Millisecond))
	g := startGateway(t, Config{Upstream: up.URL()})
	status, hdr, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, map[string]string{"X-Tenant": "acme", "X-Request-Id": "req-1"})
	if err != nil || status != 200 {
		t.Fatalf("status %d err %v", status, err)
	}
	want := strings.Join(vllmEvents, "") + done
	if body != want {
		t.Fatalf("client bytes differ from the engine's own answer without usage:\n got %q\nwant %q", body, want)
	}
	if !wantsUsage(up.lastBody()) {
		t.Fatalf("the gateway did not ask the engine for usage: %s", up.lastBody())
	}
	if got := hdr.Get("X-Request-Id"); got != "req-1" {
		t.Fatalf("X-Request-Id = %q", got)
	}
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeOK || rec.RequestID != "req-1" || rec.Tenant != "acme" || rec.Model != "m" || rec.Route != "chat" || !rec.Stream {
		t.Fatalf("record: %+v", rec)
	}
	if rec.ISL != 9 || rec.OSL != 2 || rec.UsageSource != meter.UsageUpstream {
		t.Fatalf("ISL %d OSL %d source %v", rec.ISL, rec.OSL, rec.UsageSource)
	}
	// role chunk, two content chunks, finish chunk: four token events.
	if rec.Events != 4 || len(rec.ITL) != 3 {
		t.Fatalf("events %d, itl %v", rec.Events, rec.ITL)
	}
	// Each event is stamped when read: every gap is about the 5 ms the
	// upstream waited. A stamp made late by a descheduled reader (a loaded
	// machine, -race) shortens the gap after it, so the tight per-gap bound
	// is checked under strict timing; otherwise the events must at least
	// not be stamped together.
	var sum time.Duration
	for _, gap := range rec.ITL {
		sum += gap
		if gap < 4*time.Millisecond && testenv.StrictTiming() {
			t.Fatalf("gap %v shorter than the 5ms the upstream waited", gap)
		}
	}
	if sum < 10*time.Millisecond {
		t.Fatalf("gaps %v: %v in all, the upstream waited 15ms", rec.ITL, sum)
	}
	t.Logf("gaps %v", rec.ITL)
	if rec.TTFT <= 0 || rec.TTFTContent < rec.TTFT || rec.E2E < rec.TTFT {
		t.Fatalf("ttft %v ttft_content %v e2e %v", rec.TTFT, rec.TTFTContent, rec.E2E)
	}
	if rec.LeadEvents != 1 { // the role chunk, before the first content
		t.Fatalf("%d token events before the first with content, want 1", rec.LeadEvents)
	}
	// The gateway's own write latency: known, and, under strict timing, far
	// below the 5 ms gaps (a loaded machine running -race once took 7 ms to
	// run the writing goroutine again).
	if rec.WriteDelay <= 0 || rec.Overhead <= 0 {
		t.Fatalf("write delay %v, overhead %v", rec.WriteDelay, rec.Overhead)
	}
	if rec.WriteDelay > 5*time.Millisecond && testenv.StrictTiming() {
		t.Fatalf("write delay %v, longer than the 5 ms gaps", rec.WriteDelay)
	}
	t.Logf("write delay %v, overhead %v", rec.WriteDelay, rec.Overhead)
	g.noMoreRecords(t)
}

func TestStreamClientAskedForUsage(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g := startGateway(t, Config{Upstream: up.URL()})
	reqBody := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}`
	_, _, body, err := post(t, g.URL()+"/v1/chat/completions", reqBody, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(vllmEvents, "") + vllmUsage + done; body != want {
		t.Fatalf("got %q want %q", body, want)
	}
	if string(up.lastBody()) != reqBody {
		t.Fatalf("request body rewritten although the client asked for usage: %s", up.lastBody())
	}
	rec := g.record(t)
	if rec.OSL != 2 || rec.ISL != 9 {
		t.Fatalf("record %+v", rec)
	}
}

// An OpenAI-style engine adds "usage":null to every chunk once usage is
// requested; the client that did not ask must not see it.
func TestStreamStripsNullUsage(t *testing.T) {
	chunk := func(usage bool, content string) string {
		u := ""
		if usage {
			u = `,"usage":null`
		}
		return `data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + content + `"},"finish_reason":null}]` + u + "}\n\n"
	}
	up := startRawUpstream(t, func(c *scriptConn) {
		u := wantsUsage(c.Req.Body())
		writeSSEHead(c)
		writeChunk(c, chunk(u, "a"))
		writeChunk(c, chunk(u, "b"))
		if u {
			writeChunk(c, `data: {"id":"x","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`+"\n\n")
		}
		writeChunk(c, done)
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	_, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := chunk(false, "a") + chunk(false, "b") + done; body != want {
		t.Fatalf("got %q want %q", body, want)
	}
	if rec := g.record(t); rec.OSL != 2 || rec.ISL != 3 || rec.Outcome != meter.OutcomeOK {
		t.Fatalf("record %+v", rec)
	}
}

func TestHeaders(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		const answer = `{"choices":[{"index":0,"message":{"content":""},"finish_reason":"stop"}]}`
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nX-Engine: vllm\r\n\r\n%s", len(answer), answer)
		c.BW.Flush()
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	req, _ := http.NewRequest("POST", g.URL()+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
	req.Header.Set("Connection", "X-Client-Hop")
	req.Header.Set("X-Client-Hop", "secret")
	req.Header.Set("X-Forwarded-For", "10.1.2.3")
	req.Header.Set("Accept-Encoding", "gzip")
	req.Header.Set("Proxy-Authorization", "Basic abc")
	// curl sends it with larger bodies; the gateway has the whole body
	// before it asks the engine, which would answer it with a needless 100.
	req.Header.Set("Expect", "100-continue")
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	h := up.lastHeaders()
	for _, bad := range []string{"X-Client-Hop", "Proxy-Authorization", "gzip", "Expect", "100-continue"} {
		if strings.Contains(h, bad) {
			t.Errorf("upstream saw %q:\n%s", bad, h)
		}
	}
	// The client sent no Content-Type, and neither does the gateway (a
	// default application/octet-stream makes FastAPI refuse the body).
	if raw := up.lastRawHeaders(); !strings.Contains(raw, "X-Forwarded-For") || strings.Contains(strings.ToLower(raw), "content-type") {
		t.Errorf("upstream saw a Content-Type the client did not send:\n%s", raw)
	}
	if !strings.Contains(h, "X-Forwarded-For: 10.1.2.3, 127.0.0.1") {
		t.Errorf("X-Forwarded-For not appended:\n%s", h)
	}
	if !strings.Contains(h, "Accept-Encoding: identity") {
		t.Errorf("Accept-Encoding not identity:\n%s", h)
	}
	if !strings.Contains(h, "X-Request-Id: ") {
		t.Errorf("no generated X-Request-Id upstream:\n%s", h)
	}
	if resp.Header.Get("X-Hop") != "" || resp.Header.Get("X-Engine") != "vllm" {
		t.Errorf("response headers: %v", resp.Header)
	}
	rec := g.record(t)
	if len(rec.RequestID) != 32 || resp.Header.Get("X-Request-Id") != rec.RequestID {
		t.Errorf("generated request id %q, returned %q", rec.RequestID, resp.Header.Get("X-Request-Id"))
	}
	if rec.Stream || rec.TTFT != meter.Unknown || rec.Outcome != meter.OutcomeOK {
		t.Errorf("non-stream record %+v", rec)
	}
}

// Every Connection line's options are hop-by-hop, not only the first
// line's: in the client's request (with gateway keys, so that a key in a
// header named there would be looked for too) and in the engine's answer.
func TestConnectionOptionsOfEveryLine(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		io.WriteString(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: keep-alive\r\nConnection: X-Up-Hop\r\nX-Up-Hop: 1\r\nX-Engine: vllm\r\n\r\n{}")
		c.BW.Flush()
	})
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{})
	store, _ := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store})
	body := `{"model":"m"}`
	answer := sendRaw(t, g.addr, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+key+
		"\r\nConnection: keep-alive\r\nConnection: X-Hop2, close\r\nX-Hop2: 1\r\nX-Kept: 1\r\n"+
		fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body), false)
	if !strings.HasPrefix(answer, "HTTP/1.1 200 ") || strings.Contains(answer, "X-Up-Hop") || !strings.Contains(answer, "X-Engine: vllm") {
		t.Errorf("the client got %q", answer)
	}
	if h := strings.ToLower(up.lastRawHeaders()); strings.Contains(h, "x-hop2") || !strings.Contains(h, "x-kept") {
		t.Errorf("the engine got:\n%s", h)
	}
	g.record(t)
}

func TestNonStreamingUsage(t *testing.T) {
	big := strings.Repeat("x", 200<<10) // larger than any buffer: must pass through unbuffered
	respBody := `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` + big + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}}`
	up := startRawUpstream(t, func(c *scriptConn) {
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(respBody), respBody)
		c.BW.Flush()
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	status, _, body, err := post(t, g.URL()+"/v1/chat/completions", `{"model":"m","messages":[]}`, nil)
	if err != nil || status != 200 || body != respBody {
		t.Fatalf("status %d err %v len %d", status, err, len(body))
	}
	rec := g.record(t)
	if rec.ISL != 12 || rec.OSL != 34 || rec.Stream || rec.TTFT != meter.Unknown || len(rec.ITL) != 0 || rec.E2E <= 0 {
		t.Fatalf("record %+v", rec)
	}
}

func TestUpstreamResetMidStream(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, vllmEvents[0])
		writeChunk(c, vllmEvents[1])
		if tc, ok := c.Conn.(*net.TCPConn); ok {
			tc.SetLinger(0) // RST
		}
		c.Conn.Close()
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	_, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	if err == nil {
		t.Fatalf("client saw a clean end of a broken stream: %q", body)
	}
	if body != vllmEvents[0]+vllmEvents[1] {
		t.Fatalf("client got %q before the break", body)
	}
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeUpstreamError || rec.Events != 2 {
		t.Fatalf("record %+v", rec)
	}
	g.noMoreRecords(t)
}

func TestUpstreamIdleTimeout(t *testing.T) {
	release := make(chan struct{})
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, vllmEvents[0])
		<-release
	})
	defer close(release)
	g := startGateway(t, Config{Upstream: up.URL(), IdleTimeout: 150 * time.Millisecond})
	start := time.Now()
	_, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	if err == nil {
		t.Fatalf("clean end after an idle timeout: %q", body)
	}
	if el := time.Since(start); el < 150*time.Millisecond || el > 5*time.Second {
		t.Fatalf("ended after %v", el)
	}
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeTimeout || rec.Events != 1 {
		t.Fatalf("record %+v", rec)
	}
}

func TestFirstByteTimeout(t *testing.T) {
	release := make(chan struct{})
	up := startRawUpstream(t, func(c *scriptConn) { <-release })
	defer close(release)
	g := startGateway(t, Config{Upstream: up.URL(), FirstByteTimeout: 100 * time.Millisecond})
	status, h, body, _ := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	if status != 504 || !strings.Contains(body, `"error"`) {
		t.Fatalf("status %d body %s", status, body)
	}
	// The engine has the prompt: the openai SDKs must not send it again.
	if got := h.Get("X-Should-Retry"); got != "false" {
		t.Fatalf("X-Should-Retry %q, want false", got)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeTimeout || rec.Status != 504 {
		t.Fatalf("record %+v", rec)
	}
}

func TestMalformedEvent(t *testing.T) {
	bad := "data: {\"id\":\"c1\",\"choices\":[{\"delta\":{\"content\":\"x\"\n\n"
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, vllmEvents[0])
		writeChunk(c, bad)
		writeChunk(c, done)
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	_, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	if err != nil || body != vllmEvents[0]+bad+done {
		t.Fatalf("err %v body %q", err, body)
	}
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeUpstreamError || !strings.Contains(rec.ErrorMessage, "malformed") {
		t.Fatalf("record %+v", rec)
	}
}

func TestUpstreamStatus(t *testing.T) {
	for _, c := range []struct {
		status int
		want   meter.Outcome
	}{{503, meter.OutcomeUpstreamError}, {400, meter.OutcomeClientError}, {404, meter.OutcomeClientError}} {
		errBody := `{"error":{"message":"nope","type":"x","code":null}}`
		up := startRawUpstream(t, func(sc *scriptConn) {
			fmt.Fprintf(sc.BW, "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", c.status, len(errBody), errBody)
			sc.BW.Flush()
		})
		g := startGateway(t, Config{Upstream: up.URL()})
		status, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
		if err != nil || status != c.status || body != errBody {
			t.Fatalf("status %d body %q err %v", status, body, err)
		}
		if rec := g.record(t); rec.Outcome != c.want || rec.Status != c.status {
			t.Fatalf("status %d: record %+v", c.status, rec)
		}
	}
}

func TestUpstreamDown(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	g := startGateway(t, Config{Upstream: "http://" + addr})
	status, h, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	if err != nil || status != 502 {
		t.Fatalf("status %d err %v", status, err)
	}
	// The engine never had the request: a retry is the client's to make.
	if got := h.Values("X-Should-Retry"); len(got) != 0 {
		t.Fatalf("X-Should-Retry %q on a refused connection", got)
	}
	var e struct {
		Error struct{ Message, Type, Code string }
	}
	if json.Unmarshal([]byte(body), &e) != nil || e.Error.Message == "" || e.Error.Code == "" {
		t.Fatalf("not an OpenAI error body: %s", body)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeUpstreamError || rec.Status != 502 {
		t.Fatalf("record %+v", rec)
	}
}

func TestBodyTooLarge(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g := startGateway(t, Config{Upstream: up.URL(), MaxBodyBytes: 1000})
	body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", 2000) + `"}]}`
	status, _, resp, err := post(t, g.URL()+"/v1/chat/completions", body, nil)
	if err != nil || status != 413 || !strings.Contains(resp, "request_too_large") {
		t.Fatalf("status %d body %s err %v", status, resp, err)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeRejected || rec.Status != 413 {
		t.Fatalf("record %+v", rec)
	}
	// A body within the limit still passes.
	status, _, _, err = post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	if err != nil || status != 200 {
		t.Fatalf("status %d err %v", status, err)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
		t.Fatalf("record %+v", rec)
	}
}

func TestOtherRoutePassThrough(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		b := `{"object":"list","data":[{"id":"m"}]}`
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
		c.BW.Flush()
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	resp, err := testClient.Get(g.URL() + "/v1/models?x=1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(b, []byte(`"id":"m"`)) {
		t.Fatalf("body %s", b)
	}
	if !strings.HasPrefix(up.lastHeaders(), "GET /v1/models?x=1 HTTP/1.1") {
		t.Fatalf("upstream request line: %s", up.lastHeaders())
	}
	rec := g.record(t)
	if rec.Route != "other" || rec.Outcome != meter.OutcomeOK || rec.Model != "" || rec.Stream {
		t.Fatalf("record %+v", rec)
	}
	// Unmetered: token figures are unknown (null), never 0 or [].
	line := string(rec.AppendJSON(nil))
	for _, f := range []string{`"events":null`, `"itl_ms":null`, `"isl":null`, `"osl":null`, `"ttft_ms":null`} {
		if !strings.Contains(line, f) {
			t.Errorf("pass-through log line lacks %s: %s", f, line)
		}
	}
}

// The client leaves mid-stream: the gateway notices at its next event write,
// closes the upstream connection at once (so the engine stops generating),
// and the record says client_abort. The upstream sends one event after the
// client left and nothing more: the record can only come from that write.
func TestClientAbort(t *testing.T) {
	next := make(chan struct{})
	upClosed := make(chan error, 1)
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, vllmEvents[1])
		<-next
		writeChunk(c, vllmEvents[1])
		// Nothing more: wait for the gateway to hang up.
		c.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		var b [1]byte
		_, err := c.Conn.Read(b[:])
		upClosed <- err
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	conn := rawPost(t, g.addr, chatBody, "")
	buf := make([]byte, 4096)
	if _, err := conn.Read(buf); err != nil {
		t.Fatal(err)
	}
	conn.(*net.TCPConn).SetLinger(0)
	conn.Close()
	close(next)
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeClientAbort {
		t.Fatalf("record %+v", rec)
	}
	// By the time of the record the upstream connection is closed.
	upstreamClosed(t, upClosed)
	g.noMoreRecords(t)
}

// upstreamClosed waits for an engine's read, sent on closed, to fail as the
// gateway hangs up (not at the engine's own read deadline).
func upstreamClosed(t *testing.T, closed <-chan error) {
	t.Helper()
	select {
	case err := <-closed:
		if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("upstream connection still open after the record: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("upstream handler stuck")
	}
}

func TestUnterminatedLastEvent(t *testing.T) {
	// A server that ends the body without the blank line after its last
	// event (here the finish chunk: a stream that ends without saying why
	// its output stopped was cut short).
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, vllmEvents[0])
		writeChunk(c, strings.TrimSuffix(vllmEvents[3], "\n\n"))
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	_, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	if err != nil || body != vllmEvents[0]+strings.TrimSuffix(vllmEvents[3], "\n\n") {
		t.Fatalf("err %v body %q", err, body)
	}
	if rec := g.record(t); rec.Events != 2 || rec.Outcome != meter.OutcomeOK {
		t.Fatalf("record %+v", rec)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "upstream: required"},
		{Config{Upstream: "https://x"}, "scheme must be http"},
		{Config{Upstream: "http://x/v1"}, "path prefix"},
		{Config{Upstream: "http://127.0.0.1:99999"}, "the port must be a number from 1 to 65535"},
		{Config{Upstream: "http://x:0"}, "the port must be a number from 1 to 65535"},
		{Config{Upstream: "http://[::1]:65536"}, "the port must be a number from 1 to 65535"},
		{Config{Upstream: "http://x:"}, "the port must be a number from 1 to 65535"},
		{Config{Upstream: "http://x:/"}, "the port must be a number from 1 to 65535"},
		{Config{Upstream: "http://x", IdleTimeout: -1}, "timeouts.idle"},
		// An engine's URL with a password is refused without quoting it:
		// the refusal goes to the start's log (a probe found it there).
		{Config{Upstream: "http://user:s3cretpassw0rd@x:8000"}, `"http://user:xxxxx@x:8000": must not carry a query, a fragment or credentials`},
		{Config{Upstream: "https://user:s3cretpassw0rd@x"}, `"https://user:xxxxx@x": scheme must be http`},
		{Config{Upstream: "http://user:s3cret/passw0rd@x"}, "is not a URL"},
		{Config{Upstream: "http://user:s3cretpassw0rd%zz@x"}, "is not a URL"},
		// A password that url.Parse splits elsewhere: its digits taken as
		// a port, the rest as a query, a path or a fragment (which the
		// engine's requests would not carry: the URL was accepted, and
		// quoted whole in the start's log and in /readyz).
		{Config{Upstream: "http://user:1234?s3cretpassw0rd@x:8000"}, "must not carry a query"},
		{Config{Upstream: "http://user:1234/s3cretpassw0rd@x:8000"}, "a path prefix is not supported"},
		{Config{Upstream: "http://user:1234#s3cretpassw0rd@x:8000"}, "must not carry a query, a fragment or credentials"},
		{Config{Upstream: "http://x:8000#frag"}, "must not carry a query, a fragment or credentials"},
		// A token as the user, without a password.
		{Config{Upstream: "http://sk-s3cretpassw0rd@x:8000"}, `"http://xxxxx@x:8000": must not carry`},
	} {
		_, err := New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "passw0rd") {
			t.Errorf("New(%+v) = %v, want error containing %q, no password", c.cfg, err, c.want)
		}
	}
}

// Response headers larger than the connection's small read buffer (a hosted
// API behind a CDN) still pass.
func TestLargeResponseHeaders(t *testing.T) {
	big := strings.Repeat("x", 6000)
	up := startRawUpstream(t, func(c *scriptConn) {
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nX-Cdn-Trace: %s\r\nSet-Cookie: a=%s\r\n\r\n", big, big[:3000])
		c.BW.Flush()
		for _, e := range vllmEvents {
			writeChunk(c, e)
		}
		writeChunk(c, done)
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	for i := 0; i < 2; i++ { // the second request reuses the connection
		status, hdr, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
		if err != nil || status != 200 || hdr.Get("X-Cdn-Trace") != big || body != strings.Join(vllmEvents, "")+done {
			t.Fatalf("status %d err %v header len %d body %q", status, err, len(hdr.Get("X-Cdn-Trace")), body)
		}
		if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.Events != 4 {
			t.Fatalf("record %+v", rec)
		}
	}
}

// A client that leaves while the engine has not yet sent a byte (queued or
// in prefill) is noticed within a poll interval: the upstream connection is
// closed so the engine can drop the request, and the record says
// client_abort, status 499.
func TestClientAbortBeforeFirstByte(t *testing.T) {
	upClosed := make(chan time.Time, 1)
	arrived := make(chan struct{})
	up := startRawUpstream(t, func(c *scriptConn) {
		close(arrived)
		// Never answer; report when the gateway hangs up.
		upClosed <- hungUpWithin(c, 5*time.Second)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	conn := rawPost(t, g.addr, chatBody, "")
	<-arrived // the request waits at the engine
	closedAt := time.Now()
	conn.Close()
	select {
	case at := <-upClosed:
		if at.IsZero() {
			t.Fatal("upstream never saw the gateway hang up")
		}
		// Without the guard the upstream waits its whole 5s. With it, one
		// poll interval: checked with room for a loaded machine only where
		// timing is checked (GOODPUT_TIMING_TESTS=1), else well under 5s.
		d := at.Sub(closedAt)
		t.Logf("upstream saw the hang-up %v after the client left", d)
		bound := 2 * time.Second
		if testenv.StrictTiming() {
			bound = guardPoll + 250*time.Millisecond
		}
		if d > bound {
			t.Fatalf("upstream saw the hang-up %v after the client left, want within %v", d, bound)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("upstream still waiting 10s after the client left")
	}
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeClientAbort || rec.Status != 499 || rec.TTFT >= 0 {
		t.Fatalf("record %+v", rec)
	}
	g.noMoreRecords(t)
}

// At the end of a shutdown's drain period, Cut ends what is still in
// flight: a stream ends abnormally for its client, a request still waiting
// for the engine gets 503, a later request too; each has one record with
// outcome timeout.
func TestCutInFlight(t *testing.T) {
	stalled := make(chan struct{}, 1)
	up := startRawUpstream(t, func(c *scriptConn) {
		if len(c.Req.Header.Peek("X-Short")) > 0 {
			writeSSEHead(c)
			writeChunk(c, "data: [DONE]\n\n")
			endChunks(c)
			return
		}
		if len(c.Req.Header.Peek("X-Stall")) > 0 {
			stalled <- struct{}{}
			// Never answer: the gateway waits for the first byte.
			c.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			var b [1]byte
			c.Conn.Read(b[:])
			return
		}
		writeSSEHead(c)
		for i := 0; i < 200; i++ {
			if err := writeChunk(c, vllmEvents[1]); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	type result struct {
		name   string
		status int
		body   string
		err    error
	}
	results := make(chan result, 2)
	send := func(name string, hdr map[string]string) {
		status, _, body, err := post(t, g.URL()+"/v1/chat/completions",
			`{"model":"sim-llama","stream":true,"max_tokens":200,"ignore_eos":true,"messages":[]}`, hdr)
		results <- result{name, status, body, err}
	}
	// Warm the pool, so the waiting request goes out on a reused
	// connection: its cut must not be mistaken for a stale connection and
	// sent again on a new one.
	if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", `{"model":"m","max_tokens":1,"messages":[]}`, map[string]string{"X-Stall": "", "X-Short": "1"}); err != nil || status != 200 {
		t.Fatalf("warm-up: %d %v", status, err)
	}
	g.record(t)
	go send("waiting", map[string]string{"X-Stall": "1"})
	<-stalled // at the engine, which does not answer
	st := startStream(t, g.URL()+"/v1/chat/completions",
		`{"model":"sim-llama","stream":true,"max_tokens":200,"ignore_eos":true,"messages":[]}`, nil)
	go func() {
		e := <-st.rest
		results <- result{"stream", st.status, st.first + e.body, e.err}
	}()
	accepted := up.accepts.Load()
	cut := time.Now()
	g.p.Cut()
	for range 2 {
		select {
		case r := <-results:
			switch r.name {
			case "stream":
				if r.err == nil || r.status != 200 || strings.Contains(r.body, "[DONE]") {
					t.Fatalf("cut stream: status %d err %v, ends %q", r.status, r.err, r.body[max(0, len(r.body)-40):])
				}
			case "waiting":
				if r.err != nil || r.status != 503 || !strings.Contains(r.body, "shutting down") {
					t.Fatalf("cut wait: %d %v %s", r.status, r.err, r.body)
				}
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a request still in flight 5s after the cut")
		}
	}
	took := time.Since(cut)
	if n := up.accepts.Load(); n != accepted {
		t.Errorf("%d new upstream connections after the cut", n-accepted)
	}
	for range 2 {
		rec := g.record(t)
		if rec.Outcome != meter.OutcomeTimeout || !strings.Contains(rec.ErrorMessage, "shutting down") {
			t.Fatalf("record %+v", rec)
		}
	}
	status, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	if err != nil || status != 503 {
		t.Fatalf("after the cut: %d %v %s", status, err, body)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeTimeout {
		t.Fatalf("after the cut: %+v", rec)
	}
	g.noMoreRecords(t)
	t.Logf("both requests ended %v after the cut", took)
}

// A panic while handling upstream bytes (a bug) ends that stream as an
// upstream error with one record and an abnormal end for its client; the
// gateway goes on serving.
func TestReaderPanicIsContained(t *testing.T) {
	var logged strings.Builder
	var logMu sync.Mutex
	up := startRawUpstream(t, vllmUpstream(time.Millisecond))
	g := startGateway(t, Config{Upstream: up.URL(), Logf: func(format string, args ...any) {
		logMu.Lock()
		fmt.Fprintf(&logged, format, args...)
		logMu.Unlock()
	}})
	n := 0
	testHookEvent = func([]byte) {
		if n++; n == 3 {
			panic("test: a parser bug")
		}
	}
	status, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	rec := g.record(t)  // after the reader is done (the record follows it)
	testHookEvent = nil // so unset it only now
	if status != 200 || err == nil || strings.Contains(body, "[DONE]") {
		t.Fatalf("status %d err %v body %q: want an abnormal end", status, err, body)
	}
	if rec.Outcome != meter.OutcomeUpstreamError || !strings.Contains(rec.ErrorMessage, "internal error") {
		t.Fatalf("record %+v", rec)
	}
	logMu.Lock()
	if !strings.Contains(logged.String(), "panic") || !strings.Contains(logged.String(), "a parser bug") {
		t.Errorf("log: %q", logged.String())
	}
	logMu.Unlock()
	// Still serving.
	if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil); status != 200 || err != nil {
		t.Fatalf("after the panic: %d %v", status, err)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
		t.Fatalf("after the panic: %+v", rec)
	}
}

// A metered POST whose response body cannot be metered (no body, empty,
// not JSON, over MaxJSONBytes) passes through untouched with the engine's
// status, and is recorded once with what is known: nothing may panic.
func TestUnmeterableJSONBody(t *testing.T) {
	big := `"` + strings.Repeat("a", 8<<20) + `"`
	for _, c := range []struct {
		name, head, body string
		status           int
		outcome          meter.Outcome
		msg              string
	}{
		{"204 json", "HTTP/1.1 204 No Content\r\nContent-Type: application/json\r\n\r\n", "", 204, meter.OutcomeUpstreamError, "upstream status 204"},
		{"empty", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n", "", 200, meter.OutcomeUpstreamError, "empty response body"},
		{"empty chunked", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "", 200, meter.OutcomeUpstreamError, "empty response body"},
		{"empty 503", "HTTP/1.1 503 Busy\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n", "", 503, meter.OutcomeUpstreamError, "upstream status 503"},
		{"invalid", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\n", "{nope", 200, meter.OutcomeUpstreamError, "malformed response body"},
		{"over 8 MiB", fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(big)), big, 200, meter.OutcomeOK, "the most the gateway reads"},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := startRawUpstream(t, func(sc *scriptConn) {
				sc.BW.WriteString(c.head)
				sc.BW.WriteString(c.body)
				sc.BW.Flush()
			})
			g := startGateway(t, Config{Upstream: up.URL()})
			status, _, body, err := post(t, g.URL()+"/v1/chat/completions", `{"model":"m","messages":[]}`, nil)
			if err != nil || status != c.status || body != c.body {
				t.Fatalf("status %d (want %d), body of %d bytes (want %d), err %v", status, c.status, len(body), len(c.body), err)
			}
			rec := g.record(t)
			if rec.Outcome != c.outcome || rec.Status != c.status || !strings.Contains(rec.ErrorMessage, c.msg) ||
				rec.ISL != meter.Unknown || rec.OSL != meter.Unknown || rec.E2E <= 0 {
				t.Fatalf("record %+v", rec)
			}
			g.noMoreRecords(t)
		})
	}
}

// The total timeout is finite unless configured otherwise: a response that
// never ends must still end, with its record.
func TestTotalTimeoutDefault(t *testing.T) {
	p, err := New(Config{Upstream: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if p.cfg.TotalTimeout != 30*time.Minute {
		t.Fatalf("total timeout %v, want 30m", p.cfg.TotalTimeout)
	}
}

// A pooled stream does not keep a buffer grown for one large request (a
// slow client's queue, a large JSON body): idle streams would hold what the
// largest requests needed.
func TestPooledStreamDropsLargeBuffers(t *testing.T) {
	s := &stream{jsonBuf: make([]byte, 5, 8<<20), pending: make([]byte, 3, 512<<10), spare: make([]byte, 0, 4<<10)}
	s.reset()
	if s.jsonBuf != nil || s.pending != nil || cap(s.spare) != 4<<10 || len(s.spare) != 0 {
		t.Fatalf("kept: json %d, pending %d, spare %d/%d", cap(s.jsonBuf), cap(s.pending), len(s.spare), cap(s.spare))
	}
}

// The client's address is appended as net.IP.String writes it, after
// what an earlier proxy wrote, or alone.
func TestAppendForwardedFor(t *testing.T) {
	for _, ip := range []net.IP{
		net.IPv4(10, 1, 2, 3),             // 16 bytes, IPv4 mapped into IPv6
		net.IPv4(10, 1, 2, 3).To4(),       // 4 bytes
		net.ParseIP("2001:db8::1"),        // IPv6
		net.ParseIP("::ffff:192.0.2.128"), // mapped, parsed
	} {
		for _, prior := range []string{"", "198.51.100.7", strings.Repeat("203.0.113.9, ", 10) + "203.0.113.10"} {
			var h fasthttp.RequestHeader
			want := ip.String()
			if prior != "" {
				h.Set("X-Forwarded-For", prior)
				want = prior + ", " + want
			}
			if got := string(appendForwardedFor(nil, &h, ip, prior != "")); got != "X-Forwarded-For: "+want+"\r\n" {
				t.Errorf("%v after %q: %q, want %q", ip, prior, got, want)
			}
		}
	}
	// Two lines of the header are one list: both are kept, in order.
	var two fasthttp.RequestHeader
	two.Add("X-Forwarded-For", "6.6.6.6")
	two.Add("X-Forwarded-For", "7.7.7.7, 8.8.8.8")
	if got := string(appendForwardedFor(nil, &two, net.IPv4(127, 0, 0, 1), true)); got != "X-Forwarded-For: 6.6.6.6, 7.7.7.7, 8.8.8.8, 127.0.0.1\r\n" {
		t.Errorf("two lines: %q", got)
	}
	// Without the earlier hops (the client's Connection named the
	// header), the address alone.
	if got := string(appendForwardedFor(nil, &two, net.IPv4(127, 0, 0, 1), false)); got != "X-Forwarded-For: 127.0.0.1\r\n" {
		t.Errorf("no priors: %q", got)
	}
	// No address, or not one (net.IP.String would write "<nil>" or
	// "?" and hex): nothing is appended, or the earlier hops alone.
	for _, ip := range []net.IP{nil, {}, {1, 2, 3}} {
		var h fasthttp.RequestHeader
		if got := appendForwardedFor([]byte("x"), &h, ip, false); string(got) != "x" {
			t.Errorf("%#v: %q", ip, got)
		}
		if got := string(appendForwardedFor(nil, &two, ip, true)); got != "X-Forwarded-For: 6.6.6.6, 7.7.7.7, 8.8.8.8\r\n" {
			t.Errorf("%#v after two lines: %q", ip, got)
		}
	}
}

// The client leaves while the engine, mid-stream, sends nothing (a stall, a
// model thinking without streaming it): no write can tell, so the stream
// looks at the client whenever its read deadline fires (once a second on
// the direct path). It hangs up on the engine then, long before the idle
// timeout, and the record says client_abort, not timeout.
func TestClientGoneWhileTheEngineIsSilent(t *testing.T) {
	upClosed := make(chan error, 1)
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, vllmEvents[0])
		writeChunk(c, vllmEvents[1])
		// Then silence, until the gateway hangs up.
		c.Conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		var b [1]byte
		_, err := c.Conn.Read(b[:])
		upClosed <- err
	})
	g := startGateway(t, Config{Upstream: up.URL(), IdleTimeout: time.Minute})
	conn := rawPost(t, g.addr, chatBody, "")
	br := bufio.NewReader(conn)
	var got string
	for !strings.Contains(got, `"content":"Hello"`) {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("%v after %q", err, got)
		}
		got += line
	}
	conn.Close()
	rec := g.record(t) // within 10 s: not the idle timeout's minute
	if rec.Outcome != meter.OutcomeClientAbort || rec.Status != 200 || rec.Events != 2 {
		t.Fatalf("record: outcome %v status %d events %d error %q", rec.Outcome, rec.Status, rec.Events, rec.ErrorMessage)
	}
	upstreamClosed(t, upClosed)
	g.noMoreRecords(t)
}

// An engine that closes, resets or answers garbage after it has read the
// whole POST may be generating: the 502 tells the client's SDK not to send
// it again (the openai SDKs retry a 502 twice, which ran the prompt three
// times). A GET that failed so may be retried.
func TestBadGatewayAfterTheRequestSaysNoRetry(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		switch string(c.Req.Header.Peek("X-Fault")) {
		case "reset":
			c.Conn.(*net.TCPConn).SetLinger(0)
		case "garbage":
			io.WriteString(c.Conn, "HTTP/1.1 2")
		}
		c.Conn.Close()
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	for _, fault := range []string{"close", "reset", "garbage"} {
		status, h, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, map[string]string{"X-Fault": fault})
		if err != nil || status != 502 {
			t.Fatalf("%s: status %d err %v", fault, status, err)
		}
		if got := h.Get("X-Should-Retry"); got != "false" {
			t.Errorf("%s: X-Should-Retry %q, want false", fault, got)
		}
		if rec := g.record(t); rec.Outcome != meter.OutcomeUpstreamError {
			t.Errorf("%s: outcome %v", fault, rec.Outcome)
		}
	}
	resp, err := testClient.Get(g.URL() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 502 || len(resp.Header.Values("X-Should-Retry")) != 0 {
		t.Errorf("GET: status %d, X-Should-Retry %q", resp.StatusCode, resp.Header.Values("X-Should-Retry"))
	}
	g.record(t)
}

// An unmetered route's event stream is recorded as a stream: the record's
// stream says whether the answer was one, metered or not.
func TestOtherRouteStreamIsAStream(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, "data: {\"x\":1}\n\n")
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	if status, _, body, err := post(t, g.URL()+"/v1/audio/speech", `{"stream_format":"sse"}`, nil); err != nil || status != 200 || body != "data: {\"x\":1}\n\n" {
		t.Fatalf("status %d err %v body %q", status, err, body)
	}
	if rec := g.record(t); rec.Route != "other" || !rec.Stream || rec.Events != meter.Unknown {
		t.Fatalf("route %q stream %v events %d", rec.Route, rec.Stream, rec.Events)
	}
}
