package ratelimit

import (
	"context"
	"errors"
	"math"
	"time"
)

// concurrencyPoll is how often the head of a queue held by a concurrency
// limit asks again for a slot when no release in this replica woke it (a
// slot freed by another replica, or a lease that expired).
const concurrencyPoll = 10 * time.Millisecond

// Gate is what the proxy calls: a Limiter plus its metrics and the optional
// queue (max_queue_wait). It is safe for concurrent use.
type Gate struct {
	lim     Limiter
	met     *Metrics
	maxWait time.Duration
	clk     clock
	q       *queues
	poll    time.Duration // concurrencyPoll; tests change it
}

// clock is the time source of the queue; tests replace it.
type clock struct {
	now func() time.Time
	// sleep waits d, or less when wake receives; it returns ctx's error if
	// ctx ends first.
	sleep func(ctx context.Context, d time.Duration, wake <-chan struct{}) error
}

var wallClock = clock{now: time.Now, sleep: sleepCtx}

func sleepCtx(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	case <-wake:
		return nil
	}
}

// newGate wraps lim. m may be nil (no metrics); maxWait 0 disables queueing.
func newGate(lim Limiter, m *Metrics, maxWait time.Duration) *Gate {
	return &Gate{lim: lim, met: m, maxWait: maxWait, clk: wallClock, q: newQueues(), poll: concurrencyPoll}
}

// Remote reports whether decisions are network calls (the Redis backend):
// the caller then keeps Reconcile off the client's path.
func (g *Gate) Remote() bool { return g.lim.Name() == backendRedis }

// Healthy reports whether decisions reach the limits backend: always for
// the local one; for Redis, false from the first failed call of an outage
// until the breaker has closed and the outage has ended.
func (g *Gate) Healthy() bool {
	h, ok := g.lim.(healthReporter)
	return !ok || h.Healthy()
}

// CheckBackend asks a remote limits backend once (Redis.checkAtStart), so
// that one out of reach at start is said and counted as down from then;
// nil for the local one.
func (g *Gate) CheckBackend(ctx context.Context) error {
	if r, ok := g.lim.(*Redis); ok {
		return r.checkAtStart(ctx)
	}
	return nil
}

// MaxWait returns the queueing budget (0: no queueing).
func (g *Gate) MaxWait() time.Duration { return g.maxWait }

// Admit decides on req now, waiting up to MaxWait for capacity when a rate or
// concurrency limit rejects it (see admitWait); waiting requests are served first
// come, first served among those with the same tenant, key and model. It
// returns the ticket to reconcile when d.Allowed, and the time spent waiting
// in the queue (0 when the first decision stood), which is part of the
// request's TTFT and goes in the request log as queue_ms. The error is a
// backend failure (d holds what the policy decided), ErrUnknownTenant, or
// ctx's error if the client went away while queued. The final decision is
// counted in the metrics.
func (g *Gate) Admit(ctx context.Context, req *Request, d *Decision) (Ticket, time.Duration, error) {
	t, waited, err := g.admitWait(ctx, req, d)
	t.tenant = req.Tenant
	return t, waited, err
}

// Reconcile passes the request's real token usage to the limiter and releases
// its concurrency slot; call it exactly once per admitted request when the
// response has ended, whatever the outcome (actualTokens 0 when nothing was
// generated nor read). It returns when ctx ends (not the client's context:
// the accounting must happen after the client has gone; a shutdown's),
// leaving the release to the backend (Redis.Reconcile). A failure is counted
// in the metrics and returned; one that ctx's end made is returned only.
func (g *Gate) Reconcile(ctx context.Context, t Ticket, actualTokens int64) error {
	err := g.lim.Reconcile(ctx, g.clk.now(), t, actualTokens)
	if err != nil && g.met != nil && !callerDone(ctx) {
		g.met.observeBackendError()
	}
	g.q.kick(t.tenant)
	return err
}

