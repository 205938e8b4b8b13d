package export

import (
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/goodput/goodput/meter"
)

// Other is the label value that stands for every value not admitted, and
// for a value that cannot be a label (see ValidLabel).
const Other = "other"

// None is the model label of a request that names no model (a model
// listing, a health check, a body without "model").
const None = "none"

// Unread is the model label of a request on a metered route that ended
// before the gateway read its model (meter.Record.ModelUnread: a body
// refused unread, one that did not arrive in time, a key refused before
// the body; without gateway keys, a body the gateway cannot read, passed
// on). Its model is not known, so it is judged by its tenant's
// class, while a request that names none is judged by its default
// model's: under one label, the two would make one series of two
// classes.
const Unread = "unread"

// Reserved reports whether v is a value of a tenant label (model: false)
// or a model label the gateway gives a meaning of its own, which no
// configured value may take: Other for both (a tenant named "other" would
// share its series with the requests no label holds: without a valid key,
// past the label limit), None and Unread for models only (a request
// without a model, or whose model was not read; the gateway never gives a
// tenant label those values).
func Reserved(v string, model bool) bool {
	return v == Other || (model && (v == None || v == Unread))
}

// NoModel returns the model label of a request whose Model is empty:
// Unread when its model was not read (meter.Record.ModelUnread), else
// None.
func NoModel(rec *meter.Record) string {
	if rec.ModelUnread {
		return Unread
	}
	return None
}

// LabelSet bounds the values of one metric label (tenant, model): values
// from configuration are always admitted; when none are configured, up to
// Max distinct values are admitted, each with the first request with it
// that is accepted (see Labeler.End), so requests the engine refuses (a
// bogus model name) cannot take the slots of real values. Anything else is "other", so a
// client cannot grow the number of series without limit. A value that is
// not valid UTF-8, holds a control or format character or is longer than
// MaxLabelBytes is always "other" (see ValidLabel), configured or not.
//
// Safe for concurrent use: readers load an immutable snapshot, never a
// value a reload is writing.
type LabelSet struct {
	mu   sync.Mutex // serialises writers
	snap atomic.Pointer[labelSnap]
}

// labelSnap is one immutable state of a LabelSet.
type labelSnap struct {
	allowed map[string]struct{}
	fixed   bool // only configured values are admitted
	max     int
	gen     uint64 // how many times SetConfigured replaced the values (the Labeler's pairs follow it)
}

// NewLabelSet returns a set that admits the configured values, or, when
// configured is empty, up to max values first come first served (max 0
// means 32).
func NewLabelSet(configured []string, max int) *LabelSet {
	if max <= 0 {
		max = 32
	}
	s := &LabelSet{}
	s.snap.Store(configuredSnap(configured, max))
	return s
}

func configuredSnap(configured []string, max int) *labelSnap {
	sn := &labelSnap{allowed: make(map[string]struct{}, len(configured)), fixed: len(configured) > 0, max: max}
	for _, v := range configured {
		if valid(v) {
			sn.allowed[v] = struct{}{}
		}
	}
	return sn
}

// SetConfigured replaces the configured values (a reload). An empty list
// switches to first come, first served.
func (s *LabelSet) SetConfigured(configured []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.snap.Load()
	next := configuredSnap(configured, old.max)
	next.gen = old.gen + 1
	s.snap.Store(next)
}

// MaxLabelBytes is the longest value a tenant or model label may carry;
// a longer one is "other". Real model names are far shorter: a Hugging Face
// repository id (organisation/name, the name at most 96 characters) stays
// near 100 bytes, and a local snapshot path an engine serves as the model
// name (vLLM's default: the path it loaded,
// .../hub/models--<org>--<name>/snapshots/<40 hex digits>) is about 120,
// and under 240 even for the longest names in the default cache directory.
// Without a bound, a client naming a model a megabyte long, to an engine
// that ignores the model (llama.cpp), put it in every series of every
// /metrics scrape (which grew from 89 KB to 220 MB) and of the admin API.
const MaxLabelBytes = 256

// ValidLabel reports whether v can be a label value of its own: at most
// MaxLabelBytes long, valid UTF-8 (the Prometheus client refuses anything
// else), without control characters (a NUL, an escape or a line break in a
// label would reach every scrape and every dashboard as raw bytes) and
// without invisible ones (format characters such as a bidi override or a
// zero-width space, which make a value show as another: see invisible).
func ValidLabel(v string) bool { return valid(v) }

func valid(v string) bool {
	if v == "" || len(v) > MaxLabelBytes || !utf8.ValidString(v) {
		return false
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f || r >= 0x80 && invisible(r) {
			return false
		}
	}
	return true
}

