package ratelimit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// latencyProxy is a TCP proxy in front of a Redis server: what a client
// sends reaches the server delay later (a network with that round trip),
// and it counts the client's turns that begin with a script call (EVALSHA
// or EVAL; a turn is what a client sends between two replies: one round
// trip). With holdFor(n), the replies to script turns wait until n of them
// have begun: a client that sends them one after another gets none.
type latencyProxy struct {
	ln    net.Listener
	to    string
	delay atomic.Int64 // ns
	done  chan struct{}
	wg    sync.WaitGroup

	mu    sync.Mutex
	turns int           // script turns since holdFor
	hold  int           // replies to script turns wait until turns reaches it
	held  chan struct{} // closed when turns reaches hold; nil: none held
	conns []net.Conn
}

// startLatencyProxy starts a proxy in front of the Redis at rawURL and
// returns it and the URL that reaches Redis through it.
func startLatencyProxy(t *testing.T, rawURL string) (*latencyProxy, string) {
	t.Helper()
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &latencyProxy{ln: ln, to: opt.Addr, done: make(chan struct{})}
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = ln.Addr().String()
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		close(p.done)
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p, u.String()
}

// holdFor resets the count of script turns and holds their replies until
// n have begun.
func (p *latencyProxy) holdFor(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.turns, p.hold, p.held = 0, n, make(chan struct{})
}

// scriptTurns is the count of script turns since holdFor.
func (p *latencyProxy) scriptTurns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.turns
}

func (p *latencyProxy) noteScriptTurn() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.turns++
	if p.held != nil && p.turns >= p.hold {
		close(p.held)
		p.held = nil
	}
}

// awaitHold waits until the replies to script turns may go.
func (p *latencyProxy) awaitHold() {
	p.mu.Lock()
	held := p.held
	p.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-p.done:
		}
	}
}

func (p *latencyProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.to)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.serve(c, s)
	}
}

type delayedChunk struct {
	b  []byte
	at time.Time
}

// serve forwards between the client c and the server s.
func (p *latencyProxy) serve(c, s net.Conn) {
	var replied, script atomic.Bool // the server answered since the client's last turn; the turn is a script call
	replied.Store(true)
	chunks := make(chan delayedChunk, 1024)
	p.wg.Go(func() { // client -> chunks
		defer close(chunks)
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				b := bytes.Clone(buf[:n])
				if replied.Swap(false) {
					head := bytes.ToLower(b[:min(len(b), 64)])
					sc := bytes.Contains(head, []byte("\r\nevalsha\r\n")) || bytes.Contains(head, []byte("\r\neval\r\n"))
					script.Store(sc)
					if sc {
						p.noteScriptTurn()
					}
				}
				chunks <- delayedChunk{b, time.Now()}
			}
			if err != nil {
				return
			}
		}
	})
	p.wg.Go(func() { // chunks -> server, each delay after it came
		defer s.Close()
		for ch := range chunks {
			time.Sleep(time.Until(ch.at.Add(time.Duration(p.delay.Load()))))
			if _, err := s.Write(ch.b); err != nil {
				return
			}
		}
	})
	p.wg.Go(func() { // server -> client
		defer c.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := s.Read(buf)
			if n > 0 {
				if script.Load() {
					p.awaitHold()
				}
				replied.Store(true) // before the client can read it, and send its next turn
				if _, werr := c.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					s.Close()
				}
				return
			}
		}
	})
}

