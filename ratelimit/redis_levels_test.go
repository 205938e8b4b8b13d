package ratelimit

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/goodput/goodput/internal/testenv"
)

// wantRedisLevels checks which levels of a tenant of r are made: its own,
// and the names of its key and model levels. It reads them without the
// tenant's lock: no decision may run meanwhile.
func wantRedisLevels(t *testing.T, r *Redis, name string, top bool, keys, models []string) {
	t.Helper()
	rt := r.state.Load().tenants[name]
	if rt == nil {
		t.Fatalf("no tenant %s", name)
	}
	var gotKeys, gotModels []string
	for k := range rt.keys {
		gotKeys = append(gotKeys, k)
	}
	for m := range rt.models {
		gotModels = append(gotModels, m)
	}
	slices.Sort(gotKeys)
	slices.Sort(gotModels)
	if gotTop := rt.top != nil; gotTop != top || !slices.Equal(gotKeys, keys) || !slices.Equal(gotModels, models) {
		t.Fatalf("%s: levels made: tenant %v, keys %q, models %q; want tenant %v, keys %q, models %q",
			name, gotTop, gotKeys, gotModels, top, keys, models)
	}
}

// The Redis backend makes a level (its key names and script arguments) at
// its first decision: a tenant that sends nothing has none, nor does a key
// or a model it never asks for, and a reload makes none. A reload that
// changes a limit takes effect at the next decision, on the state Redis
// keeps. (Every level was built up front, and again at every reload: 173 MB
// for 20,000 tenants with 25 per-model limits each, BenchmarkRedisScale.)
func TestRedisMakesLevelsAtFirstDecision(t *testing.T) {
	url, prefix := redisTarget(t)
	acme := tenant("acme", Limits{RPM: 60, TPM: 1000, MaxConcurrency: 2})
	acme.Keys = []KeyConfig{{ID: "k", SHA256: hashA, Limits: Limits{RPM: 30}}, {ID: "plain", SHA256: hashB}}
	acme.Models = map[string]Limits{"big": {TPM: 500}, "small": {RPM: 10}, "free": {}}
	ts := []TenantConfig{acme, tenant("idle", Limits{RPM: 60, MaxConcurrency: 1})}
	r := newTestRedis(t, url, prefix, ts, nil)
	wantRedisLevels(t, r, "acme", false, nil, nil)
	wantRedisLevels(t, r, "idle", false, nil, nil)

	tk, d := admit(t, r, t0, Request{Tenant: "acme", KeyID: "k", Model: "big", EstTokens: 100})
	if !d.Allowed || d.Requests.Remaining != 29 || d.Tokens.Remaining != 400 || d.Concurrency.Remaining != 1 {
		t.Fatalf("first decision: %+v", d)
	}
	wantRedisLevels(t, r, "acme", true, []string{"k"}, []string{"big"})
	wantRedisLevels(t, r, "idle", false, nil, nil)
	// A key and a model without limits of their own have no level.
	tk2, d := admit(t, r, t0, Request{Tenant: "acme", KeyID: "plain", Model: "free", EstTokens: 100})
	if !d.Allowed || d.Requests.Remaining != 58 || d.Tokens.Remaining != 800 || d.Concurrency.Remaining != 0 {
		t.Fatalf("second decision: %+v", d)
	}
	wantRedisLevels(t, r, "acme", true, []string{"k"}, []string{"big"})

	// The tenant's concurrency limit rises to 3 and big's tpm falls to 50:
	// the next decision counts the 2 requests still in flight against the
	// 3, and finds 100 tokens too large for big.
	changed := acme
	changed.Limits.MaxConcurrency = 3
	changed.Models = map[string]Limits{"big": {TPM: 50}, "small": {RPM: 10}, "free": {}}
	r.SetTenants(t0, []TenantConfig{changed, ts[1]})
	wantRedisLevels(t, r, "acme", false, nil, nil)
	if _, d := admit(t, r, t0, Request{Tenant: "acme", KeyID: "k", Model: "big", EstTokens: 100}); d.Allowed || !d.TooLarge || d.Scope != scopeModel || d.Tokens.Limit != 50 {
		t.Fatalf("big after the reload: %+v, want too large for its 50 tokens", d)
	}
	tk3, d := admit(t, r, t0, Request{Tenant: "acme", KeyID: "plain", EstTokens: 100})
	if !d.Allowed || d.Concurrency.Limit != 3 || d.Concurrency.Remaining != 0 || d.Tokens.Remaining != 700 {
		t.Fatalf("tenant after the reload: %+v, want allowed, the third of 3 in flight, 700 tokens left", d)
	}
	if _, d := admit(t, r, t0, Request{Tenant: "acme", KeyID: "plain"}); d.Allowed || d.Limit != limitConcurrency {
		t.Fatalf("tenant after the reload: %+v, want refused: 3 in flight", d)
	}
	wantRedisLevels(t, r, "acme", true, []string{"k"}, []string{"big"})
	wantRedisLevels(t, r, "idle", false, nil, nil)
	for _, tk := range []Ticket{tk, tk2, tk3} {
		reconcile(t, r, t0, tk, 100)
	}
}

