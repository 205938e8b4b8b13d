package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/testenv"
)

// 60 rpm with a burst of 3: three at once, then one per second.
func TestRequestBucket(t *testing.T) {
	forEachBackend(t, func(t *testing.T, mk func([]TenantConfig) Limiter) {
		l := mk([]TenantConfig{tenant("acme", Limits{RPM: 60, Burst: 3})})
		req := Request{Tenant: "acme"}
		for i := range 3 {
			_, d := admit(t, l, t0, req)
			if !d.Allowed || d.Limit != limitNone {
				t.Fatalf("request %d rejected: %+v", i, d)
			}
			if d.Requests.Limit != 60 || d.Requests.Remaining != int64(2-i) || !near(d.Requests.Reset, time.Duration(i+1)*time.Second, tol) {
				t.Errorf("request %d quota %+v, want limit 60, remaining %d, reset %ds", i, d.Requests, 2-i, i+1)
			}
			if d.Tokens.Limit != 0 || d.Concurrency.Limit != 0 {
				t.Errorf("quotas for unset limits: %+v %+v", d.Tokens, d.Concurrency)
			}
		}
		tk, d := admit(t, l, t0, req)
		if d.Allowed || d.Limit != limitRequests || d.Scope != scopeTenant || !near(d.RetryAfter, time.Second, tol) || d.TooLarge {
			t.Fatalf("4th: %+v, want a requests rejection with 1s retry", d)
		}
		if d.Requests.Remaining != 0 || !near(d.Requests.Reset, 3*time.Second, tol) || tk.admitted() {
			t.Errorf("4th quota %+v (ticket %v)", d.Requests, tk.admitted())
		}
		if d.statusCode() != 429 {
			t.Errorf("status %d", d.statusCode())
		}
		_, d = admit(t, l, t0.Add(400*time.Millisecond), req)
		if d.Allowed || !near(d.RetryAfter, 600*time.Millisecond, tol) {
			t.Fatalf("at +400ms: %+v, want retry 600ms", d)
		}
		_, d = admit(t, l, t0.Add(time.Second), req)
		if !d.Allowed || d.Requests.Remaining != 0 {
			t.Fatalf("at +1s: %+v, want allowed with nothing left", d)
		}
		// Ten quiet seconds fill the bucket again, no more.
		for i := range 4 {
			_, d = admit(t, l, t0.Add(11*time.Second), req)
			if d.Allowed != (i < 3) {
				t.Fatalf("after refill, request %d: allowed=%v", i, d.Allowed)
			}
		}
	})
}

// Without burst the bucket holds the whole minute.
func TestDefaultBurstIsRPM(t *testing.T) {
	forEachBackend(t, func(t *testing.T, mk func([]TenantConfig) Limiter) {
		l := mk([]TenantConfig{tenant("acme", Limits{RPM: 30})})
		for i := range 31 {
			_, d := admit(t, l, t0, Request{Tenant: "acme"})
			if d.Allowed != (i < 30) {
				t.Fatalf("request %d: allowed=%v", i, d.Allowed)
			}
			if i == 30 && !near(d.RetryAfter, 2*time.Second, tol) {
				t.Fatalf("retry %v, want 2s", d.RetryAfter)
			}
		}
	})
}

func TestTokenBucket(t *testing.T) {
	forEachBackend(t, func(t *testing.T, mk func([]TenantConfig) Limiter) {
		l := mk([]TenantConfig{tenant("acme", Limits{TPM: 600})}) // 10 tokens/s, 600 capacity
		req := Request{Tenant: "acme", EstTokens: 100}
		for i := range 6 {
			_, d := admit(t, l, t0, req)
			if !d.Allowed || d.Tokens.Limit != 600 || d.Tokens.Remaining != int64(500-100*i) {
				t.Fatalf("request %d: %+v", i, d)
			}
		}
		_, d := admit(t, l, t0, req)
		if d.Allowed || d.Limit != limitTokens || !near(d.RetryAfter, 10*time.Second, tol) || !near(d.Tokens.Reset, 60*time.Second, tol) {
			t.Fatalf("7th: %+v, want a tokens rejection with 10s retry", d)
		}
		// An estimate of 0 needs no tokens, even with none left.
		if _, d := admit(t, l, t0, Request{Tenant: "acme"}); !d.Allowed {
			t.Fatalf("zero estimate rejected: %+v", d)
		}
		// Larger than the whole bucket: never admissible.
		_, d = admit(t, l, t0.Add(time.Hour), Request{Tenant: "acme", EstTokens: 601})
		if d.Allowed || !d.TooLarge || d.Limit != limitTokens || d.RetryAfter != 0 {
			t.Fatalf("too large: %+v", d)
		}
		if _, d := admit(t, l, t0.Add(time.Hour), Request{Tenant: "acme", EstTokens: 600}); !d.Allowed {
			t.Fatalf("a full bucket's worth rejected: %+v", d)
		}
	})
}

