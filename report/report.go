package report

import (
	"encoding/json"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/goodput/goodput/slo"
)

// Format and Version identify the report's JSON document.
const (
	Format  = "goodput.report"
	Version = 1
)

// Num is a number that may be unknown: NaN (or an infinity) is unknown, and
// encodes as JSON null (and decodes back from null as NaN).
type Num = slo.Num

// unknown is the unknown number.
func unknown() Num { return Num(math.NaN()) }

// Known reports whether n is a known number.
func Known(n Num) bool {
	f := float64(n)
	return !math.IsNaN(f) && !math.IsInf(f, 0)
}

// Source kinds.
const (
	SourceAdmin      = "admin"
	SourcePrometheus = "prometheus"
)

// Report is one tenant's SLO report over a period; its JSON is the document
// `goodput report --format json` writes.
type Report struct {
	// Format is always "goodput.report"; Version is 1.
	Format  string `json:"format"`
	Version int    `json:"version"`
	// GeneratedAt is when the report was made.
	GeneratedAt time.Time `json:"generated_at"`
	// Tenant is the tenant the report is about.
	Tenant string `json:"tenant"`
	// Source says where the numbers come from.
	Source Source `json:"source"`
	// Period is the time the numbers cover, and the range that was asked for.
	Period Period `json:"period"`
	// SLO holds the objective, attainment and error budget.
	SLO SLOSummary `json:"slo"`
	// Goodput is the useful work: requests and output tokens of good
	// requests, per second of the period.
	Goodput Goodput `json:"goodput"`
	// Throughput is all the work, good or not, per second of the period.
	Throughput Throughput `json:"throughput"`
	// Latency holds the latency distributions.
	Latency Latency `json:"latency"`
	// Hours lists every hour of the period in order (clock hours in UTC,
	// the first and last clipped to the period). Null when the source has
	// no per-hour numbers.
	Hours []Hour `json:"hours"`
	// WorstHours are the hours with the lowest attainment (ties: more
	// misses first), at most the number asked for, among hours with
	// requests. Null when the source has no per-hour numbers.
	WorstHours []Hour `json:"worst_hours"`
	// Series are attainment and latency over the period, step by step;
	// null when the source has no history (the admin API).
	Series *Series `json:"series"`
	// Models breaks the tenant's traffic down by model, sorted by name.
	Models []Model `json:"models"`
	// Traffic is the shape of the tenant's traffic.
	Traffic Traffic `json:"traffic"`
	// Notes say how the numbers were obtained and what they cannot say.
	Notes []string `json:"notes"`
}

// Source names the data source of a report.
type Source struct {
	// Kind is "admin" (one gateway's live view) or "prometheus".
	Kind string `json:"kind"`
	// URL is the base URL that was read.
	URL string `json:"url"`
	// Window is the rolling window of the admin API that was used (5m, 1h
	// or 24h); empty for Prometheus.
	Window string `json:"window"`
}

// Period is the time a report covers.
type Period struct {
	// From and To bound the numbers.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Seconds is To − From: rates divide by it.
	Seconds float64 `json:"seconds"`
	// RequestedFrom and RequestedTo are the range that was asked for; they
	// differ from From and To when the source cannot give that range (the
	// admin API's rolling windows end now).
	RequestedFrom time.Time `json:"requested_from"`
	RequestedTo   time.Time `json:"requested_to"`
}

