package slo

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goodput/goodput/export"
	"github.com/goodput/goodput/meter"
	"github.com/prometheus/client_golang/prometheus"
)

// TenantClasses says which class a tenant's requests are judged against.
type TenantClasses struct {
	// Name is the tenant.
	Name string
	// Class is the tenant's class. Empty: JudgerOptions.DefaultClass.
	Class string
	// ByModel and ByShape override Class per model and per shape of work
	// (a model override wins). ByModel is looked up by the name a request
	// gave, then by the configured model its limits matched
	// (meter.Record.MatchedModel). Nil: none.
	ByModel, ByShape map[string]string
}

// JudgerOptions configures a Judger.
type JudgerOptions struct {
	// Config holds the classes and the shape thresholds.
	Config Config
	// DefaultClass judges tenants that name no class, and every request when
	// no tenants are configured. Empty: such requests are not judged.
	DefaultClass string
	// Tenants lists the configured tenants. Nil: every tenant uses
	// DefaultClass.
	Tenants []TenantClasses
	// Labels chooses the tenant and model label values of each request
	// (export.Labeler bounds them). Nil: the values themselves, "other"
	// for one that is not valid UTF-8.
	Labels Labeler
	// Registry receives the SLO counters. Nil: a private registry.
	Registry prometheus.Registerer
	// MaxSeries bounds the live view's and the profile's series; requests of
	// series past it count under tenant and model "other". Zero:
	// defaultMaxSeries (512: 64 folded 24% of a soak's requests, 31 tenants
	// over 3 models and 4 classes, into "other", while Prometheus counted
	// each tenant apart).
	MaxSeries int
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
}

// Judger is the SLO stage of the gateway's record pipeline: it judges every
// record of a request that reached the gateway with a valid key, writes the
// verdict into the record (slo, good, miss_reasons in the request log) and
// feeds the counters, the live view and the workload profile. It has the
// method set of proxy.Sink: Begin when a request arrives, Record when it
// ends; put it before the sinks that read the verdict.
type Judger struct {
	metrics *Metrics
	tracker *Tracker
	profile *Profile
	shapes  ShapeThresholds
	classes map[string]*Class
	defName string
	now     func() time.Time
	labels  Labeler

	// res is the current configuration's resolvers. A request keeps its
	// tenant's resolver of when it began (Begin, meter.Live.Classes) and
	// is judged by it: a reload never touches a request in flight.
	res atomic.Pointer[resolvers]
	mu  sync.Mutex // serialises the publishing of resolvers

	// objSeen remembers the (tenant label, class) pairs whose objective
	// gauge is set, for tenants judged by the default class without being
	// configured (tenants named by a header): the gauge is set once, on
	// first sight. A plain map: a lookup allocates nothing.
	objMu   sync.RWMutex
	objSeen map[Key]struct{}
}

type resolvers struct {
	byTenant map[string]*resolver
	def      *resolver // nil when there is no default class
}

// noClass is what Begin keeps for a request whose tenant had no class (not
// configured, and no default_slo): it is not judged, whatever a reload
// changes meanwhile.
var noClass resolver

// Labeler chooses the metric label values of a request once, for every
// metric that counts it (export.Labeler implements it).
type Labeler interface {
	// Begin fills rec.Live when the request arrives, unless already set.
	Begin(rec *meter.Record)
	// End fills rec.Labels when the request ends, unless already set.
	End(rec *meter.Record)
	// Tenant returns the label value of a configured tenant.
	Tenant(name string) string
}

// plainLabels is the Labeler of the values themselves, those that can be
// label values (export.ValidLabel: not too long, UTF-8, no control
// characters); the others are "other".
type plainLabels struct{}

func plainLabel(v, empty string) string {
	switch {
	case v == "":
		return empty
	case !export.ValidLabel(v):
		return other
	}
	return v
}

// plainModel is the model label of rec: plainLabel's, "other" for a
// model named as a reserved label ("none", "unread": export.Reserved),
// whose series it would share, as the gateway's Labeler does.
func plainModel(rec *meter.Record) string {
	if export.Reserved(rec.Model, true) {
		return other
	}
	return plainLabel(rec.Model, export.NoModel(rec))
}

func (plainLabels) Begin(rec *meter.Record) {
	if rec.Live.Tenant == "" {
		rec.Live.Tenant, rec.Live.Model = plainLabel(rec.Tenant, other), plainModel(rec)
	}
}

func (plainLabels) End(rec *meter.Record) {
	if rec.Labels.Tenant == "" {
		rec.Labels.Tenant, rec.Labels.Model = plainLabel(rec.Tenant, other), plainModel(rec)
	}
}

func (plainLabels) Tenant(name string) string { return plainLabel(name, other) }

