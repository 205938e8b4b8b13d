package proxy

import (
	"bufio"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
	"github.com/goodput/goodput/sim"
)

// Requests that end while Redis has stopped answering wait for the release
// of their limits in the goroutine that settles them, and no other: a
// release spawns no goroutine of its own in normal operation (one per
// request would double the settles' goroutines). At shutdown their records
// still do not wait for the Redis timeout: settleAfterCut after Cut they
// are written, each with its outcome, while the releases go on without
// them.
func TestSettlesWaitingForRedisAreRecordedAfterCut(t *testing.T) {
	_, simURL := startSim(t, sim.Config{ITL: 5 * time.Millisecond})
	target, err := url.Parse(redisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	rl := testenv.StartRedisRelay(t, target.Host)
	target.Host = rl.Addr()
	const timeout = 10 * time.Second
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{MaxConcurrency: 100})
	backend := ratelimit.BackendConfig{Backend: "redis", Redis: ratelimit.RedisConfig{
		URL: target.String(), Timeout: cfgtypes.Duration(timeout),
		KeyPrefix: fmt.Sprintf("gp-settlesweep-%d", time.Now().UnixNano())}}
	store, gate := newKeysAndGate(t, backend, tc)
	t.Cleanup(rl.Close) // before the gate's Close: the calls in flight end
	g := startGateway(t, Config{Upstream: simURL, Keys: store, Limits: gate})

	const n = 4
	hdr := map[string]string{"Authorization": "Bearer " + key}
	var rds []*bufio.Reader
	for range n {
		resp := openStream(t, g.URL()+"/v1/chat/completions", `{"model":"sim-llama","stream":true,"max_tokens":20,"ignore_eos":true,"messages":[]}`, hdr)
		rd := bufio.NewReader(resp.Body)
		if _, _, err := readContent(rd, 1); err != nil { // admitted
			t.Fatal(err)
		}
		rds = append(rds, rd)
	}
	rl.Freeze() // Redis stops answering
	for _, rd := range rds {
		if _, _, err := readContent(rd, -1); err != nil {
			t.Fatal(err)
		}
	}
	// Each release is in flight, waiting for Redis.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := stacks()
		if strings.Count(st, "ratelimit.(*Redis).Reconcile(") >= n {
			if c := strings.Count(st, "created by github.com/goodput/goodput/ratelimit.(*Redis).Reconcile"); c != 0 {
				t.Fatalf("%d goroutines started by releases in normal operation, want none", c)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("releases not in flight after 10s:\n%s", st)
		}
		runtime.Gosched()
	}
	select {
	case rec := <-g.records:
		t.Fatalf("a record before its release ended: %+v", rec)
	default:
	}

	cut := time.Now()
	g.p.Cut()
	for i := range n {
		select {
		case rec := <-g.records:
			if rec.Outcome != meter.OutcomeOK || rec.Tenant != "acme" {
				t.Fatalf("record %d: outcome %v tenant %q, want ok for acme", i, rec.Outcome, rec.Tenant)
			}
		case <-time.After(settleAfterCut + 2*time.Second):
			t.Fatalf("%d of %d records %v after Cut (Redis timeout %v)", i, n, time.Since(cut), timeout)
		}
	}
	g.p.Wait()
}

func stacks() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}
