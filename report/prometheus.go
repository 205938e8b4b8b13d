package report

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/goodput/goodput/internal/remote"
	"github.com/goodput/goodput/internal/urlredact"
)

// The metrics a report reads from Prometheus (exported by every gateway).
const (
	metricSLORequests  = "goodput_slo_requests_total"
	metricSLOMisses    = "goodput_slo_misses_total"
	metricGoodTokens   = "goodput_good_output_tokens_total"
	metricOutTokens    = "goodput_output_tokens_total"
	metricObjective    = "goodput_slo_objective"
	metricRequests     = "goodput_requests_total"
	metricInFlight     = "goodput_in_flight_requests"
	metricTTFT         = "goodput_time_to_first_token_seconds"
	metricTPOT         = "goodput_time_per_output_token_seconds"
	metricITL          = "goodput_inter_token_latency_seconds"
	metricE2E          = "goodput_request_duration_seconds"
	metricInputTokens  = "goodput_input_tokens"
	metricOutputTokens = "goodput_output_tokens"
	metricTokenEvents  = "goodput_token_event_requests_total"
	metricMultiToken   = "goodput_multi_token_event_requests_total"
)

// maxHourSteps is the most hourly steps one range query may ask for
// (Prometheus refuses more than 11,000 points per series).
const maxHourSteps = 11000

// promDuration formats d as a PromQL duration in milliseconds, e.g.
// "3600000ms" (d is rounded to the millisecond; at least 1ms).
func promDuration(d time.Duration) string {
	ms := d.Round(time.Millisecond).Milliseconds()
	if ms < 1 {
		ms = 1
	}
	return strconv.FormatInt(ms, 10) + "ms"
}

// selector returns metric{tenant="…"} with the tenant quoted for PromQL.
func selector(metric, tenant string) string {
	return metric + `{tenant=` + strconv.Quote(tenant) + `}`
}

// ExactIncrease returns a PromQL expression for how much each counter
// series of sel grew over the rng before the evaluation time, without
// increase()'s extrapolation:
//
//   - a series present rng ago that did not reset: its last value in the
//     range minus its value rng ago (exact, also for a replica that went
//     away before the end);
//   - a series that did not exist rng ago: its last value (a counter
//     created during the period counted everything from zero, and
//     increase() would miss its first scraped value);
//   - a series whose replica restarted between the range's start and its
//     first scrape in the range (its lowest value in the range is below
//     its value rng ago, though it did not reset within the range): its
//     last value, counting from zero after the drop as increase() counts
//     a reset (last minus start would be negative, or short);
//   - a series that reset within the range (a replica restarted):
//     increase(), which handles the reset but extrapolates.
//
// Sum the result with `sum by (…)` to add replicas up.
func ExactIncrease(sel, rng string) string {
	return fmt.Sprintf("(((last_over_time(%[1]s[%[2]s]) - %[1]s offset %[2]s) unless resets(%[1]s[%[2]s]) > 0)"+
		" unless min_over_time(%[1]s[%[2]s]) < %[1]s offset %[2]s)"+
		" or (last_over_time(%[1]s[%[2]s]) unless resets(%[1]s[%[2]s]) > 0)"+
		" or increase(%[1]s[%[2]s])", sel, rng)
}

// promQueries builds the PromQL expressions of a report.
type promQueries struct {
	tenant, rng string
}

func (p promQueries) inc(metric string) string {
	return ExactIncrease(selector(metric, p.tenant), p.rng)
}

// requests: good and miss counts by class and model.
func (p promQueries) requests() string {
	return "sum by (slo, model, result) (" + p.inc(metricSLORequests) + ")"
}

// reasons: misses by reason.
func (p promQueries) reasons() string {
	return "sum by (reason) (" + p.inc(metricSLOMisses) + ")"
}