// NewJudger validates the options and returns a Judger.
func NewJudger(o JudgerOptions) (*Judger, error) {
	if err := o.Config.Validate(); err != nil {
		return nil, err
	}
	if o.DefaultClass != "" && o.Config.SLOs[o.DefaultClass] == nil {
		return nil, fmt.Errorf("default_slo: %q is not a class in slos", o.DefaultClass)
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxSeries == 0 {
		o.MaxSeries = defaultMaxSeries
	}
	if o.Labels == nil {
		o.Labels = plainLabels{}
	}
	m, err := newMetrics(o.Registry)
	if err != nil {
		return nil, err
	}
	start := o.Now()
	j := &Judger{
		metrics: m,
		tracker: newTracker(trackerOptions{Classes: o.Config.SLOs, Start: start, MaxSeries: o.MaxSeries, Now: o.Now}),
		profile: newProfile(profileOptions{Shapes: o.Config.Shapes, Start: start, MaxSeries: o.MaxSeries, Now: o.Now}),
		shapes:  o.Config.Shapes.withDefaults(),
		classes: o.Config.SLOs,
		defName: o.DefaultClass,
		now:     o.Now,
		labels:  o.Labels,
	}
	if err := j.setTenants(o.Tenants); err != nil {
		return nil, err
	}
	return j, nil
}

// setTenants replaces the tenants' classes. On error nothing changes.
func (j *Judger) setTenants(tenants []TenantClasses) error {
	publish, err := j.PrepareTenants(tenants)
	if err != nil {
		return err
	}
	publish()
	return nil
}

// PrepareTenants checks the tenants' classes of a configuration reload and
// builds them without changing anything: on error it returns the reasons;
// otherwise publish makes them the ones that requests beginning after it
// are judged by (it sets the objective gauges too). A reload publishes only
// once every other part of the gateway has accepted the configuration as
// well, so that no request begins with classes that a refusal would then
// take back. Reloads are serialised by their caller: publish replaces
// whatever is current with what was prepared.
func (j *Judger) PrepareTenants(tenants []TenantClasses) (publish func(), err error) {
	rs := &resolvers{byTenant: make(map[string]*resolver, len(tenants))}
	var errs []error
	if j.defName != "" {
		r, err := newResolver(j.classes, j.defName, nil, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("default_slo: %w", err))
		} else {
			r.dflt = true
		}
		rs.def = r
	}
	for i, t := range tenants {
		class := t.Class
		if class == "" {
			class = j.defName
		}
		if class == "" {
			if len(t.ByModel) > 0 || len(t.ByShape) > 0 {
				errs = append(errs, fmt.Errorf("tenants[%d] (%s): slo overrides need a class: set slo or default_slo", i, t.Name))
			}
			continue
		}
		r, err := newResolver(j.classes, class, t.ByModel, t.ByShape)
		if err != nil {
			errs = append(errs, fmt.Errorf("tenants[%d] (%s): %w", i, t.Name, err))
			continue
		}
		rs.byTenant[t.Name] = r
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return func() { j.publish(rs) }, nil
}

// publish makes rs the current configuration's resolvers.
func (j *Judger) publish(rs *resolvers) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.res.Store(rs)
	j.metrics.resetObjectives()
	j.objMu.Lock()
	j.objSeen = make(map[Key]struct{})
	j.objMu.Unlock()
	for name, r := range rs.byTenant {
		for cn, c := range r.classes() {
			j.metrics.setObjective(j.labels.Tenant(name), cn, c.Objective)
		}
	}
}

// resolver returns the class resolver of a tenant, or nil.
func (rs *resolvers) resolver(tenant string) *resolver {
	if r, ok := rs.byTenant[tenant]; ok {
		return r
	}
	return rs.def
}

// counted reports whether a record counts for a tenant at all: the
// denominator is every inference request that reached the gateway with a
// valid key.
func counted(rec *meter.Record) bool {
	return rec.Tenant != "" && rec.Outcome != meter.OutcomeUnauthorized && rec.Inference()
}

var reasonsAbortedOnly = Reasons(0).with(reasonAborted)

// leftBeforeFirstByte reports a client that went away before the upstream
// sent anything (queued in the gateway, or waiting for the engine).
func leftBeforeFirstByte(rec *meter.Record) bool {
	return rec.Outcome == meter.OutcomeClientAbort && rec.Status == meter.StatusClientClosed
}

