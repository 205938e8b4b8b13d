package slo

import (
	"encoding/json"
	"maps"
	"math"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/goodput/goodput/meter"
)

// defaultMaxSeries is the default limit on the series (tenant, model, SLO
// class) of a Tracker and on the (tenant, model) series of a Profile.
const defaultMaxSeries = 512

// trackerOptions configures a Tracker. The zero value is usable.
type trackerOptions struct {
	// Classes gives each class's objective for the error budget and burn
	// rate; a series whose class is not here reports them as null. Nil: none.
	Classes map[string]*Class
	// Start is when tracking began: rates divide by the time since the later
	// of Start and the window's start. Zero: when newTracker is called.
	Start time.Time
	// MaxSeries bounds the number of series; observations for new series
	// beyond it are folded into {other, other, class}, and beyond that into
	// {other, other, other}. Zero: defaultMaxSeries.
	MaxSeries int
	// Now is the clock of Handler. Nil: time.Now.
	Now func() time.Time
}

// Tracker is the live SLO view: per (tenant, model, SLO class) series it
// keeps request counts, miss reasons, output tokens and TTFT/TPOT/ITL/E2E
// sketches in ring buffers of per-minute slots (60, for the 5m and 1h
// windows) and per-hour slots (24, for 24h), and merges them on read.
//
// Memory per series is bounded by the rings whatever the traffic: 84 slots of
// four sketches, each holding only the pages of buckets its values touch
// (sketch): a busy series whose inter-token gaps span microseconds to
// seconds holds about 0.5 MiB (BenchmarkTrackerSeriesMemory), and no series
// more than about 10 MiB. The number of series is bounded by MaxSeries.
//
// Observe is safe for concurrent use: a read lock on the series map and a
// mutex per series, and it does not allocate in steady state (once a slot's
// sketches have grown, they are reused when the ring comes round).
type Tracker struct {
	start     time.Time
	maxSeries int
	now       func() time.Time

	mu      sync.RWMutex
	classes map[string]*Class
	series  map[Key]*trackSeries
}

type trackSeries struct {
	key       Key
	objective float64 // NaN when the class is unknown

	mu      sync.Mutex
	minutes ring[trackSlot, *trackSlot]
	hours   ring[trackSlot, *trackSlot]
}

// trackSlot holds one time slot of one series.
type trackSlot struct {
	requests, good          uint64
	outTokens, goodOutToken uint64
	reasons                 [numReasons]uint64
	ttft, tpot, itl, e2e    sketch      // seconds, ok requests only
	events                  eventCounts // ok requests only, as the ITL sketch
}

// eventCounts compare OSL with token events (meter.Record.EventTokens).
type eventCounts struct {
	requests, above, below, multi uint64
}

func (e *eventCounts) add(o *eventCounts) {
	e.requests += o.requests
	e.above += o.above
	e.below += o.below
	e.multi += o.multi
}

func (s *trackSlot) reset() {
	s.requests, s.good, s.outTokens, s.goodOutToken = 0, 0, 0, 0
	s.events = eventCounts{}
	s.reasons = [numReasons]uint64{}
	s.ttft.reset()
	s.tpot.reset()
	s.itl.reset()
	s.e2e.reset()
}

// newTracker returns an empty tracker.
func newTracker(o trackerOptions) *Tracker {
	t := &Tracker{start: o.Start, maxSeries: o.MaxSeries, now: o.Now, series: map[Key]*trackSeries{}}
	if t.start.IsZero() {
		t.start = time.Now()
	}
	if t.maxSeries <= 0 {
		t.maxSeries = defaultMaxSeries
	}
	if t.now == nil {
		t.now = time.Now
	}
	t.setClasses(o.Classes)
	return t
}

// SetClasses replaces the classes (on configuration reload): objectives of
// existing series are updated.
func (t *Tracker) SetClasses(classes map[string]*Class) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.setClasses(classes)
	for k, s := range t.series {
		s.mu.Lock()
		s.objective = objectiveOf(t.classes, k.SLO)
		s.mu.Unlock()
	}
}

func (t *Tracker) setClasses(classes map[string]*Class) {
	t.classes = make(map[string]*Class, len(classes))
	for n, c := range classes {
		if c != nil {
			cp := *c
			t.classes[n] = &cp
		}
	}
}

