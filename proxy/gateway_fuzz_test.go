package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goodput/goodput/export"
	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
	"github.com/goodput/goodput/slo"
	"github.com/prometheus/client_golang/prometheus"
)

// fuzzGateway is one gateway, with gateway keys, limits and Prometheus
// metrics, in front of an upstream that answers whatever the current fuzz
// input says. It is shared by the iterations of one fuzz process.
type fuzzGateway struct {
	g       *gateway
	key     string
	upResp  atomic.Pointer[[]byte] // raw bytes the upstream writes
	upClose atomic.Bool            // close without answering
	mu      sync.Mutex
	log     bytes.Buffer
	recs    [][]byte // records as JSON lines
}

func startFuzzGateway(tb testing.TB) *fuzzGateway {
	fg := &fuzzGateway{}
	up := startRawUpstream(tb, func(c *scriptConn) {
		if fg.upClose.Load() {
			c.Conn.Close()
			return
		}
		if b := fg.upResp.Load(); b != nil {
			c.BW.Write(*b)
			c.BW.Flush()
		}
		c.Conn.Close()
	})
	tc, key := tenantWithKey(tb, "acme", ratelimit.Limits{RPM: 1 << 20, TPM: 1 << 30, MaxConcurrency: 64})
	fg.key = key
	store, gate := newKeysAndGate(tb, ratelimit.BackendConfig{}, tc)
	lab := export.NewLabeler(export.NewLabelSet([]string{"acme"}, 32), export.NewLabelSet(nil, 32))
	reg := prometheus.NewRegistry()
	metrics := export.NewMetrics(reg, lab)
	judge, err := slo.NewJudger(slo.JudgerOptions{
		Config:       slo.Config{SLOs: map[string]*slo.Class{"c": {TTFT: cfgtypes.Duration(100 * time.Millisecond), Objective: 0.9}}},
		DefaultClass: "c", Labels: lab, Registry: reg,
	})
	if err != nil {
		tb.Fatal(err)
	}
	cfg := Config{
		Judge:    judge,
		Upstream: up.URL(), Keys: store, Limits: gate,
		FirstByteTimeout: 300 * time.Millisecond, IdleTimeout: 200 * time.Millisecond,
		FirstTokenTimeout: 300 * time.Millisecond, TotalTimeout: 2 * time.Second,
		ReadHeaderTimeout: 200 * time.Millisecond, ReadBodyTimeout: 200 * time.Millisecond,
		Logf: func(f string, a ...any) {
			fg.mu.Lock()
			fmt.Fprintf(&fg.log, f+"\n", a...)
			fg.mu.Unlock()
		},
	}
	fg.g = startGateway(tb, cfg)
	// Records pass through the metrics as in serve, then are kept as JSON.
	fg.g.p.cfg.Sink = Sinks{metrics, RecordFunc(func(rec *meter.Record) {
		fg.mu.Lock()
		fg.recs = append(fg.recs, rec.AppendJSON(nil))
		fg.mu.Unlock()
	})}
	return fg
}

// fuzzRequest builds the raw request: a request line, the fuzzed header
// lines (one per "\n"-separated line; blank ones dropped, so the fuzzer
// cannot end the head early by accident, only on purpose with its own
// framing headers), the gateway key as auth says, and the body.
func fuzzRequest(method uint8, path, hdrs string, auth uint8, key string, body []byte) []byte {
	methods := []string{"POST", "GET", "HEAD", "PUT", "OPTIONS", "DELETE", "PATCH", "CONNECT"}
	var b bytes.Buffer
	version := " HTTP/1.1\r\n"
	if method&8 != 0 {
		version = " HTTP/1.0\r\n" // the method's fourth bit: an HTTP/1.0 client
	}
	b.WriteString(methods[int(method)%len(methods)] + " " + path + version + "Host: gw\r\n")
	for _, l := range strings.Split(hdrs, "\n") {
		if l = strings.TrimRight(l, "\r"); l != "" {
			b.WriteString(l + "\r\n")
		}
	}
	switch auth % 4 {
	case 0:
		b.WriteString("Authorization: Bearer " + key + "\r\n")
	case 1:
		b.WriteString("X-Api-Key: " + key + "\r\n")
	case 2:
		b.WriteString("Authorization: Bearer " + key[:len(key)-1] + "x\r\n")
	}
	if !strings.Contains(strings.ToLower(hdrs), "content-length") && !strings.Contains(strings.ToLower(hdrs), "transfer-encoding") {
		b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
	}
	b.WriteString("Connection: close\r\n\r\n")
	b.Write(body)
	return b.Bytes()
}