// Progress follows an admitted request as it runs: used is the tokens it
// has used so far (the prompt estimate plus its output so far). While used
// stays within what the request was charged, Progress only compares two
// numbers (no allocation, no call, no lock). Once used passes it, the
// request is charged ahead by another chunk (1/64 of its tightest tpm,
// between 16 and 256 tokens, as many as needed to cover used): under the
// tenant's on_overrun "charge", into debt if need be; under "cut", only while
// every token limit still has them. Progress returns false when the request
// must be cut: a chunk was refused. The local backend decides at once (a
// short lock); Redis charges from a goroutine of its own, so a refusal shows
// in a later call, and a chunk that fails to reach Redis is dropped (the real
// usage is still charged by Reconcile) and never cuts. Call it from one
// goroutine at a time, before Reconcile.
func (g *Gate) Progress(t *Ticket, used int64) bool {
	if used <= t.covered {
		return t.rt == nil || !t.rt.cut.Load()
	}
	return g.overrun(t, used)
}

func (g *Gate) overrun(t *Ticket, used int64) bool {
	if t.refused {
		return false
	}
	if t.chunk <= 0 { // not an admitted ticket with a token limit
		t.covered = math.MaxInt64
		return true
	}
	n := (used - t.covered + t.chunk - 1) / t.chunk * t.chunk
	switch lim := g.lim.(type) {
	case *Local:
		if !lim.extend(g.clk.now(), t, n, t.cut) {
			t.refused = true
			return false
		}
	case *Redis:
		lim.extend(g.clk.now(), t, n)
		if t.rt.cut.Load() {
			return false
		}
	default:
		t.covered = math.MaxInt64 // a limiter that cannot: charged at the end
		return true
	}
	t.covered += n
	return true
}

// SetTenants passes a new tenant list to the limiter and the metrics; the
// Gate is meant to be a Store subscriber.
func (g *Gate) SetTenants(now time.Time, tenants []TenantConfig) {
	g.lim.SetTenants(now, tenants)
	if g.met != nil {
		g.met.SetTenants(now, tenants)
	}
}

// Close closes the limiter.
func (g *Gate) Close() error { return g.lim.Close() }

// MatchModel returns the configured model of req's tenant that req would
// be matched to by its model, NoModel and Adapter ("" for none), as Admit
// matches it; known is false when the tenant is unknown (or the limiter
// matches no models).
func (g *Gate) MatchModel(req *Request) (model string, known bool) {
	m, ok := g.lim.(modelMatcher)
	if !ok {
		return "", false
	}
	model, _, known = m.matchModel(req)
	return model, known
}

// admitWait decides on req, waiting in g's queue up to g.maxWait: when a
// rate limit rejects it with a RetryAfter that fits in what is left of the
// wait, it sleeps that long and tries again; on a concurrency limit it tries
// again every g.poll until the wait is spent. A request too large for a
// limit, or a backend failure, is not retried. It returns the ticket, the
// time waited (0 if the first decision stood) and an error as Admit does, or
// ctx's error if ctx ends while waiting (the decision is then the last
// rejection).
func (g *Gate) admitWait(ctx context.Context, req *Request, d *Decision) (Ticket, time.Duration, error) {
	a := queuedAdmission{g: g, req: req, d: d, maxWait: g.maxWait}
	if g.met != nil {
		a.tm = g.met.tenant(req.Tenant)
	}
	a.start = g.clk.now()
	a.now = a.start
	defer a.leave()
	if err := a.takeTurn(ctx); err != nil {
		*d = Decision{Model: a.matched, ByAdapter: a.byAdapter}
		return Ticket{}, a.waited, err
	}
	for {
		t, err := a.decide(ctx)
		if err != nil || d.Allowed || d.TooLarge || a.maxWait <= 0 {
			if g.met != nil && !errors.Is(err, ErrUnknownTenant) {
				g.met.observeRemaining(a.tm, d)
				g.met.observeDecision(a.tm, d)
			}
			return t, a.waited, err
		}
		if g.met != nil {
			g.met.observeRemaining(a.tm, d)
		}
		step := a.step()
		if step <= 0 {
			a.observeDecision()
			return t, a.waited, nil
		}
		if err := a.sleep(ctx, step); err != nil {
			a.observeDecision()
			// The client left during this step: it waited until now.
			return Ticket{}, g.clk.now().Sub(a.start), err
		}
	}
}

