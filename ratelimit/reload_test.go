package ratelimit

import (
	"testing"
	"time"
)

// A reload that drops a tenant, then one that restores it, leave its limits
// as they were: the requests still in flight count against its concurrency
// limit, and its buckets stay as empty as they were. The same for a key, and
// for a model, dropped and restored. (With the local backend the restored
// tenant started afresh: 10 streams of a tenant with max_concurrency 10 ran
// on, and 10 more were admitted at once. Redis keeps both in its keys.)
func TestReloadDropRestoreKeepsLimits(t *testing.T) {
	forEachBackend(t, func(t *testing.T, mk func([]TenantConfig) Limiter) {
		acme := tenant("acme", Limits{MaxConcurrency: 10})
		rated := tenant("rated", Limits{RPM: 3, TPM: 300})
		keyed := tenant("keyed", Limits{})
		keyed.Keys = []KeyConfig{{ID: "k", SHA256: hashA, Limits: Limits{MaxConcurrency: 2, TPM: 200}}}
		keyed.Models = map[string]Limits{"big": {MaxConcurrency: 1}}
		capped := tenant("capped", Limits{RPM: 3, TPM: 300})
		other := tenant("other", Limits{RPM: 60})
		all := []TenantConfig{acme, rated, keyed, capped, other}
		l := mk(all)
		var held []Ticket
		for i := range 10 {
			tk, d := admit(t, l, t0, Request{Tenant: "acme"})
			if !d.Allowed {
				t.Fatalf("acme %d: %+v", i, d)
			}
			held = append(held, tk)
		}
		for _, name := range []string{"rated", "capped"} {
			for i := range 3 { // buckets emptied, nothing in flight
				tk, d := admit(t, l, t0, Request{Tenant: name, EstTokens: 100})
				if !d.Allowed {
					t.Fatalf("%s %d: %+v", name, i, d)
				}
				reconcile(t, l, t0, tk, 100)
			}
		}
		var keyHeld []Ticket
		for i, req := range []Request{{Tenant: "keyed", KeyID: "k", EstTokens: 100}, {Tenant: "keyed", KeyID: "k", Model: "big", EstTokens: 100}} {
			tk, d := admit(t, l, t0, req)
			if !d.Allowed {
				t.Fatalf("keyed %d: %+v", i, d)
			}
			keyHeld = append(keyHeld, tk)
		}

		// Drop acme and rated, keyed's key and its model limits, and
		// capped's limits (capped serves unlimited meanwhile); restore them.
		dropped := keyed
		dropped.Keys, dropped.Models = nil, nil
		l.SetTenants(t0, []TenantConfig{dropped, tenant("capped", Limits{}), other})
		if _, d := admit(t, l, t0, Request{Tenant: "capped", EstTokens: 100}); !d.Allowed {
			t.Fatalf("capped without limits: %+v", d)
		}
		l.SetTenants(t0, all)

		for i := range 20 {
			if _, d := admit(t, l, t0, Request{Tenant: "acme"}); d.Allowed || d.Limit != limitConcurrency || d.Concurrency.Remaining != 0 {
				t.Fatalf("acme request %d after the reloads: %+v, want refused: its 10 streams still run", i, d)
			}
		}
		for _, name := range []string{"rated", "capped"} {
			if _, d := admit(t, l, t0, Request{Tenant: name, EstTokens: 1}); d.Allowed || d.Requests.Remaining != 0 || d.Tokens.Remaining != 0 {
				t.Fatalf("%s after the reloads: %+v, want refused with its buckets empty", name, d)
			}
		}
		if _, d := admit(t, l, t0, Request{Tenant: "keyed", KeyID: "k", EstTokens: 1}); d.Allowed || d.Concurrency.Remaining != 0 || d.Tokens.Remaining != 0 {
			t.Fatalf("key after the reloads: %+v, want refused: 2 in flight, its tokens spent", d)
		}
		if _, d := admit(t, l, t0, Request{Tenant: "keyed", Model: "big"}); d.Allowed || d.Limit != limitConcurrency || d.Scope != scopeModel {
			t.Fatalf("model after the reloads: %+v, want refused: 1 in flight", d)
		}

		// The old streams' ends free their slots in the restored limits.
		reconcile(t, l, t0, held[0], 0)
		tk, d := admit(t, l, t0, Request{Tenant: "acme"})
		if !d.Allowed || d.Concurrency.Remaining != 0 {
			t.Fatalf("acme after one stream ended: %+v, want one slot", d)
		}
		reconcile(t, l, t0, tk, 0)
		for _, tk := range append(held[1:], keyHeld...) {
			reconcile(t, l, t0, tk, 0)
		}
		if _, d := admit(t, l, t0, Request{Tenant: "acme"}); !d.Allowed || d.Concurrency.Remaining != 9 {
			t.Fatalf("acme after every stream ended: %+v", d)
		}
		if _, d := admit(t, l, t0, Request{Tenant: "keyed", Model: "big"}); !d.Allowed {
			t.Fatalf("model after its stream ended: %+v", d)
		}
		if _, d := admit(t, l, t0.Add(time.Minute), Request{Tenant: "rated", EstTokens: 100}); !d.Allowed {
			t.Fatalf("rated a minute later: %+v", d)
		}
	})
}