// A decision on levels already made allocates nothing to find them: the
// script call it makes is the decision's only cost.
func TestRedisLevelsAllocateNothing(t *testing.T) {
	acme := tenant("acme", Limits{RPM: 60, TPM: 1000, MaxConcurrency: 2})
	acme.Keys = []KeyConfig{{ID: "k", SHA256: hashA, Limits: Limits{RPM: 30}}, {ID: "plain", SHA256: hashB}}
	acme.Models = map[string]Limits{"big": {TPM: 500, MaxConcurrency: 1}}
	r := newTestRedis(t, "redis://"+closedPort(t), "gptest", []TenantConfig{acme}, nil)
	rt := r.state.Load().tenants["acme"]
	for _, req := range []Request{{KeyID: "k", Model: "big"}, {KeyID: "plain", Model: "other"}, {KeyID: "plain", NoModel: true}, {KeyID: "plain", Model: "other", Adapter: "big"}, {KeyID: "plain", NoModel: true, Adapter: "other"}} {
		made, _, _ := r.levels(rt, &req)
		if n := testenv.AllocsPerRun(1000, func() {
			if lv, _, _ := r.levels(rt, &req); lv != made {
				t.Fatal("a level made again")
			}
		}); n != 0 {
			t.Fatalf("%+v: %v allocations per decision", req, n)
		}
	}
}

// Decisions that make levels while reloads replace the tenants never let a
// request past a limit, whichever tenants a decision finds. Run it with
// -race.
func TestRedisLevelsUnderConcurrentReloads(t *testing.T) {
	const models, maxConc = 4, 2
	url, prefix := redisTarget(t)
	acme := tenant("acme", Limits{})
	acme.Models = map[string]Limits{}
	for m := range models {
		acme.Models[fmt.Sprint("m", m)] = Limits{MaxConcurrency: maxConc, RPM: 1e6}
	}
	// The same limits, and the tenant's tpm on or off.
	ts := [2][]TenantConfig{{acme}, {acme}}
	ts[1][0].Limits.TPM = 1e9
	r := newTestRedis(t, url, prefix, ts[0], nil)
	var inFlight [models]atomic.Int64
	var workers sync.WaitGroup
	for w := range 4 {
		workers.Go(func() {
			for i := range 100 {
				m := (w + i) % models
				var d Decision
				req := Request{Tenant: "acme", Model: fmt.Sprint("m", m), EstTokens: 1}
				tk, err := r.Admit(context.Background(), t0, &req, &d)
				if err != nil {
					t.Error(err)
					return
				}
				if !d.Allowed {
					continue
				}
				if n := inFlight[m].Add(1); n > maxConc {
					t.Errorf("m%d: %d requests in flight, max_concurrency %d", m, n, maxConc)
				}
				runtime.Gosched()
				inFlight[m].Add(-1)
				if err := r.Reconcile(context.Background(), t0, tk, 1); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	var reloads sync.WaitGroup
	reloads.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			r.SetTenants(t0, ts[i%2])
			runtime.Gosched()
		}
	})
	workers.Wait()
	close(done)
	reloads.Wait()
}

// A client chooses the model's name (any string) and may change it at every
// request: a model the tenant does not list gets no level (nor keys in
// Redis), and so costs no memory until the next reload; its requests count
// at the tenant's level (and their key's), as every request does. Only the
// tenant's listed models ever have a level.
func TestRedisRotatingModelsMakeNoLevels(t *testing.T) {
	url, prefix := redisTarget(t)
	acme := tenant("acme", Limits{RPM: 1000, TPM: 1e6, MaxConcurrency: 1000})
	acme.Keys = []KeyConfig{{ID: "k", SHA256: hashA, Limits: Limits{RPM: 1000}}}
	acme.Models = map[string]Limits{"big": {TPM: 500}}
	r := newTestRedis(t, url, prefix, []TenantConfig{acme}, nil)
	const names = 500
	var live []Ticket
	for i := range names {
		tk, d := admit(t, r, t0, Request{Tenant: "acme", KeyID: "k", Model: fmt.Sprint("model-", i), EstTokens: 1})
		if !d.Allowed || d.Requests.Remaining != int64(1000-i-1) {
			t.Fatalf("request %d: %+v, want allowed, counted at the tenant's and the key's rpm", i, d)
		}
		live = append(live, tk)
	}
	wantRedisLevels(t, r, "acme", true, []string{"k"}, nil)
	if keys, err := rawClient(t, url).Keys(context.Background(), "{"+prefix+":acme}:m:*").Result(); err != nil || len(keys) != 0 {
		t.Fatalf("model keys in Redis: %q (%v), want none", keys, err)
	}
	if _, d := admit(t, r, t0, Request{Tenant: "acme", KeyID: "k", Model: "big", EstTokens: 1}); !d.Allowed {
		t.Fatal(d)
	}
	wantRedisLevels(t, r, "acme", true, []string{"k"}, []string{"big"})
	for _, tk := range live {
		reconcile(t, r, t0, tk, 1)
	}
}