// FuzzGateway drives whole requests, headers and body, through the gateway
// against an upstream that answers with fuzzed bytes, and checks:
//   - nothing panics (a contained panic is logged, and that fails too);
//   - every response the client gets has exactly one record, and no record
//     is left without a response (client and gateway agree on the count);
//   - nothing is left in flight;
//   - the gateway key appears in no response, record or log line.
func FuzzGateway(f *testing.F) {
	sse := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
	chunk := func(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }
	stream := sse + chunk(vllmEvents[0]) + chunk(vllmEvents[1]) + chunk(vllmUsage) + chunk(done) + "0\r\n\r\n"
	jsonResp := func(status int, ct, body string) string {
		return fmt.Sprintf("HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s", status, ct, len(body), body)
	}
	for _, s := range []struct {
		method     uint8
		path, hdrs string
		auth       uint8
		body       string
		upMode     uint8
		up         string
	}{
		{0, "/v1/chat/completions", "Content-Type: application/json", 0, chatBody, 0, stream},
		{0, "/v1/completions", "", 1, `{"model":"m","prompt":"x","stream":true}`, 0, stream},
		{0, "/v1/chat/completions", "", 0, `{"model":"m"}`, 0, jsonResp(200, "application/json", `{"usage":{"prompt_tokens":1,"completion_tokens":2}}`)},
		{0, "/v1/chat/completions", "", 0, `{"model":"m"}`, 0, "HTTP/1.1 204 No Content\r\nContent-Type: application/json\r\n\r\n"},
		{0, "/v1/chat/completions", "", 0, `{"model":"m"}`, 0, jsonResp(200, "application/json", `{"usage":`)},
		{0, "/v1/chat/completions", "", 0, `{"model":"m"}`, 0, jsonResp(200, "application/json", ``)},
		{0, "/v1/chat/completions", "", 0, chatBody, 0, sse + chunk("data: {\"choices\":[{\"delta\":{}}]\n\n") + "zz\r\n"},
		{0, "/v1/chat/completions", "", 0, chatBody, 0, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\ndata: {\"usage\":{}}\n\n"},
		{0, "/v1/chat/completions", "", 0, chatBody, 0, "garbage\r\n\r\n"},
		{0, "/v1/chat/completions", "", 0, chatBody, 1, ""},
		{0, "/v1/chat/completions", "", 0, chatBody, 0, sse + chunk("data: {\"choices\":[{\"delta\":{\"content\":\"\xff\"}}],\"model\":\"\xfe\"}\n\n")},
		{0, "/v1/chat/completions", "X-Tenant: t\xff\nX-Request-Id: \xff\xfe", 3, `{"model":"m\xff"}`, 0, stream},
		{0, "/v1/chat/completions", "", 0, `{"model":"a","model":"b","max_tokens":1,"max_tokens":5000}`, 0, stream},
		{0, "/v1/chat/completions", "Content-Length: 5000", 0, `{"model":"m"}`, 0, stream},
		{0, "/v1/chat/completions", "Transfer-Encoding: chunked", 0, "5\r\nabc", 0, stream},
		{0, "/v1/chat/completions", "Content-Length: 3\nContent-Length: 4", 0, "abcd", 0, stream},
		{0, "/v1/chat/completions", "Content-Length: 0\nConnection: keep-alive", 0, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n", 0, stream},
		{0, "/v1/chat/completions", "NoColon\nX-Big: " + strings.Repeat("a", 20000), 0, chatBody, 0, stream},
		{1, "/v1/models", "", 0, "", 0, jsonResp(200, "application/json", `{"data":[]}`)},
		{2, "/v1/chat/completions", "", 0, "", 0, jsonResp(200, "application/json", `{}`)},
		{0, "/v1/chat/completions", "Authorization: Basic Zm9v", 3, chatBody, 0, stream},
		{0, "/v1/chat/completions", "", 0, `{"model":"m","stream":true,"stream_options":{}}`, 0, stream},
		{0, "/chat/completions", "", 0, chatBody, 0, jsonResp(404, "application/json", `{"error":"no model"}`)},
		{0, "/v1/chat/completions", "", 0, chatBody, 0, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\n\r\n\x1f\x8b"},
		{0, "/v1/chat/completions", "", 0, chatBody, 0, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 99999999\r\n\r\n{"},
		{0, "/v1/chat/completions", "", 0, chatBody, 0, "HTTP/1.1 200 OK\r\n" + strings.Repeat("X-H: v\r\n", 2000) + "\r\n"},
		{0, "*", "", 0, "", 0, stream},
		{0, "/v1/chat/completions?x=%zz", "", 0, chatBody, 0, stream},
		// Heads fasthttp parses but a client must not get (checkUpstreamHead);
		// the first is what this fuzzer found.
		{0, "/chat/completions", "", 0, "{\"\":\"7\",\"a22y\":\x9000", 0, "HTTP/8.2 001 000000000000000000000000000000000\n\r\n000000000000"},
		{0, "/v1/chat/completions", "", 0, chatBody, 0, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n"},
		{0, "/v1/chat/completions", "", 0, chatBody, 0, "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + vllmEvents[1] + done},
		// The Responses and Messages APIs: a stream, a large failure, a
		// stream cut before its final event, an acknowledgement, an error
		// body on a success.
		{0, "/v1/responses", "", 0, `{"model":"m","stream":true,"input":"x"}`, 0, sse +
			chunk("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\n") +
			chunk("event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n") + "0\r\n\r\n"},
		{0, "/v1/responses", "", 0, `{"model":"m","stream":true,"input":"x"}`, 0, sse +
			chunk("event: error\ndata: {\"type\":\"error\",\"message\":\""+strings.Repeat("x", 3000)+"\"}\n\n") + "0\r\n\r\n"},
		{0, "/v1/responses", "", 0, `{"model":"m","background":true,"input":"x"}`, 0, jsonResp(200, "application/json", `{"status":"queued","output":[]}`)},
		{0, "/v1/messages", "", 0, `{"model":"m","stream":true,"max_tokens":5,"messages":[]}`, 0, sse +
			chunk("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n") + "0\r\n\r\n"},
		{0, "/v1/messages", "", 0, `{"model":"m","max_tokens":5,"messages":[]}`, 0, jsonResp(200, "application/json", `{"type":"error","error":{"type":"api_error","message":"x"}}`)},
		// An HTTP/1.0 client: its streams end at the close, not in chunks.
		{8, "/v1/chat/completions", "", 0, chatBody, 0, stream},
		{8, "/v1/chat/completions", "", 0, chatBody, 0, sse + chunk(vllmEvents[0]) + "zz\r\n"},
		{8, "/v1/chat/completions", "", 0, chatBody, 0, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\n\r\n\x1f\x8b"},
	} {
		f.Add(s.method, s.path, s.hdrs, s.auth, []byte(s.body), s.upMode, []byte(s.up))
	}
	fg := startFuzzGateway(f)
	f.Fuzz(func(t *testing.T, method uint8, path, hdrs string, auth uint8, body []byte, upMode uint8, upResp []byte) {
		if len(body) > 1<<16 || len(upResp) > 1<<16 || len(hdrs) > 1<<15 {
			t.Skip("input larger than the fuzz target exercises")
		}
		fg.upClose.Store(upMode%8 == 1)
		fg.upResp.Store(&upResp)
		fg.mu.Lock()
		fg.recs, fg.log = fg.recs[:0], bytes.Buffer{}
		fg.mu.Unlock()

		raw := fuzzRequest(method, path, hdrs, auth, fg.key, body)
		conn, err := net.Dial("tcp", fg.g.addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		go conn.Write(raw) // the gateway may answer (and close) before reading it all
		got, err := io.ReadAll(conn)
		conn.Close()
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("no end of response within 10s; got %q", got)
		}
		waited := make(chan struct{})
		go func() { fg.g.p.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-time.After(10 * time.Second):
			buf := make([]byte, 1<<20)
			t.Fatalf("a record was not emitted within 10s of the response (request %q)\n%s", raw, buf[:runtime.Stack(buf, true)])
		}
		if n := fg.g.p.InFlight(); n != 0 {
			t.Fatalf("%d requests still in flight", n)
		}

		// Count the responses the client got.
		responses := 0
		br := bufio.NewReader(bytes.NewReader(got))
		reqMethod := strings.SplitN(string(raw), " ", 2)[0]
		var statuses []int
		for {
			resp, err := http.ReadResponse(br, &http.Request{Method: reqMethod})
			if err != nil {
				break
			}
			responses++
			statuses = append(statuses, resp.StatusCode)
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				break // a stream cut short ends the connection
			}
		}
		fg.mu.Lock()
		recs := append([][]byte(nil), fg.recs...)
		logged := fg.log.String()
		fg.mu.Unlock()
		if len(got) > 0 && responses == 0 {
			t.Fatalf("the client got bytes that are no HTTP response: %q", got)
		}
		// A response cut before its head was flushed (an engine that fails
		// mid-body on a non-streamed response) reaches the client as a
		// dropped connection: its record must say the engine failed.
		if len(recs) == responses+1 &&
			(bytes.Contains(recs[responses], []byte(`"outcome":"upstream_error"`)) || bytes.Contains(recs[responses], []byte(`"outcome":"timeout"`))) {
			statuses = append(statuses, 0)
			responses++
		}
		if len(recs) != responses {
			t.Fatalf("%d records for %d responses (statuses %v)\nrecords:\n%s\nresponse:\n%q", len(recs), responses, statuses, bytes.Join(recs, []byte("\n")), got)
		}
		for i, r := range recs {
			if statuses[i] != 0 && !bytes.Contains(r, []byte(`"status":`+strconv.Itoa(statuses[i]))) {
				t.Fatalf("record %s does not match the status the client got, %d", r, statuses[i])
			}
		}
		for what, s := range map[string]string{"response": string(got), "records": string(bytes.Join(recs, nil)), "log": logged} {
			if strings.Contains(s, fg.key) || strings.Contains(s, fg.key[len(fg.key)-12:]) {
				t.Fatalf("the gateway key is in the %s", what)
			}
		}
		if strings.Contains(logged, "panic") {
			t.Fatalf("a panic was contained, but there should be none:\n%s", logged)
		}
	})
}
