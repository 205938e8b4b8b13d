package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// redisURLEnv names the variable that points the tests at a real Redis (CI
// sets it to a redis://127.0.0.1:6379/N URL). Unset, the tests use an
// in-process miniredis.
const redisURLEnv = "GOODPUT_REDIS_URL"

// t0 is the start of injected time.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func realRedis() bool { return os.Getenv(redisURLEnv) != "" }

// redisTarget returns the Redis to test against and a key prefix of the
// test's own; with a real Redis the test's keys are deleted at cleanup.
func redisTarget(t testing.TB) (url, prefix string) {
	t.Helper()
	if u := os.Getenv(redisURLEnv); u != "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		name := strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
				return r
			}
			return '-'
		}, t.Name())
		if len(name) > 40 {
			name = name[len(name)-40:]
		}
		prefix = "gptest-" + strings.Trim(name, "-") + "-" + hex.EncodeToString(b[:])
		t.Cleanup(func() { deleteKeys(t, u, prefix) })
		return u, prefix
	}
	m := miniredis.RunT(t)
	return "redis://" + m.Addr(), "gptest"
}

func deleteKeys(t testing.TB, url, prefix string) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "{"+prefix+":*").Result()
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	if len(keys) > 0 {
		if err := c.Del(ctx, keys...).Err(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
}

func redisConfig(url, prefix string) BackendConfig {
	return BackendConfig{
		Backend: backendRedis,
		Redis:   RedisConfig{URL: url, KeyPrefix: prefix, Timeout: cfgtypes.Duration(time.Second)},
	}.withDefaults()
}

// newTestRedis returns a Redis limiter on injected time (ClientTime), with
// lease renewal off; it is closed at cleanup.
func newTestRedis(t testing.TB, url, prefix string, tenants []TenantConfig, edit func(*BackendConfig, *redisOptions)) *Redis {
	t.Helper()
	cfg := redisConfig(url, prefix)
	opts := redisOptions{ClientTime: true, LeaseRefresh: -1}
	if edit != nil {
		edit(&cfg, &opts)
	}
	r, err := newRedis(cfg, tenants, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// probedRedis is a Redis backend (newTestRedis, prefix gptest) whose log
// and recovery probes a test reads: probes receives each probe's outcome
// (redisOptions.Probed), lines returns what it logged so far. It probes
// every 10 ms; timeout, when not 0, is the calls' timeout; edit, when
// given, changes the configuration further.
type probedRedis struct {
	*Redis
	probes chan error
	mu     sync.Mutex
	logged []string
}

func newProbedRedis(t testing.TB, url string, ts []TenantConfig, timeout time.Duration, edit ...func(*BackendConfig, *redisOptions)) *probedRedis {
	t.Helper()
	p := &probedRedis{probes: make(chan error, 100)}
	p.Redis = newTestRedis(t, url, "gptest", ts, func(c *BackendConfig, o *redisOptions) {
		if timeout != 0 {
			c.Redis.Timeout = cfgtypes.Duration(timeout)
		}
		defer func() {
			for _, e := range edit {
				e(c, o)
			}
		}()
		o.RecoveryProbe = 10 * time.Millisecond
		o.Logf = func(format string, args ...any) {
			p.mu.Lock()
			p.logged = append(p.logged, fmt.Sprintf(format, args...))
			p.mu.Unlock()
		}
		o.Probed = func(err error) {
			select {
			case p.probes <- err:
			default:
			}
		}
	})
	return p
}

// waitProbed waits for a probe that ended an outage (a nil outcome), 20 s
// at most.
func (p *probedRedis) waitProbed(t testing.TB, what string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case err := <-p.probes:
			if err == nil {
				return
			}
		case <-deadline:
			t.Fatalf("no outage ended 20 s after %s", what)
		}
	}
}

func (p *probedRedis) lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.logged...)
}

type backend struct {
	name string
	new  func(t *testing.T, tenants []TenantConfig) Limiter
}

// backends are the limiters every behaviour test runs against: they must
// agree on every number.
var backends = []backend{
	{"local", func(_ *testing.T, ts []TenantConfig) Limiter { return newLocal(ts) }},
	{"redis", func(t *testing.T, ts []TenantConfig) Limiter {
		url, prefix := redisTarget(t)
		return newTestRedis(t, url, prefix, ts, nil)
	}},
	// A real three-node Redis Cluster (emptied for each test): tenants'
	// keys land on different nodes, and each decision's keys must share
	// one slot.
	{"redis-cluster", func(t *testing.T, ts []TenantConfig) Limiter {
		testenv.Long(t, "a Redis Cluster")
		_, url := cluster.Get(t)
		return newTestRedis(t, url, "gptest", ts, func(c *BackendConfig, _ *redisOptions) { c.Redis.Cluster = true })
	}},
}

func forEachBackend(t *testing.T, f func(t *testing.T, mk func([]TenantConfig) Limiter)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			f(t, func(ts []TenantConfig) Limiter { return b.new(t, ts) })
		})
	}
}

func admit(t *testing.T, l Limiter, now time.Time, req Request) (Ticket, Decision) {
	t.Helper()
	var d Decision
	tk, err := l.Admit(context.Background(), now, &req, &d)
	if err != nil {
		t.Fatalf("Admit: %v", err)
	}
	return tk, d
}

func reconcile(t *testing.T, l Limiter, now time.Time, tk Ticket, actual int64) {
	t.Helper()
	if err := l.Reconcile(context.Background(), now, tk, actual); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
}

// near reports whether got is within tol of want.
func near(got, want, tol time.Duration) bool { return got >= want-tol && got <= want+tol }

const tol = time.Millisecond

func tenant(name string, lim Limits) TenantConfig {
	return TenantConfig{Name: name, Limits: lim}
}

// limiter returns the wrapped limiter.
func (g *Gate) limiter() Limiter { return g.lim }

// admitted reports whether the ticket belongs to an admitted request.
func (t Ticket) admitted() bool { return t.lt != nil || t.rt != nil }
