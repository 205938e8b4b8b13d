package proxy

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
)

// Every way a request can leave the handler ends it with exactly one record
// and the outcome and status that way implies: the handler's steps end a
// request only through finish, the stream only through finishStream.
func TestOneRecordPerExitPath(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		body := string(c.Req.Body())
		switch {
		case strings.Contains(body, "engine-500"):
			b := `{"error":"boom"}`
			fmt.Fprintf(c.BW, "HTTP/1.1 500 X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
			c.BW.Flush()
		case strings.Contains(body, "hang-up"):
			c.Conn.Close()
		case strings.Contains(body, "slow"):
			time.Sleep(400 * time.Millisecond)
			vllmUpstream(0)(c)
		default:
			vllmUpstream(0)(c)
		}
	})
	acme, key := tenantWithKey(t, "acme", ratelimit.Limits{})
	tight, tightKey := tenantWithKey(t, "tight", ratelimit.Limits{RPM: 1, Burst: 1})
	store, gate := newKeysAndGate(t, ratelimit.BackendConfig{}, acme, tight)
	var mu sync.Mutex
	var got []meter.Record
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate, MaxBodyBytes: 4096,
		FirstByteTimeout: 150 * time.Millisecond,
		Sink: RecordFunc(func(rec *meter.Record) {
			mu.Lock()
			got = append(got, *rec)
			mu.Unlock()
		})})
	auth := "Authorization: Bearer " + key + "\r\n"
	chat := func(body, hdr string) func() {
		return func() {
			c := rawPost(t, g.addr, body, hdr)
			io.ReadAll(c)
			c.Close()
		}
	}
	body := func(marker string) string {
		return `{"model":"m","stream":true,"messages":[{"role":"user","content":"` + marker + `"}]}`
	}
	cases := []struct {
		name    string
		send    func()
		outcome meter.Outcome
		status  int
	}{
		{"ok", chat(body("x"), auth+"Connection: close\r\n"), meter.OutcomeOK, 200},
		{"missing key", chat(body("x"), "Connection: close\r\n"), meter.OutcomeUnauthorized, 401},
		{"unknown key", chat(body("x"), "Authorization: Bearer nope\r\nConnection: close\r\n"), meter.OutcomeUnauthorized, 401},
		{"duplicate key", chat(`{"model":"a","model":"b"}`, auth+"Connection: close\r\n"), meter.OutcomeRejected, 400},
		{"body too large", chat(body(strings.Repeat("a", 5000)), auth), meter.OutcomeRejected, 413},
		{"malformed", func() {
			c, err := net.Dial("tcp", g.addr)
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"+auth+"NoColon\r\n\r\n")
			io.ReadAll(c)
			c.Close()
		}, meter.OutcomeRejected, 400},
		{"rate limited first", chat(body("x"), "Authorization: Bearer "+tightKey+"\r\nConnection: close\r\n"), meter.OutcomeOK, 200},
		{"rate limited", chat(body("x"), "Authorization: Bearer "+tightKey+"\r\nConnection: close\r\n"), meter.OutcomeRateLimited, 429},
		{"engine hangs up", chat(body("hang-up"), auth+"Connection: close\r\n"), meter.OutcomeUpstreamError, 502},
		{"engine 500", chat(body("engine-500"), auth+"Connection: close\r\n"), meter.OutcomeUpstreamError, 500},
		{"first byte timeout", chat(body("slow"), auth+"Connection: close\r\n"), meter.OutcomeTimeout, 504},
		{"client leaves before the first byte", func() {
			// The request is sent whole, then the client hangs up.
			rawPost(t, g.addr, body("slow"), auth).Close()
		}, meter.OutcomeClientAbort, meter.StatusClientClosed},
		{"handler panic", func() {
			testHookRequest = func() { panic("test: exit path") }
			defer func() { testHookRequest = nil }()
			chat(body("x"), auth+"Connection: close\r\n")()
		}, meter.OutcomeUpstreamError, 500},
	}
	for _, c := range cases {
		mu.Lock()
		got = got[:0]
		mu.Unlock()
		c.send()
		// The first record says the handler ran (a client that hangs up
		// may leave before it starts); Wait then covers anything else.
		g.record(t)
		g.p.Wait()
		mu.Lock()
		recs := append([]meter.Record(nil), got...)
		mu.Unlock()
		for len(g.records) > 0 {
			<-g.records
		}
		if len(recs) != 1 {
			t.Errorf("%s: %d records, want exactly one: %+v", c.name, len(recs), recs)
			continue
		}
		if recs[0].Outcome != c.outcome || recs[0].Status != c.status {
			t.Errorf("%s: outcome %s status %d, want %s %d (%s)", c.name, recs[0].Outcome, recs[0].Status, c.outcome, c.status, recs[0].ErrorMessage)
		}
	}
	if n := g.p.InFlight(); n != 0 {
		t.Fatalf("%d still in flight", n)
	}
}
