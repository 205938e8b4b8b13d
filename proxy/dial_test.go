package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/valyala/fasthttp"
)

// fleetEngine is one pod of a fleet behind a name: it counts the
// connections it accepted, answers each request with jsonReply once hold
// lets it, and reports each connection the gateway closed.
type fleetEngine struct {
	ln      net.Listener
	accepts atomic.Int32
	closed  chan struct{} // one per connection closed by the gateway
}

func startFleetEngine(t *testing.T, hold func()) *fleetEngine {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &fleetEngine{ln: ln, closed: make(chan struct{}, 16)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.accepts.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br, bw := bufio.NewReader(c), bufio.NewWriter(c)
				for {
					var req fasthttp.Request
					if err := req.Read(br); err != nil {
						e.closed <- struct{}{}
						return
					}
					if hold != nil {
						hold()
					}
					fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(jsonReply), jsonReply)
					if bw.Flush() != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return e
}

// fleet maps the addresses a test name resolves to onto engines on
// loopback: lookup answers with the addresses set, and a connect to one of
// them reaches its engine, or, for an address in blackholes, waits until
// the connect's context ends or the test releases it (a SYN never
// answered).
type fleet struct {
	addrs      atomic.Pointer[[]netip.Addr]
	engines    map[string]*fleetEngine // "10.0.0.2:8000" → engine
	blackholes map[string]chan struct{}
	bhDone     atomic.Int32 // blackholed connects that returned
}

func installFleet(t *testing.T, f *fleet) {
	testHookLookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
		if host != "fleet.test" {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return append([]netip.Addr(nil), *f.addrs.Load()...), nil
	}
	testHookDialAddr = func(ctx context.Context, addr string) (net.Conn, error) {
		if release, ok := f.blackholes[addr]; ok {
			defer f.bhDone.Add(1)
			select {
			case <-ctx.Done():
			case <-release:
			}
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("i/o timeout (blackholed)")}
		}
		e, ok := f.engines[addr]
		if !ok {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", e.ln.Addr().String())
	}
	t.Cleanup(func() { testHookLookup, testHookDialAddr, testHookResolved = nil, nil, nil })
}

func addrs(s ...string) *[]netip.Addr {
	var a []netip.Addr
	for _, x := range s {
		a = append(a, netip.MustParseAddr(x))
	}
	return &a
}

const fleetChat = `{"model":"m","messages":[]}`

// A name with several addresses, the first of which never answers a
// connect (a pod gone without a reset, its IP still in DNS): the request
// is served by another address without waiting for the first's connect to
// end. net.Dialer gave the first address at least 2 s of the connect
// timeout, all of it when the timeout was 2 s or less: every new
// connection then failed (504) while two pods were up. The readiness
// check connects the same way.
func TestFleetBlackholedAddressServedElsewhere(t *testing.T) {
	release := make(chan struct{})
	f := &fleet{
		engines: map[string]*fleetEngine{
			"10.0.0.2:8000": startFleetEngine(t, nil),
			"10.0.0.3:8000": startFleetEngine(t, nil),
		},
		blackholes: map[string]chan struct{}{"10.0.0.1:8000": release},
	}
	f.addrs.Store(addrs("10.0.0.1", "10.0.0.2", "10.0.0.3"))
	installFleet(t, f)
	// A connect timeout far above the wait before the next address: the
	// blackholed connect is still waiting when the answer comes, unless
	// the dial waited for it.
	g := startGateway(t, Config{Upstream: "http://fleet.test:8000", ConnectTimeout: 20 * time.Second})
	defer close(release)

	status, _, body, err := post(t, g.URL()+"/v1/chat/completions", fleetChat, nil)
	if err != nil || status != 200 {
		t.Fatalf("request: %d %v %s", status, err, body)
	}
	if n := f.bhDone.Load(); n != 0 {
		t.Errorf("the answer came after the blackholed connect ended (%d): the dial waited out the dead address", n)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
		t.Errorf("record %+v", rec)
	}
	if n := f.engines["10.0.0.2:8000"].accepts.Load() + f.engines["10.0.0.3:8000"].accepts.Load(); n != 1 {
		t.Errorf("%d connections to the live addresses, want 1", n)
	}
	g.p.up.mu.Lock()
	g.p.up.next = 0 // the check starts at the blackholed address too
	g.p.up.mu.Unlock()
	if err := g.p.CheckUpstream(context.Background()); err != nil {
		t.Errorf("readiness check with one address of three blackholed: %v", err)
	}
	if n := f.bhDone.Load(); n != 0 {
		t.Errorf("the check waited out the blackholed address (%d)", n)
	}
}

// New connections start at the next address in turn: three streams in
// flight at once are on three pods. net.Dialer put every connection on
// the name's first address, the other pods idle.
func TestFleetConnectionsSpread(t *testing.T) {
	var arrived sync.WaitGroup
	arrived.Add(3)
	hold := func() { arrived.Done(); arrived.Wait() } // each answers once all three are in
	f := &fleet{engines: map[string]*fleetEngine{
		"10.0.0.1:8000": startFleetEngine(t, hold),
		"10.0.0.2:8000": startFleetEngine(t, hold),
		"10.0.0.3:8000": startFleetEngine(t, hold),
	}}
	f.addrs.Store(addrs("10.0.0.1", "10.0.0.2", "10.0.0.3"))
	installFleet(t, f)
	g := startGateway(t, Config{Upstream: "http://fleet.test:8000"})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if status, _, body, err := post(t, g.URL()+"/v1/chat/completions", fleetChat, nil); err != nil || status != 200 {
				t.Errorf("request: %d %v %s", status, err, body)
			}
		}()
	}
	wg.Wait()
	for a, e := range f.engines {
		if n := e.accepts.Load(); n != 1 {
			t.Errorf("%s: %d connections, want 1 (one per pod)", a, n)
		}
	}
}

