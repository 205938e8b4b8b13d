package ratelimit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// queuedRun starts n requests for req one after the other (each once the
// one before has joined its line or been admitted), each of which, once
// admitted, notes its place, holds for hold and reconciles. It returns the
// arrival indexes in admission order.
func queuedRun(t *testing.T, g *Gate, n int, hold time.Duration, req func(i int) Request) []int {
	t.Helper()
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := req(i)
			var d Decision
			tk, _, err := g.Admit(context.Background(), &r, &d)
			if err != nil || !d.Allowed {
				t.Errorf("request %d: err %v, %+v", i, err, d)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(hold)
			if err := g.Reconcile(context.Background(), tk, 0); err != nil {
				t.Error(err)
			}
		}()
		// Request i has arrived once i+1 requests are in line or admitted
		// (one between the two is in neither for a moment: wait it out).
		waitUntil(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(order)+int(g.q.waiting.Load()) >= i+1
		})
	}
	wg.Wait()
	return order
}

// waitUntil polls cond until it holds (10s at most).
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
	}
}

func inOrder(order []int, n int) bool {
	if len(order) != n {
		return false
	}
	for i, v := range order {
		if v != i {
			return false
		}
	}
	return true
}

// Requests held by a concurrency limit are admitted in arrival order, each
// woken by the release before it: with polling switched off, a request
// that was not woken would wait out its whole budget and fail.
func TestQueueConcurrencyFIFO(t *testing.T) {
	ts := []TenantConfig{tenant("acme", Limits{MaxConcurrency: 1})}
	m, err := newMetrics(prometheus.NewRegistry(), BackendLocal)
	if err != nil {
		t.Fatal(err)
	}
	g := newGate(newLocal(ts), m, 10*time.Second)
	g.SetTenants(time.Now(), ts)
	g.poll = time.Hour // only a release can wake a waiter
	const n = 8
	start := time.Now()
	// While the first holds its slot (8 × 20ms in all), the others queue.
	var maxQueued float64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
				maxQueued = max(maxQueued, testutil.ToFloat64(m.queued.WithLabelValues("acme")))
			}
		}
	}()
	order := queuedRun(t, g, n, 20*time.Millisecond, func(int) Request { return Request{Tenant: "acme"} })
	close(stop)
	<-sampled
	if got := testutil.ToFloat64(m.queued.WithLabelValues("acme")); got != 0 || maxQueued < 2 || maxQueued > n-1 {
		t.Fatalf("queued gauge %v at the end, at most %v during the run (want 0, and between 2 and %d)", got, maxQueued, n-1)
	}
	if !inOrder(order, n) {
		t.Fatalf("admission order %v, want arrival order", order)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("%d requests of 20ms one at a time took %v", n, took)
	}
}

// Requests held by a rate limit are admitted in arrival order, one per
// interval.
func TestQueueRateFIFO(t *testing.T) {
	ts := []TenantConfig{tenant("acme", Limits{RPM: 1200, Burst: 1})} // one per 50ms
	g := newGate(newLocal(ts), nil, 10*time.Second)
	const n = 8
	start := time.Now()
	order := queuedRun(t, g, n, 0, func(int) Request { return Request{Tenant: "acme"} })
	if !inOrder(order, n) {
		t.Fatalf("admission order %v, want arrival order", order)
	}
	if took := time.Since(start); took < (n-1)*50*time.Millisecond-10*time.Millisecond {
		t.Fatalf("%d requests at one per 50ms took only %v", n, took)
	}
}

