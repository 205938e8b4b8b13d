package ratelimit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeClock advances only when slept on; onSleep runs before each sleep.
type fakeClock struct {
	now     time.Time
	slept   []time.Duration
	onSleep func(d time.Duration)
}

func (c *fakeClock) clock() clock {
	return clock{
		now: func() time.Time { return c.now },
		sleep: func(ctx context.Context, d time.Duration, _ <-chan struct{}) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if c.onSleep != nil {
				c.onSleep(d)
			}
			c.slept = append(c.slept, d)
			c.now = c.now.Add(d)
			return nil
		},
	}
}

func newTestGate(t *testing.T, lim Limiter, maxWait time.Duration, ts []TenantConfig) (*Gate, *fakeClock, *Metrics) {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry(), lim.Name())
	if err != nil {
		t.Fatal(err)
	}
	g := newGate(lim, m, maxWait)
	g.SetTenants(t0, ts)
	fc := &fakeClock{now: t0}
	g.clk = fc.clock()
	return g, fc, m
}

func TestGateQueuesOnRate(t *testing.T) {
	ts := []TenantConfig{tenant("acme", Limits{RPM: 60, Burst: 1})}
	g, fc, m := newTestGate(t, newLocal(ts), 1500*time.Millisecond, ts)
	ctx := context.Background()
	req := Request{Tenant: "acme"}
	var d Decision
	if _, q, err := g.Admit(ctx, &req, &d); err != nil || !d.Allowed || q != 0 {
		t.Fatalf("first: %v %v %+v", q, err, d)
	}
	tk, q, err := g.Admit(ctx, &req, &d)
	if err != nil || !d.Allowed || !tk.admitted() || q != time.Second || len(fc.slept) != 1 || fc.slept[0] != time.Second {
		t.Fatalf("second: queued %v, slept %v, err %v, %+v; want admitted after exactly 1s", q, fc.slept, err, d)
	}
	// The next slot is 1s away; with 400ms of budget the request is rejected at once.
	fc.now = fc.now.Add(100 * time.Millisecond)
	g.maxWait = 400 * time.Millisecond
	if _, q, err := g.Admit(ctx, &req, &d); err != nil || d.Allowed || q != 0 || len(fc.slept) != 1 || !near(d.RetryAfter, 900*time.Millisecond, tol) {
		t.Fatalf("third: %v %v %+v slept %v", q, err, d, fc.slept)
	}
	if got := testutil.ToFloat64(m.decisions.WithLabelValues("acme", "none", "allowed")); got != 2 {
		t.Errorf("allowed = %v", got)
	}
	if got := testutil.ToFloat64(m.decisions.WithLabelValues("acme", "requests", "denied")); got != 1 {
		t.Errorf("denied = %v, want 1 (a queued request is counted once)", got)
	}
	if got := testutil.ToFloat64(m.remaining.WithLabelValues("acme", "requests")); got != 0 {
		t.Errorf("remaining gauge = %v", got)
	}
	// acme has a request limit only: no gauge for the limits it does not
	// have (they read 0, exhausted on a dashboard), none for other.
	if n := testutil.CollectAndCount(m.remaining); n != 1 {
		t.Errorf("%d remaining gauges, want 1", n)
	}
}

// A request that waits for a rate is counted in the queued gauge while it
// sleeps, and no longer once it has its answer.
func TestGateQueuedGaugeWhileWaiting(t *testing.T) {
	ts := []TenantConfig{tenant("acme", Limits{RPM: 60, Burst: 1})}
	g, fc, m := newTestGate(t, newLocal(ts), 1500*time.Millisecond, ts)
	ctx := context.Background()
	req := Request{Tenant: "acme"}
	var d Decision
	if _, _, err := g.Admit(ctx, &req, &d); err != nil || !d.Allowed {
		t.Fatalf("first: %v %+v", err, d)
	}
	gauge := m.queued.WithLabelValues("acme")
	var during []float64
	fc.onSleep = func(time.Duration) { during = append(during, testutil.ToFloat64(gauge)) }
	if _, q, err := g.Admit(ctx, &req, &d); err != nil || !d.Allowed || q != time.Second {
		t.Fatalf("second: queued %v, err %v, %+v", q, err, d)
	}
	if len(during) != 1 || during[0] != 1 {
		t.Errorf("queued gauge while waiting: %v, want [1]", during)
	}
	if got := testutil.ToFloat64(gauge); got != 0 {
		t.Errorf("queued gauge after the answer: %v, want 0", got)
	}
}

func TestGateQueuesOnConcurrency(t *testing.T) {
	ts := []TenantConfig{tenant("acme", Limits{MaxConcurrency: 1})}
	lim := newLocal(ts)
	g, fc, _ := newTestGate(t, lim, 100*time.Millisecond, ts)
	ctx := context.Background()
	var d Decision
	first, _, _ := g.Admit(ctx, &Request{Tenant: "acme"}, &d)
	polls := 0
	fc.onSleep = func(time.Duration) {
		polls++
		if polls == 3 { // the first request ends during the third wait
			if err := g.Reconcile(ctx, first, 0); err != nil {
				t.Error(err)
			}
		}
	}
	tk, q, err := g.Admit(ctx, &Request{Tenant: "acme"}, &d)
	if err != nil || !d.Allowed || q != 3*concurrencyPoll {
		t.Fatalf("queued %v err %v %+v; want admitted after 3 polls", q, err, d)
	}
	// Nobody releases: the wait ends with the budget, the last poll shortened to fit it.
	fc.onSleep, fc.slept = nil, nil
	_, q, err = g.Admit(ctx, &Request{Tenant: "acme"}, &d)
	if err != nil || d.Allowed || d.Limit != limitConcurrency || q != 100*time.Millisecond || len(fc.slept) != 10 {
		t.Fatalf("queued %v (slept %v) err %v %+v", q, fc.slept, err, d)
	}
	g.Reconcile(ctx, tk, 0)
}