// Estimated low, reconciled high: the real usage is charged and stops the
// tenant, with the wait the debt implies.
func TestReconcileUnderestimate(t *testing.T) {
	forEachBackend(t, func(t *testing.T, mk func([]TenantConfig) Limiter) {
		l := mk([]TenantConfig{tenant("acme", Limits{TPM: 1000})})
		req := Request{Tenant: "acme", EstTokens: 10}
		n := 0
		for ; n < 100; n++ {
			tk, d := admit(t, l, t0, req)
			if !d.Allowed {
				if d.Limit != limitTokens {
					t.Fatalf("rejected by %v", d.Limit)
				}
				// 4 requests used 1200 tokens: 200 in debt, plus 10 for this one, at 1000/60 per second.
				if want := time.Duration(210 * 60 / 1000.0 * float64(time.Second)); !near(d.RetryAfter, want, tol) {
					t.Errorf("retry %v, want %v", d.RetryAfter, want)
				}
				break
			}
			reconcile(t, l, t0, tk, 300)
		}
		if n != 4 {
			t.Fatalf("%d requests of 300 tokens admitted under 1000 tpm, want 4", n)
		}
	})
}

// Estimated high, reconciled low: the difference is given back, never beyond
// a full bucket.
func TestReconcileOverestimate(t *testing.T) {
	forEachBackend(t, func(t *testing.T, mk func([]TenantConfig) Limiter) {
		l := mk([]TenantConfig{tenant("acme", Limits{TPM: 1000})})
		req := Request{Tenant: "acme", EstTokens: 500}
		tk, d := admit(t, l, t0, req)
		if !d.Allowed || d.Tokens.Remaining != 500 {
			t.Fatalf("%+v", d)
		}
		reconcile(t, l, t0, tk, 50)
		_, d = admit(t, l, t0, req)
		if !d.Allowed || d.Tokens.Remaining != 450 {
			t.Fatalf("after a refund of 450: %+v, want 450 remaining", d)
		}
		// Two minutes later the bucket is full: a refund cannot overfill it.
		tk, _ = admit(t, l, t0.Add(2*time.Minute), Request{Tenant: "acme", EstTokens: 200})
		_, d = admit(t, l, t0.Add(4*time.Minute), Request{Tenant: "acme"})
		if d.Tokens.Remaining != 1000 {
			t.Fatalf("full bucket shows %d", d.Tokens.Remaining)
		}
		reconcile(t, l, t0.Add(4*time.Minute), tk, 0)
		_, d = admit(t, l, t0.Add(4*time.Minute), Request{Tenant: "acme", EstTokens: 1})
		if d.Tokens.Remaining != 999 {
			t.Fatalf("after refunding into a full bucket: %d remaining, want 999", d.Tokens.Remaining)
		}
		// Zero and negative actual counts are both "nothing used".
		tk, _ = admit(t, l, t0.Add(10*time.Minute), Request{Tenant: "acme", EstTokens: 400})
		reconcile(t, l, t0.Add(10*time.Minute), tk, -5)
		if _, d = admit(t, l, t0.Add(10*time.Minute), Request{Tenant: "acme"}); d.Tokens.Remaining != 1000 {
			t.Fatalf("negative actual: %d remaining", d.Tokens.Remaining)
		}
	})
}

