package slo

import (
	"encoding/json"
	"maps"
	"math"
	"math/bits"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/goodput/goodput/meter"
)

// ProfileFormat and ProfileVersion identify the profile JSON (see
// PROFILE_FORMAT.md). The version changes when a field changes meaning or
// goes away; new fields may be added within a version.
const (
	ProfileFormat  = "goodput.profile"
	ProfileVersion = 1
)

// TokenBucketBounds are the inclusive upper bounds, in tokens, of the ISL
// and OSL histogram buckets: 16, 32, …, 131072, and one more bucket above
// the last bound.
var TokenBucketBounds = func() []int {
	b := make([]int, numTokenBuckets-1)
	for i := range b {
		b[i] = 16 << i
	}
	return b
}()

const numTokenBuckets = 15

// tokenBucket returns the histogram bucket of n tokens.
func tokenBucket(n int) int {
	if n <= 16 {
		return 0
	}
	return min(bits.Len64(uint64(n-1)>>4), numTokenBuckets-1)
}

// profileOptions configures a Profile. The zero value is usable.
type profileOptions struct {
	// Shapes classifies requests; zero fields take their defaults.
	Shapes ShapeThresholds
	// Start is when profiling began: rates, concurrency and idle time count
	// from the later of Start and the window's start. Zero: when newProfile
	// is called.
	Start time.Time
	// MaxSeries bounds the (tenant, model) series; beyond it new series are
	// folded into {other, other}. Zero: defaultMaxSeries.
	MaxSeries int
	// Now is the clock of Handler. Nil: time.Now.
	Now func() time.Time
}

// Profile records the shape of real traffic per tenant and per (tenant,
// model) (docs/MEASURES.md, Workload shape): ISL and OSL distributions
// (sketch quantiles, log2 histograms and their joint histogram), arrival rate, inter-arrival
// burstiness (gamma shape k = mean²/var), concurrency over time
// (time-weighted mean, p95 and peak) and the mix of shapes, over the same
// rolling windows as the live view. Its JSON (ProfileSnapshot, documented in
// PROFILE_FORMAT.md) is what a load generator needs to replay the traffic.
//
// The caller reports each request three times, all with the same bounded
// tenant and model labels: Begin when it arrives (once the model is known),
// End when it finishes (whatever the outcome), and Observe with its record.
// A tenant's own numbers are kept in a series of their own rather than
// merged from its models, because concurrency and inter-arrival times of a
// sum of streams cannot be rebuilt from the streams' summaries.
//
// Memory per series is bounded by its rings (84 slots, each with ISL and OSL
// sketches, a 15×15 joint histogram and a concurrency sketch): typically
// about 0.2 MiB, whatever the traffic; the number of series is bounded by
// MaxSeries.
//
// Safe for concurrent use; Begin, End and Observe do not allocate in steady
// state.
type Profile struct {
	shapes    ShapeThresholds
	start     time.Time
	maxSeries int
	now       func() time.Time

	mu        sync.RWMutex
	series    map[profKey]*profSeries
	tentative int           // series with a tentative key
	retired   []*profSeries // discarded tentative series, for reuse
}

type profKey struct {
	tenant, model string
	all           bool // the tenant's own series (every model)
}

type profSeries struct {
	key    profKey
	parent *profSeries // the tenant's own series; nil for that series itself
	// tentT, tentM: the tenant or the model of key holds no label slot
	// yet (see Profile.beginLive). Guarded by Profile.mu.
	tentT, tentM bool

	mu       sync.Mutex
	inflight int
	last     time.Time // concurrency is accounted up to here
	// recent holds the latest arrivals (Unix ns), oldest first, at most
	// recentArrivals of them, for the inter-arrival gaps (arrive); trimmed:
	// older ones were let go since the series began counting.
	recent  []int64
	trimmed bool
	minutes ring[profSlot, *profSlot]
	hours   ring[profSlot, *profSlot]
}

