package ratelimit

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Local is the in-process backend: golang.org/x/time/rate token buckets for
// requests and tokens, and atomic counters for concurrency. It suits a single
// replica (each replica would enforce the limits on its own).
//
// A decision holds its tenant's mutex while it checks every bucket of every
// level (rate.Limiter.TokensAt) and, only when all admit the request, charges
// them (AllowN, which cannot fail then): a rejected request charges nothing,
// and concurrent requests cannot interleave into a partial charge.
type Local struct {
	mu    sync.Mutex // serialises SetTenants
	state atomic.Pointer[localState]
}

type localState struct {
	tenants map[string]*localTenant
}

type localTenant struct {
	mu     sync.Mutex // guards the fields below and every bucket of the tenant
	last   time.Time  // latest time seen; earlier times are raised to it
	top    *localLevel
	keys   map[string]*localLevel // only keys that have limits
	models map[string]*localLevel
}

type localLevel struct {
	scope Scope
	lim   Limits

	req       *rate.Limiter // nil: no rpm at this level
	reqPerSec float64
	reqCap    float64
	tok       *rate.Limiter // nil: no tpm at this level
	tokPerSec float64
	tokCap    float64

	inflight atomic.Int64 // admitted and not reconciled, counted whether limited or not
}

var _ Limiter = (*Local)(nil)

// newLocal returns a local limiter for tenants (which should be valid; see
// ValidateTenants).
func newLocal(tenants []TenantConfig) *Local {
	l := &Local{}
	l.state.Store(&localState{})
	l.SetTenants(time.Now(), tenants)
	return l
}

// Name returns "local".
func (l *Local) Name() string { return BackendLocal }

// Close does nothing.
func (l *Local) Close() error { return nil }

// SetTenants replaces the limits. Levels (tenant, key, model) that remain keep
// their buckets and in-flight counts; changed rates take effect at now.
func (l *Local) SetTenants(now time.Time, tenants []TenantConfig) {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.state.Load()
	ns := &localState{tenants: make(map[string]*localTenant, len(tenants))}
	for i := range tenants {
		tc := &tenants[i]
		lt := old.tenants[tc.Name]
		if lt == nil {
			lt = &localTenant{}
		}
		lt.mu.Lock()
		tnow := lt.monotonic(now)
		lt.top = updateLocalLevel(tnow, lt.top, tc.Limits, scopeTenant)
		var keys, models map[string]*localLevel
		for _, k := range tc.Keys {
			if k.Limits.IsZero() {
				continue
			}
			if keys == nil {
				keys = make(map[string]*localLevel)
			}
			keys[k.ID] = updateLocalLevel(tnow, lt.keys[k.ID], k.Limits, scopeKey)
		}
		for m, ml := range tc.Models {
			if ml.IsZero() {
				continue
			}
			if models == nil {
				models = make(map[string]*localLevel)
			}
			models[m] = updateLocalLevel(tnow, lt.models[m], ml, scopeModel)
		}
		lt.keys, lt.models = keys, models
		lt.mu.Unlock()
		ns.tenants[tc.Name] = lt
	}
	l.state.Store(ns)
}

func updateLocalLevel(now time.Time, lv *localLevel, lim Limits, scope Scope) *localLevel {
	if lv == nil {
		lv = &localLevel{}
	}
	lv.scope, lv.lim = scope, lim
	lv.req, lv.reqPerSec, lv.reqCap = updateBucket(now, lv.req, lim.RPM, lim.requestCapacity())
	lv.tok, lv.tokPerSec, lv.tokCap = updateBucket(now, lv.tok, lim.TPM, lim.TPM)
	return lv
}

func updateBucket(now time.Time, b *rate.Limiter, perMinute, capacity int64) (*rate.Limiter, float64, float64) {
	if perMinute <= 0 {
		return nil, 0, 0
	}
	r := rate.Limit(float64(perMinute) / 60)
	if b == nil {
		b = rate.NewLimiter(r, int(capacity)) // starts full
	} else {
		b.SetLimitAt(now, r)
		b.SetBurstAt(now, int(capacity))
	}
	return b, float64(r), float64(capacity)
}