// invisible reports a character beyond ASCII that a label may not hold
// because it shows nothing of its own, or changes how the others show: a
// C1 control character, a format character (Cf: bidi overrides, embeddings
// and isolates, zero-width spaces, the byte-order mark, soft hyphens,
// tags), a line or paragraph separator, and the other default-ignorable
// code points (Hangul fillers). On
// the live page and in a dashboard "a\u202eevil" showed as "alive", and
// "ac\u200bme" as "acme".
//
// The zero-width joiner and non-joiner and the variation selectors are
// allowed: they change only how the characters around them are drawn, not
// which ones show or in what order, and real names hold them (a Persian
// word with a ZWNJ, an emoji sequence, an ideographic variant).
func invisible(r rune) bool {
	if r == zwnj || r == zwj {
		return false
	}
	return r < 0xa0 || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Other_Default_Ignorable_Code_Point)
}

const (
	zwnj = '\u200c'
	zwj  = '\u200d'
)

// Admit gives v a slot, if one is free, as a value the gateway itself
// names (such as the tenant of requests that name none).
func (s *LabelSet) Admit(v string) { s.Final(v, true) }

// Value returns v if it is admitted, else "other". It never admits v.
func (s *LabelSet) Value(v string) string {
	if _, ok := s.snap.Load().allowed[v]; ok {
		return v // admitted values are valid ones
	}
	return Other
}

// Live returns the label of v for a request that begins: v if admitted;
// v and tentative when it is not but a slot is free (it keeps one only if
// the request is accepted, see Final); else "other".
func (s *LabelSet) Live(v string) (label string, tentative bool) {
	sn := s.snap.Load()
	if _, ok := sn.allowed[v]; ok {
		return v, false // admitted values are valid ones
	}
	if sn.fixed || len(sn.allowed) >= sn.max || !valid(v) {
		return Other, false
	}
	return v, true
}