// What a reload keeps of removed levels, it frees once they are idle and
// their buckets full again: tenants and keys that come and go do not add up.
func TestLocalReloadFreesIdleState(t *testing.T) {
	keyed := tenant("keyed", Limits{})
	keyed.Keys = []KeyConfig{{ID: "k", SHA256: hashA, Limits: Limits{MaxConcurrency: 2}}}
	keyed.Models = map[string]Limits{"big": {TPM: 600}}
	all := []TenantConfig{tenant("acme", Limits{MaxConcurrency: 10}), tenant("rated", Limits{RPM: 60}), keyed}
	bare := tenant("keyed", Limits{})
	l := newLocal(all)
	held, _ := admit(t, l, t0, Request{Tenant: "acme"})
	spent, _ := admit(t, l, t0, Request{Tenant: "rated"})
	reconcile(t, l, t0, spent, 0)
	keyHeld, _ := admit(t, l, t0, Request{Tenant: "keyed", KeyID: "k"})
	modelSpent, _ := admit(t, l, t0, Request{Tenant: "keyed", Model: "big", EstTokens: 600})
	reconcile(t, l, t0, modelSpent, 600)

	l.SetTenants(t0, []TenantConfig{bare})
	lt := l.state.Load().tenants["keyed"]
	if len(l.retired) != 2 || lt.keys["k"] == nil || lt.models["big"] == nil || lt.models["big"].tok != nil || lt.models["big"].tokOff == nil {
		t.Fatalf("retired %v, keys %v, models %v: want acme (1 in flight), rated (a request spent), the key (1 in flight) and the model's spent tokens kept", l.retired, lt.keys, lt.models)
	}
	reconcile(t, l, t0, held, 0)
	reconcile(t, l, t0, keyHeld, 0)
	l.SetTenants(t0, []TenantConfig{bare}) // rated's request and the model's tokens are back only after a second, a minute
	if len(l.retired) != 1 || l.retired["rated"] == nil || lt.keys["k"] != nil || lt.models["big"] == nil {
		t.Fatalf("retired %v, keys %v, models %v: want only rated and the model's tokens kept", l.retired, lt.keys, lt.models)
	}
	l.SetTenants(t0.Add(time.Minute), []TenantConfig{bare})
	if len(l.retired) != 0 || len(lt.keys) != 0 || len(lt.models) != 0 {
		t.Fatalf("retired %v, keys %v, models %v: want nothing kept", l.retired, lt.keys, lt.models)
	}
}

// A request admitted under a tpm limit that a reload then removes still has
// its tokens corrected when it ends, so that the restored limit finds the
// bucket spent by what the request used, not by its estimate.
func TestLocalReconcileReachesASetAsideBucket(t *testing.T) {
	rated := tenant("rated", Limits{TPM: 300})
	l := newLocal([]TenantConfig{rated})
	tk, d := admit(t, l, t0, Request{Tenant: "rated", EstTokens: 100})
	if !d.Allowed {
		t.Fatalf("%+v", d)
	}
	l.SetTenants(t0, []TenantConfig{tenant("rated", Limits{})})
	reconcile(t, l, t0, tk, 300) // it used 300, not 100
	l.SetTenants(t0, []TenantConfig{rated})
	if _, d := admit(t, l, t0, Request{Tenant: "rated", EstTokens: 1}); d.Allowed || d.Tokens.Remaining != 0 {
		t.Fatalf("after the restore: %+v, want refused: the request used all 300 tokens", d)
	}
}