// Model limits apply to that model only and nest inside the tenant's.
func TestPerModelLimits(t *testing.T) {
	forEachBackend(t, func(t *testing.T, mk func([]TenantConfig) Limiter) {
		ten := tenant("acme", Limits{TPM: 1000})
		ten.Models = map[string]Limits{"llama-70b": {TPM: 200}}
		l := mk([]TenantConfig{ten})
		big := Request{Tenant: "acme", Model: "llama-70b", EstTokens: 150}
		_, d := admit(t, l, t0, big)
		if !d.Allowed || d.Tokens.Limit != 200 || d.Tokens.Remaining != 50 {
			t.Fatalf("first 70b request: %+v, want the model's quota (200, 50 left)", d)
		}
		_, d = admit(t, l, t0, Request{Tenant: "acme", Model: "llama-70b", EstTokens: 100})
		if d.Allowed || d.Limit != limitTokens || d.Scope != scopeModel || !near(d.RetryAfter, 15*time.Second, tol) {
			t.Fatalf("second 70b request: %+v, want a model-level rejection, retry 15s", d)
		}
		_, d = admit(t, l, t0, Request{Tenant: "acme", Model: "llama-8b", EstTokens: 700})
		if !d.Allowed || d.Tokens.Limit != 1000 || d.Tokens.Remaining != 150 {
			t.Fatalf("other model: %+v, want the tenant's quota with the 70b charge counted", d)
		}
		_, d = admit(t, l, t0, Request{Tenant: "acme", Model: "llama-70b", EstTokens: 160})
		if d.Allowed || d.Scope != scopeModel || d.TooLarge {
			t.Fatalf("%+v", d)
		}
		_, d = admit(t, l, t0.Add(time.Minute), Request{Tenant: "acme", Model: "llama-70b", EstTokens: 201})
		if !d.TooLarge || d.Scope != scopeModel {
			t.Fatalf("over the model's capacity: %+v", d)
		}
		_, d = admit(t, l, t0.Add(time.Minute), Request{Tenant: "acme", Model: "x", EstTokens: 1001})
		if !d.TooLarge || d.Scope != scopeTenant {
			t.Fatalf("over the tenant's capacity: %+v", d)
		}
	})
}

func TestPerKeyLimits(t *testing.T) {
	forEachBackend(t, func(t *testing.T, mk func([]TenantConfig) Limiter) {
		ten := tenant("acme", Limits{RPM: 600})
		ten.Keys = []KeyConfig{{ID: "slow", SHA256: hashA, Limits: Limits{RPM: 60, Burst: 1}}, {ID: "fast", SHA256: hashB}}
		l := mk([]TenantConfig{ten})
		if _, d := admit(t, l, t0, Request{Tenant: "acme", KeyID: "slow"}); !d.Allowed || d.Requests.Limit != 60 || d.Requests.Remaining != 0 {
			t.Fatalf("slow key: %+v", d)
		}
		_, d := admit(t, l, t0, Request{Tenant: "acme", KeyID: "slow"})
		if d.Allowed || d.Scope != scopeKey || d.Limit != limitRequests || !near(d.RetryAfter, time.Second, tol) {
			t.Fatalf("slow key again: %+v", d)
		}
		_, d = admit(t, l, t0, Request{Tenant: "acme", KeyID: "fast"})
		if !d.Allowed || d.Requests.Limit != 600 || d.Requests.Remaining != 598 {
			t.Fatalf("fast key: %+v, want the tenant's bucket, charged twice", d)
		}
	})
}

func TestConcurrency(t *testing.T) {
	forEachBackend(t, func(t *testing.T, mk func([]TenantConfig) Limiter) {
		ten := tenant("acme", Limits{MaxConcurrency: 2})
		ten.Models = map[string]Limits{"m": {MaxConcurrency: 1}}
		l := mk([]TenantConfig{ten})
		a, d := admit(t, l, t0, Request{Tenant: "acme"})
		if !d.Allowed || d.Concurrency != (Quota{Limit: 2, Remaining: 1}) {
			t.Fatalf("first: %+v", d)
		}
		b, d := admit(t, l, t0, Request{Tenant: "acme", Model: "m"})
		if !d.Allowed || d.Concurrency.Remaining != 0 {
			t.Fatalf("second: %+v", d)
		}
		_, d = admit(t, l, t0, Request{Tenant: "acme"})
		if d.Allowed || d.Limit != limitConcurrency || d.Scope != scopeTenant || d.RetryAfter != concurrencyRetryHint {
			t.Fatalf("third: %+v", d)
		}
		reconcile(t, l, t0, a, 0)
		_, d = admit(t, l, t0, Request{Tenant: "acme", Model: "m"})
		if d.Allowed || d.Scope != scopeModel {
			t.Fatalf("second on model m: %+v, want the model's slot taken", d)
		}
		c, d := admit(t, l, t0, Request{Tenant: "acme"})
		if !d.Allowed {
			t.Fatalf("after a release: %+v", d)
		}
		reconcile(t, l, t0, b, 0)
		reconcile(t, l, t0, c, 0)
		reconcile(t, l, t0, Ticket{}, 10) // a rejected request's ticket: nothing happens
		for i := range 2 {
			if _, d := admit(t, l, t0, Request{Tenant: "acme"}); !d.Allowed {
				t.Fatalf("after all released, %d: %+v", i, d)
			}
		}
	})
}