// monotonic returns now, or the latest time the tenant has seen if now is
// earlier. Callers take now before they take the lock, so times arrive a
// little out of order; a rate.Limiter that saw time go back would count the
// refill of that interval twice.
func (lt *localTenant) monotonic(now time.Time) time.Time {
	if now.Before(lt.last) {
		return lt.last
	}
	lt.last = now
	return now
}

// durationFor is how long a bucket refilling at perSec takes to gain units.
func durationFor(units, perSec float64) time.Duration {
	if units <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(units / perSec * 1e9))
}

// Admit decides on req at now. It does not allocate.
func (l *Local) Admit(_ context.Context, now time.Time, req *Request, d *Decision) (Ticket, error) {
	*d = Decision{}
	lt := l.state.Load().tenants[req.Tenant]
	if lt == nil {
		return Ticket{}, ErrUnknownTenant
	}
	lt.mu.Lock()
	a := localAdmission{now: lt.monotonic(now), lv: [3]*localLevel{lt.top, lt.keys[req.KeyID], lt.models[req.Model]}}
	a.estimate(max(req.EstTokens, 0), req.DefaultOutput)
	a.decide(d)
	t := a.charge(lt, d)
	lt.mu.Unlock()
	return t, nil
}

// localAdmission is one decision of Local.Admit, made under the tenant's
// lock: the levels that apply, what their buckets hold, and the charge.
type localAdmission struct {
	now                time.Time
	lv                 [3]*localLevel // tenant, key, model; nil where none applies
	reqAvail, tokAvail [3]float64     // what each level's buckets hold at now
	est                int64          // the token charge
	tightest           int64          // the smallest tpm that applies; 0 = none
}

// estimate sets the token charge: est, with the default output allowance
// lowered to fit the tightest tpm (fitEstimate).
func (a *localAdmission) estimate(est, defaultOutput int64) {
	for _, v := range a.lv {
		if v != nil && v.tok != nil && (a.tightest == 0 || v.lim.TPM < a.tightest) {
			a.tightest = v.lim.TPM
		}
	}
	a.est = fitEstimate(est, defaultOutput, a.tightest)
}

// decide reads every level's buckets and decides, all levels and kinds at
// once: a request larger than a token bucket is rejected as too large, else
// one over a rate is rejected with the longest wait, else one over a
// concurrency limit, else it is allowed. It charges nothing.
func (a *localAdmission) decide(d *Decision) {
	var (
		rateDenied, concDenied, large    bool
		concScope, largeScope            Scope
		rateValue, concValue, largeValue int64
	)
	for i, v := range a.lv {
		if v == nil {
			continue
		}
		if v.req != nil {
			av := v.req.TokensAt(a.now)
			a.reqAvail[i] = av
			if av < 1 {
				w := durationFor(1-av, v.reqPerSec)
				if !rateDenied || w > d.RetryAfter {
					rateDenied, d.Limit, d.Scope, d.RetryAfter, rateValue = true, limitRequests, v.scope, w, v.lim.RPM
				}
			}
		}
		if v.tok != nil {
			av := v.tok.TokensAt(a.now)
			a.tokAvail[i] = av
			switch {
			case float64(a.est) > v.tokCap:
				if !large {
					large, largeScope, largeValue = true, v.scope, v.lim.TPM
				}
			case av < float64(a.est):
				w := durationFor(float64(a.est)-av, v.tokPerSec)
				if !rateDenied || w > d.RetryAfter {
					rateDenied, d.Limit, d.Scope, d.RetryAfter, rateValue = true, limitTokens, v.scope, w, v.lim.TPM
				}
			}
		}
		if m := v.lim.MaxConcurrency; m > 0 && v.inflight.Load() >= m && !concDenied {
			concDenied, concScope, concValue = true, v.scope, m
		}
	}
	switch {
	case large:
		d.TooLarge, d.Limit, d.Scope, d.RetryAfter, d.limitValue = true, limitTokens, largeScope, 0, largeValue
	case rateDenied:
		d.limitValue = rateValue
	case concDenied:
		d.Limit, d.Scope, d.RetryAfter, d.limitValue = limitConcurrency, concScope, concurrencyRetryHint, concValue
	default:
		d.Allowed = true
	}
}

