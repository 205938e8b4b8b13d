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

// Every way an Ollama stream can end gives one record with one outcome:
// clean (whatever its bytes' split and line ends, a last line without its
// newline), an error line mid-stream, the engine's connection cut, a
// silent engine, a client that leaves.
func TestOllamaStreamEnds(t *testing.T) {
	const (
		line = `{"model":"m","message":{"role":"assistant","content":"x"},"done":false}`
		done = `{"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":7,"eval_count":4}`
	)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	ndjsonHead := func(c *scriptConn) {
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n")
		c.BW.Flush()
	}
	up := startRawUpstream(t, func(c *scriptConn) {
		model := string(c.Req.Body())
		model = model[strings.Index(model, `"model":"`)+9:]
		model = model[:strings.IndexByte(model, '"')]
		whole := strings.Repeat(line+"\n", 3) + done + "\n"
		ndjsonHead(c)
		switch model {
		case "bytes": // one byte a chunk
			for i := range len(whole) {
				writeChunk(c, whole[i:i+1])
			}
		case "crlf":
			writeChunk(c, strings.ReplaceAll(whole, "\n", "\r\n"))
		case "blank": // blank lines before and between the lines
			writeChunk(c, "\n"+strings.ReplaceAll(whole, "\n", "\n \r\n\t\n"))
		case "unterminated":
			writeChunk(c, strings.TrimSuffix(whole, "\n"))
		case "error":
			writeChunk(c, line+"\n"+`{"error":"model runner has unexpectedly stopped"}`+"\n")
		case "cut":
			writeChunk(c, line+"\n"+line[:20])
			c.Conn.Close() // no last chunk: the body is cut
			return
		case "silent", "client-leaves":
			writeChunk(c, line+"\n")
			gone := make(chan struct{}) // the gateway hung up on the engine
			go func() {
				io.Copy(io.Discard, c.Conn)
				close(gone)
			}()
			select {
			case <-release:
			case <-gone:
			}
			return
		}
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL(), IdleTimeout: 300 * time.Millisecond})
	for _, c := range []struct {
		model   string
		outcome meter.Outcome
		events  int
		msg     string
	}{
		{"bytes", meter.OutcomeOK, 3, ""},
		{"crlf", meter.OutcomeOK, 3, ""},
		{"blank", meter.OutcomeOK, 3, ""},
		{"unterminated", meter.OutcomeOK, 3, ""},
		{"error", meter.OutcomeUpstreamError, 1, "model runner has unexpectedly stopped"},
		{"cut", meter.OutcomeUpstreamError, 1, ""},
		{"silent", meter.OutcomeTimeout, 1, ""},
		{"client-leaves", meter.OutcomeClientAbort, 1, ""},
	} {
		conn, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		body := `{"model":"` + c.model + `","messages":[{"role":"user","content":"hi"}]}`
		fmt.Fprintf(conn, "POST /api/chat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", c.model, resp, err)
		}
		if c.model == "client-leaves" {
			br := bufio.NewReader(resp.Body)
			br.ReadString('\n') // the first line, then the client leaves
			conn.Close()
		} else {
			io.ReadAll(resp.Body)
			conn.Close()
		}
		rec := g.record(t)
		if rec.Outcome != c.outcome || rec.Route != "ollama_chat" || rec.Events != c.events || !strings.Contains(rec.ErrorMessage, c.msg) {
			t.Errorf("%s: outcome %v (%s) route %q events %d; want %v %d", c.model, rec.Outcome, rec.ErrorMessage, rec.Route, rec.Events, c.outcome, c.events)
		}
		if c.outcome == meter.OutcomeOK && (rec.ISL != 7 || rec.OSL != 4 || rec.UsageSource != meter.UsageUpstream) {
			t.Errorf("%s: isl %d osl %d (%v)", c.model, rec.ISL, rec.OSL, rec.UsageSource)
		}
		select {
		case extra := <-g.records:
			t.Fatalf("%s: a second record: %+v", c.model, extra)
		default:
		}
	}
}