// queuedAdmission is one request's way through admitWait.
type queuedAdmission struct {
	g       *Gate
	req     *Request
	d       *Decision
	tm      *tenantMetrics // nil without metrics
	start   time.Time
	now     time.Time     // the time of the next decision
	waited  time.Duration // from start to now
	maxWait time.Duration // 0 once the next decision must stand
	w       *waiter       // the place in g's queue; nil without queueing
	waiting bool          // counted in the queued gauge
	// matched is the configured model the request was matched to for its
	// line (Decision.Model), kept for a decision that the wait ends
	// before the limiter makes one.
	matched   string
	byAdapter bool // matched by the request's adapter (Decision.ByAdapter)
}

// wait counts the request in the queued gauge (once).
func (a *queuedAdmission) wait() {
	if !a.waiting && a.tm != nil {
		a.waiting = true
		a.tm.queued.Inc()
	}
}

// leave gives up the place in the queue and the count in the gauge.
func (a *queuedAdmission) leave() {
	if a.w != nil {
		a.g.q.leave(a.w)
	}
	if a.waiting {
		a.tm.queued.Dec()
	}
}

// takeTurn takes a place in line before the first decision, when the Gate
// queues: the line's order is the order of arrival, and only its head asks
// the limiter. A request that is not the head waits for its turn, up to
// maxWait; if the wait ends first, one last decision stands, so that the
// answer carries the limit's state. It returns ctx's error if ctx ends.
func (a *queuedAdmission) takeTurn(ctx context.Context) error {
	if a.maxWait <= 0 {
		return nil
	}
	model := a.req.Model
	if m, ok := a.g.lim.(modelMatcher); ok {
		if matched, byAdapter, known := m.matchModel(a.req); known {
			model, a.matched, a.byAdapter = matched, matched, byAdapter
		}
	}
	a.w = a.g.q.join(a.req, model)
	if a.w.head() {
		return nil
	}
	a.wait()
	turn, err := awaitTurn(ctx, a.w, a.maxWait)
	a.now = a.g.clk.now()
	a.waited = a.now.Sub(a.start)
	if err != nil {
		return err
	}
	if !turn {
		a.maxWait = 0
	}
	return nil
}

// decide asks the limiter once, at now, and observes the decision's latency
// and any backend error.
func (a *queuedAdmission) decide(ctx context.Context) (Ticket, error) {
	t, err := a.g.lim.Admit(ctx, a.now, a.req, a.d)
	if m := a.g.met; m != nil {
		end := a.g.clk.now()
		m.observeLatency(end.Sub(a.now))
		if err != nil && !callerDone(ctx) && !errors.Is(err, ErrUnknownTenant) {
			m.observeBackendError()
		}
		a.now = end
	}
	return t, err
}

// step is how long to wait before deciding again on a rejection: its
// RetryAfter, or on a concurrency limit the Gate's poll; 0 when that does not
// fit in what is left of the wait (the rejection then stands).
func (a *queuedAdmission) step() time.Duration {
	left := a.maxWait - a.waited
	step := a.d.RetryAfter
	if a.d.Limit == limitConcurrency {
		step = min(a.g.poll, left)
	}
	if step <= 0 || step > left {
		return 0
	}
	return step
}

// sleep waits step, or less if the request reaches the head of the queue,
// and moves now to the time it woke.
func (a *queuedAdmission) sleep(ctx context.Context, step time.Duration) error {
	var wake <-chan struct{}
	if a.w != nil {
		wake = a.w.wake
	}
	a.wait()
	if err := a.g.clk.sleep(ctx, step, wake); err != nil {
		return err
	}
	a.now = a.g.clk.now()
	a.waited = a.now.Sub(a.start)
	return nil
}

// observeDecision counts the final decision.
func (a *queuedAdmission) observeDecision() {
	if a.g.met != nil {
		a.g.met.observeDecision(a.tm, a.d)
	}
}