// A name that moves to another address (a pod rescheduled, a Service's
// endpoints replaced while the old pods still answer) is followed by a
// gateway whose pooled connections stay busy: the name is looked up again
// in the background as connections are reused, the idle connection to
// the old address is closed and the next request goes to the new one.
// Before, a name was looked up only to dial, and reused connections kept
// every request on the old address for as long as traffic kept them from
// idling out.
func TestFleetFollowsDNSChange(t *testing.T) {
	f := &fleet{engines: map[string]*fleetEngine{
		"10.0.0.1:8000": startFleetEngine(t, nil),
		"10.0.0.2:8000": startFleetEngine(t, nil),
	}}
	old, moved := f.engines["10.0.0.1:8000"], f.engines["10.0.0.2:8000"]
	f.addrs.Store(addrs("10.0.0.1"))
	installFleet(t, f)
	resolved := make(chan struct{}, 4)
	testHookResolved = func() { resolved <- struct{}{} }
	g := startGateway(t, Config{Upstream: "http://fleet.test:8000"})
	if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", fleetChat, nil); err != nil || status != 200 {
		t.Fatalf("first request: %d %v", status, err)
	}
	f.addrs.Store(addrs("10.0.0.2"))
	// As if resolveEvery had passed since the dial's lookup.
	g.p.up.mu.Lock()
	g.p.up.resolvedAt = time.Time{}
	g.p.up.mu.Unlock()
	// This request reuses the pooled connection, and starts the lookup.
	if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", fleetChat, nil); err != nil || status != 200 {
		t.Fatalf("second request: %d %v", status, err)
	}
	g.p.up.mu.Lock()
	started := g.p.up.resolving || !g.p.up.resolvedAt.IsZero()
	g.p.up.mu.Unlock()
	if !started {
		t.Fatal("a reused connection started no new lookup of the name")
	}
	<-resolved
	if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", fleetChat, nil); err != nil || status != 200 {
		t.Fatalf("third request: %d %v", status, err)
	}
	if n := moved.accepts.Load(); n != 1 {
		t.Fatalf("the name's new address got %d connections, want 1", n)
	}
	if n := old.accepts.Load(); n != 1 {
		t.Fatalf("the old address got %d connections, want 1", n)
	}
	<-old.closed // the gateway closes its connection to the old address
}