// recentArrivals is how many of its latest arrivals a series keeps to place
// one that is counted late among them (see arrive): up to 8 KiB a series,
// grown as needed. 300 requests sent at once through the gateway were
// counted up to a few hundred places from their arrivals' order.
const recentArrivals = 1024

type profSlot struct {
	arrivals uint64
	gaps     moments // inter-arrival gaps, seconds, by the later arrival's slot
	observed uint64  // records observed
	measured uint64  // ok records with ISL and OSL known
	isl, osl sketch
	joint    [numTokenBuckets][numTokenBuckets]uint32 // [isl bucket][osl bucket]
	shapes   shapeCounts
	conc     sketch // concurrency level weighted by nanoseconds at that level
	peak     int
}

func (s *profSlot) reset() {
	s.arrivals, s.observed, s.measured, s.peak = 0, 0, 0, 0
	s.gaps = moments{}
	s.isl.reset()
	s.osl.reset()
	s.joint = [numTokenBuckets][numTokenBuckets]uint32{}
	s.shapes = shapeCounts{}
	s.conc.reset()
}

// moments keeps count, mean and sum of squared deviations (Welford), merged
// with Chan et al.'s formula, for a numerically stable variance.
type moments struct {
	n, mean, m2 float64
}

func (m *moments) add(x float64) {
	m.n++
	d := x - m.mean
	m.mean += d / m.n
	m.m2 += d * (x - m.mean)
}

// remove takes x, added before, out again (add undone).
func (m *moments) remove(x float64) {
	if m.n <= 1 {
		*m = moments{}
		return
	}
	n := m.n - 1
	mean := (m.n*m.mean - x) / n
	m.m2 = max(m.m2-(x-m.mean)*(x-mean), 0)
	m.n, m.mean = n, mean
}

func (m *moments) merge(o moments) {
	if o.n == 0 {
		return
	}
	if m.n == 0 {
		*m = o
		return
	}
	n := m.n + o.n
	d := o.mean - m.mean
	m.mean += d * o.n / n
	m.m2 += o.m2 + d*d*m.n*o.n/n
	m.n = n
}

// variance is the population variance, NaN with no values.
func (m *moments) variance() float64 {
	if m.n == 0 {
		return math.NaN()
	}
	return m.m2 / m.n
}

// newProfile returns an empty profile.
func newProfile(o profileOptions) *Profile {
	p := &Profile{shapes: o.Shapes.withDefaults(), start: o.Start, maxSeries: o.MaxSeries, now: o.Now, series: map[profKey]*profSeries{}}
	if p.start.IsZero() {
		p.start = time.Now()
	}
	if p.maxSeries <= 0 {
		p.maxSeries = defaultMaxSeries
	}
	if p.now == nil {
		p.now = time.Now
	}
	return p
}

// maxRetired bounds the discarded tentative series kept for reuse.
const maxRetired = 4

// newSeriesLocked returns an empty series for k, reusing a retired one when
// there is one. Call with p.mu held for writing.
func (p *Profile) newSeriesLocked(k profKey, parent *profSeries) *profSeries {
	if n := len(p.retired); n > 0 {
		s := p.retired[n-1]
		p.retired = p.retired[:n-1]
		s.minutes.clear()
		s.hours.clear()
		s.key, s.parent, s.tentT, s.tentM = k, parent, false, false
		s.inflight, s.last = 0, p.start
		s.forgetArrivals()
		return s
	}
	return &profSeries{
		key:    k,
		parent: parent,
		// Idle time since profiling began counts at concurrency 0.
		last:    p.start,
		minutes: newRing[profSlot](time.Minute, minuteSlots),
		hours:   newRing[profSlot](time.Hour, hourSlots),
	}
}