// Final returns the label of v for a request that ended: v if admitted, or
// if accepted and a slot is free, which v then takes; else "other".
func (s *LabelSet) Final(v string, accepted bool) string {
	sn := s.snap.Load()
	if _, ok := sn.allowed[v]; ok {
		return v // admitted values are valid ones
	}
	if !accepted || sn.fixed || len(sn.allowed) >= sn.max || !valid(v) {
		return Other
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sn = s.snap.Load()
	if _, ok := sn.allowed[v]; ok {
		return v
	}
	if sn.fixed || len(sn.allowed) >= sn.max {
		return Other
	}
	// Copy on write: at most max admissions ever happen per snapshot.
	next := &labelSnap{allowed: make(map[string]struct{}, len(sn.allowed)+1), max: sn.max, gen: sn.gen}
	for k := range sn.allowed {
		next.allowed[k] = struct{}{}
	}
	next.allowed[v] = struct{}{}
	s.snap.Store(next)
	return v
}

// Labeler chooses the tenant and model label values of each request, once,
// for every metric (the request metrics here, the SLO counters, the live
// view and the profile of package slo):
//   - Begin, when the request arrives, fills rec.Live: what counts it in
//     flight (see LabelSet.Live);
//   - End, when it finishes, fills rec.Labels (see LabelSet.Final): a value
//     takes a label slot only with a request that is accepted (see End).
//
// Both are idempotent, so each sink may call them: the first one chooses. A
// request without a tenant (no valid key) is "other"; one without a model is
// "none", or "unread" when it ended before its model was read (NoModel).
// A request that names a model "none", "unread" or "other" is "other":
// under its own name it would share the series of the requests without a
// model, judged by other classes (and "other" would take a slot).
type Labeler struct {
	tenants, models *LabelSet
	pairs           pairSet
}

// NewLabeler returns a Labeler over the tenants' and the models' sets,
// with the default bound on tenant-and-model pairs (LimitPairs).
func NewLabeler(tenants, models *LabelSet) *Labeler {
	l := &Labeler{tenants: tenants, models: models}
	l.pairs.snap.Store(&pairSnap{pairs: map[labelPair]struct{}{}, held: map[string]int{}})
	return l
}

// LimitPairs sets how many tenant-and-model pairs may have series of their
// own (labels: max_pairs); 0 means the default: PairsPerValue times the
// largest of max_values and the values each set admits (every configured
// tenant, with gateway keys). Under the default bound each configured
// tenant keeps PairsPerValue places of its own: a tenant that has as many
// gets another only while the places the others have not used yet are
// left, so that no tenant's models, however many, push a configured
// tenant's first models into "other" (a review found four tenants of
// five, each naming 32 models to an engine that ignores the model, left
// the fifth none); a tenant a reload adds keeps its share even when the
// others took the places left, past the bound by as many. Call it before
// the first request.
//
// Each label is bounded alone, but every pair of a tenant and a model
// makes about 210 series on each route (histograms of TTFT, ITL, TPOT,
// E2E, the token counts and the gateway's own time): without gateway keys
// a client naming 32 tenants and 32 models, against an engine that ignores
// the model, made 1,056 pairs and 222,617 lines of /metrics (24 MB), and
// on ten routes could make 2.3 million series. Past the bound, a new
// pair's requests count under their tenant and the model "other" (a pair
// with "other", "none" or "unread" is always allowed: at most three a
// tenant). When both tenants and models are configured, their pairs are
// bounded by the configuration, and none is refused unless max_pairs is
// set.
func (l *Labeler) LimitPairs(n int) { l.pairs.max = n }

// PairsPerValue is how many tenant-and-model pairs the default bound
// (LimitPairs) allows per label value: a tenant using a few models, a
// model used by a few tenants.
const PairsPerValue = 4

// labelPair is a tenant label and a model label.
type labelPair struct{ tenant, model string }

// pairSet holds the pairs admitted (copy on write: readers load an
// immutable snapshot; at most the bound's admissions ever copy it, and
// each reload of the tenants once: followReload).
type pairSet struct {
	mu   sync.Mutex
	snap atomic.Pointer[pairSnap]
	max  int           // LimitPairs's; 0: the default
	gen  atomic.Uint64 // the tenants' set's gen the pairs follow (followReload)
}

// pairSnap is the pairs admitted, with how many each tenant holds.
type pairSnap struct {
	pairs map[labelPair]struct{}
	held  map[string]int // pairs by tenant
	// covered is the places of the configured tenants' own shares used:
	// the sum, over the tenants' set's values when its gen was followed,
	// of the pairs each holds, at most PairsPerValue.
	covered int
}

// admits reports whether a pair of tenant may be admitted now, of a
// bound of n pairs under the tenants' snapshot t: while there is room,
// and, under the default bound with configured tenants, without taking
// the places the configured tenants below their share have yet to use.
//
// A configured tenant's share is kept even past the bound: a tenant a
// reload added, after the others had taken the places left, had none (its
// every model under "other"), and the pairs are then at most the bound
// plus the shares of the tenants added so.
func (s *pairSnap) admits(l *Labeler, t *labelSnap, tenant string, n int) bool {
	if l.pairs.max > 0 || !t.fixed {
		return len(s.pairs) < n
	}
	if _, ok := t.allowed[tenant]; ok && s.held[tenant] < PairsPerValue {
		return true // a place of its own share
	}
	return len(s.pairs)+PairsPerValue*len(t.allowed)-s.covered < n
}

// followReload drops, once the tenants' set was replaced by a reload
// (LabelSet.SetConfigured, gateway keys), the pairs of the tenants it
// removed: they would keep their places for ever, and past enough of them
// a tenant configured now had its models counted under "other" however
// few pairs the tenants configured now had. (Their series stay, as a
// removed tenant's own do.)
func (l *Labeler) followReload() {
	t := l.tenants.snap.Load()
	if l.pairs.gen.Load() == t.gen {
		return
	}
	l.pairs.mu.Lock()
	defer l.pairs.mu.Unlock()
	l.followReloadLocked()
}

// followReloadLocked is followReload with l.pairs.mu held.
func (l *Labeler) followReloadLocked() {
	t := l.tenants.snap.Load()
	if l.pairs.gen.Load() == t.gen {
		return
	}
	old := l.pairs.snap.Load()
	next := &pairSnap{pairs: make(map[labelPair]struct{}, len(old.pairs)), held: map[string]int{}}
	for k := range old.pairs {
		if l.tenantAdmitted(t, k.tenant) {
			next.pairs[k] = struct{}{}
			next.held[k.tenant]++
		}
	}
	for tenant, n := range next.held {
		if _, ok := t.allowed[tenant]; ok {
			next.covered += min(n, PairsPerValue)
		}
	}
	l.pairs.snap.Store(next)
	l.pairs.gen.Store(t.gen)
}

// tenantAdmitted reports whether tenant, a tenant label, is one the
// tenants' snapshot t gives: one of its values, or "other".
func (l *Labeler) tenantAdmitted(t *labelSnap, tenant string) bool {
	_, ok := t.allowed[tenant]
	return ok || tenant == Other
}

// pairRoom returns how many pairs may be admitted, -1 for no bound.
func (l *Labeler) pairRoom() int {
	if l.pairs.max > 0 {
		return l.pairs.max
	}
	t, m := l.tenants.snap.Load(), l.models.snap.Load()
	if t.fixed && m.fixed {
		return -1
	}
	return PairsPerValue * max(t.max, m.max, len(t.allowed), len(m.allowed))
}

// pairKnown reports whether the pair (tenant, model) has series of its
// own (known: a model the gateway names itself always has, and with no
// bound every pair), and whether it has or may have them (free: known, or
// room left).
func (l *Labeler) pairKnown(tenant, model string) (known, free bool) {
	n := l.pairRoom()
	if n < 0 || Reserved(model, true) {
		return true, true
	}
	l.followReload()
	snap := l.pairs.snap.Load()
	if _, ok := snap.pairs[labelPair{tenant, model}]; ok {
		return true, true
	}
	return false, snap.admits(l, l.tenants.snap.Load(), tenant, n)
}

// admitPair returns model when the pair (tenant, model) has series of its
// own, or takes them now (accepted, with room left); else Other.
func (l *Labeler) admitPair(tenant, model string, accepted bool) string {
	if Reserved(model, true) || l.pairRoom() < 0 {
		return model
	}
	key := labelPair{tenant, model}
	if _, ok := l.pairs.snap.Load().pairs[key]; ok {
		return model
	}
	if !accepted {
		return Other
	}
	l.pairs.mu.Lock()
	defer l.pairs.mu.Unlock()
	l.followReloadLocked()
	snap := l.pairs.snap.Load()
	if _, ok := snap.pairs[key]; ok {
		return model
	}
	t := l.tenants.snap.Load()
	if !l.tenantAdmitted(t, tenant) {
		// A request begun before a reload removed its tenant keeps its
		// values (End), and its pair no place of the bound.
		return model
	}
	if !snap.admits(l, t, tenant, l.pairRoom()) {
		return Other
	}
	next := &pairSnap{pairs: make(map[labelPair]struct{}, len(snap.pairs)+1), held: make(map[string]int, len(snap.held)+1), covered: snap.covered}
	for k := range snap.pairs {
		next.pairs[k] = struct{}{}
	}
	for k, n := range snap.held {
		next.held[k] = n
	}
	next.pairs[key] = struct{}{}
	next.held[tenant]++
	if _, ok := t.allowed[tenant]; ok && next.held[tenant] <= PairsPerValue {
		next.covered++
	}
	l.pairs.snap.Store(next)
	return model
}

// Begin chooses rec.Live unless already chosen.
func (l *Labeler) Begin(rec *meter.Record) {
	if rec.Live.Tenant != "" {
		return
	}
	rec.Live.Tenant, rec.Live.TentativeTenant = l.tenants.Live(rec.Tenant)
	switch {
	case rec.Model == "":
		rec.Live.Model, rec.Live.TentativeModel = NoModel(rec), false
	case Reserved(rec.Model, true):
		rec.Live.Model, rec.Live.TentativeModel = Other, false
	default:
		rec.Live.Model, rec.Live.TentativeModel = l.models.Live(rec.Model)
	}
	switch known, free := l.pairKnown(rec.Live.Tenant, rec.Live.Model); {
	case !free:
		rec.Live.Model, rec.Live.TentativeModel = Other, false
	case !known:
		// The pair takes its series only with a request accepted (End).
		rec.Live.TentativePair = true
	}
}

// End chooses rec.Labels unless already chosen. A value takes a label
// slot only with a request that was not refused for the client's own
// mistake (meter.Record.ClientMistake), so refused junk (a bogus model
// name, 404) takes none, while a real tenant or model whose first requests
// fail (an engine still loading) has those misses counted as its own, not
// as "other". A model takes one only when the engine answered, too: the
// engine vouches for model names (it refuses unknown ones), and a request
// the gateway answered alone (rate-limited, engine unreachable, a client
// gone before the first byte) carries a name nobody checked. No engine
// checks a tenant named by a header.
//
// A value that held its slot when the request began keeps it to the end,
// even when a reload removed it meanwhile (a tenant removed while its
// streams run): a request is counted under one tenant, in the metrics as
// in the request log.
func (l *Labeler) End(rec *meter.Record) {
	if rec.Labels.Tenant != "" {
		return
	}
	accepted := !rec.ClientMistake()
	if live := rec.Live; live.Tenant != "" && live.Tenant == rec.Tenant && !live.TentativeTenant {
		rec.Labels.Tenant = live.Tenant
	} else {
		rec.Labels.Tenant = l.tenants.Final(rec.Tenant, accepted)
	}
	switch live := rec.Live; {
	case rec.Model == "":
		rec.Labels.Model = NoModel(rec)
	case Reserved(rec.Model, true):
		rec.Labels.Model = Other
	case live.Model == rec.Model && !live.TentativeModel:
		rec.Labels.Model = live.Model
	default:
		rec.Labels.Model = l.models.Final(rec.Model, accepted && rec.UpstreamStatus != 0)
	}
	// The pair takes its place as the tenant takes its slot: a model
	// here holds its own already (listed, or the engine vouched for it),
	// so a request the gateway answered alone (a 429, an engine
	// unreachable) counts under it, as before pairs were bounded.
	rec.Labels.Model = l.admitPair(rec.Labels.Tenant, rec.Labels.Model, accepted)
}

// Tenant returns the label of a configured tenant.
func (l *Labeler) Tenant(name string) string { return l.tenants.Value(name) }