// A rejection by one limit charges none of the others.
func TestRejectionChargesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, mk func([]TenantConfig) Limiter) {
		ten := tenant("acme", Limits{RPM: 60, Burst: 2, TPM: 1000})
		ten.Models = map[string]Limits{"m": {MaxConcurrency: 1}, "t": {TPM: 100}}
		ten.Keys = []KeyConfig{{ID: "k", SHA256: hashA, Limits: Limits{RPM: 60, Burst: 10}}}
		l := mk([]TenantConfig{ten})
		if _, d := admit(t, l, t0, Request{Tenant: "acme", KeyID: "k", Model: "m", EstTokens: 10}); !d.Allowed {
			t.Fatal(d)
		}
		for range 5 {
			// Concurrency at the model level rejects; tenant rpm/tpm and key rpm must not move.
			if _, d := admit(t, l, t0, Request{Tenant: "acme", KeyID: "k", Model: "m", EstTokens: 10}); d.Allowed || d.Limit != limitConcurrency {
				t.Fatal(d)
			}
			// Tokens at the model level reject.
			if _, d := admit(t, l, t0, Request{Tenant: "acme", KeyID: "k", Model: "t", EstTokens: 101}); d.Allowed || !d.TooLarge {
				t.Fatal(d)
			}
		}
		_, d := admit(t, l, t0, Request{Tenant: "acme", KeyID: "k", EstTokens: 10})
		if !d.Allowed || d.Requests.Remaining != 0 || d.Tokens.Remaining != 980 {
			t.Fatalf("%+v: rejected requests were charged", d)
		}
		// Now the tenant's rpm rejects: the key's bucket must not move either.
		if _, d := admit(t, l, t0, Request{Tenant: "acme", KeyID: "k"}); d.Allowed || d.Scope != scopeTenant {
			t.Fatal(d)
		}
		l.SetTenants(t0, []TenantConfig{{Name: "acme", Keys: ten.Keys}}) // lift the tenant's limits
		_, d = admit(t, l, t0, Request{Tenant: "acme", KeyID: "k"})
		if !d.Allowed || d.Requests.Limit != 60 || d.Requests.Remaining != 7 {
			t.Fatalf("%+v: key bucket should have 10-3 left", d)
		}
	})
}

func TestUnknownTenant(t *testing.T) {
	forEachBackend(t, func(t *testing.T, mk func([]TenantConfig) Limiter) {
		l := mk([]TenantConfig{tenant("acme", Limits{})})
		var d Decision
		tk, err := l.Admit(context.Background(), t0, &Request{Tenant: "nobody"}, &d)
		if !errors.Is(err, ErrUnknownTenant) || d.Allowed || tk.admitted() {
			t.Fatalf("err=%v d=%+v", err, d)
		}
		// A tenant without limits is always admitted.
		for range 100 {
			tk, d := admit(t, l, t0, Request{Tenant: "acme", EstTokens: 1 << 40})
			if !d.Allowed || !tk.admitted() || d.Requests.Limit+d.Tokens.Limit+d.Concurrency.Limit != 0 {
				t.Fatal(d)
			}
			reconcile(t, l, t0, tk, 1<<41)
		}
	})
}

