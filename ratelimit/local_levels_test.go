package ratelimit

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/testenv"
)

// madeLevels returns which levels of a tenant of l are made: its own, and
// the names of its key and model levels.
func madeLevels(t *testing.T, l *Local, name string) (top bool, keys, models []string) {
	t.Helper()
	lt := l.state.Load().tenants[name]
	if lt == nil {
		t.Fatalf("no tenant %s", name)
	}
	lt.mu.Lock()
	defer lt.mu.Unlock()
	for k := range lt.keys {
		keys = append(keys, k)
	}
	for m := range lt.models {
		models = append(models, m)
	}
	slices.Sort(keys)
	slices.Sort(models)
	return lt.top != nil, keys, models
}

func wantLevels(t *testing.T, l *Local, name string, top bool, keys, models []string) {
	t.Helper()
	gotTop, gotKeys, gotModels := madeLevels(t, l, name)
	if gotTop != top || !slices.Equal(gotKeys, keys) || !slices.Equal(gotModels, models) {
		t.Fatalf("%s: levels made: tenant %v, keys %q, models %q; want tenant %v, keys %q, models %q",
			name, gotTop, gotKeys, gotModels, top, keys, models)
	}
}

// A level is made at its first decision: a tenant that sends nothing holds
// no level, nor does a key or a model it never asks for, and a reload makes
// none. (Every level was built up front, and again at every reload: 164 MB
// for 20,000 tenants with 25 per-model limits each, BenchmarkLocalScale.)
func TestLocalMakesLevelsAtFirstDecision(t *testing.T) {
	acme := tenant("acme", Limits{RPM: 60, TPM: 1000, MaxConcurrency: 2})
	acme.Keys = []KeyConfig{{ID: "k", SHA256: hashA, Limits: Limits{RPM: 30}}, {ID: "plain", SHA256: hashB}}
	acme.Models = map[string]Limits{"big": {TPM: 500}, "small": {RPM: 10}, "free": {}}
	ts := []TenantConfig{acme, tenant("idle", Limits{RPM: 60, MaxConcurrency: 1})}
	l := newLocal(ts)
	wantLevels(t, l, "acme", false, nil, nil)
	wantLevels(t, l, "idle", false, nil, nil)

	tk, d := admit(t, l, t0, Request{Tenant: "acme", KeyID: "k", Model: "big", EstTokens: 100})
	if !d.Allowed || d.Requests.Remaining != 29 || d.Tokens.Remaining != 400 || d.Concurrency.Remaining != 1 {
		t.Fatalf("first decision: %+v", d)
	}
	wantLevels(t, l, "acme", true, []string{"k"}, []string{"big"})
	wantLevels(t, l, "idle", false, nil, nil)
	// A key and a model without limits of their own have no level.
	tk2, d := admit(t, l, t0, Request{Tenant: "acme", KeyID: "plain", Model: "free", EstTokens: 100})
	if !d.Allowed || d.Requests.Remaining != 58 || d.Tokens.Remaining != 800 || d.Concurrency.Remaining != 0 {
		t.Fatalf("second decision: %+v", d)
	}
	wantLevels(t, l, "acme", true, []string{"k"}, []string{"big"})

	l.SetTenants(t0, ts)
	wantLevels(t, l, "acme", true, []string{"k"}, []string{"big"})
	wantLevels(t, l, "idle", false, nil, nil)
	reconcile(t, l, t0, tk, 100)
	reconcile(t, l, t0, tk2, 100)
}

