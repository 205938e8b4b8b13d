package ratelimit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/goodput/goodput/internal/redistest"
	"github.com/goodput/goodput/internal/testenv"
)

// A Redis out of reach at start is said at start, and counted as down from
// then (Healthy false: goodput_ratelimit_backend_up 0), before any request
// (a new user's probe: nothing was said, and the backend counted as up,
// until a request's decision failed). When it comes back, the probe ends
// the outage without a request, and the log says it answers again.
func TestRedisOutOfReachAtStart(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	pr := newProbedRedis(t, "redis://"+srv.Addr(), []TenantConfig{tenant("acme", Limits{RPM: 10})}, 250*time.Millisecond)
	g := newGate(pr.Redis, nil, 0)
	if !g.Healthy() {
		t.Fatal("unhealthy before anything was asked")
	}
	if err := g.CheckBackend(context.Background()); err == nil {
		t.Fatal("no error from a Redis that is not there")
	}
	if g.Healthy() {
		t.Error("healthy after a start check that failed")
	}
	if l := strings.Join(pr.lines(), "\n"); !strings.Contains(l, "failing") || !strings.Contains(l, "admitting requests unlimited until it answers") {
		t.Errorf("the start check's failure was not logged with its policy:\n%s", l)
	}
	srv.Restart()
	pr.waitProbed(t, "Redis came back")
	if !g.Healthy() {
		t.Error("unhealthy after the probe ended the outage")
	}
	if l := strings.Join(pr.lines(), "\n"); !strings.Contains(l, "answers again") {
		t.Errorf("the recovery was not logged:\n%s", l)
	}
	// A Redis that answers: nothing said, healthy.
	before := len(pr.lines())
	if err := g.CheckBackend(context.Background()); err != nil || !g.Healthy() || len(pr.lines()) != before {
		t.Errorf("a Redis that answers: %v, healthy %v, logged %q", err, g.Healthy(), pr.lines()[before:])
	}
	// A Redis that hangs at start (SIGSTOP: the PING times out), then
	// answers: the probe ends the outage without a request (a review found
	// a timeout left the backend down while the gateway idled).
	srv.Stop()
	if err := g.CheckBackend(context.Background()); err == nil || g.Healthy() {
		t.Fatalf("a hung Redis: %v, healthy %v", err, g.Healthy())
	}
	srv.Continue()
	pr.waitProbed(t, "Redis resumed")
	if !g.Healthy() {
		t.Error("unhealthy after the probe ended the hung Redis's outage")
	}
	// An error Redis answers (a password it wants) is logged, and left to
	// the requests' own failures.
	pw := miniredis.RunT(t)
	pw.RequireAuth("sesame")
	pp := newProbedRedis(t, "redis://"+pw.Addr(), []TenantConfig{tenant("acme", Limits{RPM: 10})}, 250*time.Millisecond)
	pg := newGate(pp.Redis, nil, 0)
	if err := pg.CheckBackend(context.Background()); err == nil || !strings.Contains(strings.Join(pp.lines(), "\n"), "failed the start check, answering with an error (NOAUTH") || strings.Contains(strings.Join(pp.lines(), "\n"), "sesame") {
		t.Errorf("a Redis that wants a password: %v, logged %q", err, pp.lines())
	}
	// The local backend has nothing to ask.
	if err := newGate(newLocal(nil), nil, 0).CheckBackend(context.Background()); err != nil {
		t.Error(err)
	}
}

// A Redis Cluster master out of reach at start is an outage of its own
// from the start check on, logged under its address, its probe ending it
// when it answers, while the other masters decide their tenants (an
// operator's probe found it unsaid, the backend up, until a request of a
// tenant on that master came).
func TestRedisClusterMasterOutAtStart(t *testing.T) {
	testenv.Long(t, "a Redis Cluster")
	nodes, url := cluster.Get(t)
	names := tenantsOnNodes(t, nodes[0], len(nodes))
	var ts []TenantConfig
	for _, n := range names {
		ts = append(ts, tenant(n, Limits{RPM: 1000000}))
	}
	pr := newProbedRedis(t, url, ts, 250*time.Millisecond, func(c *BackendConfig, o *redisOptions) { c.Redis.Cluster = true })
	g := newGate(pr.Redis, nil, 0)
	const down = 1
	nodes[down].Stop() // hung: the cluster fails it over only after its 2 s node timeout
	t.Cleanup(nodes[down].Continue)
	if err := g.CheckBackend(context.Background()); err == nil {
		t.Fatal("no error from a cluster with a master out of reach")
	}
	if g.Healthy() {
		t.Error("healthy after a start check that failed on a master")
	}
	var d Decision
	if _, err := pr.Admit(context.Background(), t0, &Request{Tenant: names[down]}, &d); !errors.Is(err, errBreakerOpen) {
		t.Errorf("%s, on the hung master: %v, want the breaker open from the start check", names[down], err)
	}
	nodes[down].Continue()
	pr.waitProbed(t, "the master answers")
	if !g.Healthy() {
		t.Error("unhealthy after the probe ended the master's outage")
	}
	failing, back, lines := outageLines(t, pr, nodes[down].Addr(), "answers again")
	if failing != 1 || back != 1 {
		t.Errorf("want one outage of one master, logged %d starts and %d ends:\n%s", failing, back, strings.Join(lines, "\n"))
	}
}
