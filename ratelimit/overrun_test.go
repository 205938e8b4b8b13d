package ratelimit

import (
	"context"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/goodput/goodput/internal/testenv"
)

// settleGrowth waits until the Redis backend has sent every chunk asked for
// (its charging goroutine has finished); a no-op on the local backend, which
// charges at once.
func settleGrowth(tk *Ticket) {
	if tk.rt == nil {
		return
	}
	for tk.rt.growing.Load() || tk.rt.pending.Load() != 0 {
		runtime.Gosched()
	}
	tk.rt.mu.Lock() // a chunk in flight holds it
	tk.rt.mu.Unlock()
}

// tokensLeft is the tokens remaining at the tenant's tightest level, from a
// decision that charges nothing.
func tokensLeft(t *testing.T, g *Gate, tenant string) int64 {
	t.Helper()
	var d Decision
	tk, _, err := g.Admit(context.Background(), &Request{Tenant: tenant}, &d)
	if err != nil || !d.Allowed && d.Limit != limitTokens { // in debt, even 0 waits
		t.Fatalf("probe: %v %+v", err, d)
	}
	if err := g.Reconcile(context.Background(), tk, 0); err != nil {
		t.Fatal(err)
	}
	return d.Tokens.Remaining
}

// A default output allowance shrinks to fit the tightest tpm (a client that
// did not choose it is never "too large" for it); the client's own
// max_tokens does not.
func TestDefaultOutputFitsTightestTPM(t *testing.T) {
	forEachBackend(t, func(t *testing.T, mk func([]TenantConfig) Limiter) {
		ts := []TenantConfig{{Name: "acme", Limits: Limits{TPM: 1000},
			Models: map[string]Limits{"small": {TPM: 500}}}}
		l := mk(ts)
		est, dfl := EstimateRequest(400, 0, 0, 1) // 100 + 1024
		tk, d := admit(t, l, t0, Request{Tenant: "acme", EstTokens: est, DefaultOutput: dfl})
		if !d.Allowed || tk.EstTokens() != 1000 || d.Tokens.Remaining != 0 {
			t.Fatalf("default allowance: %+v, charged %d, want allowed at 1000", d, tk.EstTokens())
		}
		reconcile(t, l, t0, tk, 0)
		tk, d = admit(t, l, t0, Request{Tenant: "acme", Model: "small", EstTokens: est, DefaultOutput: dfl})
		if !d.Allowed || tk.EstTokens() != 500 {
			t.Fatalf("model level: %+v, charged %d, want 500", d, tk.EstTokens())
		}
		reconcile(t, l, t0, tk, 0)
		// The prompt alone is too large: no default can help.
		if _, d = admit(t, l, t0, Request{Tenant: "acme", EstTokens: 1100, DefaultOutput: 50}); d.Allowed || !d.TooLarge {
			t.Fatalf("prompt over tpm: %+v", d)
		}
		est, _ = EstimateRequest(400, 1024, 0, 1)
		if _, d = admit(t, l, t0, Request{Tenant: "acme", EstTokens: est}); d.Allowed || !d.TooLarge {
			t.Fatalf("explicit max_tokens over tpm: %+v, want too large", d)
		}
	})
}

