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
//
// A level (tenant, key, model) is made at its first decision, under its
// tenant's mutex, only for a key or a model the tenant lists with limits (a
// client names any model, a new one at every request if it likes; one not
// listed counts at the tenant's level and makes none): a tenant that sends
// nothing, or a model it never asks for, holds no buckets (a platform's
// 20,000 tenants with 25 per-model limits each held 164 MB of them before
// any request, built again at every reload). A level that holds no state
// (nothing in flight, every bucket full) is the same as a fresh one, and
// may be dropped: a reload drops those it finds, and so does a tenant's
// decision that makes a level, at most once every levelSweep.
//
// A reload keeps the state of every level that has any: a level whose
// limits remain keeps its buckets (at the new rates, if they changed) and
// its requests in flight; one it removes while requests still count against
// it or a bucket of it is not full is kept aside, and a reload that restores
// it takes it back, so that removing a tenant and restoring it resets none of
// its limits.
type Local struct {
	mu    sync.Mutex // serialises SetTenants; guards retired
	state atomic.Pointer[localState]
	// retired are the tenants that reloads removed while they held state.
	retired map[string]*localTenant
}

type localState struct {
	tenants map[string]*localTenant
}

// levelSweep is how often at most a tenant's decisions drop its levels that
// hold no state (see Local), when one of them makes a level.
const levelSweep = time.Minute