// At a high round trip (a managed Redis in another zone), the heartbeat
// renews its leases in pipelines sent at once, a round trip for all of
// them, not a round trip per call: 1,000 leases in calls of 16 keys are 63
// calls, which one after another took 63 round trips (at 80 ms, 5,000
// leases in calls of 256 took 1.6 s, past the renewal period of 1 s). The
// proxy counts the round trips that carry script calls, and holds their
// replies until the four pipelines have all been sent: sent one after
// another, the first would get no answer (and fail at its timeout).
func TestRedisHeartbeatPipelinesAtHighLatency(t *testing.T) {
	defer func(b, p, c int) { heartbeatBatch, heartbeatPipeline, heartbeatCalls = b, p, c }(heartbeatBatch, heartbeatPipeline, heartbeatCalls)
	heartbeatBatch, heartbeatPipeline, heartbeatCalls = 16, 256, 4
	const tenants, each = 10, 100
	target, prefix := redisTarget(t)
	p, viaProxy := startLatencyProxy(t, target)
	var ts []TenantConfig
	for i := range tenants {
		ts = append(ts, tenant(fmt.Sprint("t", i), Limits{MaxConcurrency: each}))
	}
	r := newTestRedis(t, viaProxy, prefix, ts, nil)
	var live []Ticket
	for i := range tenants * each {
		tk, d := admit(t, r, t0, Request{Tenant: fmt.Sprint("t", i%tenants)})
		if !d.Allowed {
			t.Fatal(d)
		}
		live = append(live, tk)
	}
	// A first heartbeat loads the script and opens the pool's connections
	// (a new one takes two more round trips: its dial and HELLO).
	if err := r.heartbeat(t0, nil); err != nil {
		t.Fatal(err)
	}

	p.delay.Store(int64(50 * time.Millisecond))
	pipelines := (tenants*each + heartbeatPipeline - 1) / heartbeatPipeline
	p.holdFor(pipelines)
	now := t0.Add(time.Second)
	start := time.Now()
	if err := r.heartbeat(now, nil); err != nil {
		t.Fatalf("heartbeat: %v (round trips: %d)", err, p.scriptTurns())
	}
	took := time.Since(start)
	if got := p.scriptTurns(); got != pipelines {
		t.Fatalf("%d round trips carried the heartbeat's calls, want %d (its pipelines)", got, pipelines)
	}
	t.Logf("%d leases renewed in %v at a round trip of %v", len(live), took, time.Duration(p.delay.Load()))
	p.delay.Store(0)

	c := rawClient(t, target)
	want := float64(now.Add(r.leaseTTL).UnixMicro())
	renewed := 0
	for i := range tenants {
		zs, err := c.ZRangeWithScores(context.Background(), "{"+prefix+":t"+strconv.Itoa(i)+"}:c", 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, z := range zs {
			if z.Score != want {
				t.Fatalf("t%d: lease %v expires at %v, want renewed to %v", i, z.Member, z.Score, want)
			}
			renewed++
		}
	}
	if renewed != len(live) {
		t.Fatalf("%d leases in Redis, want %d", renewed, len(live))
	}
	for _, tk := range live {
		reconcile(t, r, now, tk, 0)
	}
}

// On a Redis Cluster the heartbeat's calls each carry the keys of one slot
// (a tenant's), and go in a pipeline per master: 30 tenants' leases on
// three masters in three round trips, every lease renewed.
func TestRedisClusterHeartbeatPipelinesByMaster(t *testing.T) {
	testenv.Long(t, "a Redis Cluster")
	_, url := cluster.Get(t)
	const tenants = 30
	var ts []TenantConfig
	for i := range tenants {
		ts = append(ts, tenant(fmt.Sprint("t", i), Limits{MaxConcurrency: 10}))
	}
	r := newTestRedis(t, url, "gptest", ts, func(c *BackendConfig, _ *redisOptions) { c.Redis.Cluster = true })
	var live []Ticket
	for i := range 2 * tenants {
		tk, d := admit(t, r, t0, Request{Tenant: fmt.Sprint("t", i%tenants)})
		if !d.Allowed {
			t.Fatal(d)
		}
		live = append(live, tk)
	}
	if err := r.heartbeat(t0, nil); err != nil { // the script loaded on every master
		t.Fatal(err)
	}
	calls := &scriptCalls{}
	r.client.Load().c.AddHook(calls)
	now := t0.Add(time.Second)
	if err := r.heartbeat(now, nil); err != nil {
		t.Fatal(err)
	}
	if got, trips := calls.take(), calls.takeTrips(); len(got) != tenants || trips != 3 {
		t.Fatalf("calls %v in %d pipelines, want %d calls (one per tenant's slot) in 3 (one per master)", got, trips, tenants)
	}
	cc := r.client.Load().c
	want := float64(now.Add(r.leaseTTL).UnixMicro())
	for _, tk := range live {
		k := tk.rt.keys[tk.rt.ntok]
		if score, err := cc.ZScore(context.Background(), k, tk.rt.lease).Result(); err != nil || score != want {
			t.Fatalf("lease %s in %s: expires at %v (%v), want renewed to %v", tk.rt.lease, k, score, err, want)
		}
	}
	for _, tk := range live {
		reconcile(t, r, now, tk, 0)
	}
}