// hour: good/miss counts and misses by reason in one query.
func (p promQueries) hour() string {
	return "sum by (result) (" + p.inc(metricSLORequests) + ") or sum by (reason) (" + p.inc(metricSLOMisses) + ")"
}

// tokens: good and all output tokens by model, told apart by a kind label.
func (p promQueries) tokens() string {
	return `label_replace(sum by (model) (` + p.inc(metricGoodTokens) + `), "kind", "good", "", "")` +
		` or label_replace(sum by (model) (` + p.inc(metricOutTokens) + `), "kind", "all", "", "")`
}

// tokenEvents: streamed requests by how OSL compares with their token
// events (osl_vs_events), and those with a multi-token event (kind
// "multi").
func (p promQueries) tokenEvents() string {
	return "sum by (osl_vs_events) (" + p.inc(metricTokenEvents) + ")" +
		` or label_replace(sum(` + p.inc(metricMultiToken) + `), "kind", "multi", "", "")`
}

// objective: each class's objective, the last value in the period (the
// stricter one when replicas disagree, as the recording rules do).
func (p promQueries) objective() string {
	return "max by (slo) (last_over_time(" + selector(metricObjective, p.tenant) + "[" + p.rng + "]))"
}

// arrivals: every inference request that reached the gateway, whatever
// its outcome; requests passed through unmetered (route other: model
// lists, health checks) are not arrivals, as in the gateway's profile.
func (p promQueries) arrivals() string {
	return "sum(" + ExactIncrease(metricRequests+`{tenant=`+strconv.Quote(p.tenant)+`,route!="other"}`, p.rng) + ")"
}

// resets: how many SLO counter series reset in the period.
func (p promQueries) resets() string {
	return "count(resets(" + selector(metricSLORequests, p.tenant) + "[" + p.rng + "]) > 0)"
}

// histogram: p50, p90, p95, p99, count and sum of a histogram, told apart
// by a q label.
func (p promQueries) histogram(metric string) string {
	buckets := "sum by (le) (" + p.inc(metric+"_bucket") + ")"
	var parts []string
	for _, q := range []struct{ name, v string }{{"p50", "0.5"}, {"p90", "0.9"}, {"p95", "0.95"}, {"p99", "0.99"}} {
		parts = append(parts, `label_replace(histogram_quantile(`+q.v+`, `+buckets+`), "q", "`+q.name+`", "", "")`)
	}
	parts = append(parts,
		`label_replace(sum(`+p.inc(metric+"_count")+`), "q", "count", "", "")`,
		`label_replace(sum(`+p.inc(metric+"_sum")+`), "q", "sum", "", "")`)
	return strings.Join(parts, " or ")
}

// buckets: a histogram's cumulative buckets.
func (p promQueries) buckets(metric string) string {
	return "sum by (le) (" + p.inc(metric+"_bucket") + ")"
}

// concurrency: time-sampled mean, p95 and peak of the in-flight gauge
// summed over replicas, at the given subquery step.
func (p promQueries) concurrency(step string) string {
	sub := "sum(" + selector(metricInFlight, p.tenant) + ")[" + p.rng + ":" + step + "]"
	return `label_replace(avg_over_time(` + sub + `), "q", "mean", "", "")` +
		` or label_replace(quantile_over_time(0.95, ` + sub + `), "q", "p95", "", "")` +
		` or label_replace(max_over_time(` + sub + `), "q", "peak", "", "")`
}

// promClient reads Prometheus's HTTP API with client_golang's API client
// (api/prometheus/v1): POST with a GET fallback, the API's JSON and error
// format, warnings.
type promClient struct {
	base     string // as given, for messages with any password redacted
	api      api.Client
	warnings map[string]bool
}

func newPromClient(base string, hc *http.Client) (*promClient, error) {
	ac, err := api.NewClient(api.Config{Address: base, Client: remote.LimitClient(hc, int64(maxBody))})
	if err != nil {
		return nil, fmt.Errorf("Prometheus URL: %w", err)
	}
	base = urlredact.String(base)
	return &promClient{base: base, api: ac, warnings: map[string]bool{}}, nil
}

