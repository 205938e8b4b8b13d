package ratelimit

import (
	"context"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A Redis whose ACL lets the gateway write its tenants' keys but not the
// recovery probe's ends an outage all the same: the probe's write is
// refused (NOPERM), it asks for PING instead and says once what to grant
// (found by a review: the breaker stayed open for good, every admission
// decided by on_backend_error while Redis could have decided them).
func TestRedisProbeRefusedByTheACL(t *testing.T) {
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ReadTimeout: 5 * time.Second})
	defer admin.Close()
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "gw", "on", ">pw", "~{gptest:acme}*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	ts := []TenantConfig{tenant("acme", Limits{RPM: 6000})}
	pr := newProbedRedis(t, "redis://gw:pw@"+srv.Addr(), ts, 0)
	r, probes := pr.Redis, pr.probes
	acme := Request{Tenant: "acme"}
	if _, d := admit(t, r, t0, acme); !d.Allowed || d.Limit != limitNone {
		t.Fatalf("first admission: %+v", d)
	}
	// A refused dial opens the breaker at once, and a probe starts.
	r.noteError(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	if !r.open.Load() {
		t.Fatal("the breaker did not open")
	}
	for i := 0; ; i++ {
		err := <-probes
		if err == nil {
			break
		}
		if i == 20 {
			t.Fatalf("20 probes failed, the last with %v: the breaker stays open", err)
		}
	}
	if _, d := admit(t, r, t0, acme); !d.Allowed || d.Limit != limitNone {
		t.Fatalf("admission after the probe: %+v, want Redis to decide it", d)
	}
	said := 0
	logged := pr.lines()
	for _, l := range logged {
		if strings.Contains(l, "refuses the gateway's write to its probe key {gptest:_probe}:r") {
			said++
		}
	}
	if said != 1 {
		t.Fatalf("log %q: want one line naming the probe's key", logged)
	}
}