// A waiter that gives up hands its place on; a line of one model does not
// hold a request for another model with capacity left.
func TestQueueLeaveAndLines(t *testing.T) {
	ten := tenant("acme", Limits{})
	ten.Models = map[string]Limits{"m1": {MaxConcurrency: 1}, "m2": {MaxConcurrency: 1}}
	ts := []TenantConfig{ten}
	g := newGate(newLocal(ts), nil, 10*time.Second)
	g.poll = time.Hour
	var d Decision
	m1 := Request{Tenant: "acme", Model: "m1"}
	holder, _, err := g.Admit(context.Background(), &m1, &d)
	if err != nil || !d.Allowed {
		t.Fatal(err, d)
	}
	type result struct {
		i   int
		err error
		tk  Ticket
	}
	results := make(chan result, 3)
	ctxs := make([]context.CancelFunc, 3)
	for i := range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		ctxs[i] = cancel
		go func() {
			r := m1
			var d Decision
			tk, _, err := g.Admit(ctx, &r, &d)
			if err == nil && !d.Allowed {
				t.Errorf("waiter %d rejected: %+v", i, d)
			}
			results <- result{i, err, tk}
		}()
		waitUntil(t, func() bool { return g.q.waiting.Load() == int64(i+1) }) // in line, in order
	}
	// m2 has its own line and capacity: admitted at once.
	m2 := Request{Tenant: "acme", Model: "m2"}
	other, q, err := g.Admit(context.Background(), &m2, &d)
	if err != nil || !d.Allowed || q != 0 {
		t.Fatalf("m2 behind m1's line: queued %v err %v %+v", q, err, d)
	}
	g.Reconcile(context.Background(), other, 0)
	// The second waiter leaves; the first gets the slot, then the third.
	ctxs[1]()
	if r := <-results; r.i != 1 || r.err == nil {
		t.Fatalf("canceled waiter: %+v", r)
	}
	g.Reconcile(context.Background(), holder, 0)
	r := <-results
	if r.i != 0 || r.err != nil {
		t.Fatalf("first after the release: %+v", r)
	}
	g.Reconcile(context.Background(), r.tk, 0)
	r = <-results
	if r.i != 2 || r.err != nil {
		t.Fatalf("next: %+v", r)
	}
	g.Reconcile(context.Background(), r.tk, 0)
	for _, c := range ctxs {
		c()
	}
	if n := g.q.waiting.Load(); n != 0 || len(g.q.lines) != 0 {
		t.Fatalf("%d waiting, %d lines left", n, len(g.q.lines))
	}
}

// Requests held by the same limits wait in one line whatever name they
// give their model: a configured model's other spellings (Ollama's, an
// alias) join its line, and so does a request that names no model (llama3,
// the tenant's only model, is its default); models the tenant does not
// list share the tenant's (and key's) line. A line of their own let them
// pass the requests that came first (two lines, each head asking on every
// release).
func TestQueueLinesByMatchedModel(t *testing.T) {
	forEachBackend(t, func(t *testing.T, mk func([]TenantConfig) Limiter) {
		ten := tenant("acme", Limits{MaxConcurrency: 2})
		ten.Models = map[string]Limits{"llama3": {MaxConcurrency: 1}}
		ten.ModelAliases = map[string][]string{"llama3": {"l3"}}
		g := newGate(mk([]TenantConfig{ten}), nil, 10*time.Second)
		g.poll = time.Hour
		var d Decision
		holder, _, err := g.Admit(context.Background(), &Request{Tenant: "acme", Model: "llama3"}, &d)
		if err != nil || !d.Allowed {
			t.Fatal(err, d)
		}
		other, _, err := g.Admit(context.Background(), &Request{Tenant: "acme", Model: "a"}, &d)
		if err != nil || !d.Allowed {
			t.Fatal(err, d)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		reqs := []Request{{Model: "llama3"}, {Model: "LLAMA3:latest"}, {Model: "l3"}, {NoModel: true}, {Model: "b"}, {Model: "c"}}
		done := make(chan error, len(reqs))
		for i, req := range reqs {
			req.Tenant = "acme"
			go func() {
				_, _, err := g.Admit(ctx, &req, new(Decision))
				done <- err
			}()
			waitUntil(t, func() bool { return g.q.waiting.Load() == int64(i+1) })
		}
		g.q.mu.Lock()
		lines := map[string]int{}
		for k, l := range g.q.lines["acme"] {
			lines[k.model] = len(l.waiters)
		}
		g.q.mu.Unlock()
		if len(lines) != 2 || lines["llama3"] != 4 || lines[""] != 2 {
			t.Errorf("lines by model (waiters): %v, want llama3's 4 and the tenant's 2", lines)
		}
		cancel()
		for range reqs {
			<-done
		}
		g.Reconcile(context.Background(), holder, 0)
		g.Reconcile(context.Background(), other, 0)
	})
}