// A reload keeps the state of the buckets that remain, and in-flight tickets
// stay valid; a removed tenant becomes unknown.
func TestSetTenantsKeepsState(t *testing.T) {
	forEachBackend(t, func(t *testing.T, mk func([]TenantConfig) Limiter) {
		ts := []TenantConfig{tenant("acme", Limits{RPM: 60, Burst: 2, MaxConcurrency: 5}), tenant("beta", Limits{RPM: 1})}
		l := mk(ts)
		tk, _ := admit(t, l, t0, Request{Tenant: "acme"})
		admit(t, l, t0, Request{Tenant: "acme"})
		l.SetTenants(t0, ts)
		if _, d := admit(t, l, t0, Request{Tenant: "acme"}); d.Allowed || d.Concurrency.Remaining != 3 {
			t.Fatalf("after an identical reload: %+v, want the bucket still empty and 2 in flight", d)
		}
		l.SetTenants(t0, ts[:1])
		var d Decision
		if _, err := l.Admit(context.Background(), t0, &Request{Tenant: "beta"}, &d); !errors.Is(err, ErrUnknownTenant) {
			t.Fatalf("removed tenant: %v", err)
		}
		reconcile(t, l, t0, tk, 0)
		if _, d := admit(t, l, t0.Add(time.Second), Request{Tenant: "acme"}); !d.Allowed || d.Concurrency.Remaining != 3 {
			t.Fatalf("%+v", d)
		}
	})
}

// Every remote backend (Redis, Redis Cluster) gives the same answers as the
// local one to the same random workload, over two tenants (on a cluster,
// their keys live in different slots).
func TestBackendsAgree(t *testing.T) {
	ten := tenant("acme", Limits{RPM: 120, Burst: 5, TPM: 3000, MaxConcurrency: 4})
	ten.Models = map[string]Limits{"big": {TPM: 800, RPM: 30}}
	ten.Keys = []KeyConfig{{ID: "k", SHA256: hashA, Limits: Limits{RPM: 90, Burst: 3}}}
	ts := []TenantConfig{ten, tenant("beta", Limits{RPM: 60, TPM: 2000, MaxConcurrency: 2})}
	for _, b := range backends {
		if b.name == "local" {
			continue
		}
		t.Run(b.name, func(t *testing.T) { testBackendsAgree(t, newLocal(ts), b.new(t, ts)) })
	}
}

func testBackendsAgree(t *testing.T, local, rds Limiter) {
	rng := rand.New(rand.NewPCG(1, 2))
	type open struct {
		lt, rt Ticket
		end    time.Time
		actual int64
	}
	var inflight []open
	now := t0
	for i := range 400 {
		now = now.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
		// finish what is due, in time order
		slices.SortFunc(inflight, func(a, b open) int { return a.end.Compare(b.end) })
		keep := inflight[:0]
		for _, o := range inflight {
			if o.end.After(now) {
				keep = append(keep, o)
				continue
			}
			reconcile(t, local, o.end, o.lt, o.actual)
			reconcile(t, rds, o.end, o.rt, o.actual)
		}
		inflight = keep
		req := Request{Tenant: "acme", EstTokens: int64(rng.IntN(300))}
		if rng.IntN(4) == 0 {
			req.Tenant = "beta"
		} else {
			if rng.IntN(2) == 0 {
				req.KeyID = "k"
			}
			if rng.IntN(3) == 0 {
				req.Model = "big"
			}
		}
		lt, ld := admit(t, local, now, req)
		rt, rd := admit(t, rds, now, req)
		if ld.Allowed != rd.Allowed || ld.Limit != rd.Limit || ld.Scope != rd.Scope || ld.TooLarge != rd.TooLarge ||
			!near(ld.RetryAfter, rd.RetryAfter, tol) || ld.Requests.Limit != rd.Requests.Limit || ld.Tokens.Limit != rd.Tokens.Limit ||
			ld.Concurrency != rd.Concurrency || abs(ld.Requests.Remaining-rd.Requests.Remaining) > 0 || abs(ld.Tokens.Remaining-rd.Tokens.Remaining) > 1 {
			t.Fatalf("step %d, %+v:\nlocal %+v\nremote %+v", i, req, ld, rd)
		}
		if ld.Allowed {
			inflight = append(inflight, open{lt, rt, now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond), int64(rng.IntN(400))})
		}
	}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func TestDecisionStrings(t *testing.T) {
	for k, want := range map[LimitKind]string{limitNone: "none", limitRequests: "requests", limitTokens: "tokens",
		limitConcurrency: "concurrency", limitBackend: "backend", 99: "unknown"} {
		if k.String() != want {
			t.Errorf("%d: %q", k, k.String())
		}
	}
	for s, want := range map[Scope]string{scopeTenant: "tenant", scopeKey: "key", scopeModel: "model", 9: "unknown"} {
		if s.String() != want {
			t.Errorf("%d: %q", s, s.String())
		}
	}
	d := Decision{Limit: limitTokens, Scope: scopeModel, RetryAfter: 1500 * time.Millisecond, limitValue: 50000}
	st, msg, typ, code := d.ErrorInfo("acme")
	if st != 429 || typ != "tokens" || code != "rate_limit_exceeded" ||
		msg != "Rate limit reached for tenant acme on tokens per minute (model limit: 50000). Please try again in 1.5s." {
		t.Errorf("%d %q %q %q", st, msg, typ, code)
	}
	d = Decision{Limit: limitBackend, RetryAfter: time.Second}
	if st, _, typ, code := d.ErrorInfo("acme"); st != 503 || typ != "server_error" || code != "rate_limiter_unavailable" {
		t.Errorf("%d %q %q", st, typ, code)
	}
	d = Decision{Limit: limitTokens, TooLarge: true, limitValue: 100}
	if _, msg, _, _ := d.ErrorInfo("acme"); msg != "Request too large for tenant acme: its estimated tokens exceed the tenant limit of 100 tokens per minute. Lower max_tokens, the number of outputs asked for (n, best_of, prompts, conversations) or the prompt size." {
		t.Error(msg)
	}
	if st, msg, _, _ := (&Decision{Allowed: true}).ErrorInfo("acme"); st != 200 || msg != "" {
		t.Error(st, msg)
	}
}

