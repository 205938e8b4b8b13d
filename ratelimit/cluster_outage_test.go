package ratelimit

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/redistest"
	"github.com/goodput/goodput/internal/testenv"
)

// tenantsOnNodes returns one tenant name per node of a cluster whose n
// nodes hold equal ranges of the slots in order (redistest.StartCluster):
// names[i] has its keys (prefix gptest) on node i.
func tenantsOnNodes(t *testing.T, node *redistest.Server, n int) []string {
	t.Helper()
	c := node.Client()
	defer c.Close()
	names := make([]string, n)
	found := 0
	for i := 0; found < n && i < 1000; i++ {
		name := "t" + strconv.Itoa(i)
		slot, err := c.ClusterKeySlot(context.Background(), "{gptest:"+name+"}:r").Result()
		if err != nil {
			t.Fatal(err)
		}
		if k := int(slot) * n / 16384; names[k] == "" {
			names[k] = name
			found++
		}
	}
	if found < n {
		t.Fatalf("no tenant name for every node: %q", names)
	}
	return names
}

// clusterDecider returns a probed Redis Cluster backend (with the calls'
// timeout, and the heartbeat every 50 ms) for one tenant per name, and
// decide, which asks for one request of a tenant and releases it: nil when
// Redis decided (it admits every one), else the backend's error
// (on_backend_error decided). Every tenant is decided once before it
// returns.
func clusterDecider(t *testing.T, url string, names []string, timeout time.Duration) (*probedRedis, func(name string) error) {
	t.Helper()
	var ts []TenantConfig
	for _, n := range names {
		ts = append(ts, tenant(n, Limits{RPM: 1000000, MaxConcurrency: 100}))
	}
	pr := newProbedRedis(t, url, ts, timeout, func(c *BackendConfig, o *redisOptions) {
		c.Redis.Cluster = true
		o.LeaseRefresh = 50 * time.Millisecond
	})
	ctx := context.Background()
	decide := func(name string) error {
		var d Decision
		tk, err := pr.Admit(ctx, t0, &Request{Tenant: name}, &d)
		if err == nil && !d.Allowed {
			t.Fatalf("%s refused: %+v", name, d)
		}
		if err == nil {
			if err := pr.Reconcile(ctx, t0, tk, 0); err != nil {
				t.Errorf("%s: release: %v", name, err)
			}
		}
		return err
	}
	for _, n := range names {
		if err := decide(n); err != nil {
			t.Fatalf("%s before the outage: %v", n, err)
		}
	}
	return pr, decide
}

// outageLines counts the lines of pr's log that start an outage and those
// that end one with end in them, and reports (t.Errorf) any of them that
// does not name addr alone.
func outageLines(t *testing.T, pr *probedRedis, addr, end string) (starts, ends int, lines []string) {
	t.Helper()
	lines = pr.lines()
	for _, l := range lines {
		switch {
		case strings.Contains(l, " failing ("):
			starts++
		case strings.Contains(l, end):
			ends++
		default:
			continue
		}
		if !strings.Contains(l, "redis ["+addr+"] ") {
			t.Errorf("the outage names other nodes: %s", l)
		}
	}
	return starts, ends, lines
}

// A Redis Cluster master that hangs is an outage of the tenants whose slots
// it serves, not of every tenant: their calls time out until its breaker
// opens, then follow on_backend_error at once, while the tenants on the
// other masters are still decided by Redis; the log names that master
// once, and its outage ends when it answers again.
func TestRedisClusterOneMasterHung(t *testing.T) {
	testenv.Long(t, "a Redis Cluster")
	nodes, url := cluster.Get(t)
	names := tenantsOnNodes(t, nodes[0], len(nodes))
	pr, decide := clusterDecider(t, url, names, 100*time.Millisecond)

	// The cluster marks a master that does not answer its bus for 2 s
	// (cluster-node-timeout) as failed, and then refuses every slot (full
	// coverage): the hang must end before.
	const down = 1
	nodes[down].Stop()
	stopped := time.Now()
	t.Cleanup(nodes[down].Continue)
	var err error
	for i := 0; !errors.Is(err, errBreakerOpen); i++ {
		if i == 20 {
			t.Fatalf("the breaker did not open after 20 calls to a hung master: %v", err)
		}
		err = decide(names[down])
	}
	for i, n := range names {
		if i == down {
			continue
		}
		if err := decide(n); err != nil {
			t.Errorf("%s, on a master that answers, while another hangs: %v", n, err)
		}
	}
	if pr.Healthy() {
		t.Error("healthy while a master hangs")
	}
	hung := time.Since(stopped)
	nodes[down].Continue()
	pr.waitProbed(t, "the master came back")
	if err := decide(names[down]); err != nil {
		t.Errorf("%s after its master came back: %v", names[down], err)
	}
	if !pr.Healthy() {
		t.Error("not healthy after the master came back")
	}
	failing, back, lines := outageLines(t, pr, nodes[down].Addr(), "answers again")
	if failing != 1 || back != 1 {
		t.Errorf("want one outage of one master, logged %d starts and %d ends:\n%s", failing, back, strings.Join(lines, "\n"))
	}
	t.Logf("master hung %v; log:\n%s", hung.Round(time.Millisecond), strings.Join(lines, "\n"))
}