// A request of several outputs is charged each of them: n times its
// max_tokens, refused as too large when that passes the tpm, and admitted
// when it fits what is left. Its default allowance is lowered to fit, but
// not below a token for each output past the first: a count of outputs
// over the tpm is too large with or without max_tokens, and a hostile one
// (1e15, or the largest int64) neither wraps nor passes.
func TestOutputsCharged(t *testing.T) {
	forEachBackend(t, func(t *testing.T, mk func([]TenantConfig) Limiter) {
		l := mk([]TenantConfig{{Name: "acme", Limits: Limits{TPM: 1000}}})
		est, dfl := EstimateRequest(40, 300, 0, 4) // 10 + 4 × 300
		if _, d := admit(t, l, t0, Request{Tenant: "acme", EstTokens: est, DefaultOutput: dfl}); d.Allowed || !d.TooLarge {
			t.Fatalf("4 × 300 under tpm 1000: %+v, want too large", d)
		}
		est, dfl = EstimateRequest(40, 300, 0, 3) // 910
		tk, d := admit(t, l, t0, Request{Tenant: "acme", EstTokens: est, DefaultOutput: dfl})
		if !d.Allowed || tk.EstTokens() != 910 {
			t.Fatalf("3 × 300: %+v, charged %d, want 910", d, tk.EstTokens())
		}
		est, dfl = EstimateRequest(40, 50, 0, 2) // 110, over the 90 left
		if _, d = admit(t, l, t0, Request{Tenant: "acme", EstTokens: est, DefaultOutput: dfl}); d.Allowed || d.TooLarge || d.Limit != limitTokens {
			t.Fatalf("2 × 50 with 90 left: %+v, want refused for now", d)
		}
		reconcile(t, l, t0, tk, 0) // refunded whole: 1000 left
		// No max_tokens: 8 default allowances, lowered to the tpm.
		est, dfl = EstimateRequest(40, 0, 0, 8)
		tk, d = admit(t, l, t0, Request{Tenant: "acme", EstTokens: est, DefaultOutput: dfl})
		if !d.Allowed || tk.EstTokens() != 1000 {
			t.Fatalf("8 default allowances: %+v, charged %d, want the tpm", d, tk.EstTokens())
		}
		reconcile(t, l, t0, tk, 0)
		for _, n := range []int64{1000, 1e9, 1e15, math.MaxInt64} {
			for _, maxTokens := range []int64{0, 1, math.MaxInt64} {
				est, dfl = EstimateRequest(40, maxTokens, 0, n)
				if _, d = admit(t, l, t0, Request{Tenant: "acme", EstTokens: est, DefaultOutput: dfl}); d.Allowed || !d.TooLarge {
					t.Fatalf("%d outputs of max_tokens %d (est %d, default %d): %+v, want too large", n, maxTokens, est, dfl, d)
				}
			}
		}
	})
}

// A stream that passes what it was charged is charged as it goes, a chunk
// (1/64 of tpm, at least 16) ahead of its output; within its charge Progress
// charges nothing; Reconcile settles the real usage against all of it.
func TestProgressChargesAsItGoes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, mk func([]TenantConfig) Limiter) {
		ts := []TenantConfig{tenant("acme", Limits{TPM: 6400})} // chunk 100
		g, _, _ := newTestGate(t, mk(ts), 0, ts)
		ctx := context.Background()
		var d Decision
		tk, _, err := g.Admit(ctx, &Request{Tenant: "acme", EstTokens: 300}, &d)
		if err != nil || !d.Allowed {
			t.Fatal(err, d)
		}
		for used := int64(0); used <= 300; used += 7 {
			if !g.Progress(&tk, used) {
				t.Fatalf("cut at %d within the charge", used)
			}
		}
		settleGrowth(&tk)
		if got := tokensLeft(t, g, "acme"); got != 6100 {
			t.Fatalf("within the charge: %d left, want 6100", got)
		}
		if !g.Progress(&tk, 301) || !g.Progress(&tk, 400) {
			t.Fatal("cut under on_overrun: charge")
		}
		settleGrowth(&tk)
		if got := tokensLeft(t, g, "acme"); got != 6000 {
			t.Fatalf("one chunk past: %d left, want 6000", got)
		}
		if !g.Progress(&tk, 600) { // two more chunks at once
			t.Fatal("cut")
		}
		settleGrowth(&tk)
		if got := tokensLeft(t, g, "acme"); got != 5800 {
			t.Fatalf("three chunks past: %d left, want 5800", got)
		}
		if err := g.Reconcile(ctx, tk, 620); err != nil {
			t.Fatal(err)
		}
		if got := tokensLeft(t, g, "acme"); got != 6400-620 {
			t.Fatalf("after reconcile: %d left, want %d", got, 6400-620)
		}
	})
}