type headerMap map[string]string

func (h headerMap) SetBytesKV(k, v []byte) { h[string(k)] = string(v) }

func TestWriteHeaders(t *testing.T) {
	d := Decision{
		Allowed:    false,
		Limit:      limitTokens,
		Requests:   Quota{Limit: 600, Remaining: 12, Reset: 6 * time.Second},
		Tokens:     Quota{Limit: 200000, Remaining: 0, Reset: 6*time.Minute + 1},
		RetryAfter: 1200 * time.Millisecond,
	}
	h := headerMap{}
	d.WriteHeaders(h)
	want := headerMap{
		"x-ratelimit-limit-requests": "600", "x-ratelimit-remaining-requests": "12", "x-ratelimit-reset-requests": "6s",
		"x-ratelimit-limit-tokens": "200000", "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "6m0.001s",
		"retry-after": "2", "retry-after-ms": "1200",
	}
	if fmt.Sprint(h) != fmt.Sprint(want) {
		t.Errorf("headers\n%v\nwant\n%v", h, want)
	}
	// Too large for the tpm: no wait admits it, and the client is told not
	// to retry.
	d = Decision{Allowed: false, TooLarge: true, Limit: limitTokens, Tokens: Quota{Limit: 1000, Remaining: 1000}}
	h = headerMap{}
	d.WriteHeaders(h)
	if h["x-should-retry"] != "false" || h["retry-after"] != "" {
		t.Errorf("too large: %v", h)
	}
	// Allowed, tokens not limited: only the requests headers.
	d = Decision{Allowed: true, Requests: Quota{Limit: 60, Remaining: 59, Reset: time.Second}, RetryAfter: time.Second}
	h = headerMap{}
	d.WriteHeaders(h)
	if len(h) != 3 || h["x-ratelimit-reset-requests"] != "1s" {
		t.Errorf("%v", h)
	}
	var sink nopSetter
	if n := testenv.AllocsPerRun(100, func() { d.WriteHeaders(sink) }); n != 0 {
		t.Errorf("WriteHeaders allocates %v times", n)
	}
}

type nopSetter struct{}

func (nopSetter) SetBytesKV(_, _ []byte) {}

func TestAppendReset(t *testing.T) {
	for _, d := range []time.Duration{
		time.Millisecond, 20 * time.Millisecond, 999 * time.Millisecond, time.Second, 1500 * time.Millisecond,
		1010 * time.Millisecond, 59 * time.Second, time.Minute, 6 * time.Minute, 61*time.Minute + 500*time.Millisecond,
		25*time.Hour + 3*time.Second,
	} {
		if got, want := string(appendReset(nil, d)), d.String(); got != want {
			t.Errorf("%v: got %q", d, got)
		}
	}
	if got := string(appendReset(nil, 1)); got != "1ms" {
		t.Errorf("1ns rounds up to %q", got)
	}
	if got := string(appendReset(nil, 0)); got != "0s" {
		t.Errorf("0: %q", got)
	}
}
