package proxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
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

// A lookup of the engine's name that fails for want of the gateway's own
// descriptors is the gateway's shortage too: Go's resolver, with no socket
// to ask the resolver on, answers "no such host", which made it the
// engine's upstream_error (502) on the first connect to a name. A lookup
// that fails while sockets can be opened is still the engine's.
func TestLookupOutOfDescriptorsIsTheGatewaysShortage(t *testing.T) {
	testHookLookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	short := error(os.NewSyscallError("socket", syscall.EMFILE))
	testHookSocket = func() error { return short }
	t.Cleanup(func() { testHookLookup, testHookSocket = nil, nil })
	g := startGateway(t, Config{Upstream: "http://fleet.test:8000"})
	status, hdr, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	if err != nil || status != 503 || hdr.Get("Retry-After") != "1" || !strings.Contains(body, "out of file descriptors") {
		t.Fatalf("lookup without a socket: %d %v %q %v", status, hdr, body, err)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeRejected || !strings.Contains(rec.ErrorMessage, "no such host") ||
		!strings.Contains(rec.ErrorMessage, "too many open files") {
		t.Fatalf("lookup without a socket: record %+v", rec)
	}
	short = nil
	status, _, _, err = post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	if err != nil || status != 502 {
		t.Fatalf("lookup that failed: %d %v", status, err)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeUpstreamError || strings.Contains(rec.ErrorMessage, "socket") {
		t.Fatalf("lookup that failed: record %+v", rec)
	}
	g.noMoreRecords(t)
}

// socketShortage finds the shortage for real: with the open-files limit at
// the lowest descriptor free, no socket opens.
func TestSocketShortageUnderTheFileLimit(t *testing.T) {
	if err := socketShortage(); err != nil {
		t.Fatalf("with descriptors to spare: %v", err)
	}
	var was syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &was); err != nil {
		t.Fatal(err)
	}
	// The lowest descriptor free: a limit at it leaves no descriptor to
	// open (the limit bounds a descriptor's number).
	free, err := syscall.Dup(0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(free)
	low := was
	low.Cur = uint64(free)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skipf("cannot lower the open-files limit: %v", err)
	}
	err = socketShortage()
	if e := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &was); e != nil {
		t.Fatal(e)
	}
	if !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("at the limit: %v, want EMFILE", err)
	}
}