// A reload keeps the state of every level that holds any, whether its
// limits changed or not: its requests in flight and its buckets as spent
// as they were. A level that holds none (nothing in flight, its buckets
// full again) is dropped, and the next decision makes it as it was.
func TestLocalReloadKeepsLevelsInUse(t *testing.T) {
	acme := tenant("acme", Limits{MaxConcurrency: 3})
	acme.Models = map[string]Limits{"big": {TPM: 1000}, "small": {RPM: 6}, "quick": {RPM: 60}}
	l := newLocal([]TenantConfig{acme})
	held, _ := admit(t, l, t0, Request{Tenant: "acme"})
	spent, _ := admit(t, l, t0, Request{Tenant: "acme", Model: "big", EstTokens: 600})
	reconcile(t, l, t0, spent, 600) // 400 of 1000 tokens left
	for _, m := range []string{"small", "quick"} {
		tk, d := admit(t, l, t0, Request{Tenant: "acme", Model: m})
		if !d.Allowed {
			t.Fatalf("%s: %+v", m, d)
		}
		reconcile(t, l, t0, tk, 0)
	}
	lt := l.state.Load().tenants["acme"]
	top, big, small := lt.top, lt.models["big"], lt.models["small"]

	// A second later: quick's bucket is full again (60 rpm), small's is not
	// (6 rpm). The tenant's concurrency limit and big's tpm change.
	now := t0.Add(time.Second)
	changed := tenant("acme", Limits{MaxConcurrency: 2})
	changed.Models = map[string]Limits{"big": {TPM: 2000}, "small": {RPM: 6}, "quick": {RPM: 60}}
	l.SetTenants(now, []TenantConfig{changed})
	wantLevels(t, l, "acme", true, nil, []string{"big", "small"})
	if lt.top != top || lt.models["big"] != big || lt.models["small"] != small {
		t.Fatal("a level in use was made again by the reload")
	}
	if _, d := admit(t, l, now, Request{Tenant: "acme"}); !d.Allowed || d.Concurrency.Remaining != 0 {
		t.Fatalf("tenant after the reload: %+v, want allowed with no slot left: 1 still in flight of 2", d)
	}
	if _, d := admit(t, l, now, Request{Tenant: "acme"}); d.Allowed || d.Limit != limitConcurrency {
		t.Fatalf("tenant after the reload: %+v, want refused: 2 in flight", d)
	}
	reconcile(t, l, now, held, 0)
	// big: 400 left at t0, 16.67 more a second later, then at 2000 a minute.
	tk, d := admit(t, l, now, Request{Tenant: "acme", Model: "big", EstTokens: 1})
	if !d.Allowed || d.Tokens.Limit != 2000 || d.Tokens.Remaining != 415 {
		t.Fatalf("big after the reload: %+v, want 415 of its 2000 tokens left", d.Tokens)
	}
	reconcile(t, l, now, tk, 1)
	tk, d = admit(t, l, now, Request{Tenant: "acme", Model: "small"})
	if !d.Allowed || d.Requests.Remaining != 4 {
		t.Fatalf("small after the reload: %+v, want 4 requests left (5.1 before this one)", d)
	}
	reconcile(t, l, now, tk, 0)
	// quick, dropped, is made again as it was: full.
	if _, d := admit(t, l, now, Request{Tenant: "acme", Model: "quick"}); !d.Allowed || d.Requests.Remaining != 59 {
		t.Fatalf("quick after the reload: %+v, want 59 requests left", d)
	}
}

// Without a reload, a decision that makes a level first drops the tenant's
// levels that hold no state, at most once a minute: a tenant's levels
// come and go with its traffic.
func TestLocalDecisionDropsIdleLevels(t *testing.T) {
	acme := tenant("acme", Limits{})
	acme.Models = map[string]Limits{"m0": {RPM: 60}, "m1": {MaxConcurrency: 1}, "m2": {RPM: 60}, "m3": {TPM: 600}, "m4": {RPM: 60}}
	l := newLocal([]TenantConfig{acme})
	tk, _ := admit(t, l, t0, Request{Tenant: "acme", Model: "m0"})
	reconcile(t, l, t0, tk, 0)
	held, _ := admit(t, l, t0, Request{Tenant: "acme", Model: "m1"})
	now := t0.Add(levelSweep - time.Second)
	tk, _ = admit(t, l, now, Request{Tenant: "acme", Model: "m2"})
	reconcile(t, l, now, tk, 0)
	spent, _ := admit(t, l, now, Request{Tenant: "acme", Model: "m3", EstTokens: 600})
	reconcile(t, l, now, spent, 600)
	wantLevels(t, l, "acme", true, nil, []string{"m0", "m1", "m2", "m3"})

	// A minute after the first sweep, m4's first decision: m0 and m2 are
	// full, m1 holds a request, m3's tokens are back but for a second's
	// worth. A dropped level is made again as it was.
	now = t0.Add(levelSweep)
	tk, _ = admit(t, l, now, Request{Tenant: "acme", Model: "m4"})
	reconcile(t, l, now, tk, 0)
	wantLevels(t, l, "acme", true, nil, []string{"m1", "m3", "m4"})
	if _, d := admit(t, l, now, Request{Tenant: "acme", Model: "m0"}); !d.Allowed || d.Requests.Remaining != 59 {
		t.Fatalf("m0: %+v", d.Requests)
	}
	if _, d := admit(t, l, now, Request{Tenant: "acme", Model: "m1"}); d.Allowed || d.Limit != limitConcurrency {
		t.Fatalf("m1: %+v, want refused: its request still runs", d)
	}
	if _, d := admit(t, l, now, Request{Tenant: "acme", Model: "m3", EstTokens: 600}); d.Allowed || d.Tokens.Remaining != 10 {
		t.Fatalf("m3: %+v, want refused with 10 tokens", d.Tokens)
	}
	reconcile(t, l, now, held, 0)
}