// answer records the HTTP status and body of the one call made through
// it, for error messages.
type answer struct {
	api.Client
	status int
	body   []byte
}

func (a *answer) Do(ctx context.Context, req *http.Request) (*http.Response, []byte, error) {
	resp, body, err := a.Client.Do(ctx, req)
	if resp != nil {
		a.status = resp.StatusCode
	}
	a.body = body
	return resp, body, err
}

// explain turns an error of a call to path into a message that says what
// went wrong and where.
func (c *promClient) explain(err error, a *answer, path, expr string) error {
	var ae *v1.Error
	switch {
	case errors.Is(err, remote.ErrTooLarge):
		return fmt.Errorf("Prometheus's answer to %s%s is larger than %d MiB", c.base, path, maxBody>>20)
	case a.status == 0:
		return fmt.Errorf("cannot reach Prometheus at %s%s: %w", c.base, path, unwrapURLError(err))
	case errors.As(err, &ae) && (ae.Type == v1.ErrClient || ae.Type == v1.ErrServer || ae.Type == v1.ErrBadResponse):
		hint := ""
		if a.status == http.StatusNotFound {
			hint = " (is this the base URL of a Prometheus server?)"
		}
		return fmt.Errorf("Prometheus at %s answered %s with HTTP %d and not the API's JSON%s: %s", c.base, path, a.status, hint, snippet(a.body))
	case errors.As(err, &ae):
		return fmt.Errorf("Prometheus at %s refused the query (HTTP %d, %s: %s); query: %s", c.base, a.status, remote.Printable(string(ae.Type)), remote.Printable(ae.Msg), expr)
	default:
		return fmt.Errorf("Prometheus at %s: bad result: %s; query: %s", c.base, remote.Printable(err.Error()), expr)
	}
}

func (c *promClient) warn(ws v1.Warnings) {
	for _, w := range ws {
		c.warnings[remote.Printable(w)] = true
	}
}

// kindOf says what kind of number each series of a query's answer holds
// (remote.Kind): every value is checked against it.
type kindOf func(model.Metric) remote.Kind

// all: every series holds numbers of kind k.
func all(k remote.Kind) kindOf { return func(model.Metric) remote.Kind { return k } }

// histKinds: the series of promQueries.histogram and quantileSeries,
// told apart by q: a count, a sum of seconds or tokens, else percentiles.
func histKinds(m model.Metric) remote.Kind {
	switch m["q"] {
	case "count":
		return remote.Count
	case "sum":
		return remote.Amount
	}
	return remote.Quantile
}

// badValue is the error for a value v (at t, for a range query) of series
// m that cannot be of its kind k: the answer is malformed.
func (c *promClient) badValue(expr string, m model.Metric, v float64, k remote.Kind, t *model.Time) error {
	at := ""
	if t != nil {
		at = " at " + stamp(t.Time())
	}
	return fmt.Errorf("Prometheus at %s answered %s for %s%s, which cannot be %s; query: %s", c.base, remote.FormatValue(v), remote.Printable(m.String()), at, k, expr)
}

// query runs an instant query at t; every value must be of its series'
// kind.
func (c *promClient) query(ctx context.Context, expr string, t time.Time, kind kindOf) (model.Vector, error) {
	a := &answer{Client: c.api}
	v, ws, err := v1.NewAPI(a).Query(ctx, expr, t)
	if err != nil {
		return nil, c.explain(err, a, "/api/v1/query", expr)
	}
	c.warn(ws)
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, c.wrongType(v, model.ValVector, expr)
	}
	for _, s := range vec {
		if k := kind(s.Metric); !k.Holds(float64(s.Value)) {
			return nil, c.badValue(expr, s.Metric, float64(s.Value), k, nil)
		}
	}
	return vec, nil
}

