package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"
)

// An upstream named by a host name may resolve to several addresses: a
// Kubernetes headless Service has an A record per ready pod. net.Dialer
// dials them in order, so every connection went to the first address, and
// gave the first at least 2 s of the connect timeout even when it never
// answered: a pod that vanished without a reset (a node gone, an IP not
// yet out of DNS) cost every new connection 2 s, and with a connect
// timeout of 2 s or less failed it, while other pods were up. And since a
// name was resolved only to dial, connections kept busy went on to the
// old address after DNS had moved on.
//
// So the upstream resolves the name itself, and for each new connection:
//   - starts at the next address in turn (round robin over connections:
//     streams in flight spread over the pods, as kube-proxy spreads a
//     ClusterIP Service's connections);
//   - tries an address that failed to connect within the last downFor
//     after the others;
//   - dials the next address when one has not connected within
//     dialStagger (or at once when it failed), the first to connect
//     winning, all within the connect timeout; the others are left to end
//     (a connect sends no request; one that connects is closed) so their
//     outcome is known;
//   - re-resolves the name every resolveEvery while connections are reused
//     (in the background, never on a request's path), and retires the
//     connections to an address no longer in it: idle ones at once, busy
//     ones when their exchange ends. A lookup that fails or finds nothing
//     changes nothing.

const (
	dialStagger  = 300 * time.Millisecond // as Go's dialer waits before its IPv4 fallback
	downFor      = 10 * time.Second
	resolveEvery = 5 * time.Second
)

// Test hooks: the name's addresses, and a connect to one address.
var (
	testHookLookup   func(ctx context.Context, host string) ([]netip.Addr, error)
	testHookDialAddr func(ctx context.Context, addr string) (net.Conn, error)
	testHookResolved func()       // a background lookup ended
	testHookSocket   func() error // socketShortage
)

// setAddr parses the upstream's host:port.
func (u *upstream) setAddr(addr string) {
	u.addr = addr
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return // dial reports it
	}
	u.host = host
	p, _ := strconv.ParseUint(port, 10, 16)
	u.port = uint16(p)
	if a, err := netip.ParseAddr(host); err == nil {
		u.literal = a
	}
}