// Levels made, dropped and refreshed by decisions and reloads at once never
// let a request past a limit: a level in use is never dropped (one made
// again beside it would start afresh). Run it with -race.
func TestLocalLevelsUnderConcurrentReloads(t *testing.T) {
	const models, maxConc = 4, 2
	acme := tenant("acme", Limits{})
	acme.Models = map[string]Limits{}
	for m := range models {
		acme.Models[fmt.Sprint("m", m)] = Limits{MaxConcurrency: maxConc}
	}
	ts := []TenantConfig{acme}
	l := newLocal(ts)
	var clock atomic.Int64 // minutes after t0: each decision that makes a level sweeps
	now := func() time.Time { return t0.Add(time.Duration(clock.Load()) * time.Minute) }
	var inFlight [models]atomic.Int64
	var workers sync.WaitGroup
	for w := range 4 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for i := range 2000 {
				m := (w + i) % models
				var d Decision
				req := Request{Tenant: "acme", Model: fmt.Sprint("m", m)}
				tk, err := l.Admit(context.Background(), now(), &req, &d)
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
				_ = l.Reconcile(context.Background(), now(), tk, 0)
			}
		}()
	}
	done := make(chan struct{})
	reloaded := make(chan struct{})
	go func() {
		defer close(reloaded)
		for {
			select {
			case <-done:
				return
			default:
			}
			clock.Add(1)
			l.SetTenants(now(), ts)
			runtime.Gosched()
		}
	}()
	workers.Wait()
	close(done)
	<-reloaded
}

// A decision on levels already made allocates nothing.
func TestLocalAdmitAllocatesNothing(t *testing.T) {
	acme := tenant("acme", Limits{RPM: 1e9, TPM: 1e12, MaxConcurrency: 1e6})
	acme.Keys = []KeyConfig{{ID: "k", SHA256: hashA, Limits: Limits{RPM: 1e9}}, {ID: "plain", SHA256: hashB}}
	acme.Models = map[string]Limits{"big": {TPM: 1e12, MaxConcurrency: 1e6}}
	l := newLocal([]TenantConfig{acme})
	ctx := context.Background()
	now := t0
	var d Decision
	for _, req := range []Request{
		{Tenant: "acme", KeyID: "k", Model: "big", EstTokens: 500},
		{Tenant: "acme", KeyID: "plain", Model: "other", EstTokens: 500},
	} {
		step := func() {
			now = now.Add(time.Millisecond)
			tk, err := l.Admit(ctx, now, &req, &d)
			if err != nil || !d.Allowed {
				t.Fatal(err, d)
			}
			if err := l.Reconcile(ctx, now, tk, 400); err != nil {
				t.Fatal(err)
			}
		}
		step() // makes the levels
		if n := testenv.AllocsPerRun(1000, step); n != 0 {
			t.Fatalf("%+v: %v allocations per decision", req, n)
		}
	}
}

// A client chooses the model's name (any string) and may change it at every
// request: a model the tenant does not list gets no level, and so costs no
// memory until the next reload; its requests count at the tenant's level
// (and their key's), as every request does. Only the tenant's listed models
// ever have a level.
func TestLocalRotatingModelsMakeNoLevels(t *testing.T) {
	acme := tenant("acme", Limits{RPM: 1000, TPM: 1e6, MaxConcurrency: 1000})
	acme.Keys = []KeyConfig{{ID: "k", SHA256: hashA, Limits: Limits{RPM: 1000}}}
	acme.Models = map[string]Limits{"big": {TPM: 500}}
	l := newLocal([]TenantConfig{acme})
	const names = 500
	var live []Ticket
	for i := range names {
		tk, d := admit(t, l, t0, Request{Tenant: "acme", KeyID: "k", Model: fmt.Sprint("model-", i), EstTokens: 1})
		if !d.Allowed || d.Requests.Remaining != int64(1000-i-1) {
			t.Fatalf("request %d: %+v, want allowed, counted at the tenant's and the key's rpm", i, d)
		}
		live = append(live, tk)
	}
	wantLevels(t, l, "acme", true, []string{"k"}, nil)
	if _, d := admit(t, l, t0, Request{Tenant: "acme", KeyID: "k", Model: "big", EstTokens: 1}); !d.Allowed {
		t.Fatal(d)
	}
	wantLevels(t, l, "acme", true, []string{"k"}, []string{"big"})
	for _, tk := range live {
		reconcile(t, l, t0, tk, 1)
	}
}
