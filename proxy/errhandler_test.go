package proxy

import (
	"io"
	"net"
	"strings"
	"testing"

	"github.com/goodput/goodput/meter"
)

// A request whose head is malformed is recorded unidentified, whatever an
// earlier client of a connection context fasthttp may reuse had sent: here,
// a client that closes at a chunk boundary after its head. A review found
// an attempt to identify failed bodies restoring such an earlier head
// (fasthttp then called neither the handler nor the error handler for the
// earlier request). That client's own record, a client_abort, carries its
// own identity (heldhead.go); the malformed request's never does.
func TestMalformedHeadNeverGetsAnEarlierIdentity(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g := startGateway(t, Config{Upstream: up.URL(), MaxBodyBytes: 1000})
	for i := 0; i < 10; i++ {
		c, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Tenant: victim\r\nX-Request-Id: victim-id\r\nTransfer-Encoding: chunked\r\n\r\n")
		c.Close()
		line := rawExchange(t, g.addr, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nnocolonhere\r\n\r\n")
		if !strings.Contains(line, " 400 ") {
			t.Fatalf("answer %s", line)
		}
		for {
			rec := g.record(t)
			if rec.Status != 400 {
				if rec.Outcome != meter.OutcomeClientAbort {
					t.Fatalf("round %d: the earlier client's record: %+v", i, rec)
				}
				continue
			}
			if rec.Tenant == "victim" || rec.RequestID == "victim-id" || rec.Route != "other" {
				t.Fatalf("round %d: a record with the earlier client's identity: %+v", i, rec)
			}
			break
		}
	}
}