// charge takes an allowed request's charge from every level (a request, its
// tokens, a concurrency slot) and returns its ticket; allowed or not, it
// fills d's quotas with the tightest level of each kind.
func (a *localAdmission) charge(lt *localTenant, d *Decision) Ticket {
	var t Ticket
	var reqCost, tokCost float64
	if d.Allowed {
		t = Ticket{est: a.est, lt: lt, lv: a.lv, covered: math.MaxInt64}
		if a.tightest > 0 {
			t.covered, t.chunk, t.cut = a.est, overrunChunk(a.tightest), lt.top.lim.OnOverrun == OverrunCut
		}
		reqCost, tokCost = 1, float64(a.est)
	}
	for i, v := range a.lv {
		if v == nil {
			continue
		}
		if v.req != nil {
			if d.Allowed {
				v.req.AllowN(a.now, 1)
			}
			after := a.reqAvail[i] - reqCost
			pickQuota(&d.Requests, v.lim.RPM, floorUnits(after), durationFor(v.reqCap-after, v.reqPerSec))
		}
		if v.tok != nil {
			if d.Allowed {
				if a.est > 0 {
					v.tok.AllowN(a.now, int(a.est))
				}
				t.tokm |= 1 << i
			}
			after := a.tokAvail[i] - tokCost
			pickQuota(&d.Tokens, v.lim.TPM, floorUnits(after), durationFor(v.tokCap-after, v.tokPerSec))
		}
		n := v.inflight.Load()
		if d.Allowed {
			n = v.inflight.Add(1)
		}
		if m := v.lim.MaxConcurrency; m > 0 {
			pickQuota(&d.Concurrency, m, max(m-n, 0), 0)
		}
	}
	return t
}

// extend charges n more tokens to the token buckets t was charged at (see
// Gate.Progress). With cut it charges them only if every bucket has them,
// and otherwise charges nothing and returns false. It does not allocate.
func (l *Local) extend(now time.Time, t *Ticket, n int64, cut bool) bool {
	if t.lt == nil {
		return true
	}
	t.lt.mu.Lock()
	defer t.lt.mu.Unlock()
	now = t.lt.monotonic(now)
	if cut {
		for i, v := range t.lv {
			if v != nil && v.tok != nil && t.tokm&(1<<i) != 0 && v.tok.TokensAt(now) < float64(n) {
				return false
			}
		}
	}
	for i, v := range t.lv {
		if v != nil && v.tok != nil && t.tokm&(1<<i) != 0 {
			adjustBucket(v.tok, now, n, int64(v.tokCap))
		}
	}
	t.est += n
	return true
}

// maxDebtMinutes bounds how far beyond its capacity one Reconcile can push a
// token bucket into debt (in multiples of the capacity, i.e. minutes).
const maxDebtMinutes = 60

// Reconcile corrects the token charge and releases the concurrency slots. It
// does not allocate and never fails.
func (l *Local) Reconcile(_ context.Context, now time.Time, t Ticket, actualTokens int64) error {
	if t.lt == nil {
		return nil
	}
	actual := max(actualTokens, 0)
	delta := actual - t.est
	t.lt.mu.Lock()
	now = t.lt.monotonic(now)
	for i, v := range t.lv {
		if v == nil || v.tok == nil {
			continue
		}
		n := delta
		if t.tokm&(1<<i) == 0 { // tpm added by a reload after admission
			n = actual
		}
		adjustBucket(v.tok, now, n, int64(v.tokCap))
	}
	t.lt.mu.Unlock()
	for _, v := range t.lv {
		if v != nil {
			v.inflight.Add(-1)
		}
	}
	return nil
}

// adjustBucket charges n tokens (n > 0) even beyond what is available, which
// puts the bucket in debt, or refunds -n tokens (n < 0), never above capacity.
// ReserveN with the limiter's infinite horizon always succeeds for
// |n| <= capacity; a negative count adds tokens, and the limiter clamps its
// level to the burst on the next read.
func adjustBucket(b *rate.Limiter, now time.Time, n, capacity int64) {
	if n < 0 {
		b.ReserveN(now, int(max(n, -capacity)))
		return
	}
	for i := 0; n > 0 && i < maxDebtMinutes; i++ {
		c := min(n, capacity)
		b.ReserveN(now, int(c))
		n -= c
	}
}