// queryRange runs a range query; every value must be of its series'
// kind.
func (c *promClient) queryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration, kind kindOf) (model.Matrix, error) {
	a := &answer{Client: c.api}
	v, ws, err := v1.NewAPI(a).QueryRange(ctx, expr, v1.Range{Start: start, End: end, Step: step})
	if err != nil {
		return nil, c.explain(err, a, "/api/v1/query_range", expr)
	}
	c.warn(ws)
	m, ok := v.(model.Matrix)
	if !ok {
		return nil, c.wrongType(v, model.ValMatrix, expr)
	}
	for _, ser := range m {
		k := kind(ser.Metric)
		for _, p := range ser.Values {
			if !k.Holds(float64(p.Value)) {
				return nil, c.badValue(expr, ser.Metric, float64(p.Value), k, &p.Timestamp)
			}
		}
	}
	return m, nil
}

func (c *promClient) wrongType(v model.Value, want model.ValueType, expr string) error {
	got := "no"
	if v != nil {
		got = v.Type().String()
	}
	return fmt.Errorf("Prometheus at %s answered a %q result, want %q; query: %s", c.base, got, want.String(), expr)
}

// label returns the value of label name of s, with what a terminal would
// act on escaped (remote.Printable): the report shows it.
func label(s *model.Sample, name model.LabelName) string {
	return remote.Printable(string(s.Metric[name]))
}

// hourSpans splits [from, to) at clock hours (UTC): the first and last
// spans may be shorter than an hour.
func hourSpans(from, to time.Time) [][2]time.Time {
	var out [][2]time.Time
	for t := from; t.Before(to); {
		next := t.Truncate(time.Hour).Add(time.Hour)
		if next.After(to) {
			next = to
		}
		out = append(out, [2]time.Time{t, next})
		t = next
	}
	return out
}

// FromPrometheus builds a report from a Prometheus server at base (e.g.
// http://127.0.0.1:9090) that scrapes the gateways: counts are exact
// counter increases over the period summed over replicas (ExactIncrease),
// percentiles histogram_quantile over summed bucket increases, and the
// hours come from a range query with a one-hour step.
func FromPrometheus(ctx context.Context, base string, q Query) (*Report, error) {
	if err := q.normalise(); err != nil {
		return nil, err
	}
	base, err := BaseURL(base)
	if err != nil {
		return nil, fmt.Errorf("Prometheus URL: %w", err)
	}
	c, err := newPromClient(base, q.Client)
	if err != nil {
		return nil, err
	}
	rngDur := q.To.Sub(q.From).Round(time.Millisecond)
	if rngDur < time.Millisecond {
		return nil, fmt.Errorf("the period %s to %s is shorter than a millisecond", stamp(q.From), stamp(q.To))
	}
	if h := int64(rngDur / time.Hour); h > maxHourSteps+1 {
		// Before the queries, which a period from 1970 kept busy for a
		// minute before the hours refused it (a new user's probe).
		return nil, fmt.Errorf("the period has about %d hours; the hourly breakdown is limited to %d: ask for a shorter period", h, maxHourSteps)
	}
	r := newReport(q.Tenant, Source{Kind: SourcePrometheus, URL: c.base}, q.From, q.To) // its password masked: a report is shared
	r.GeneratedAt = q.Now
	r.Period.To = q.To
	r.Period.From = q.To.Add(-rngDur)
	r.Period.Seconds = rngDur.Seconds()
	b := &promReport{
		c: c, r: r, tenant: q.Tenant, at: q.To,
		pq:   promQueries{tenant: q.Tenant, rng: promDuration(rngDur)},
		step: min(max(rngDur/10000, time.Second), time.Minute).Round(time.Second),
	}
	for _, step := range []func(context.Context) error{
		b.requests, b.objectives, b.reasons, b.tokens, b.latency, b.tokenEvents, b.traffic, b.hours, b.series, b.resets,
	} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	r.finish(q.Worst)
	b.notes(c.base) // its password masked
	return r, nil
}