// SLOSummary is the SLO part of a report (docs/MEASURES.md, SLOs).
type SLOSummary struct {
	// Classes lists the SLO classes the tenant's requests were judged
	// against, sorted by name.
	Classes []Class `json:"classes"`
	// Objective is the target fraction of good requests; with several
	// classes, the request-weighted mean of their objectives.
	Objective Num `json:"objective"`
	// Requests counts every judged request (failures included: they are
	// misses, never dropped); Good those that met their class; Misses the
	// rest.
	Requests Num `json:"requests"`
	Good     Num `json:"good"`
	Misses   Num `json:"misses"`
	// Attainment is Good / Requests.
	Attainment Num `json:"attainment"`
	// Met says whether Attainment ≥ Objective; null when either is unknown.
	Met *bool `json:"met"`
	// ErrorBudget is 1 − Objective: the fraction of requests allowed to
	// miss. AllowedMisses is that many requests of this period:
	// Σ requests·(1 − objective) over the classes.
	ErrorBudget   Num `json:"error_budget"`
	AllowedMisses Num `json:"allowed_misses"`
	// ErrorBudgetUsed is Misses / AllowedMisses, the fraction of the
	// period's error budget spent (above 1 when overspent); it equals the
	// burn rate over the period. ErrorBudgetRemaining is 1 − ErrorBudgetUsed
	// (negative when overspent).
	ErrorBudgetUsed      Num `json:"error_budget_used"`
	ErrorBudgetRemaining Num `json:"error_budget_remaining"`
	// MissReasons counts misses per reason, in the order of slo.AllReasons;
	// a miss with several reasons counts once for each.
	MissReasons []ReasonCount `json:"miss_reasons"`
}

// Class is one SLO class in use.
type Class struct {
	Name string `json:"name"`
	// Objective is the class's objective (unknown when the source does not
	// give it per class).
	Objective Num `json:"objective"`
	// Requests and Good count the requests judged against this class
	// (unknown when the source does not break counts down by class).
	Requests Num `json:"requests"`
	Good     Num `json:"good"`
}

// ReasonCount is the number of misses for one reason.
type ReasonCount struct {
	Reason string `json:"reason"`
	Count  Num    `json:"count"`
}

// Goodput is good work per second (docs/MEASURES.md, SLOs).
type Goodput struct {
	GoodRequestsPerSecond     Num `json:"good_requests_per_second"`
	GoodOutputTokensPerSecond Num `json:"good_output_tokens_per_second"`
	// GoodOutputTokens is the total over the period.
	GoodOutputTokens Num `json:"good_output_tokens"`
}

// Throughput is all work per second.
type Throughput struct {
	RequestsPerSecond     Num `json:"requests_per_second"`
	OutputTokensPerSecond Num `json:"output_tokens_per_second"`
	// OutputTokens is the total over the period.
	OutputTokens Num `json:"output_tokens"`
}

// Latency holds the latency distributions, in seconds.
type Latency struct {
	// Method says how the percentiles were computed: "sketch" (the
	// gateway's quantile sketch, within 0.5%, ok requests only; mean and
	// max exact) or "histogram" (histogram_quantile over summed bucket
	// differences, interpolated within buckets; every request with the
	// measure; max unknown).
	Method string `json:"method"`
	TTFT   Dist   `json:"ttft_seconds"`
	TPOT   Dist   `json:"tpot_seconds"`
	ITL    Dist   `json:"itl_seconds"`
	E2E    Dist   `json:"e2e_seconds"`
	// TokenEvents says what ITL measured.
	TokenEvents TokenEvents `json:"token_events"`
}

// TokenEvents compares the output count (OSL) of streamed requests with
// their number of token events, over the requests of the latency figures
// (ok ones for the admin API, every one for Prometheus) that had token
// events and an output count from the engine. ITL is one gap per token
// event, as vllm bench serve counts it: where an event carried several
// tokens, its gap spans them all and mean ITL exceeds TPOT; where token
// events carried none (a role-only first chunk, a separate finish chunk),
// near-zero gaps pull ITL down.
type TokenEvents struct {
	// Requests is how many streamed requests were compared.
	Requests Num `json:"requests"`
	// OSLNotEvents counts those whose OSL differs from their number of
	// token events: OSLAboveEvents (more tokens than events: some events
	// carried several) plus OSLBelowEvents (fewer: some carried none).
	OSLNotEvents   Num `json:"osl_ne_events"`
	OSLAboveEvents Num `json:"osl_above_events"`
	OSLBelowEvents Num `json:"osl_below_events"`
	// MultiTokenEvents counts requests where an event is known to have
	// carried several tokens (from the engine's running counts, else OSL
	// above the events: a lower bound).
	MultiTokenEvents Num `json:"multi_token_events"`
}