type localTenant struct {
	mu    sync.Mutex // guards the fields below and every bucket of the tenant
	last  time.Time  // latest time seen; earlier times are raised to it
	swept time.Time  // when a decision last dropped the levels that hold no state

	// The configured limits: the tenant's own, its keys' (only keys that
	// have limits; nil: none) and its models' (the configuration's own map,
	// TenantConfig.Models, only read; a zero entry is no limit).
	lim      Limits
	keyLim   map[string]Limits
	modelLim map[string]Limits
	names    modelNames // matches a request's model to one of modelLim

	// The levels made: by a decision, when it needed one; nil or absent
	// where none was made, or where one that held no state was dropped. A
	// key or model level that a reload removed while it held state stays,
	// without limits, counting its requests in flight (so that they count if
	// its limits return).
	top    *localLevel
	keys   map[string]*localLevel
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
	// The buckets of a kind that a reload removed from the level, kept
	// while they are not full for a reload that restores it.
	reqOff, tokOff *rate.Limiter

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

// SetTenants replaces the limits; changed rates take effect at now. Levels
// (tenant, key, model) that remain keep their buckets and in-flight counts,
// and so do levels that it removes (see Local) until a reload finds them idle
// and full. A removed key or model level that still holds state stays in its
// tenant without limits, counting its requests in flight (so that they count
// if its limits return); a removed tenant is unknown to Admit. Levels that
// hold no state are dropped (a decision makes them again). The tenants'
// Models maps are kept, and only read: the caller must not change them.
func (l *Local) SetTenants(now time.Time, tenants []TenantConfig) {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.state.Load()
	ns := &localState{tenants: make(map[string]*localTenant, len(tenants))}
	for i := range tenants {
		tc := &tenants[i]
		lt := old.tenants[tc.Name]
		if lt == nil {
			if lt = l.retired[tc.Name]; lt != nil {
				delete(l.retired, tc.Name)
			} else {
				lt = &localTenant{}
			}
		}
		var keyLim map[string]Limits
		for _, k := range tc.Keys {
			if !k.Limits.IsZero() {
				if keyLim == nil {
					keyLim = make(map[string]Limits)
				}
				keyLim[k.ID] = k.Limits
			}
		}
		lt.mu.Lock()
		tnow := lt.monotonic(now)
		lt.lim, lt.keyLim, lt.modelLim = tc.Limits, keyLim, tc.Models
		lt.names = modelNames{lim: tc.Models, aliases: tc.ModelAliases, def: tc.defaultModel()}
		lt.top = refreshLevel(tnow, lt.top, tc.Limits, scopeTenant)
		lt.keys = refreshLevels(tnow, lt.keys, keyLim, scopeKey)
		lt.models = refreshLevels(tnow, lt.models, tc.Models, scopeModel)
		lt.mu.Unlock()
		ns.tenants[tc.Name] = lt
	}
	// Free what earlier reloads set aside and is now idle, then set aside
	// the tenants this one removes. A tenant removed now is never freed
	// in the same reload: an Admit that loaded the state before it may
	// still charge it.
	for name, lt := range l.retired {
		if !lt.holdsState(now) {
			delete(l.retired, name)
		}
	}
	for name, lt := range old.tenants {
		if ns.tenants[name] == nil {
			if l.retired == nil {
				l.retired = make(map[string]*localTenant)
			}
			l.retired[name] = lt
		}
	}
	l.state.Store(ns)
}

// refreshLevel gives the level lv (nil: none made) the limits lim (zero: the
// reload removed them, and the level's buckets are set aside) and returns
// it, or nil when it holds no state: a fresh level, made at the next
// decision, is the same.
func refreshLevel(now time.Time, lv *localLevel, lim Limits, scope Scope) *localLevel {
	if lv == nil {
		return nil
	}
	lv = updateLocalLevel(now, lv, lim, scope)
	if !lv.holdsState(now) {
		return nil
	}
	return lv
}

// refreshLevels refreshes each level of levels with its limits in lims
// (refreshLevel), and drops those that hold no state.
func refreshLevels(now time.Time, levels map[string]*localLevel, lims map[string]Limits, scope Scope) map[string]*localLevel {
	for name, lv := range levels {
		if refreshLevel(now, lv, lims[name], scope) == nil {
			delete(levels, name)
		}
	}
	if len(levels) == 0 {
		return nil // a map does not shrink: let it go
	}
	return levels
}

func putLevel(m map[string]*localLevel, name string, lv *localLevel) map[string]*localLevel {
	if m == nil {
		m = make(map[string]*localLevel)
	}
	m[name] = lv
	return m
}

// levels returns the levels that apply to a request of the tenant with
// keyID and model (the request's, matched to a configured one here, by
// its model or its adapter: resolveRequest): tenant, key, model, nil where
// none applies; the configured model it was matched to ("" for none), and
// whether by its adapter. The caller holds lt.mu, and
// now is monotonic (lt.monotonic). It makes the levels that apply and were
// not made yet, dropping first, at most once every levelSweep, the
// tenant's levels that hold no state; it does not allocate when they were
// all made.
func (lt *localTenant) levels(now time.Time, req *Request) (lv [3]*localLevel, model string, byAdapter bool) {
	keyID := req.KeyID
	model, byAdapter = lt.names.resolveRequest(req)
	lv = [3]*localLevel{lt.top, lt.keys[keyID], lt.models[model]}
	if lv[0] != nil && (lv[1] != nil || lt.keyLim[keyID].IsZero()) && (lv[2] != nil || lt.modelLim[model].IsZero()) {
		return lv, model, byAdapter
	}
	if now.Sub(lt.swept) >= levelSweep {
		lt.swept = now
		lt.top = refreshLevel(now, lt.top, lt.lim, scopeTenant)
		lt.keys = refreshLevels(now, lt.keys, lt.keyLim, scopeKey)
		lt.models = refreshLevels(now, lt.models, lt.modelLim, scopeModel)
	}
	if lt.top == nil {
		lt.top = updateLocalLevel(now, nil, lt.lim, scopeTenant)
	}
	if lt.keys[keyID] == nil {
		if lim := lt.keyLim[keyID]; !lim.IsZero() {
			lt.keys = putLevel(lt.keys, keyID, updateLocalLevel(now, nil, lim, scopeKey))
		}
	}
	if lt.models[model] == nil {
		if lim := lt.modelLim[model]; !lim.IsZero() {
			lt.models = putLevel(lt.models, model, updateLocalLevel(now, nil, lim, scopeModel))
		}
	}
	return [3]*localLevel{lt.top, lt.keys[keyID], lt.models[model]}, model, byAdapter
}

// holdsState reports whether the tenant differs from a fresh one at now:
// requests in flight, or a bucket not full, at any level.
func (lt *localTenant) holdsState(now time.Time) bool {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	now = lt.monotonic(now)
	if lt.top != nil && lt.top.holdsState(now) {
		return true
	}
	for _, m := range [2]map[string]*localLevel{lt.keys, lt.models} {
		for _, lv := range m {
			if lv.holdsState(now) {
				return true
			}
		}
	}
	return false
}

// holdsState reports whether the level differs from a fresh one at now:
// requests in flight, or a bucket (of a kind it limits or not) not full.
func (lv *localLevel) holdsState(now time.Time) bool {
	if lv.inflight.Load() != 0 {
		return true
	}
	for _, b := range [...]*rate.Limiter{lv.req, lv.tok, lv.reqOff, lv.tokOff} {
		if b != nil && !bucketFull(b, now) {
			return true
		}
	}
	return false
}

func bucketFull(b *rate.Limiter, now time.Time) bool {
	return b.TokensAt(now) >= float64(b.Burst())
}

func updateLocalLevel(now time.Time, lv *localLevel, lim Limits, scope Scope) *localLevel {
	if lv == nil {
		lv = &localLevel{}
	}
	lv.scope, lv.lim = scope, lim
	lv.req, lv.reqOff, lv.reqPerSec, lv.reqCap = updateBucket(now, lv.req, lv.reqOff, lim.RPM, lim.requestCapacity())
	lv.tok, lv.tokOff, lv.tokPerSec, lv.tokCap = updateBucket(now, lv.tok, lv.tokOff, lim.TPM, lim.TPM)
	return lv
}

// updateBucket sets the rate and capacity of a level's bucket of one kind:
// b is the bucket in use (nil: none), off the bucket of the kind a reload
// removed. It returns the bucket to use (nil: the kind has no limit) and the
// one to keep aside (a removed kind's bucket until it is full).
func updateBucket(now time.Time, b, off *rate.Limiter, perMinute, capacity int64) (on, aside *rate.Limiter, perSec, burst float64) {
	if perMinute <= 0 {
		if b != nil {
			off = b
		}
		if off != nil && bucketFull(off, now) {
			off = nil
		}
		return nil, off, 0, 0
	}
	if b == nil {
		b = off // restored: as spent as it was, refilled meanwhile at its old rate
	}
	r := rate.Limit(float64(perMinute) / 60)
	if b == nil {
		b = rate.NewLimiter(r, int(capacity)) // starts full
	} else {
		b.SetLimitAt(now, r)
		b.SetBurstAt(now, int(capacity))
	}
	return b, nil, float64(r), float64(capacity)
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

// Admit decides on req at now. It does not allocate, unless it makes a
// level (the first decision of its tenant, key or model, or the first since
// the level was dropped).
func (l *Local) Admit(_ context.Context, now time.Time, req *Request, d *Decision) (Ticket, error) {
	*d = Decision{}
	lt := l.state.Load().tenants[req.Tenant]
	if lt == nil {
		return Ticket{}, ErrUnknownTenant
	}
	lt.mu.Lock()
	now = lt.monotonic(now)
	a := localAdmission{now: now}
	a.lv, d.Model, d.ByAdapter = lt.levels(now, req)
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
			t.covered, t.chunk, t.cut = a.est, overrunChunk(a.tightest), lt.lim.OnOverrun == OverrunCut
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
		if v == nil || t.tokm&(1<<i) == 0 {
			continue
		}
		if v.tok != nil {
			adjustBucket(v.tok, now, n, int64(v.tokCap))
		} else if v.tokOff != nil { // set aside by a reload: see Reconcile
			adjustBucket(v.tokOff, now, n, int64(v.tokOff.Burst()))
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
		if v == nil {
			continue
		}
		b, capacity := v.tok, int64(v.tokCap)
		if b == nil {
			// A reload set the level's tpm aside after admission: the
			// charge made then is still corrected, so that a restored
			// limit finds its bucket spent by what the request used.
			if v.tokOff == nil || t.tokm&(1<<i) == 0 {
				continue
			}
			b, capacity = v.tokOff, int64(v.tokOff.Burst())
		}
		n := delta
		if t.tokm&(1<<i) == 0 { // tpm added by a reload after admission
			n = actual
		}
		adjustBucket(b, now, n, capacity)
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