// promReport builds a report from Prometheus, one query (or a few) a step.
type promReport struct {
	c      *promClient
	r      *Report
	pq     promQueries
	tenant string
	at     time.Time     // the period's end, where instant queries look back from
	step   time.Duration // the concurrency gauge's sampling step

	classes, models map[string]*goodCount // by the requests step
	noData          bool                  // no SLO series for the tenant
	resetSeries     float64               // SLO counter series that reset
}

// goodCount counts requests and good ones.
type goodCount struct{ requests, good Num }

// requests: requests by class, model and result.
func (b *promReport) requests(ctx context.Context) error {
	res, err := b.c.query(ctx, b.pq.requests(), b.at, all(remote.Count))
	if err != nil {
		return err
	}
	b.classes, b.models = map[string]*goodCount{}, map[string]*goodCount{}
	var total, good Num
	for _, s := range res {
		v := Num(s.Value)
		isGood := label(s, "result") == "good"
		for _, m := range []struct {
			into map[string]*goodCount
			key  string
		}{{b.classes, label(s, "slo")}, {b.models, label(s, "model")}} {
			g := m.into[m.key]
			if g == nil {
				g = &goodCount{}
				m.into[m.key] = g
			}
			g.requests += v
			if isGood {
				g.good += v
			}
		}
		total += v
		if isGood {
			good += v
		}
	}
	b.r.SLO.Requests, b.r.SLO.Good = total, good
	b.noData = len(res) == 0
	return nil
}

// objectives: each class's objective, for the classes that had requests (or
// the tenant's one class when none had).
func (b *promReport) objectives(ctx context.Context) error {
	res, err := b.c.query(ctx, b.pq.objective(), b.at, all(remote.Fraction))
	if err != nil {
		return err
	}
	objectives := map[string]Num{}
	for _, s := range res {
		objectives[label(s, "slo")] = Num(s.Value)
	}
	r := b.r
	for _, name := range slices.Sorted(maps.Keys(b.classes)) {
		o, ok := objectives[name]
		if !ok {
			o = unknown()
		}
		g := b.classes[name]
		r.SLO.Classes = append(r.SLO.Classes, Class{Name: name, Objective: o, Requests: g.requests, Good: g.good})
	}
	if len(b.classes) == 0 && len(objectives) == 1 {
		// No requests, but the tenant's class is known.
		for name, o := range objectives {
			r.SLO.Classes = append(r.SLO.Classes, Class{Name: name, Objective: o, Requests: 0, Good: 0})
		}
	}
	return nil
}

// reasons: misses by reason.
func (b *promReport) reasons(ctx context.Context) error {
	res, err := b.c.query(ctx, b.pq.reasons(), b.at, all(remote.Count))
	if err != nil {
		return err
	}
	counts := map[string]Num{}
	for _, s := range res {
		counts[label(s, "reason")] += Num(s.Value)
	}
	b.r.SLO.MissReasons = reasonList(counts)
	return nil
}

// tokens: output tokens, good and all, in total and by model (with each
// model's requests).
func (b *promReport) tokens(ctx context.Context) error {
	res, err := b.c.query(ctx, b.pq.tokens(), b.at, all(remote.Count))
	if err != nil {
		return err
	}
	r := b.r
	goodTok, allTok := map[string]Num{}, map[string]Num{}
	r.Goodput.GoodOutputTokens, r.Throughput.OutputTokens = 0, 0
	for _, s := range res {
		v := Num(s.Value)
		if label(s, "kind") == "good" {
			goodTok[label(s, "model")] += v
			r.Goodput.GoodOutputTokens += v
		} else {
			allTok[label(s, "model")] += v
			r.Throughput.OutputTokens += v
		}
	}
	for _, name := range slices.Sorted(maps.Keys(b.models)) {
		g := b.models[name]
		r.Models = append(r.Models, Model{
			Model: name, Requests: g.requests, Good: g.good,
			GoodOutputTokensPerSecond: perSecond(goodTok[name], r.Period.Seconds),
			OutputTokensPerSecond:     perSecond(allTok[name], r.Period.Seconds),
		})
	}
	return nil
}