// seriesFor returns the series of k, creating it (or folding k into other)
// as needed.
func (t *Tracker) seriesFor(k Key) *trackSeries {
	t.mu.RLock()
	s := t.series[k]
	t.mu.RUnlock()
	if s != nil {
		return s
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, kk := range [...]Key{k, {other, other, k.SLO}, {other, other, other}} {
		if s := t.series[kk]; s != nil {
			return s
		}
		if len(t.series) < t.maxSeries || kk == (Key{other, other, other}) {
			s := &trackSeries{
				key:       kk,
				objective: objectiveOf(t.classes, kk.SLO),
				minutes:   newRing[trackSlot](time.Minute, minuteSlots),
				hours:     newRing[trackSlot](time.Hour, hourSlots),
			}
			t.series[kk] = s
			return s
		}
	}
	panic("unreachable")
}

// Observe counts one judged request at time now (when it ended). k names
// the series: bounded tenant and model labels and the class the request was
// judged against. Latency sketches take ok requests only (as vLLM's
// benchmark reports latencies of successful requests); counts, reasons and
// output tokens take every request. Observations older than the rings are
// dropped.
func (t *Tracker) Observe(k Key, rec *meter.Record, v Verdict, now time.Time) {
	t.observe(k, rec, v, now, false)
}

// observe is Observe; current says that now is the current time (the
// judging step's clock), which empties the rings when the wall clock has
// stepped back (see ring.sync).
func (t *Tracker) observe(k Key, rec *meter.Record, v Verdict, now time.Time, current bool) {
	s := t.seriesFor(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	mid, hid := s.minutes.id(now), s.hours.id(now)
	if current {
		_ = s.minutes.sync(mid)
		_ = s.hours.sync(hid)
	}
	m, h := s.minutes.get(mid), s.hours.get(hid)
	var out uint64
	if rec.OSL > 0 {
		out = uint64(rec.OSL)
	}
	for _, sl := range [2]*trackSlot{m, h} {
		if sl == nil {
			continue
		}
		sl.requests++
		sl.outTokens += out
		if v.Good {
			sl.good++
			sl.goodOutToken += out
		}
		for r := Reason(0); r < numReasons; r++ {
			if v.Reasons.has(r) {
				sl.reasons[r]++
			}
		}
	}
	if rec.Outcome != meter.OutcomeOK {
		return
	}
	if et := rec.EventTokens(); et != meter.EventTokensUnknown {
		var e eventCounts
		e.requests = 1
		switch et {
		case meter.EventTokensAbove:
			e.above = 1
		case meter.EventTokensBelow:
			e.below = 1
		}
		if rec.MultiTokenEvents() {
			e.multi = 1
		}
		for _, sl := range [2]*trackSlot{m, h} {
			if sl != nil {
				sl.events.add(&e)
			}
		}
	}
	var ms, hs [4]*sketch
	if m != nil {
		ms = [4]*sketch{&m.ttft, &m.tpot, &m.itl, &m.e2e}
	}
	if h != nil {
		hs = [4]*sketch{&h.ttft, &h.tpot, &h.itl, &h.e2e}
	}
	// The distributions are of the measures as the record and Prometheus
	// have them: a non-streamed response has no TTFT (its E2E stands in for
	// it only when it is judged).
	if rec.TTFT >= 0 {
		add2(ms[0], hs[0], rec.TTFT)
	}
	if rec.OSL > 1 && rec.TPOT >= 0 {
		add2(ms[1], hs[1], rec.TPOT)
	}
	for _, g := range rec.ITL {
		add2(ms[2], hs[2], g)
	}
	if r := &rec.ITLRest; r.Count > 0 {
		// The gaps after the ones the record keeps, in buckets that are the
		// sketch's (see addGaps): added with no further error.
		for _, sl := range [2]*sketch{ms[2], hs[2]} {
			if sl != nil {
				sl.addGaps(r)
			}
		}
	}
	if rec.E2E >= 0 {
		add2(ms[3], hs[3], rec.E2E)
	}
}

// add2 adds d (as seconds) to up to two sketches, computing its bucket once.
func add2(a, b *sketch, d time.Duration) {
	v := d.Seconds()
	k, z := sketchIndex(v)
	if a != nil {
		a.addAt(k, z, v, 1)
	}
	if b != nil {
		b.addAt(k, z, v, 1)
	}
}

// SLOSnapshot is the live view: the JSON of GET /admin/api/slo.
type SLOSnapshot struct {
	// Time is when the snapshot was taken.
	Time time.Time `json:"time"`
	// Tenants lists every tenant, sorted by name.
	Tenants []TenantSLO `json:"tenants"`
}

// TenantSLO is one tenant's view.
type TenantSLO struct {
	Tenant string `json:"tenant"`
	// SLOs lists the classes its requests were judged against.
	SLOs []string `json:"slos"`
	// Windows maps a window name (5m, 1h, 24h) to its numbers.
	Windows map[string]*WindowStats `json:"windows"`
	// Models breaks the tenant down by model, sorted by name.
	Models []ModelSLO `json:"models"`
}

// ModelSLO is one (tenant, model) view.
type ModelSLO struct {
	Model   string                  `json:"model"`
	SLOs    []string                `json:"slos"`
	Windows map[string]*WindowStats `json:"windows"`
}

// WindowStats holds the numbers of one window. Ratios that are undefined
// (no requests, unknown objective) are null in JSON.
type WindowStats struct {
	// Seconds is the time the window covers: from the later of its first
	// slot's start and the tracker's start, to the snapshot time.
	Seconds float64 `json:"seconds"`
	// Requests counts every judged request; Good those that met the class;
	// Misses the rest. Failed requests are misses, never dropped.
	Requests uint64 `json:"requests"`
	Good     uint64 `json:"good"`
	Misses   uint64 `json:"misses"`
	// MissReasons counts misses per reason (a miss can have several).
	MissReasons map[string]uint64 `json:"miss_reasons"`
	// Attainment is Good / Requests.
	Attainment Num `json:"attainment"`
	// Objective is the class objective; with several classes, the
	// request-weighted mean of their objectives.
	Objective Num `json:"objective"`
	// GoodRequestsPerSecond and GoodOutputTokensPerSecond are goodput;
	// RequestsPerSecond and OutputTokensPerSecond throughput (per Seconds).
	GoodRequestsPerSecond     Num    `json:"good_requests_per_second"`
	GoodOutputTokensPerSecond Num    `json:"good_output_tokens_per_second"`
	RequestsPerSecond         Num    `json:"requests_per_second"`
	OutputTokensPerSecond     Num    `json:"output_tokens_per_second"`
	OutputTokens              uint64 `json:"output_tokens"`
	GoodOutputTokens          uint64 `json:"good_output_tokens"`
	// BurnRate is the miss ratio over the error budget (1 − objective); with
	// several classes, misses over the misses their budgets allow,
	// Σ requests·(1 − objective). 1 spends the budget exactly.
	BurnRate Num `json:"burn_rate"`
	// ErrorBudgetRemaining is 1 − BurnRate: the share of this window's
	// error budget not spent (negative when overspent).
	ErrorBudgetRemaining Num `json:"error_budget_remaining"`
	// Latency distributions of ok requests, in seconds.
	TTFT Dist `json:"ttft_seconds"`
	TPOT Dist `json:"tpot_seconds"`
	ITL  Dist `json:"itl_seconds"`
	E2E  Dist `json:"e2e_seconds"`
	// TokenEvents says what ITL measured, over the same ok requests (nil
	// only when read from a gateway that predates it).
	TokenEvents *TokenEventStats `json:"token_events"`
}

// TokenEventStats compares OSL with the number of token events of ok
// streamed requests. ITL is one gap per token event (vLLM's rule): where
// events carried several tokens, a gap spans all of them and mean ITL
// exceeds TPOT; where token events carried none (a role-only first chunk,
// a separate finish chunk), gaps near zero pull ITL down.
type TokenEventStats struct {
	// Requests counts ok streamed requests with token events and an output
	// count from the engine (an estimated OSL is not compared).
	Requests uint64 `json:"requests"`
	// OSLNotEvents counts those whose OSL differs from their number of
	// token events: OSLAboveEvents (some events carried several tokens)
	// plus OSLBelowEvents (some token events carried none).
	OSLNotEvents   uint64 `json:"osl_ne_events"`
	OSLAboveEvents uint64 `json:"osl_above_events"`
	OSLBelowEvents uint64 `json:"osl_below_events"`
	// MultiTokenEvents counts requests where an event is known to have
	// carried several tokens: from tokens_per_event when the engine sent a
	// running count on every event, else OSL above the events (a lower
	// bound).
	MultiTokenEvents uint64 `json:"multi_token_events"`
}

// Dist summarises a distribution: percentiles by numpy's linear
// interpolation from the sketch (within 0.5%), exact mean and max.
type Dist struct {
	Count uint64 `json:"count"`
	Mean  Num    `json:"mean"`
	P50   Num    `json:"p50"`
	P90   Num    `json:"p90"`
	P95   Num    `json:"p95"`
	P99   Num    `json:"p99"`
	Max   Num    `json:"max"`
}

func distOf(s *sketch) Dist {
	return Dist{
		Count: s.count(), Mean: Num(s.mean()),
		P50: Num(s.quantile(0.50)), P90: Num(s.quantile(0.90)),
		P95: Num(s.quantile(0.95)), P99: Num(s.quantile(0.99)),
		Max: Num(s.Max()),
	}
}

// trackAgg accumulates slots and series for one window.
type trackAgg struct {
	requests, good, out, goodOut uint64
	reasons                      [numReasons]uint64
	allowed                      float64 // Σ requests·ErrorBudget(objective)
	// obj is the objective of every request counted, when objN is 1 (0: no
	// request yet; 2: several objectives, or one unknown).
	obj                  float64
	objN                 uint8
	ttft, tpot, itl, e2e sketch
	events               eventCounts
	slos                 map[string]bool
}

func (a *trackAgg) addSlot(s *trackSlot) {
	a.requests += s.requests
	a.good += s.good
	a.out += s.outTokens
	a.goodOut += s.goodOutToken
	for i := range a.reasons {
		a.reasons[i] += s.reasons[i]
	}
	a.ttft.merge(&s.ttft)
	a.tpot.merge(&s.tpot)
	a.itl.merge(&s.itl)
	a.e2e.merge(&s.e2e)
	a.events.add(&s.events)
}

func (a *trackAgg) merge(b *trackAgg) {
	a.requests += b.requests
	a.good += b.good
	a.out += b.out
	a.goodOut += b.goodOut
	for i := range a.reasons {
		a.reasons[i] += b.reasons[i]
	}
	a.allowed += b.allowed
	switch {
	case b.objN == 0:
	case a.objN == 0:
		a.obj, a.objN = b.obj, b.objN
	case a.objN != 1 || b.objN != 1 || a.obj != b.obj:
		a.objN = 2
	}
	a.ttft.merge(&b.ttft)
	a.tpot.merge(&b.tpot)
	a.itl.merge(&b.itl)
	a.e2e.merge(&b.e2e)
	a.events.add(&b.events)
	for n := range b.slos {
		if a.slos == nil {
			a.slos = map[string]bool{}
		}
		a.slos[n] = true
	}
}

func (a *trackAgg) stats(secs float64) *WindowStats {
	w := &WindowStats{
		Seconds:          secs,
		Requests:         a.requests,
		Good:             a.good,
		Misses:           a.requests - a.good,
		MissReasons:      make(map[string]uint64, numReasons),
		OutputTokens:     a.out,
		GoodOutputTokens: a.goodOut,
		Attainment:       ratio(float64(a.good), float64(a.requests)),
		Objective:        Num(math.NaN()),
		BurnRate:         ratio(float64(a.requests-a.good), a.allowed),
		TTFT:             distOf(&a.ttft),
		TPOT:             distOf(&a.tpot),
		ITL:              distOf(&a.itl),
		E2E:              distOf(&a.e2e),
		TokenEvents: &TokenEventStats{
			Requests:         a.events.requests,
			OSLNotEvents:     a.events.above + a.events.below,
			OSLAboveEvents:   a.events.above,
			OSLBelowEvents:   a.events.below,
			MultiTokenEvents: a.events.multi,
		},
	}
	for r := Reason(0); r < numReasons; r++ {
		w.MissReasons[reasonNames[r]] = a.reasons[r]
	}
	switch {
	case a.requests > 0 && a.objN == 1:
		// One objective: the configured one, and the miss ratio over its
		// budget, so that a window at exactly its objective burns exactly
		// 1 (misses/allowed is off by a rounding: 3/(30·0.1) = 0.99…9).
		w.Objective = Num(a.obj)
		w.BurnRate = ratio(float64(a.requests-a.good)/float64(a.requests), ErrorBudget(a.obj))
	case a.requests > 0:
		w.Objective = Num(1 - a.allowed/float64(a.requests))
	}
	w.ErrorBudgetRemaining = 1 - w.BurnRate
	if secs > 0 {
		w.GoodRequestsPerSecond = Num(float64(a.good) / secs)
		w.GoodOutputTokensPerSecond = Num(float64(a.goodOut) / secs)
		w.RequestsPerSecond = Num(float64(a.requests) / secs)
		w.OutputTokensPerSecond = Num(float64(a.out) / secs)
	} else {
		nan := Num(math.NaN())
		w.GoodRequestsPerSecond, w.GoodOutputTokensPerSecond = nan, nan
		w.RequestsPerSecond, w.OutputTokensPerSecond = nan, nan
	}
	return w
}

// snapshot returns the live view at now, for every tenant, or only for
// tenant when it is not empty.
func (t *Tracker) snapshot(now time.Time, tenant string) *SLOSnapshot {
	t.mu.RLock()
	series := make([]*trackSeries, 0, len(t.series))
	for k, s := range t.series {
		if tenant == "" || k.Tenant == tenant {
			series = append(series, s)
		}
	}
	t.mu.RUnlock()

	type mkey struct{ tenant, model string }
	nw := len(windows)
	tenants := map[string][]*trackAgg{}
	models := map[mkey][]*trackAgg{}
	spans := make([]float64, nw)
	for i, w := range windows {
		spans[i] = span(windowStart(w, now), t.start, now)
	}
	for _, s := range series {
		aggs := make([]*trackAgg, nw)
		s.mu.Lock()
		for i, w := range windows {
			r := &s.minutes
			if w.Slot == time.Hour {
				r = &s.hours
			}
			cur, n := r.id(now), windowSlots(w)
			a := &trackAgg{slos: map[string]bool{s.key.SLO: true}}
			r.each(cur, n, a.addSlot)
			// Objectives are per series, so allowed misses add up exactly.
			// A series without requests in the window adds none: one whose
			// class a reload removed has an unknown (NaN) objective, and
			// 0·NaN made every window of its tenant unknown.
			if a.requests > 0 {
				a.allowed = float64(a.requests) * ErrorBudget(s.objective)
				a.obj, a.objN = s.objective, 1
				if math.IsNaN(s.objective) {
					a.objN = 2
				}
			}
			aggs[i] = a
		}
		s.mu.Unlock()
		tenants[s.key.Tenant] = mergeAggs(tenants[s.key.Tenant], aggs)
		mk := mkey{s.key.Tenant, s.key.Model}
		models[mk] = mergeAggs(models[mk], aggs)
	}

	snap := &SLOSnapshot{Time: now, Tenants: []TenantSLO{}}
	view := func(aggs []*trackAgg) (map[string]*WindowStats, []string) {
		ws := make(map[string]*WindowStats, nw)
		for i, w := range windows {
			ws[w.Name] = aggs[i].stats(spans[i])
		}
		return ws, slices.Sorted(maps.Keys(aggs[0].slos))
	}
	for _, tn := range slices.Sorted(maps.Keys(tenants)) {
		ts := TenantSLO{Tenant: tn, Models: []ModelSLO{}}
		ts.Windows, ts.SLOs = view(tenants[tn])
		var ms []string
		for mk := range models {
			if mk.tenant == tn {
				ms = append(ms, mk.model)
			}
		}
		sort.Strings(ms)
		for _, m := range ms {
			mv := ModelSLO{Model: m}
			mv.Windows, mv.SLOs = view(models[mkey{tn, m}])
			ts.Models = append(ts.Models, mv)
		}
		snap.Tenants = append(snap.Tenants, ts)
	}
	return snap
}

// mergeAggs merges src into dst window by window; dst may be nil.
func mergeAggs(dst, src []*trackAgg) []*trackAgg {
	if dst == nil {
		dst = make([]*trackAgg, len(src))
		for i := range dst {
			dst[i] = &trackAgg{}
		}
	}
	for i := range src {
		dst[i].merge(src[i])
	}
	return dst
}

// json returns the live view at now as JSON (all tenants when tenant is
// empty).
func (t *Tracker) json(now time.Time, tenant string) ([]byte, error) {
	return json.Marshal(t.snapshot(now, tenant))
}

// handler serves GET /admin/api/slo: the live view as JSON, for every tenant
// or for the one named by the `tenant` query parameter.
func (t *Tracker) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		q, err := adminQuery(r, "tenant")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		b, err := t.json(t.now(), q["tenant"])
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(b)
	})
}