func (u *upstream) lookup(ctx context.Context) ([]netip.Addr, error) {
	if testHookLookup != nil {
		return testHookLookup(ctx, u.host)
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", u.host)
	for i := range ips {
		ips[i] = ips[i].Unmap()
	}
	return ips, err
}

func (u *upstream) dialAddr(ctx context.Context, addr string) (net.Conn, error) {
	if testHookDialAddr != nil {
		return testHookDialAddr(ctx, addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// connect opens a connection to the upstream, and says to which address.
func (u *upstream) connect(parent context.Context) (net.Conn, netip.Addr, error) {
	ctx, cancel := context.WithTimeout(parent, u.connectTimeout)
	if u.literal.IsValid() || u.host == "" {
		defer cancel()
		nc, err := u.dialAddr(ctx, u.addr)
		return nc, u.literal, err
	}
	ips, err := u.lookup(ctx)
	if err == nil && len(ips) == 0 {
		err = &net.DNSError{Err: "no addresses", Name: u.host, IsNotFound: true}
	}
	now := time.Now()
	u.mu.Lock()
	if err != nil && u.addrs != nil {
		// A lookup that fails (a resolver restarting) leaves the
		// addresses the name had: the engines are likely still there (a
		// review found every new connection failed meanwhile).
		ips, err = u.addrs, nil
	}
	if err != nil {
		u.mu.Unlock()
		cancel()
		if !OutOfDescriptors(err) {
			short := socketShortage
			if testHookSocket != nil {
				short = testHookSocket
			}
			if e := short(); e != nil {
				err = fmt.Errorf("%w, as the gateway cannot open a socket (%w)", err, e)
			}
		}
		return nil, netip.Addr{}, &net.OpError{Op: "dial", Net: "tcp", Err: err}
	}
	u.learn(ips, now)
	order := u.order(ips, now)
	u.mu.Unlock()
	return u.race(ctx, cancel, order)
}

// learn takes ips as the name's addresses. Called with mu held.
func (u *upstream) learn(ips []netip.Addr, now time.Time) {
	u.addrs = slices.Clone(ips)
	u.resolvedAt = now
	for a := range u.down {
		if !slices.Contains(ips, a) {
			delete(u.down, a)
		}
	}
}

// order is the order to dial ips in for the next connection: from the next
// address in turn, those that failed lately last. Called with mu held.
func (u *upstream) order(ips []netip.Addr, now time.Time) []netip.Addr {
	n := len(ips)
	start := int(u.next % uint32(n))
	u.next++
	order := make([]netip.Addr, 0, n)
	var late []netip.Addr
	for i := range n {
		a := ips[(start+i)%n]
		if until, ok := u.down[a]; ok && now.Before(until) {
			late = append(late, a)
		} else {
			order = append(order, a)
		}
	}
	return append(order, late...)
}

// errSlowConnect marks an address that has not connected within the
// stagger (mark), until its connect ends.
var errSlowConnect = errors.New("no connection within the stagger")

type dialResult struct {
	c   net.Conn
	a   netip.Addr
	err error
}

// race dials the addresses in order, the next one when the last has not
// connected within dialStagger or has failed, until one connects or ctx
// ends; cancel is ctx's, called once every dial has ended.
func (u *upstream) race(ctx context.Context, cancel context.CancelFunc, order []netip.Addr) (net.Conn, netip.Addr, error) {
	results := make(chan dialResult, len(order))
	launched, pending := 0, 0
	launch := func() {
		a := order[launched]
		launched++
		pending++
		go func() {
			c, err := u.dialAddr(ctx, netip.AddrPortFrom(a, u.port).String())
			results <- dialResult{c, a, err}
		}()
	}
	stagger := min(dialStagger, u.connectTimeout/time.Duration(len(order)))
	launch()
	timer := time.NewTimer(stagger)
	defer timer.Stop()
	var first error
	for pending > 0 {
		select {
		case r := <-results:
			pending--
			u.mark(ctx, r.a, r.err)
			if r.err == nil {
				go u.settle(ctx, results, pending, cancel)
				return r.c, r.a, nil
			}
			if first == nil {
				first = r.err
			}
			if launched < len(order) {
				launch()
				timer.Reset(stagger)
			}
		case <-timer.C:
			if launched < len(order) {
				// The address dialled last has not connected within the
				// stagger: tried last by the next connections until it
				// does (else each new connection that starts there
				// waited the stagger until its connect timed out; found
				// by review).
				u.mark(ctx, order[launched-1], errSlowConnect)
				launch()
				timer.Reset(stagger)
			}
		}
	}
	cancel()
	return nil, netip.Addr{}, first
}

// settle waits for the dials a race left, noting their outcome and closing
// those that connected.
func (u *upstream) settle(ctx context.Context, results chan dialResult, pending int, cancel context.CancelFunc) {
	defer cancel()
	for ; pending > 0; pending-- {
		r := <-results
		u.mark(ctx, r.a, r.err)
		if r.err == nil {
			_ = r.c.Close()
		}
	}
}

// mark notes a connect's outcome: an address that failed is tried last for
// downFor. A connect the caller gave up on (a shutdown), or one the
// gateway had no descriptor for (the address was never tried), says
// nothing.
func (u *upstream) mark(ctx context.Context, a netip.Addr, err error) {
	if err != nil && (errors.Is(ctx.Err(), context.Canceled) || OutOfDescriptors(err)) {
		return
	}
	u.mu.Lock()
	if err == nil {
		delete(u.down, a)
	} else {
		if u.down == nil {
			u.down = make(map[netip.Addr]time.Time)
		}
		u.down[a] = time.Now().Add(downFor)
	}
	u.mu.Unlock()
}

// retired reports a connection to an address the name no longer has.
// Called with mu held.
func (u *upstream) retired(c *upConn) bool {
	return u.addrs != nil && c.addr.IsValid() && !slices.Contains(u.addrs, c.addr)
}

// refreshDue reports whether get should look the name up again (and notes
// that it does). Called with mu held.
func (u *upstream) refreshDue(now time.Time) bool {
	if u.addrs == nil || u.resolving || now.Sub(u.resolvedAt) < resolveEvery {
		return false
	}
	u.resolving = true
	return true
}

// refresh looks the name up again, and closes the idle connections to an
// address it no longer has.
func (u *upstream) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), u.connectTimeout)
	ips, err := u.lookup(ctx)
	cancel()
	var stale []*upConn
	u.mu.Lock()
	u.resolving = false
	u.resolvedAt = time.Now() // a failure is tried again as late
	if err == nil && len(ips) > 0 {
		u.learn(ips, u.resolvedAt)
		kept := u.idle[:0]
		for _, c := range u.idle {
			if u.retired(c) {
				stale = append(stale, c)
			} else {
				kept = append(kept, c)
			}
		}
		clear(u.idle[len(kept):])
		u.idle = kept
	}
	u.mu.Unlock()
	for _, c := range stale {
		u.discard(c)
	}
	if testHookResolved != nil {
		testHookResolved()
	}
}