// unknownTokenEvents has every count unknown.
func unknownTokenEvents() TokenEvents {
	u := unknown()
	return TokenEvents{u, u, u, u, u}
}

// Dist summarises a distribution: p50, p90, p95, p99, mean, max
// (docs/MEASURES.md, Percentiles).
type Dist struct {
	Count Num `json:"count"`
	Mean  Num `json:"mean"`
	P50   Num `json:"p50"`
	P90   Num `json:"p90"`
	P95   Num `json:"p95"`
	P99   Num `json:"p99"`
	Max   Num `json:"max"`
}

// unknownDist returns a distribution with every number unknown.
func unknownDist() Dist {
	u := unknown()
	return Dist{Count: u, Mean: u, P50: u, P90: u, P95: u, P99: u, Max: u}
}

// Hour holds the SLO numbers of one hour.
type Hour struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Requests, Good, Misses and Attainment as in SLOSummary.
	Requests   Num `json:"requests"`
	Good       Num `json:"good"`
	Misses     Num `json:"misses"`
	Attainment Num `json:"attainment"`
	// Reasons are the hour's miss reasons with a count above zero, most
	// frequent first (ties in slo.AllReasons order).
	Reasons []ReasonCount `json:"reasons"`
}

// Model holds one model's numbers.
type Model struct {
	Model      string `json:"model"`
	Requests   Num    `json:"requests"`
	Good       Num    `json:"good"`
	Attainment Num    `json:"attainment"`
	// GoodOutputTokensPerSecond is the model's goodput in tokens.
	GoodOutputTokensPerSecond Num `json:"good_output_tokens_per_second"`
	// OutputTokensPerSecond is its throughput in tokens.
	OutputTokensPerSecond Num `json:"output_tokens_per_second"`
}

// Traffic is the shape of the traffic (docs/MEASURES.md, Workload shape).
type Traffic struct {
	// Arrivals counts requests that reached the gateway; ArrivalRate is per
	// second.
	Arrivals    Num `json:"arrivals"`
	ArrivalRate Num `json:"arrival_rate_per_second"`
	// InterArrival summarises the gaps between arrivals; GammaShape is the
	// burstiness k = mean²/variance (1: Poisson, below 1: burstier).
	InterArrival InterArrival `json:"inter_arrival"`
	// ISL and OSL are the prompt and output token distributions.
	ISL TokenDist `json:"isl"`
	OSL TokenDist `json:"osl"`
	// Concurrency is the number of requests in flight over time.
	Concurrency Concurrency `json:"concurrency"`
	// Shapes is the mix of shapes of work.
	Shapes ShapeMix `json:"shapes"`
}

// InterArrival summarises inter-arrival gaps, in seconds.
type InterArrival struct {
	Mean       Num `json:"mean_seconds"`
	CV         Num `json:"cv"`
	GammaShape Num `json:"gamma_shape"`
}

// TokenDist is a token-count distribution.
type TokenDist struct {
	Count Num `json:"count"`
	Mean  Num `json:"mean"`
	Min   Num `json:"min"`
	Max   Num `json:"max"`
	P50   Num `json:"p50"`
	P90   Num `json:"p90"`
	P95   Num `json:"p95"`
	P99   Num `json:"p99"`
	// Buckets is the histogram, in order of upper bound; null when unknown.
	Buckets []Bucket `json:"buckets"`
}

// Bucket is one histogram bucket: the values in (previous bound, LE].
type Bucket struct {
	// LE is the inclusive upper bound, "+Inf" for the last bucket.
	LE    string `json:"le"`
	Count Num    `json:"count"`
}

// Concurrency summarises requests in flight.
type Concurrency struct {
	// Method is "exact" (time-weighted by the gateway) or "sampled" (the
	// in-flight gauge at Prometheus's evaluation steps).
	Method string `json:"method"`
	Mean   Num    `json:"mean"`
	P95    Num    `json:"p95"`
	Peak   Num    `json:"peak"`
}