// The order of a new connection's connects: from the next address in
// turn, an address that failed lately last, until downFor has passed.
func TestDialOrderRoundRobinDeadLast(t *testing.T) {
	u := newUpstream("fleet.test:8000", time.Second, 4, time.Minute)
	ips := *addrs("10.0.0.1", "10.0.0.2", "10.0.0.3")
	now := time.Now()
	u.mark(context.Background(), ips[0], errors.New("connection refused"))
	var got [][]netip.Addr
	u.mu.Lock()
	for range 3 {
		got = append(got, u.order(ips, now))
	}
	later := u.order(ips, now.Add(downFor+time.Second))
	u.mu.Unlock()
	want := [][]netip.Addr{{ips[1], ips[2], ips[0]}, {ips[1], ips[2], ips[0]}, {ips[2], ips[1], ips[0]}}
	for i := range want {
		if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
			t.Errorf("connection %d: order %v, want %v", i, got[i], want[i])
		}
	}
	if first := later[0]; first != ips[0] {
		t.Errorf("after downFor the failed address is not back in turn: %v", later)
	}
	u.mark(context.Background(), ips[0], nil)
	u.mu.Lock()
	again := u.order(ips, now)
	u.mu.Unlock()
	if again[0] != ips[1] { // the fifth connection starts at ips[4%3]
		t.Errorf("after a connect succeeded: %v", again)
	}
}

// A connect the gateway had no file descriptor for never reached its
// address: the address keeps its turn (it went last for downFor, and with
// every address so marked in a burst, the fleet's order was the accident
// of which connects ran short).
func TestDialOutOfDescriptorsKeepsTheAddressesTurn(t *testing.T) {
	u := newUpstream("fleet.test:8000", time.Second, 4, time.Minute)
	ips := *addrs("10.0.0.1", "10.0.0.2", "10.0.0.3")
	u.mark(context.Background(), ips[0], &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)})
	u.mu.Lock()
	got := u.order(ips, time.Now())
	u.mu.Unlock()
	if fmt.Sprint(got) != fmt.Sprint(ips) {
		t.Fatalf("order %v: the address ran short of nothing but went last", got)
	}
}

// An address that has not connected within the stagger goes last for the
// next connections until its connect ends, and a lookup that fails leaves
// the name's addresses: before, each new connection that started at a
// silent address waited the stagger until its connect timed out, and every
// new connection failed while the resolver did (found by review).
func TestDialSilentAddressLastAndLookupFailure(t *testing.T) {
	ips := *addrs("10.0.0.1", "10.0.0.2", "10.0.0.3")
	var mu sync.Mutex
	var dialled []string
	lookupErr := error(nil)
	silent := make(chan struct{})
	t.Cleanup(func() { close(silent) })
	testHookLookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
		mu.Lock()
		defer mu.Unlock()
		if lookupErr != nil {
			return nil, lookupErr
		}
		return ips, nil
	}
	testHookDialAddr = func(ctx context.Context, addr string) (net.Conn, error) {
		mu.Lock()
		dialled = append(dialled, addr)
		mu.Unlock()
		if addr == "10.0.0.1:8000" { // silent: no answer until the connect times out (or the test ends)
			select {
			case <-ctx.Done():
			case <-silent:
			}
			return nil, errors.New("timed out")
		}
		c, s := net.Pipe()
		s.Close()
		return c, nil
	}
	t.Cleanup(func() { testHookLookup, testHookDialAddr = nil, nil })
	u := newUpstream("fleet.test:8000", 10*time.Second, 4, time.Minute)
	first := func() string {
		t.Helper()
		mu.Lock()
		dialled = dialled[:0]
		mu.Unlock()
		c, _, err := u.connect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		mu.Lock()
		defer mu.Unlock()
		return dialled[0]
	}
	// The first connection starts at the silent address and wins on the
	// next after the stagger; the fourth would start there again.
	if got := first(); got != "10.0.0.1:8000" {
		t.Fatalf("first connection dialled %s first", got)
	}
	first()
	first()
	if got := first(); got == "10.0.0.1:8000" {
		t.Errorf("the fourth connection dialled the silent address first, its first connect still running")
	}
	mu.Lock()
	lookupErr = &net.DNSError{Err: "server misbehaving", Name: "fleet.test", IsTemporary: true}
	mu.Unlock()
	if c, a, err := u.connect(context.Background()); err != nil {
		t.Errorf("with the lookup failing: %v", err)
	} else {
		c.Close()
		if !slices.Contains(ips, a) {
			t.Errorf("connected to %v", a)
		}
	}
}