func TestGateQueueCanceled(t *testing.T) {
	ts := []TenantConfig{tenant("acme", Limits{RPM: 60, Burst: 1})}
	g, fc, _ := newTestGate(t, newLocal(ts), 5*time.Second, ts)
	ctx, cancel := context.WithCancel(context.Background())
	var d Decision
	g.Admit(ctx, &Request{Tenant: "acme"}, &d)
	fc.onSleep = func(time.Duration) { cancel() }
	realSleep := g.clk.sleep
	g.clk.sleep = func(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
		fc.onSleep(d)
		return realSleep(ctx, d, wake)
	}
	tk, _, err := g.Admit(ctx, &Request{Tenant: "acme"}, &d)
	if !errors.Is(err, context.Canceled) || d.Allowed || tk.admitted() {
		t.Fatalf("err %v, %+v", err, d)
	}
}

// A client that leaves while queued has waited until it left, not until
// the last poll before: queue_ms counts the part of the poll it was there.
func TestGateQueueCanceledCountsTheWholeWait(t *testing.T) {
	ts := []TenantConfig{tenant("acme", Limits{MaxConcurrency: 1})}
	g, fc, _ := newTestGate(t, newLocal(ts), 5*time.Second, ts)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var d Decision
	first, _, _ := g.Admit(context.Background(), &Request{Tenant: "acme"}, &d)
	defer g.Reconcile(context.Background(), first, 0)
	polls := 0
	g.clk.sleep = func(ctx context.Context, step time.Duration, _ <-chan struct{}) error {
		polls++
		if polls == 3 { // the client leaves 4 ms into the third poll
			fc.now = fc.now.Add(4 * time.Millisecond)
			cancel()
			return ctx.Err()
		}
		fc.now = fc.now.Add(step)
		return nil
	}
	_, q, err := g.Admit(ctx, &Request{Tenant: "acme"}, &d)
	if want := 2*concurrencyPoll + 4*time.Millisecond; !errors.Is(err, context.Canceled) || q != want {
		t.Fatalf("queued %v, err %v; want %v and the context's error", q, err, want)
	}
}

func TestGateNoQueueForTooLargeOrUnknown(t *testing.T) {
	ts := []TenantConfig{tenant("acme", Limits{TPM: 100})}
	g, fc, m := newTestGate(t, newLocal(ts), 5*time.Second, ts)
	var d Decision
	if _, q, err := g.Admit(context.Background(), &Request{Tenant: "acme", EstTokens: 101}, &d); err != nil || d.Allowed || !d.TooLarge || q != 0 || len(fc.slept) != 0 {
		t.Fatalf("%v %v %+v", q, err, d)
	}
	if _, _, err := g.Admit(context.Background(), &Request{Tenant: "zed"}, &d); !errors.Is(err, ErrUnknownTenant) || len(fc.slept) != 0 {
		t.Fatalf("%v", err)
	}
	if got := testutil.ToFloat64(m.decisions.WithLabelValues("acme", "tokens", "denied")); got != 1 {
		t.Errorf("tokens denied = %v", got)
	}
	if got := testutil.ToFloat64(m.backendErrors); got != 0 {
		t.Errorf("an unknown tenant counted as a backend error")
	}
}

func TestMetricsRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, "local")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newMetrics(reg, "local"); err == nil {
		t.Fatal("registering twice succeeded")
	}
	m.SetTenants(t0, []TenantConfig{{Name: "a"}, {Name: "b"}})
	a := m.tenant("a")
	m.SetTenants(t0, []TenantConfig{{Name: "a"}})
	if m.tenant("a") != a || m.tenant("b") != m.other || m.tenant("zzz") != m.other {
		t.Error("tenant children not kept or not mapped to other")
	}
	m.observeLatency(3 * time.Millisecond)
	m.observeRemaining(a, &Decision{Requests: Quota{Limit: 10, Remaining: 3}})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	got := strings.Join(names, " ")
	for _, want := range []string{"goodput_ratelimit_decisions_total", "goodput_ratelimit_backend_errors_total",
		"goodput_ratelimit_decision_seconds", "goodput_ratelimit_remaining"} {
		if !strings.Contains(got, want) {
			t.Errorf("%s not registered (have %s)", want, got)
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP goodput_ratelimit_backend_errors_total Admissions and reconciliations the rate limiting backend did not decide: failed calls, and those not made while its breaker is open.
# TYPE goodput_ratelimit_backend_errors_total counter
goodput_ratelimit_backend_errors_total{backend="local"} 0
`), "goodput_ratelimit_backend_errors_total"); err != nil {
		t.Error(err)
	}
}