// ShapeMix is the mix of the shapes of work.
type ShapeMix struct {
	// Counts per shape (chat, rag, longgen, unknown); null when unknown.
	Counts map[string]Num `json:"counts"`
	// Fractions of chat, rag and longgen among measured requests; null when
	// unknown.
	Fractions map[string]Num `json:"fractions"`
	// Traffic is the dominant shape, "mixed", or "unknown".
	Traffic string `json:"traffic"`
}

// newReport returns a report with every number unknown.
func newReport(tenant string, src Source, from, to time.Time) *Report {
	u := unknown()
	ud := unknownDist()
	td := TokenDist{Count: u, Mean: u, Min: u, Max: u, P50: u, P90: u, P95: u, P99: u}
	return &Report{
		Format: Format, Version: Version, Tenant: tenant, Source: src,
		Period: Period{RequestedFrom: from, RequestedTo: to},
		SLO: SLOSummary{
			Classes: []Class{}, Objective: u, Requests: u, Good: u, Misses: u, Attainment: u,
			ErrorBudget: u, AllowedMisses: u, ErrorBudgetUsed: u, ErrorBudgetRemaining: u,
			MissReasons: []ReasonCount{},
		},
		Goodput:    Goodput{u, u, u},
		Throughput: Throughput{u, u, u},
		Latency:    Latency{TTFT: ud, TPOT: ud, ITL: ud, E2E: ud, TokenEvents: unknownTokenEvents()},
		Models:     []Model{},
		Traffic: Traffic{
			Arrivals: u, ArrivalRate: u, InterArrival: InterArrival{u, u, u},
			ISL: td, OSL: td, Concurrency: Concurrency{Mean: u, P95: u, Peak: u},
			Shapes: ShapeMix{Traffic: "unknown"},
		},
		Notes: []string{},
	}
}

// ratio returns a/b, unknown when b is 0 or either is unknown.
func ratio(a, b Num) Num {
	if !Known(a) || !Known(b) || b == 0 {
		return unknown()
	}
	return a / b
}

// perSecond returns n / secs, unknown when secs ≤ 0.
func perSecond(n Num, secs float64) Num {
	if secs <= 0 {
		return unknown()
	}
	return ratio(n, Num(secs))
}

// finish derives the numbers that follow from the counts: misses,
// attainment, error budget, rates, and the worst hours.
func (r *Report) finish(worst int) {
	s := &r.SLO
	if Known(s.Requests) && Known(s.Good) {
		s.Misses = s.Requests - s.Good
	}
	s.Attainment = ratio(s.Good, s.Requests)
	r.fillBudget()
	secs := r.Period.Seconds
	r.Goodput.GoodRequestsPerSecond = perSecond(s.Good, secs)
	r.Goodput.GoodOutputTokensPerSecond = perSecond(r.Goodput.GoodOutputTokens, secs)
	r.Throughput.RequestsPerSecond = perSecond(s.Requests, secs)
	r.Throughput.OutputTokensPerSecond = perSecond(r.Throughput.OutputTokens, secs)
	r.Traffic.ArrivalRate = perSecond(r.Traffic.Arrivals, secs)
	for i := range r.Models {
		m := &r.Models[i]
		m.Attainment = ratio(m.Good, m.Requests)
	}
	for i := range r.Hours {
		h := &r.Hours[i]
		if Known(h.Requests) && Known(h.Good) {
			h.Misses = h.Requests - h.Good
		}
		h.Attainment = ratio(h.Good, h.Requests)
	}
	if r.Hours != nil {
		r.WorstHours = worstHours(r.Hours, worst)
	}
}