// latency: the latency histograms' percentiles, count and mean.
func (b *promReport) latency(ctx context.Context) error {
	r := b.r
	r.Latency.Method = "histogram"
	for _, h := range []struct {
		metric string
		into   *Dist
	}{{metricTTFT, &r.Latency.TTFT}, {metricTPOT, &r.Latency.TPOT}, {metricITL, &r.Latency.ITL}, {metricE2E, &r.Latency.E2E}} {
		vals, err := b.c.labelled(ctx, b.pq.histogram(h.metric), b.at, histKinds)
		if err != nil {
			return err
		}
		*h.into = histDist(vals)
	}
	return nil
}

// tokenEvents: what ITL measured, OSL against token events. No series at
// all (a gateway that predates these counters) leaves the counts unknown.
func (b *promReport) tokenEvents(ctx context.Context) error {
	res, err := b.c.query(ctx, b.pq.tokenEvents(), b.at, all(remote.Count))
	if err != nil || len(res) == 0 {
		return err
	}
	te := TokenEvents{0, 0, 0, 0, 0}
	for _, s := range res {
		v := Num(s.Value)
		switch {
		case label(s, "kind") == "multi":
			te.MultiTokenEvents += v
		case label(s, "osl_vs_events") == "above":
			te.Requests += v
			te.OSLAboveEvents += v
		case label(s, "osl_vs_events") == "below":
			te.Requests += v
			te.OSLBelowEvents += v
		default:
			te.Requests += v
		}
	}
	te.OSLNotEvents = te.OSLAboveEvents + te.OSLBelowEvents
	b.r.Latency.TokenEvents = te
	return nil
}

// traffic: arrivals, ISL and OSL, and the sampled concurrency.
func (b *promReport) traffic(ctx context.Context) error {
	res, err := b.c.query(ctx, b.pq.arrivals(), b.at, all(remote.Count))
	if err != nil {
		return err
	}
	r := b.r
	r.Traffic.Arrivals = 0
	for _, s := range res {
		r.Traffic.Arrivals += Num(s.Value)
	}
	for _, t := range []struct {
		metric string
		into   *TokenDist
	}{{metricInputTokens, &r.Traffic.ISL}, {metricOutputTokens, &r.Traffic.OSL}} {
		vals, err := b.c.labelled(ctx, b.pq.histogram(t.metric), b.at, histKinds)
		if err != nil {
			return err
		}
		d := histDist(vals)
		*t.into = TokenDist{Count: d.Count, Mean: d.Mean, Min: unknown(), Max: unknown(), P50: d.P50, P90: d.P90, P95: d.P95, P99: d.P99}
		res, err := b.c.query(ctx, b.pq.buckets(t.metric), b.at, all(remote.Count))
		if err != nil {
			return err
		}
		t.into.Buckets = histBuckets(res)
	}
	vals, err := b.c.labelled(ctx, b.pq.concurrency(promDuration(b.step)), b.at, all(remote.Amount))
	if err != nil {
		return err
	}
	r.Traffic.Concurrency = Concurrency{Method: "sampled", Mean: vals.get("mean"), P95: vals.get("p95"), Peak: vals.get("peak")}
	r.Traffic.Shapes = ShapeMix{Traffic: "unknown"}
	return nil
}

// hours: the per-hour counts (promHours).
func (b *promReport) hours(ctx context.Context) error {
	hours, err := promHours(ctx, b.c, b.tenant, b.r.Period.From, b.r.Period.To)
	if err != nil {
		return err
	}
	b.r.Hours = hours
	return nil
}