// llama.cpp before its pull request #16109 wrote a streamed error in the
// SSE field error: (server_sent_event(sink, "error", ...)), which WHATWG's
// rules drop: the record kept no message, and a chat stream, which
// llama.cpp ends with [DONE] after the error, was recorded ok. Such an
// event now ends the record as upstream_error with the engine's message
// (keys redacted, cut as every engine message is), the bytes passing to
// the client as they came, whatever their split: the streams are the
// meter's fixtures built from llama.cpp's source, written one byte a
// chunk and in chunks of 7 bytes.
func TestLlamaCppErrorField(t *testing.T) {
	native := fixtureText(t, "llamacpp/llamacpp-src-completion-stream-error-field.txt")
	chat := fixtureText(t, "errors/llamacpp-src-chat-stream-error-field.txt")
	acme, key := tenantWithKey(t, "acme", ratelimit.Limits{})
	long := strings.Repeat("é", 400)
	keyed := "error: {\"code\":400,\"message\":\"bad prompt: my key is " + key + " " + long + "\",\"type\":\"invalid_request_error\"}\n\n"
	var answer string
	var step int
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		for i := 0; i < len(answer); i += step {
			writeChunk(c, answer[i:min(i+step, len(answer))])
		}
		endChunks(c)
	})
	store, _ := newKeysAndGate(t, ratelimit.BackendConfig{}, acme)
	for _, keys := range []bool{false, true} {
		cfg := Config{Upstream: up.URL()}
		hdr := map[string]string(nil)
		if keys {
			cfg.Keys = store
			hdr = map[string]string{"Authorization": "Bearer " + key}
		}
		g := startGateway(t, cfg)
		for _, c := range []struct {
			path, body, answer, route string
			events, isl, osl          int
			source                    meter.UsageSource
		}{
			{"/completion", `{"prompt":"The capital of France is","stream":true}`, native, "llamacpp_completion", 3, 12, 3, meter.UsageContinuous},
			{"/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}`, chat, "chat", 4, meter.Unknown, 3, meter.UsageEstimate},
			{"/completion", `{"prompt":"x","stream":true}`, native[:strings.Index(native, "error:")] + keyed, "llamacpp_completion", 3, 12, 3, meter.UsageContinuous},
		} {
			for _, step = range []int{1, 7} {
				answer = c.answer
				status, _, got, err := post(t, g.URL()+c.path, c.body, hdr)
				if err != nil || status != 200 || got != c.answer {
					t.Fatalf("%s (step %d): status %d err %v; the client got %q", c.path, step, status, err, got)
				}
				rec := g.record(t)
				msg := "error event in stream: Context size has been exceeded."
				if c.answer != native && c.answer != chat {
					msg = rec.ErrorMessage
					if strings.Contains(msg, key) || !strings.Contains(msg, "bad prompt: my key is ") || !strings.Contains(msg, "[redacted]") || len(msg) > maxMessage+len("…") {
						t.Errorf("keys %v, step %d: message %q (%d bytes): want the key redacted, cut to %d bytes", keys, step, msg, len(msg), maxMessage)
					}
				}
				if rec.Route != c.route || rec.Outcome != meter.OutcomeUpstreamError || rec.ErrorMessage != msg ||
					rec.Events != c.events || rec.ISL != c.isl || rec.OSL != c.osl || rec.UsageSource != c.source {
					t.Errorf("%s, keys %v, step %d: route %q %v %q, events %d, isl %d osl %d (%v); want %q upstream_error %q, %d, %d %d (%v)",
						c.path, keys, step, rec.Route, rec.Outcome, rec.ErrorMessage, rec.Events, rec.ISL, rec.OSL, rec.UsageSource,
						c.route, msg, c.events, c.isl, c.osl, c.source)
				}
			}
		}
	}
}