// Under on_overrun: charge a stream runs on into debt; under cut, it is cut
// when the next chunk is not there, and charged nothing more until Reconcile
// charges what it really used.
func TestProgressOverrunPolicies(t *testing.T) {
	for _, policy := range []string{overrunCharge, OverrunCut} {
		t.Run(policy, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, mk func([]TenantConfig) Limiter) {
				ts := []TenantConfig{tenant("acme", Limits{TPM: 1000, OnOverrun: policy})} // chunk 16
				g, _, _ := newTestGate(t, mk(ts), 0, ts)
				ctx := context.Background()
				var d Decision
				tk, _, err := g.Admit(ctx, &Request{Tenant: "acme", EstTokens: 990}, &d)
				if err != nil || !d.Allowed {
					t.Fatal(err, d)
				}
				ok := g.Progress(&tk, 1000) // needs a chunk of 16; 10 are left
				settleGrowth(&tk)
				ok = ok && g.Progress(&tk, 1000)
				if ok != (policy == overrunCharge) {
					t.Fatalf("Progress past the bucket = %v", ok)
				}
				want := int64(0) // charge: 1006 charged, in debt
				if policy == OverrunCut {
					want = 10
				}
				if got := tokensLeft(t, g, "acme"); got != want {
					t.Fatalf("%d left, want %d", got, want)
				}
				if err := g.Reconcile(ctx, tk, 1003); err != nil {
					t.Fatal(err)
				}
				var d2 Decision
				if _, _, err := g.Admit(ctx, &Request{Tenant: "acme", EstTokens: 1}, &d2); err != nil || d2.Allowed {
					t.Fatalf("after 1003 of 1000: %v %+v, want a rejection", err, d2)
				}
				// 1003 charged: 4 tokens short of one, at 1000/min.
				if !near(d2.RetryAfter, 240*time.Millisecond, 2*time.Millisecond) {
					t.Fatalf("retry %v, want 240ms", d2.RetryAfter)
				}
			})
		})
	}
}

// Following a stream costs no allocation per event: within its charge, nor
// (local backend) when it charges a chunk.
func TestProgressAllocatesNothing(t *testing.T) {
	ts := []TenantConfig{tenant("acme", Limits{TPM: 1_000_000_000})}
	g, _, _ := newTestGate(t, newLocal(ts), 0, ts)
	var d Decision
	tk, _, err := g.Admit(context.Background(), &Request{Tenant: "acme", EstTokens: 10}, &d)
	if err != nil || !d.Allowed {
		t.Fatal(err, d)
	}
	used := int64(0)
	if n := testenv.AllocsPerRun(1000, func() {
		used += 100 // a chunk is 256: a charge every third call
		if !g.Progress(&tk, used) {
			t.Fatal("cut")
		}
	}); n != 0 {
		t.Fatalf("%v allocations per call", n)
	}
}

// A chunk that cannot reach Redis is dropped, not a reason to cut: the
// stream runs on under on_overrun: cut, and Reconcile charges what it used
// once Redis answers again.
func TestRedisChunkFailureDoesNotCut(t *testing.T) {
	m := miniredis.RunT(t) // stopped and restarted: always in-process
	ts := []TenantConfig{tenant("acme", Limits{TPM: 1000, OnOverrun: OverrunCut})}
	r := newTestRedis(t, "redis://"+m.Addr(), "gptest", ts, nil)
	g, _, _ := newTestGate(t, r, 0, ts)
	ctx := context.Background()
	var d Decision
	tk, _, err := g.Admit(ctx, &Request{Tenant: "acme", EstTokens: 100}, &d)
	if err != nil || !d.Allowed {
		t.Fatal(err, d)
	}
	m.Close()
	for used := int64(101); used < 400; used += 20 {
		if !g.Progress(&tk, used) {
			t.Fatalf("cut at %d: Redis unreachable is no refusal", used)
		}
		settleGrowth(&tk)
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	for r.open.Load() { // the breaker closes at Redis's first answer
		runtime.Gosched()
	}
	if err := g.Reconcile(ctx, tk, 400); err != nil {
		t.Fatal(err)
	}
	if got := tokensLeft(t, g, "acme"); got != 600 {
		t.Fatalf("%d left, want 600 (400 used)", got)
	}
}