// pairLocked returns the (tenant, model) series, whose parent is the
// tenant's own series, creating them if needed. tentT and tentM say the
// tenant or the model holds no label slot yet: a series created for such a
// value is tentative, kept only if a request confirms the value (see
// endLive). Beyond MaxSeries (or MaxSeries tentative series) new values
// are folded into "other". Call with p.mu held for writing.
func (p *Profile) pairLocked(tenant, model string, tentT, tentM bool) *profSeries {
	get := func(k, fold profKey, tentative bool, parent *profSeries) (*profSeries, bool) {
		if s := p.series[k]; s != nil {
			return s, false
		}
		full := len(p.series)-p.tentative >= p.maxSeries
		if tentative {
			full = p.tentative >= p.maxSeries
		}
		if full {
			k = fold
			if s := p.series[k]; s != nil {
				return s, false
			}
			tentative = false
		}
		s := p.newSeriesLocked(k, parent)
		p.series[k] = s
		return s, tentative
	}
	sa, newT := get(profKey{tenant: tenant, all: true}, profKey{tenant: other, all: true}, tentT, nil)
	if newT {
		p.setTentLocked(sa, true, false)
	}
	t := sa.key.tenant
	sm, newM := get(profKey{tenant: t, model: model}, profKey{tenant: t, model: other}, sa.tentT || tentM, sa)
	if newM {
		p.setTentLocked(sm, sa.tentT, tentM && sm.key.model == model)
	}
	return sm
}

// setTentLocked sets which parts of s's key are tentative, keeping the
// count of tentative series. Call with p.mu held for writing.
func (p *Profile) setTentLocked(s *profSeries, t, m bool) {
	was := s.tentT || s.tentM
	s.tentT, s.tentM = t, m
	switch now := t || m; {
	case now && !was:
		p.tentative++
	case was && !now:
		p.tentative--
	}
}

// pair returns the (tenant, model) series and the tenant's own series.
func (p *Profile) pair(tenant, model string) (*profSeries, *profSeries) {
	p.mu.RLock()
	sm := p.series[profKey{tenant: tenant, model: model}]
	p.mu.RUnlock()
	if sm == nil {
		p.mu.Lock()
		sm = p.pairLocked(tenant, model, false, false)
		p.mu.Unlock()
	}
	return sm, sm.parent
}

// Observe records a finished request's ISL, OSL and shape. Only ok requests
// with known ISL and OSL enter the distributions and the mix (a failed
// request's OSL is truncated); every record counts in `requests`, and the
// others count as shape unknown.
func (p *Profile) Observe(tenant, model string, rec *meter.Record, now time.Time) {
	sm, _ := p.pair(tenant, model)
	p.observe(sm, rec, now, false)
}

func (p *Profile) observe(sm *profSeries, rec *meter.Record, now time.Time, current bool) {
	shape := shapeUnknown
	if rec.Outcome == meter.OutcomeOK {
		shape = p.shapes.classify(rec.ISL, rec.OSL)
	}
	sm.observe(rec, shape, now, current)
	sm.parent.observe(rec, shape, now, current)
}

// beginLive records the arrival of a request at arrival (its t0), and
// returns its series (the request's place in the profile, whatever labels
// change before it ends) for observe and endLive. tentT and tentM say the
// tenant or the model holds no label slot yet (see pairLocked): the series
// of a value that no request confirms is discarded when its last request
// ends, so values the engine refused never take a series for good, and
// never appear in a snapshot.
func (p *Profile) beginLive(tenant, model string, tentT, tentM bool, arrival time.Time, arrives bool) *profSeries {
	now := p.now()
	// Begin under p.mu, so that a tentative series is never discarded
	// between being found and counting this request.
	p.mu.RLock()
	if sm := p.series[profKey{tenant: tenant, model: model}]; sm != nil {
		sm.begin(arrival, now, arrives)
		sm.parent.begin(arrival, now, arrives)
		p.mu.RUnlock()
		return sm
	}
	p.mu.RUnlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	sm := p.pairLocked(tenant, model, tentT, tentM)
	sm.begin(arrival, now, arrives)
	sm.parent.begin(arrival, now, arrives)
	return sm
}