// resets: how many SLO counter series reset, to say when increase() had to
// be used.
func (b *promReport) resets(ctx context.Context) error {
	res, err := b.c.query(ctx, b.pq.resets(), b.at, all(remote.Count))
	if err != nil {
		return err
	}
	for _, s := range res {
		b.resetSeries += float64(s.Value)
	}
	return nil
}

// notes says where the numbers come from and what they cannot tell.
func (b *promReport) notes(base string) {
	r := b.r
	r.Notes = append(r.Notes,
		fmt.Sprintf("Source: Prometheus at %s, %s to %s, every replica it scrapes. Counts are the growth of the gateways' counters over the period (last value in the period minus the value at its start, a series created during the period, or restarted before its first scrape in it, counting from zero), summed over replicas: exact, not extrapolated.", base, stamp(r.Period.From), stamp(r.Period.To)))
	if b.resetSeries > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%g SLO counter series restarted during the period (a replica restarted): for those, counts come from increase(), which extrapolates and may not be whole numbers.", b.resetSeries))
	}
	if b.noData {
		r.Notes = append(r.Notes, fmt.Sprintf("Prometheus has no %s series for tenant %q in this period: check the tenant name, that Prometheus scrapes the gateways' admin listeners, and that the gateways judge the tenant's requests (they need SLO classes and a class for the tenant).", metricSLORequests, b.tenant))
	}
	for _, c := range r.SLO.Classes {
		if !Known(c.Objective) {
			r.Notes = append(r.Notes, fmt.Sprintf("The objective of class %q is unknown: Prometheus has no %s for tenant %q and that class (gateways export it for configured tenants), so the error budget is unknown.", c.Name, metricObjective, b.tenant))
		}
	}
	r.Notes = append(r.Notes,
		"Latency and token percentiles are histogram_quantile over the replicas' summed bucket increases: interpolated linearly within the histogram buckets, so they are only as precise as the buckets; they cover every request with the measure (not only ok ones); max and min are unknown.",
		"The time series have one point per step (the step it ends): attainment from the SLO counters, TTFT and ITL p50 and p99 from histogram_quantile over the step's bucket growth; a step without requests has no point.",
		"Worst hours are clock hours (UTC), the first and last clipped to the period, from a range query with a one-hour step.",
		"Concurrency is the in-flight gauge summed over replicas, sampled every "+b.step.String()+" (a sampled estimate: short peaks between samples are missed).",
		"Burstiness and the shape mix are unknown: Prometheus keeps neither inter-arrival gaps nor each request's joint ISL and OSL; the gateway's admin API (--admin) has them.")
	for _, w := range slices.Sorted(maps.Keys(b.c.warnings)) {
		r.Notes = append(r.Notes, "Prometheus warned: "+w)
	}
}

// labelledValues maps a q label to a value.
type labelledValues map[string]float64

func (l labelledValues) get(k string) Num {
	v, ok := l[k]
	if !ok {
		return unknown()
	}
	return Num(v)
}

// labelled runs a query whose series are told apart by a q label.
func (c *promClient) labelled(ctx context.Context, expr string, at time.Time, kind kindOf) (labelledValues, error) {
	res, err := c.query(ctx, expr, at, kind)
	if err != nil {
		return nil, err
	}
	out := labelledValues{}
	for _, s := range res {
		out[label(s, "q")] = float64(s.Value)
	}
	return out, nil
}

// histDist reads the values of promQueries.histogram.
func histDist(v labelledValues) Dist {
	d := unknownDist()
	d.Count = v.get("count")
	d.Mean = ratio(v.get("sum"), d.Count)
	if Known(d.Count) && d.Count > 0 {
		d.P50, d.P90, d.P95, d.P99 = v.get("p50"), v.get("p90"), v.get("p95"), v.get("p99")
	}
	return d
}

