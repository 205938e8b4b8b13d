package proxy

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/goodput/goodput/meter"
)

func TestClipMessage(t *testing.T) {
	if got := clipMessage("short"); got != "short" {
		t.Errorf("%q", got)
	}
	long := strings.Repeat("é", 400) // 800 bytes
	got := clipMessage(long)
	if !utf8.ValidString(got) || len(got) > maxMessage+len("…") || !strings.HasSuffix(got, "…") {
		t.Errorf("clipped to %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
}

// A malformed event whose parser error runs for kilobytes (deep nesting)
// leaves a bounded message in the record.
func TestMalformedEventMessageIsBounded(t *testing.T) {
	deep := strings.Repeat("[", 5000)
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")
		writeChunk(c, "data: {\"x\":"+deep+"\n\n")
		writeChunk(c, "data: [DONE]\n\n")
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil); err != nil || status != 200 {
		t.Fatalf("status %d err %v", status, err)
	}
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeUpstreamError || !strings.HasPrefix(rec.ErrorMessage, "malformed stream event") {
		t.Fatalf("outcome %s message %.80q", rec.Outcome, rec.ErrorMessage)
	}
	if len(rec.ErrorMessage) > maxMessage+len("…") {
		t.Fatalf("a message of %d bytes", len(rec.ErrorMessage))
	}
}

// Bytes that are not UTF-8 are cut near the bound, not emptied.
func TestClipMessageInvalidUTF8(t *testing.T) {
	got := clipMessage(strings.Repeat("\x80", 1000))
	if len(got) < maxMessage-3 {
		t.Errorf("clipped to %d bytes", len(got))
	}
}

// A client that leaves after the engine's malformed event (the openai SDK
// throws on it and closes) leaves a record of the engine's fault, not of
// its own abort: the fault came first (a new user's probe found it
// recorded as client_abort, the SLO's miss blamed on the client). A client
// that leaves a well-formed stream is still the one that aborted.
func TestClientLeavingAfterAMalformedEventIsTheEnginesFault(t *testing.T) {
	for _, malformed := range []bool{true, false} {
		t.Run(fmt.Sprintf("malformed=%v", malformed), func(t *testing.T) {
			gone := make(chan struct{})
			up := startRawUpstream(t, func(c *scriptConn) {
				writeSSEHead(c)
				writeChunk(c, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")
				if malformed {
					writeChunk(c, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]\n\n")
				} else {
					writeChunk(c, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\n")
				}
				select {
				case <-gone:
				case <-time.After(10 * time.Second):
				}
				// Events the gateway cannot deliver: their write finds
				// the client gone.
				for range 20 {
					if writeChunk(c, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"c\"}}]}\n\n") != nil {
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
				endChunks(c)
			})
			g := startGateway(t, Config{Upstream: up.URL()})
			conn, err := net.Dial("tcp", g.addr)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(chatBody), chatBody)
			// Read until the second event has come, then leave.
			var got []byte
			buf := make([]byte, 4096)
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			for !strings.Contains(string(got), `"content":"b"`) {
				n, err := conn.Read(buf)
				if err != nil {
					t.Fatalf("read: %v after %q", err, got)
				}
				got = append(got, buf[:n]...)
			}
			conn.Close()
			close(gone)
			rec := g.record(t)
			if malformed && (rec.Outcome != meter.OutcomeUpstreamError || !strings.HasPrefix(rec.ErrorMessage, "malformed stream event") || !strings.HasSuffix(rec.ErrorMessage, "then the client went away")) {
				t.Errorf("outcome %s message %q, want upstream_error, the malformed event first", rec.Outcome, rec.ErrorMessage)
			}
			if !malformed && rec.Outcome != meter.OutcomeClientAbort {
				t.Errorf("outcome %s message %q, want client_abort", rec.Outcome, rec.ErrorMessage)
			}
		})
	}
}