// fillBudget derives the objective and the error budget. With the classes'
// objectives and request counts known, the allowed misses add up per class
// (Σ requests·(1−objective)), as the gateway's live view and the recording
// rules compute them; otherwise a known overall objective is used. With one
// objective (one class, or classes of the same objective), the budget used
// is the miss ratio over that objective's budget (slo.ErrorBudget), so that
// a period at exactly its objective uses exactly 100%. A class without
// requests in the period is left out of that (as the live view leaves out
// a series without requests in its window): a Prometheus report lists a
// class whose counters did not grow.
func (r *Report) fillBudget() {
	s := &r.SLO
	allowed := Num(0)
	perClass := len(s.Classes) > 0
	for _, c := range s.Classes {
		if !Known(c.Objective) || !Known(c.Requests) {
			perClass = false
			break
		}
		allowed += c.Requests * Num(slo.ErrorBudget(float64(c.Objective)))
	}
	var obj Num
	one := false // the classes have one objective, obj
	if perClass {
		obj, one = oneObjective(s.Classes)
	}
	switch {
	case one:
		s.Objective = obj
	case perClass && Known(s.Requests) && s.Requests > 0:
		s.Objective = 1 - allowed/s.Requests
	}
	if !Known(s.Objective) {
		return
	}
	s.ErrorBudget = Num(slo.ErrorBudget(float64(s.Objective)))
	if Known(s.Requests) {
		if perClass {
			s.AllowedMisses = allowed
		} else {
			s.AllowedMisses = s.Requests * s.ErrorBudget
		}
	}
	if perClass && !one {
		s.ErrorBudgetUsed = ratio(s.Misses, s.AllowedMisses)
	} else {
		s.ErrorBudgetUsed = ratio(ratio(s.Misses, s.Requests), s.ErrorBudget)
	}
	if Known(s.ErrorBudgetUsed) {
		s.ErrorBudgetRemaining = 1 - s.ErrorBudgetUsed
	}
	if Known(s.Attainment) {
		met := float64(s.Attainment) >= float64(s.Objective)-1e-12
		s.Met = &met
	}
}

// oneObjective returns the objective of the classes cs (objectives and
// requests known) that had requests, when they all have the same; when
// none had any, of every class, when they all have the same.
func oneObjective(cs []Class) (Num, bool) {
	var o Num
	n := 0
	for _, idle := range []bool{false, true} {
		for _, c := range cs {
			if !idle && c.Requests == 0 {
				continue
			}
			if n > 0 && c.Objective != o {
				return 0, false
			}
			o, n = c.Objective, n+1
		}
		if n > 0 {
			break
		}
	}
	return o, n > 0
}

// worstHours returns up to n hours with requests, lowest attainment first;
// ties go to the hour with more misses, then the earlier hour.
func worstHours(hours []Hour, n int) []Hour {
	out := []Hour{}
	for _, h := range hours {
		if Known(h.Attainment) {
			out = append(out, h)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Attainment != b.Attainment {
			return a.Attainment < b.Attainment
		}
		if a.Misses != b.Misses {
			return a.Misses > b.Misses
		}
		return a.Start.Before(b.Start)
	})
	if n >= 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// reasonList turns counts by reason name into a list: every reason of
// slo.AllReasons in order (zero when absent from counts), then any other
// names in counts, sorted.
func reasonList(counts map[string]Num) []ReasonCount {
	all := slo.AllReasons()
	out := make([]ReasonCount, 0, len(all))
	known := make(map[string]bool, len(all))
	for _, r := range all {
		known[r.String()] = true
		c, ok := counts[r.String()]
		if !ok {
			c = 0
		}
		out = append(out, ReasonCount{Reason: r.String(), Count: c})
	}
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		if !known[k] {
			out = append(out, ReasonCount{Reason: k, Count: counts[k]})
		}
	}
	return out
}

// topReasons returns the reasons with a count above zero, most frequent
// first (ties keep their order).
func topReasons(rs []ReasonCount) []ReasonCount {
	out := []ReasonCount{}
	for _, r := range rs {
		if Known(r.Count) && r.Count > 0 {
			out = append(out, r)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Count > out[j].Count })
	return out
}

// JSON writes the report as indented JSON.
func (r *Report) JSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
