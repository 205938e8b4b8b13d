package proxy

import (
	"context"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/goodput/goodput/meter"
)

// A connect that fails for want of the gateway's own file descriptors is
// the gateway's shortage, not the engine's fault: it was recorded as
// upstream_error ("upstream unreachable", 502), which sent the operator
// looking at a healthy engine. It is refused as a body without room is:
// 503 with Retry-After, outcome rejected, judged (not a client's
// mistake), its record naming the shortage, logged once for the burst.
func TestConnectOutOfDescriptorsIsTheGatewaysShortage(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE} {
		t.Run(errno.Error(), func(t *testing.T) {
			testHookDialAddr = func(ctx context.Context, addr string) (net.Conn, error) {
				return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", errno)}
			}
			t.Cleanup(func() { testHookDialAddr = nil })
			logs := newLogLines()
			g := startGateway(t, Config{Upstream: "http://127.0.0.1:9", Logf: logs.logf})
			for i := range 2 {
				status, hdr, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
				if err != nil || status != 503 || hdr.Get("Retry-After") != "1" || !strings.Contains(body, "out of file descriptors") {
					t.Fatalf("request %d: %d %v %q %v", i, status, hdr, body, err)
				}
				rec := g.record(t)
				if rec.Outcome != meter.OutcomeRejected || rec.Status != 503 || rec.ClientMistake() ||
					!strings.Contains(rec.ErrorMessage, "out of file descriptors") || !strings.Contains(rec.ErrorMessage, errno.Error()) {
					t.Fatalf("request %d: record %+v", i, rec)
				}
			}
			g.noMoreRecords(t)
			var warned []string
			for _, l := range logs.get() {
				if strings.Contains(l, "out of file descriptors") {
					warned = append(warned, l)
				}
			}
			if len(warned) != 1 || !strings.Contains(warned[0], "1 refused so far") {
				t.Fatalf("logged %q", logs.get())
			}
		})
	}
	// An engine that refuses the connect is still the engine's.
	testHookDialAddr = func(ctx context.Context, addr string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	t.Cleanup(func() { testHookDialAddr = nil })
	g := startGateway(t, Config{Upstream: "http://127.0.0.1:9"})
	if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil); err != nil || status != 502 {
		t.Fatalf("refused connect: %d %v", status, err)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeUpstreamError {
		t.Fatalf("refused connect: record %+v", rec)
	}
}
