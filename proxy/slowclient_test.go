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

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
	"github.com/goodput/goodput/sim"
)

// trickle writes s one byte every gap until it is written or a write
// fails (the gateway hung up).
func trickle(conn net.Conn, s string, gap time.Duration) {
	for i := 0; i < len(s); i++ {
		if _, err := conn.Write([]byte{s[i]}); err != nil {
			return
		}
		time.Sleep(gap) // the attack's pace, not a barrier
	}
}

// readAnswer reads what the gateway sends until it closes the connection
// (bounded by limit: an attack before the fix would be served in full).
func readAnswer(t *testing.T, conn net.Conn, limit time.Duration) (string, time.Duration, bool) {
	t.Helper()
	start := time.Now()
	conn.SetReadDeadline(start.Add(limit))
	b, err := io.ReadAll(conn)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return string(b), time.Since(start), false
	}
	return string(b), time.Since(start), true
}

// Slow clients cannot hold a connection (issue 8.3, slowloris): a new
// connection that sends nothing, a request line or headers trickled one
// byte at a time, and a body trickled, are each cut at their read timeout;
// a cut request gets one record and never reaches the engine.
func TestSlowClientsAreCut(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	const timeout = 300 * time.Millisecond
	g := startGateway(t, Config{Upstream: up.URL(), ReadHeaderTimeout: timeout, ReadBodyTimeout: timeout})
	// Padded with JSON whitespace so that even the body alone takes over
	// 10 s to trickle: a gateway that never cut it would answer it in
	// full long after the bounds below.
	body := `{"model":"m","stream":true,"messages":[]` + strings.Repeat(" ", 60) + `}`
	head := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	reqLine, _, _ := strings.Cut(head, "\r\n")
	const gap = 100 * time.Millisecond // the body alone takes > 10 s at this pace
	for _, c := range []struct {
		name          string
		sent, trickle string
		record        bool
	}{
		{"idle", "", "", false},
		{"request line", "", head + body, true},
		{"headers", reqLine + "\r\n", head[len(reqLine)+2:] + body, true},
		{"body", head, body, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", g.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			io.WriteString(conn, c.sent)
			go trickle(conn, c.trickle, gap)
			answer, took, closed := readAnswer(t, conn, 5*time.Second)
			if !closed {
				t.Fatalf("connection still open after %v (timeout %v)", took, timeout)
			}
			// Well above the timeout (a loaded CI machine running the
			// race detector once took 1.5 s for the 300 ms one) and well
			// below the trickle's 10 s.
			if took > timeout+3*time.Second {
				t.Fatalf("closed after %v, timeout %v", took, timeout)
			}
			if !c.record {
				if answer != "" {
					t.Fatalf("an idle connection got %q", answer)
				}
				g.noMoreRecords(t)
				return
			}
			if !strings.HasPrefix(answer, "HTTP/1.1 408 ") {
				t.Fatalf("answer %q, want 408", answer)
			}
			rec := g.record(t)
			if rec.Outcome != meter.OutcomeRejected || rec.Status != 408 {
				t.Fatalf("record %+v", rec)
			}
			g.noMoreRecords(t)
		})
	}
	if n := up.accepts.Load(); n != 0 {
		t.Fatalf("%d requests reached the engine", n)
	}
}

// The read deadline set for a request is long past while its response is
// awaited and streamed: the client-gone checks must not take it for a
// client that left, and the stream must run to its end.
func TestReadDeadlineSparesWaitAndStream(t *testing.T) {
	_, simURL := startSim(t, sim.Config{TTFT: 400 * time.Millisecond, ITL: 20 * time.Millisecond})
	g := startGateway(t, Config{Upstream: simURL, ReadHeaderTimeout: 100 * time.Millisecond, ReadBodyTimeout: 100 * time.Millisecond})
	// About 400 ms to the first byte (the guard peeks every 50 ms), then
	// 20 tokens over 400 ms.
	conn := rawPost(t, g.addr, `{"model":"sim-llama","stream":true,"max_tokens":20,"ignore_eos":true,"messages":[]}`, "Connection: close\r\n")
	defer conn.Close()
	answer, _, closed := readAnswer(t, conn, 10*time.Second)
	if !closed || !strings.HasPrefix(answer, "HTTP/1.1 200") || !strings.Contains(answer, "data: [DONE]") {
		t.Fatalf("answer %q", answer[:min(len(answer), 300)])
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.OSL != 20 {
		t.Fatalf("record %+v", rec)
	}
}

// Same for a request queued for capacity (the queue's client watch).
func TestReadDeadlineSparesQueuedRequest(t *testing.T) {
	_, simURL := startSim(t, sim.Config{TTFT: 0, ITL: 20 * time.Millisecond})
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{MaxConcurrency: 1})
	store, gate := newKeysAndGate(t, ratelimit.BackendConfig{MaxQueueWait: cfgtypes.Duration(5 * time.Second)}, tc)
	g := startGateway(t, Config{Upstream: simURL, Keys: store, Limits: gate,
		ReadHeaderTimeout: 100 * time.Millisecond, ReadBodyTimeout: 100 * time.Millisecond})
	// A holds the only slot for 20 × 20 ms once its headers are back.
	req, _ := http.NewRequest("POST", g.URL()+"/v1/chat/completions",
		strings.NewReader(`{"model":"sim-llama","stream":true,"max_tokens":20,"ignore_eos":true,"messages":[]}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// B waits in the queue well past its read deadline.
	conn := rawPost(t, g.addr, simChat, "Authorization: Bearer "+key+"\r\nConnection: close\r\n")
	defer conn.Close()
	io.Copy(io.Discard, resp.Body)
	br := bufio.NewReader(conn)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	status, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 200") {
		t.Fatalf("queued request: %q %v", status, err)
	}
	io.Copy(io.Discard, br)
	outcomes := map[meter.Outcome]int{}
	for i := 0; i < 2; i++ {
		outcomes[g.record(t).Outcome]++
	}
	if outcomes[meter.OutcomeOK] != 2 {
		t.Fatalf("outcomes %v", outcomes)
	}
}