// histBuckets turns cumulative le buckets into per-bucket counts, in order
// of upper bound; nil without buckets.
func histBuckets(res model.Vector) []Bucket {
	type b struct {
		le  float64
		cum float64
	}
	var bs []b
	for _, s := range res {
		le, err := strconv.ParseFloat(label(s, "le"), 64)
		if err != nil {
			continue
		}
		bs = append(bs, b{le, float64(s.Value)})
	}
	if len(bs) == 0 {
		return nil
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	out := make([]Bucket, len(bs))
	prev := 0.0
	for i, x := range bs {
		le := "+Inf"
		if !math.IsInf(x.le, 1) {
			le = strconv.FormatFloat(x.le, 'g', -1, 64)
		}
		c := x.cum - prev
		if c < 0 {
			c = 0 // counts of different series scraped at different times
		}
		out[i] = Bucket{LE: le, Count: Num(c)}
		prev = math.Max(prev, x.cum)
	}
	return out
}

// promHours fills the hours of [from, to): whole clock hours with one range
// query (one-hour step), clipped first and last hours with instant queries.
func promHours(ctx context.Context, c *promClient, tenant string, from, to time.Time) ([]Hour, error) {
	spans := hourSpans(from, to)
	hours := make([]Hour, len(spans))
	var full []int
	for i, sp := range spans {
		hours[i] = Hour{Start: sp[0], End: sp[1], Requests: 0, Good: 0, Misses: 0, Attainment: unknown(), Reasons: []ReasonCount{}}
		if sp[1].Sub(sp[0]) == time.Hour {
			full = append(full, i)
		}
	}
	fill := func(h *Hour, metric model.Metric, v float64) {
		switch {
		case metric["result"] != "":
			h.Requests += Num(v)
			if metric["result"] == "good" {
				h.Good += Num(v)
			}
		case metric["reason"] != "":
			h.Reasons = append(h.Reasons, ReasonCount{Reason: remote.Printable(string(metric["reason"])), Count: Num(v)})
		}
	}
	if len(full) > 0 {
		if len(full) > maxHourSteps {
			return nil, fmt.Errorf("the period has %d whole hours; the hourly breakdown is limited to %d: ask for a shorter period", len(full), maxHourSteps)
		}
		first, last := spans[full[0]][1], spans[full[len(full)-1]][1]
		pq := promQueries{tenant: tenant, rng: promDuration(time.Hour)}
		series, err := c.queryRange(ctx, pq.hour(), first, last, time.Hour, all(remote.Count))
		if err != nil {
			return nil, err
		}
		for _, s := range series {
			at := make(map[int64]float64, len(s.Values)) // by Unix second
			for _, p := range s.Values {
				at[int64(math.Round(float64(p.Timestamp)/1000))] = float64(p.Value)
			}
			for _, i := range full {
				if v, ok := at[spans[i][1].Unix()]; ok {
					fill(&hours[i], s.Metric, v)
				}
			}
		}
	}
	for i, sp := range spans {
		if sp[1].Sub(sp[0]) == time.Hour {
			continue
		}
		pq := promQueries{tenant: tenant, rng: promDuration(sp[1].Sub(sp[0]))}
		res, err := c.query(ctx, pq.hour(), sp[1], all(remote.Count))
		if err != nil {
			return nil, err
		}
		for _, s := range res {
			fill(&hours[i], s.Metric, float64(s.Value))
		}
	}
	for i := range hours {
		hours[i].Reasons = topReasons(reasonOrder(hours[i].Reasons))
	}
	return hours, nil
}

// reasonOrder merges duplicate reasons and puts them in reasonList's
// order.
func reasonOrder(rs []ReasonCount) []ReasonCount {
	counts := map[string]Num{}
	for _, r := range rs {
		counts[r.Reason] += r.Count
	}
	return reasonList(counts)
}