// A Redis Cluster master that dies and is replaced by its replica (a
// failover) is an outage of its own tenants only, from its death until the
// gateway's map of the slots names the new master; the tenants on the
// other masters are decided by Redis throughout (the cluster does not
// require full coverage, so they keep answering while the dead master's
// slots have no master), and the log has one start and one end, for that
// master. So for a master that hangs and fails over (its probe's write
// went to the new master through the cluster client, and the end was
// logged as the hung master answering), and for a master whose outage
// Redis answered (out of memory) when a replica takes over its slots (no
// call would be counted against it again: the outage never ended).
func TestRedisClusterFailover(t *testing.T) {
	testenv.Long(t, "a Redis Cluster with replicas")
	masters, replicas, url := redistest.StartReplicatedCluster(t, 3, "1000", "--cluster-require-full-coverage", "no")
	names := tenantsOnNodes(t, masters[0], len(masters))
	pr, decide := clusterDecider(t, url, names, 500*time.Millisecond)
	ctx := context.Background()
	// failover decides every tenant every 10 ms until names[down] is
	// decided by Redis again, and checks that the others were throughout.
	failover := func(down int) (took time.Duration, failed int) {
		t.Helper()
		start := time.Now()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for range tick.C {
			for i, n := range names {
				if i != down {
					if err := decide(n); err != nil {
						t.Fatalf("%s, on a master that answers, during another's failover: %v", n, err)
					}
				}
			}
			if decide(names[down]) == nil {
				break
			}
			failed++
			if time.Since(start) > 30*time.Second {
				t.Fatalf("%s not decided by Redis 30s after its master failed", names[down])
			}
		}
		if failed == 0 {
			t.Fatalf("%s decided at once after its master failed", names[down])
		}
		// The old master's probe sees the new map at a later round.
		pr.waitProbed(t, "a failover")
		return time.Since(start), failed
	}
	// ended checks the log's lines of the outage of masters[i]: one start,
	// one end by a failover that names replicas[i].
	ended := func(i int) {
		t.Helper()
		var failing, moved int
		for _, l := range pr.lines() {
			switch {
			case strings.Contains(l, "redis ["+masters[i].Addr()+"] failing ("):
				failing++
			case strings.Contains(l, "redis ["+masters[i].Addr()+"] no longer serves"):
				moved++
				if !strings.Contains(l, replicas[i].Addr()+" does") {
					t.Errorf("the end does not name the new master %s: %s", replicas[i].Addr(), l)
				}
			case strings.Contains(l, "redis ["+masters[i].Addr()+"]"):
				t.Errorf("master %d: %s", i, l)
			}
		}
		if failing != 1 || moved != 1 {
			t.Errorf("master %d: want one outage ended by the failover: %d starts, %d ends:\n%s", i, failing, moved, strings.Join(pr.lines(), "\n"))
		}
		if !pr.Healthy() {
			t.Errorf("not healthy after master %d's failover", i)
		}
	}

	masters[2].Kill()
	took, failed := failover(2)
	t.Logf("killed: %s decided by its new master %v after the old one died (%d decisions by the policy meanwhile)", names[2], took.Round(time.Millisecond), failed)
	ended(2)

	masters[1].Stop()
	t.Cleanup(masters[1].Continue)
	took, failed = failover(1)
	t.Logf("hung: %s decided by its new master %v after the old one hung (%d decisions by the policy meanwhile)", names[1], took.Round(time.Millisecond), failed)
	ended(1)
	masters[1].Continue()

	// A request of names[0] holds a lease; its master runs out of memory;
	// its replica takes over; the request's release, redirected there,
	// reloads the map.
	var d Decision
	held, err := pr.Admit(ctx, t0, &Request{Tenant: names[0]}, &d)
	if err != nil || !d.Allowed {
		t.Fatalf("%s: %v %+v", names[0], err, d)
	}
	c := masters[0].Client()
	defer c.Close()
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := decide(names[0]); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("%s on a master out of memory: %v, want OOM", names[0], err)
	}
	rc := replicas[0].Client()
	defer rc.Close()
	if err := rc.Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if info, err := rc.Info(ctx, "replication").Result(); err == nil && strings.Contains(info, "role:master") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica did not take over within 20 s")
		}
	}
	if err := pr.Reconcile(ctx, t0, held, 0); err != nil {
		t.Fatalf("release after the takeover: %v", err)
	}
	pr.waitProbed(t, "the takeover")
	ended(0)
	if err := decide(names[0]); err != nil {
		t.Errorf("%s after the takeover: %v", names[0], err)
	}
	t.Logf("log:\n%s", strings.Join(pr.lines(), "\n"))
}

// BenchmarkHeartbeatCluster is one heartbeat of a replica with a live
// request of each of 1,000 tenants on a three-node Redis Cluster (a call
// per tenant, in pipelines by master), its pipelines one at a time and
// heartbeatCalls at once.
// GOODPUT_LONG_TESTS=1 go test -run '^$' -bench HeartbeatCluster ./ratelimit
func BenchmarkHeartbeatCluster(b *testing.B) {
	testenv.Long(b, "a Redis Cluster")
	_, url := cluster.Get(b)
	const tenants = 1000
	var ts []TenantConfig
	for i := range tenants {
		ts = append(ts, tenant("t"+strconv.Itoa(i), Limits{MaxConcurrency: 10}))
	}
	r := newTestRedis(b, url, "gptest", ts, func(c *BackendConfig, _ *redisOptions) { c.Redis.Cluster = true })
	for i := range tenants {
		var d Decision
		if _, err := r.Admit(context.Background(), t0, &Request{Tenant: "t" + strconv.Itoa(i)}, &d); err != nil || !d.Allowed {
			b.Fatal(err, d)
		}
	}
	for _, calls := range []int{1, heartbeatCalls} {
		b.Run("calls="+strconv.Itoa(calls), func(b *testing.B) {
			defer func(n int) { heartbeatCalls = n }(heartbeatCalls)
			heartbeatCalls = calls
			b.ReportAllocs()
			for b.Loop() {
				if err := r.heartbeat(t0, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