// Begin counts an inference request with a tenant as an arrival in the
// workload profile, in flight until its record, and keeps its tenant's
// classes of the current configuration in the record (meter.Live.Classes):
// Judge judges the request by them whatever a reload changes meanwhile. It
// keeps that tenant's resolver only, not the configuration: a stream of
// hours across many reloads of a large tenants file holds no more. The proxy calls
// Begin for every request, those it refuses itself too (just before their
// record), so each is judged by the configuration current when it began.
//
// A request that asked to be generated in the background (a Responses API
// request with "background": true) is in flight from Begin as any, but
// counted as an arrival (at its t0) only at its record, and only when its
// answer generated it (the engine did not merely queue it:
// meter.Record.Deferred): an acknowledgement is no inference request, and
// never an arrival in the workload profile.
func (j *Judger) Begin(rec *meter.Record) {
	if rec.Tenant == "" || !rec.Inference() || rec.Live.Profile != nil || rec.Live.Classes != nil {
		return
	}
	r := j.res.Load().resolver(rec.Tenant)
	if r == nil {
		r = &noClass
	}
	rec.Live.Classes = r
	j.labels.Begin(rec)
	rec.Live.Profile = j.profile.beginLive(rec.Live.Tenant, rec.Live.Model, rec.Live.TentativeTenant, rec.Live.TentativeModel || rec.Live.TentativePair, rec.Start, !rec.Background)
}

// Judge judges a finished record, writes the verdict into it and feeds the
// counters, the live view and the profile. It is the gateway's judging step
// (proxy.Judge), run before the sinks that export the record. Only inference requests with a
// valid key are judged; requests refused for the client's own mistake
// (meter.Record.ClientMistake) only when their class counts them
// (Class.CountClientErrors).
func (j *Judger) Judge(rec *meter.Record) {
	now := j.now()
	// The tenant's classes of when the request began; of the current
	// configuration for a record whose Begin did not run.
	r, _ := rec.Live.Classes.(*resolver)
	rec.Live.Classes = nil
	cur := j.res.Load()
	switch r {
	case nil:
		r = cur.resolver(rec.Tenant)
	case &noClass:
		r = nil
	}
	sm, _ := rec.Live.Profile.(*profSeries)
	if sm != nil && rec.Background && counted(rec) {
		// Generated in its exchange after all: it arrived at its t0.
		j.profile.arriveLate(sm, rec.Start, now)
	}
	if sm == nil && !counted(rec) {
		return
	}
	j.labels.End(rec)
	if sm != nil {
		rec.Live.Profile = nil
		if counted(rec) {
			j.profile.observe(sm, rec, now, true)
		}
		j.profile.endLive(sm, now, rec.Labels.Tenant == rec.Live.Tenant, rec.Labels.Model == rec.Live.Model)
	}
	if !counted(rec) {
		return
	}
	if r == nil {
		return
	}
	given := rec.Model
	if rec.MatchedByAdapter {
		// The engine runs the adapter whatever the body's model says.
		given = rec.MatchedModel
	}
	name, class := r.resolve(given, rec.MatchedModel, j.shapes.classify(rec.ISL, rec.OSL))
	if !class.CountClientErrors && rec.ClientMistake() {
		return
	}
	v := judge(rec, class)
	if leftBeforeFirstByte(rec) && v.Reasons == reasonsAbortedOnly {
		// Client aborts count after the first byte. Before it,
		// the service had no chance to keep or break its promise unless
		// the wait already broke a bound (then it is a miss like any).
		return
	}
	rec.SLO, rec.Judged, rec.Good = name, true, v.Good
	rec.MissReasons = rec.MissReasons[:0]
	for i := Reason(0); i < numReasons; i++ {
		if v.Reasons.has(i) {
			rec.MissReasons = append(rec.MissReasons, i.String())
		}
	}
	k := Key{Tenant: rec.Labels.Tenant, Model: rec.Labels.Model, SLO: name}
	if r.dflt && cur.byTenant[rec.Tenant] == nil {
		// Not a configured tenant, then or now: its objective gauge is
		// set on first sight (configured tenants' gauges are set by
		// publish). Its class is default_slo in both configurations
		// (reloads keep the classes and default_slo), so the gauge is the
		// current configuration's whenever the request began. A request
		// of a tenant a reload configured or removed sets none: the
		// gauges show the current configuration's objectives, and no
		// gauge of a tenant or class it dropped comes back.
		j.noteObjective(Key{Tenant: k.Tenant, SLO: name}, class.Objective)
	}
	j.metrics.Observe(k, rec, v)
	j.tracker.observe(k, rec, v, now, true)
}

// noteObjective sets the objective gauge of k the first time k is seen.
func (j *Judger) noteObjective(k Key, objective float64) {
	j.objMu.RLock()
	_, seen := j.objSeen[k]
	j.objMu.RUnlock()
	if seen {
		return
	}
	j.objMu.Lock()
	if _, seen = j.objSeen[k]; !seen {
		j.objSeen[k] = struct{}{}
		j.metrics.setObjective(k.Tenant, k.SLO, objective)
	}
	j.objMu.Unlock()
}

// SLOHandler serves the live view (GET /admin/api/slo).
func (j *Judger) SLOHandler() http.Handler { return j.tracker.handler() }

// ProfileHandler serves the workload profile (GET /admin/api/profile).
func (j *Judger) ProfileHandler() http.Handler { return j.profile.handler() }
