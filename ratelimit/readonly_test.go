package ratelimit

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/goodput/goodput/internal/redistest"
)

// A Redis that takes no writes (READONLY: a replica, as an old master is
// after a failover) still runs the refusals, which write nothing, while
// it refuses the releases: a concurrency limit then counted the slots of
// requests that had ended, and refused their tenant (429) until the
// leases expired, whatever on_backend_error said. A probe: a tenant at
// its max_concurrency refused every request for lease_ttl (5 s), none of
// its requests running, while fail_open admitted the other tenants
// unlimited. Such a refusal follows on_backend_error now.
func TestRedisReadOnlyCountsNoReleasedSlot(t *testing.T) {
	for _, policy := range []string{FailOpen, FailClosed} {
		t.Run(policy, func(t *testing.T) {
			srv := redistest.Start(t) // made a replica: a private server
			ts := []TenantConfig{tenant("acme", Limits{RPM: 6000, MaxConcurrency: 1})}
			r := newTestRedis(t, "redis://"+srv.Addr(), "gptest", ts, func(c *BackendConfig, _ *redisOptions) {
				c.OnBackendError = policy
			})
			acme := Request{Tenant: "acme"}
			tk, d := admit(t, r, t0, acme)
			if !d.Allowed {
				t.Fatal(d)
			}
			var busy Decision
			if _, err := r.Admit(context.Background(), t0, &acme, &busy); err != nil || busy.Allowed || busy.Limit != limitConcurrency {
				t.Fatalf("a second request while the first runs: %+v, %v: want a concurrency refusal", busy, err)
			}
			// A replica of nothing: it keeps its data, answers reads and
			// refuses writes.
			if err := srv.Client().ReplicaOf(context.Background(), "127.0.0.1", closedPort(t)[len("127.0.0.1:"):]).Err(); err != nil {
				t.Fatal(err)
			}
			if err := r.Reconcile(context.Background(), t0, tk, 0); err == nil || !strings.Contains(err.Error(), "READONLY") {
				t.Fatalf("release on a replica: %v, want READONLY", err)
			}
			var d2 Decision
			_, err := r.Admit(context.Background(), t0, &acme, &d2)
			if !errors.Is(err, errReleaseFailed) || d2.Limit != limitBackend || d2.Allowed != (policy == FailOpen) {
				t.Fatalf("after the first request ended: %+v, %v: want the slot its release did not free left to %s", d2, err, policy)
			}
		})
	}
}