// arriveLate counts the arrival at arrival of a request of sm in flight
// since then, begun without it (beginLive's arrives false): a background
// request known to be an inference only at its end.
func (p *Profile) arriveLate(sm *profSeries, arrival, now time.Time) {
	for _, s := range [2]*profSeries{sm, sm.parent} {
		s.mu.Lock()
		s.sync(now)
		s.arrive(arrival, s.minutes.get(s.minutes.id(arrival)), s.hours.get(s.hours.id(arrival)))
		s.mu.Unlock()
	}
}

// endLive records that the request of sm finished at now. keepT and keepM
// say the request confirmed its tenant and its model (they hold a label
// slot now); a tentative series left idle and unconfirmed is discarded.
func (p *Profile) endLive(sm *profSeries, now time.Time, keepT, keepM bool) {
	sa := sm.parent
	sm.end(now, true)
	sa.end(now, true)
	p.mu.RLock()
	tentative := sm.tentT || sm.tentM || sa.tentT
	p.mu.RUnlock()
	if !tentative {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if keepT && sa.tentT {
		p.setTentLocked(sa, false, false)
	}
	// sm's tenant part is confirmed with its tenant's series.
	p.setTentLocked(sm, sm.tentT && sa.tentT && !keepT, sm.tentM && !keepM)
	for _, s := range [2]*profSeries{sm, sa} {
		if !(s.tentT || s.tentM) || p.series[s.key] != s {
			continue
		}
		s.mu.Lock()
		idle := s.inflight == 0
		s.mu.Unlock()
		if !idle {
			continue
		}
		// Every request of a tenant counts in its own series too, so an
		// idle tenant series has no model series left in flight: those
		// are discarded at their own last end (sm first, here).
		delete(p.series, s.key)
		p.setTentLocked(s, false, false)
		if len(p.retired) < maxRetired {
			p.retired = append(p.retired, s)
		}
	}
}

// begin counts a request in flight from arrival (its t0, which may be some
// time past), and its arrival there unless arrives is false (arriveLate
// counts it), at cur, the current time (zero when not known: then the
// rings are not synced, see ring.sync).
func (s *profSeries) begin(arrival, cur time.Time, arrives bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !cur.IsZero() {
		s.sync(cur)
	}
	now := arrival
	s.advance(now)
	s.inflight++
	m := s.minutes.get(s.minutes.id(now))
	h := s.hours.get(s.hours.id(now))
	for _, sl := range [2]*profSlot{m, h} {
		if sl != nil {
			sl.peak = max(sl.peak, s.inflight)
		}
	}
	if arrives {
		s.arrive(now, m, h)
	}
}

// arrive counts an arrival at t in its slots m and h (nil when older than
// their ring) and accounts its inter-arrival gaps. An arrival is a request's
// t0, its head's read, but is counted only once its body has been read
// (Judger.Begin), so concurrent requests are counted out of the order of
// their arrivals: one counted after a later one is placed between its
// neighbours among the recent arrivals, and the gap between them, counted
// in the later one's slots, becomes the two gaps on either side of it.
// So the gaps are those between consecutive arrivals in time (the profile
// had dropped each arrival counted late, and measured the next gap from
// the latest one counted: 26 gaps of 299 for 300 requests sent at once,
// and a mean gap 11 times the real one). One older than every arrival
// kept, once older ones were let go (trimmed), has no known neighbour
// before it and adds no gap.
func (s *profSeries) arrive(t time.Time, m, h *profSlot) {
	for _, sl := range [2]*profSlot{m, h} {
		if sl != nil {
			sl.arrivals++
		}
	}
	ns := t.UnixNano()
	r := s.recent
	i := len(r) // its place: after every arrival at or before it
	for i > 0 && r[i-1] > ns {
		i--
	}
	switch {
	case i > 0 && i < len(r):
		// Between prev and next: the gap next−prev is replaced.
		prev, next := r[i-1], r[i]
		s.gapsAt(next, secs(next-prev), (*moments).remove)
		addGap(m, h, secs(ns-prev))
		s.gapsAt(next, secs(next-ns), (*moments).add)
	case i > 0:
		addGap(m, h, secs(ns-r[i-1]))
	case len(r) > 0 && !s.trimmed:
		// Before the first arrival the series counted: the gap to it.
		s.gapsAt(r[0], secs(r[0]-ns), (*moments).add)
	case len(r) > 0:
		return // before the arrivals kept: its neighbours are not known
	}
	if len(r) == recentArrivals {
		if i == 0 {
			s.trimmed = true
			return // it would be let go first
		}
		copy(r, r[1:i])
		i--
		r[i] = ns
		s.trimmed = true
	} else {
		r = append(r, 0)
		copy(r[i+1:], r[i:])
		r[i] = ns
	}
	s.recent = r
}

// forgetArrivals starts the inter-arrival gaps again from the next
// arrival.
func (s *profSeries) forgetArrivals() {
	s.recent, s.trimmed = s.recent[:0], false
}

func secs(ns int64) float64 { return float64(ns) / 1e9 }

func addGap(m, h *profSlot, gap float64) {
	for _, sl := range [2]*profSlot{m, h} {
		if sl != nil {
			sl.gaps.add(gap)
		}
	}
}

// gapsAt applies op with gap to the gaps of the slots of the arrival at
// ns (Unix ns), those still in the rings.
func (s *profSeries) gapsAt(ns int64, gap float64, op func(*moments, float64)) {
	t := time.Unix(0, ns)
	for _, sl := range [2]*profSlot{s.minutes.find(s.minutes.id(t)), s.hours.find(s.hours.id(t))} {
		if sl != nil {
			op(&sl.gaps, gap)
		}
	}
}

func (s *profSeries) end(now time.Time, current bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if current {
		s.sync(now)
	}
	s.advance(now)
	if s.inflight > 0 {
		s.inflight--
	}
}

// sync tells the rings that now is the current time (see ring.sync). Call
// with s.mu held. When the wall clock has stepped back, the concurrency
// time and the inter-arrival gaps start again from now: the time since the
// last one, on a clock that went back, is not known.
func (s *profSeries) sync(now time.Time) {
	m := s.minutes.sync(s.minutes.id(now))
	h := s.hours.sync(s.hours.id(now))
	if m || h {
		s.last = now
		s.forgetArrivals()
	}
}

// advance accounts the time from s.last to now at the current in-flight
// level into the slots it spans (only the part the rings can hold).
func (s *profSeries) advance(now time.Time) {
	if !now.After(s.last) {
		return
	}
	level := float64(s.inflight)
	k, z := sketchIndex(level)
	for _, r := range [2]*ring[profSlot, *profSlot]{&s.minutes, &s.hours} {
		from := s.last
		if keep := now.Add(-time.Duration(r.slot * int64(len(r.slots)))); keep.After(from) {
			from = keep
		}
		for from.Before(now) {
			id := r.id(from)
			to := time.Unix(0, (id+1)*r.slot)
			if to.After(now) {
				to = now
			}
			if sl := r.get(id); sl != nil {
				sl.conc.addAt(k, z, level, uint64(to.Sub(from)))
				sl.peak = max(sl.peak, s.inflight)
			}
			from = to
		}
	}
	s.last = now
}

func (s *profSeries) observe(rec *meter.Record, shape Shape, now time.Time, current bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if current {
		s.sync(now)
	}
	m := s.minutes.get(s.minutes.id(now))
	h := s.hours.get(s.hours.id(now))
	measured := shape != shapeUnknown
	var ik, ok int
	var iz, oz bool
	var isl, osl float64
	if measured {
		isl, osl = float64(rec.ISL), float64(rec.OSL)
		ik, iz = sketchIndex(isl)
		ok, oz = sketchIndex(osl)
	}
	for _, sl := range [2]*profSlot{m, h} {
		if sl == nil {
			continue
		}
		sl.observed++
		sl.shapes[shape]++
		if !measured {
			continue
		}
		sl.measured++
		sl.isl.addAt(ik, iz, isl, 1)
		sl.osl.addAt(ok, oz, osl, 1)
		c := &sl.joint[tokenBucket(rec.ISL)][tokenBucket(rec.OSL)]
		if *c < math.MaxUint32 { // saturates rather than wraps
			*c++
		}
	}
}

// ProfileSnapshot is the workload profile: the JSON of GET
// /admin/api/profile, documented in PROFILE_FORMAT.md.
type ProfileSnapshot struct {
	Format        string          `json:"format"`
	Version       int             `json:"version"`
	GeneratedAt   time.Time       `json:"generated_at"`
	Window        string          `json:"window"`
	WindowSeconds float64         `json:"window_seconds"`
	Shapes        ShapeThresholds `json:"shape_thresholds"`
	// TokenBuckets are the inclusive upper bounds of the ISL and OSL
	// histogram buckets; each histogram has one more bucket above the last.
	TokenBuckets []int           `json:"token_bucket_bounds"`
	Tenants      []TenantProfile `json:"tenants"`
}

// TenantProfile is one tenant's profile and its models'.
type TenantProfile struct {
	Tenant  string         `json:"tenant"`
	Profile *WorkProfile   `json:"profile"`
	Models  []ModelProfile `json:"models"`
}

// ModelProfile is one (tenant, model) profile.
type ModelProfile struct {
	Model   string       `json:"model"`
	Profile *WorkProfile `json:"profile"`
}

// WorkProfile is the traffic of one series over the window.
type WorkProfile struct {
	// Requests counts finished requests observed; Measured those (ok, with
	// ISL and OSL known) that make up the ISL/OSL distributions and mix.
	Requests uint64 `json:"requests"`
	Measured uint64 `json:"measured"`
	// Arrivals counts requests begun; ArrivalRate is per second.
	Arrivals     uint64       `json:"arrivals"`
	ArrivalRate  Num          `json:"arrival_rate_per_second"`
	InterArrival InterArrival `json:"inter_arrival"`
	ISL          TokenDist    `json:"isl"`
	OSL          TokenDist    `json:"osl"`
	// Joint lists the non-empty cells of the joint ISL × OSL histogram, by
	// bucket index into TokenBuckets, sorted by ISL then OSL bucket.
	Joint       []JointCell `json:"isl_osl"`
	Concurrency Concurrency `json:"concurrency"`
	Shapes      ShapeMix    `json:"shapes"`
}

// ActiveRate is the arrival rate of a series while its requests came: 1
// over its mean inter-arrival gap, (arrivals − 1) over the time from the
// first to the last, the rate its gaps and gamma shape describe; with
// fewer than one gap, its ArrivalRate (arrivals over the window). A
// window's ArrivalRate counts the idle time before its first arrival and
// after its last too: 300 requests sent at 50 a second 20 s after the
// gateway started had an ArrivalRate of 8.7 a second in a 5-minute
// window, replayed (bench --profile) and compared (compare --real) as
// such, the gaps' shape with six times their mean.
func ActiveRate(wp *WorkProfile) float64 {
	if ia := wp.InterArrival; ia.Count >= 1 && float64(ia.Mean) > 0 {
		return 1 / float64(ia.Mean)
	}
	return float64(wp.ArrivalRate)
}

// InterArrival summarises the gaps between consecutive arrivals.
type InterArrival struct {
	Count  uint64 `json:"count"`
	Mean   Num    `json:"mean_seconds"`
	StdDev Num    `json:"stddev_seconds"`
	// CV is StdDev/Mean: 1 for Poisson arrivals.
	CV Num `json:"cv"`
	// GammaShape is k = mean²/variance (population variance), vLLM bench's
	// --burstiness: 1 is Poisson, below 1 burstier, above 1 more regular;
	// null with fewer than two gaps or zero variance.
	GammaShape Num `json:"gamma_shape"`
}

// TokenDist is an ISL or OSL distribution, in tokens.
type TokenDist struct {
	Count uint64 `json:"count"`
	Mean  Num    `json:"mean"`
	Min   Num    `json:"min"`
	Max   Num    `json:"max"`
	P50   Num    `json:"p50"`
	P90   Num    `json:"p90"`
	P95   Num    `json:"p95"`
	P99   Num    `json:"p99"`
	// Buckets counts requests per bucket of TokenBuckets (one more entry,
	// for the values above the last bound).
	Buckets []uint64 `json:"buckets"`
}

// JointCell is one non-empty cell of the joint ISL × OSL histogram.
type JointCell struct {
	ISLBucket int    `json:"isl_bucket"`
	OSLBucket int    `json:"osl_bucket"`
	Count     uint64 `json:"count"`
}

// Concurrency summarises requests in flight over the window, weighted by
// time (idle time counts as 0).
type Concurrency struct {
	Mean Num `json:"mean"`
	// P95 is the smallest level at or below which the series spent 95% of
	// the time (levels above 100 are rounded within 0.5%).
	P95  Num `json:"p95"`
	Peak int `json:"peak"`
}

// ShapeMix is the mix of shapes of work.
type ShapeMix struct {
	// Counts per shape: chat, rag, longgen and unknown (not measured).
	Counts map[string]uint64 `json:"counts"`
	// Fractions of chat, rag and longgen among the measured requests.
	Fractions map[string]Num `json:"fractions"`
	// Traffic is the dominant shape, mixed, or unknown with no measured
	// request (see ShapeThresholds.DominantShare).
	Traffic string `json:"traffic"`
}

type profAgg struct {
	arrivals, observed, measured uint64
	gaps                         moments
	isl, osl                     sketch
	joint                        [numTokenBuckets][numTokenBuckets]uint64
	shapes                       shapeCounts
	conc                         sketch
	peak                         int
}

func (a *profAgg) addSlot(s *profSlot) {
	a.arrivals += s.arrivals
	a.observed += s.observed
	a.measured += s.measured
	a.gaps.merge(s.gaps)
	a.isl.merge(&s.isl)
	a.osl.merge(&s.osl)
	for i := range a.joint {
		for j := range a.joint[i] {
			a.joint[i][j] += uint64(s.joint[i][j])
		}
	}
	for i := range a.shapes {
		a.shapes[i] += s.shapes[i]
	}
	a.conc.merge(&s.conc)
	a.peak = max(a.peak, s.peak)
}

func (a *profAgg) profile(secs float64, th ShapeThresholds) *WorkProfile {
	w := &WorkProfile{
		Requests: a.observed,
		Measured: a.measured,
		Arrivals: a.arrivals,
	}
	if secs > 0 {
		w.ArrivalRate = Num(float64(a.arrivals) / secs)
	} else {
		w.ArrivalRate = Num(math.NaN())
	}
	g := a.gaps
	v := g.variance()
	mean := Num(math.NaN())
	if g.n > 0 {
		mean = Num(g.mean)
	}
	w.InterArrival = InterArrival{
		Count: uint64(g.n), Mean: mean, StdDev: Num(math.Sqrt(v)),
		CV: ratio(math.Sqrt(v), g.mean), GammaShape: Num(math.NaN()),
	}
	if g.n >= 2 && v > 0 {
		w.InterArrival.GammaShape = Num(g.mean * g.mean / v)
	}
	var islB, oslB [numTokenBuckets]uint64
	w.Joint = []JointCell{}
	for i := range a.joint {
		for j, c := range a.joint[i] {
			islB[i] += c
			oslB[j] += c
			if c > 0 {
				w.Joint = append(w.Joint, JointCell{ISLBucket: i, OSLBucket: j, Count: c})
			}
		}
	}
	w.ISL = tokenDistOf(&a.isl, islB[:])
	w.OSL = tokenDistOf(&a.osl, oslB[:])
	w.Concurrency = Concurrency{Mean: Num(a.conc.mean()), P95: Num(math.Round(a.conc.quantile(0.95))), Peak: a.peak}
	var classified uint64
	for _, s := range [...]Shape{shapeChat, shapeRAG, shapeLongGen} {
		classified += a.shapes[s]
	}
	w.Shapes = ShapeMix{Counts: map[string]uint64{}, Fractions: map[string]Num{}, Traffic: th.traffic(a.shapes).String()}
	for _, s := range [...]Shape{shapeChat, shapeRAG, shapeLongGen, shapeUnknown} {
		w.Shapes.Counts[s.String()] = a.shapes[s]
		if s != shapeUnknown {
			w.Shapes.Fractions[s.String()] = ratio(float64(a.shapes[s]), float64(classified))
		}
	}
	return w
}

func tokenDistOf(s *sketch, buckets []uint64) TokenDist {
	return TokenDist{
		Count: s.count(), Mean: Num(s.mean()), Min: Num(s.Min()), Max: Num(s.Max()),
		P50: Num(s.quantile(0.5)), P90: Num(s.quantile(0.9)), P95: Num(s.quantile(0.95)), P99: Num(s.quantile(0.99)),
		Buckets: append([]uint64(nil), buckets...),
	}
}

// snapshot returns the profile over window w at now, for every tenant or
// only tenant when it is not empty. Concurrency is accounted up to now.
func (p *Profile) snapshot(now time.Time, w Window, tenant string) *ProfileSnapshot {
	p.mu.RLock()
	series := make([]*profSeries, 0, len(p.series))
	for k, s := range p.series {
		if s.tentT || s.tentM {
			continue // not a label value yet
		}
		if tenant == "" || k.tenant == tenant {
			series = append(series, s)
		}
	}
	p.mu.RUnlock()

	snap := &ProfileSnapshot{
		Format: ProfileFormat, Version: ProfileVersion, GeneratedAt: now,
		Window: w.Name, Shapes: p.shapes, TokenBuckets: TokenBucketBounds,
		Tenants: []TenantProfile{},
	}
	n := windowSlots(w)
	secs := span(windowStart(w, now), p.start, now)
	tenants := map[string]*TenantProfile{}
	models := map[string][]ModelProfile{}
	for _, s := range series {
		a := &profAgg{}
		s.mu.Lock()
		s.advance(now)
		r := &s.minutes
		if w.Slot == time.Hour {
			r = &s.hours
		}
		cur := r.id(now)
		r.each(cur, n, a.addSlot)
		s.mu.Unlock()
		wp := a.profile(secs, p.shapes)
		if s.key.all {
			tenants[s.key.tenant] = &TenantProfile{Tenant: s.key.tenant, Profile: wp}
		} else {
			models[s.key.tenant] = append(models[s.key.tenant], ModelProfile{Model: s.key.model, Profile: wp})
		}
	}
	snap.WindowSeconds = secs
	for _, tn := range slices.Sorted(maps.Keys(tenants)) {
		tp := tenants[tn]
		tp.Models = models[tn]
		if tp.Models == nil {
			tp.Models = []ModelProfile{}
		}
		sort.Slice(tp.Models, func(i, j int) bool { return tp.Models[i].Model < tp.Models[j].Model })
		snap.Tenants = append(snap.Tenants, *tp)
	}
	return snap
}

// json returns the profile over window w at now as JSON.
func (p *Profile) json(now time.Time, w Window, tenant string) ([]byte, error) {
	return json.Marshal(p.snapshot(now, w, tenant))
}

// handler serves GET /admin/api/profile: the profile as JSON over the window
// named by the `window` query parameter (5m, 1h or 24h; default 1h), for
// every tenant or the one named by `tenant`.
func (p *Profile) handler() http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			rw.Header().Set("Allow", "GET, HEAD")
			http.Error(rw, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		q, err := adminQuery(r, "window", "tenant")
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		name := q["window"]
		if name == "" {
			name = "1h"
		}
		w, err := windowByName(name)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		b, err := p.json(p.now(), w, q["tenant"])
		if err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		rw.Header().Set("Cache-Control", "no-store")
		_, _ = rw.Write(b)
	})
}
