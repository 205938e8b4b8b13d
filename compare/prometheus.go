package compare

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/goodput/goodput/internal/remote"
	"github.com/goodput/goodput/internal/urlredact"
	"github.com/goodput/goodput/report"
)

// The gateway metrics a Prometheus source reads (export/metrics.go).
const (
	promRequests = "goodput_requests_total"
	promInFlight = "goodput_in_flight_requests"
	promISL      = "goodput_input_tokens"
	promOSL      = "goodput_output_tokens"
	promTTFT     = "goodput_time_to_first_token_seconds"
	promTPOT     = "goodput_time_per_output_token_seconds"
	promITL      = "goodput_inter_token_latency_seconds"
	promE2E      = "goodput_request_duration_seconds"
)

// PromOptions says what to read from Prometheus.
type PromOptions struct {
	Filter
	// Window is how far back from Now the figures look (default 1h).
	Window time.Duration
	// Step is the resolution of the arrival counts and the concurrency
	// samples (default 1m; at least the scrape interval).
	Step   time.Duration
	Now    time.Time
	Client *http.Client
}

// ReadPrometheus reads the real side from a Prometheus server that scrapes
// the gateways (the whole fleet, or one tenant and/or model): ISL, OSL and
// latency histograms as bucket increases over the window (summed over
// replicas), the arrival rate from goodput_requests_total, burstiness from
// the dispersion of arrivals per step, and concurrency from the in-flight
// gauge sampled every step.
func ReadPrometheus(ctx context.Context, base string, o PromOptions) (*Side, error) {
	if o.Window <= 0 {
		o.Window = time.Hour
	}
	if o.Step <= 0 {
		o.Step = time.Minute
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: time.Minute}
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, inputErr("%q is not a Prometheus base URL (e.g. http://127.0.0.1:9090)", urlredact.String(base))
	}
	shown := urlredact.String(base)
	ac, err := api.NewClient(api.Config{Address: strings.TrimRight(base, "/"), Client: remote.LimitClient(o.Client, remote.MaxBody)})
	if err != nil {
		return nil, inputErr("Prometheus URL %s: %v", shown, err)
	}
	p := &promReader{api: v1.NewAPI(ac), base: shown, o: o, rng: promDur(o.Window)}
	s := newSide(KindPrometheus, shown)
	s.Label = o.Filter.String() + ", last " + o.Window.String()
	s.Seconds = Num(o.Window.Seconds())

	byOutcome, err := p.vector(ctx, "sum by (outcome) ("+p.inc(p.sel(promRequests, true))+")", remote.Count)
	if err != nil {
		return nil, err
	}
	var total, ok, missLo, missHi float64
	for _, smp := range byOutcome {
		v := float64(smp.Value)
		total += v
		// Failures against attainment, by outcome: these always; a
		// client error or a rejection may be the client's own mistake
		// (a 4xx other than 408 and 429), a client abort may have left
		// before the engine answered: they bound the count from above.
		switch smp.Metric["outcome"] {
		case "ok":
			ok = v
		case "upstream_error", "timeout", "rate_limited":
			missLo += v
			missHi += v
		case "client_error", "rejected", "client_abort":
			missHi += v
		}
	}
	if total == 0 {
		return nil, inputErr("Prometheus at %s has no goodput_requests_total increase for %s over the last %s: is it scraping the gateways?", shown, o.Filter, o.Window)
	}
	s.Requests = int(math.Round(ok))
	s.Failed = Num(math.Round(total - ok))
	s.missLo, s.missHi = Num(math.Round(missLo)), Num(math.Round(missHi))
	s.ArrivalRate = Num(total / o.Window.Seconds())
	s.RateFrom = "goodput_requests_total increase over the window"

	for _, h := range []struct {
		d      *Dist
		metric string
		scale  float64
	}{{&s.ISL, promISL, 1}, {&s.OSL, promOSL, 1}, {&s.TTFT, promTTFT, 1000}, {&s.TPOT, promTPOT, 1000}, {&s.ITL, promITL, 1000}, {&s.E2E, promE2E, 1000}} {
		d, err := p.histogram(ctx, h.metric, h.scale)
		if err != nil {
			return nil, err
		}
		*h.d = d
	}
	if err := p.burstiness(ctx, s); err != nil {
		return nil, err
	}
	if err := p.concurrency(ctx, s); err != nil {
		return nil, err
	}
	s.note("Prometheus has histograms, not per-request values: KS is bucketed, percentiles are interpolated within buckets, attainment is a range")
	s.note("ISL/OSL histograms count every inference request with token counts, whatever its outcome")
	return s, nil
}

type promReader struct {
	api  v1.API
	base string
	o    PromOptions
	rng  string
}

// promDur formats d for PromQL in milliseconds.
func promDur(d time.Duration) string {
	return strconv.FormatInt(max(d.Milliseconds(), 1), 10) + "ms"
}

// inc is how much each counter series of sel grew over the window, by
// goodput report's rule (report.ExactIncrease): no extrapolation to the
// window's edges.
func (p *promReader) inc(sel string) string {
	return report.ExactIncrease(sel, p.rng)
}

// sel is metric{…} with the filter's labels and, for per-route series,
// only the inference routes.
func (p *promReader) sel(metric string, routed bool) string {
	var m []string
	if routed {
		m = append(m, `route!="other"`)
	}
	if p.o.Tenant != "" {
		m = append(m, "tenant="+strconv.Quote(p.o.Tenant))
	}
	if p.o.Model != "" && metric != promInFlight {
		m = append(m, "model="+strconv.Quote(p.o.Model))
	}
	return metric + "{" + strings.Join(m, ",") + "}"
}

// vector runs an instant query whose every value must be of kind k.
func (p *promReader) vector(ctx context.Context, q string, k remote.Kind) (model.Vector, error) {
	v, _, err := p.api.Query(ctx, q, p.o.Now)
	if err != nil {
		return nil, p.explain(err, "/api/v1/query", q)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, inputErr("Prometheus at %s answered a %s, want a vector; query: %s", p.base, typeOf(v), q)
	}
	for _, smp := range vec {
		if !k.Holds(float64(smp.Value)) {
			return nil, p.badValue(q, smp.Metric, float64(smp.Value), k, "")
		}
	}
	return vec, nil
}

// badValue is the error for a value v (at a range query's time at) of
// series m that cannot be of kind k: the answer is malformed.
func (p *promReader) badValue(q string, m model.Metric, v float64, k remote.Kind, at string) error {
	if at != "" {
		at = " at " + at
	}
	return inputErr("Prometheus at %s answered %s for %s%s, which cannot be %s; query: %s", p.base, remote.FormatValue(v), remote.Printable(m.String()), at, k, q)
}

func typeOf(v model.Value) string {
	if v == nil {
		return "nothing"
	}
	return v.Type().String()
}

// explain turns an error of a call to path with the query q into a
// message that says what went wrong and where.
func (p *promReader) explain(err error, path, q string) error {
	if errors.Is(err, remote.ErrTooLarge) {
		return inputErr("Prometheus's answer to %s%s is larger than %d MiB; query: %s", strings.TrimRight(p.base, "/"), path, remote.MaxBody>>20, q)
	}
	var ae *v1.Error
	if errors.As(err, &ae) {
		switch ae.Type {
		case v1.ErrClient, v1.ErrServer, v1.ErrBadResponse:
			return inputErr("Prometheus at %s did not answer with the query API's JSON (is this the base URL of a Prometheus server?): %s", p.base, remote.Printable(ae.Msg))
		}
		return inputErr("Prometheus at %s refused the query (%s: %s); query: %s", p.base, remote.Printable(string(ae.Type)), remote.Printable(ae.Msg), q)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return inputErr("cannot reach Prometheus at %s: %v", p.base, err)
}

// histogram reads a histogram's bucket increases over the window, summed
// over series, with bounds scaled (seconds to milliseconds).
func (p *promReader) histogram(ctx context.Context, metric string, scale float64) (Dist, error) {
	q := "sum by (le) (" + p.inc(p.sel(metric+"_bucket", true)) + ")"
	vec, err := p.vector(ctx, q, remote.Count)
	if err != nil {
		return Dist{}, err
	}
	type bkt struct{ le, v float64 }
	var bs []bkt
	total := math.NaN()
	for _, smp := range vec {
		le, err := strconv.ParseFloat(string(smp.Metric["le"]), 64)
		if err != nil {
			continue
		}
		v := float64(smp.Value)
		if math.IsInf(le, 1) {
			total = v
			continue
		}
		bs = append(bs, bkt{le * scale, v})
	}
	if len(bs) == 0 || math.IsNaN(total) || total <= 0 {
		return Dist{}, nil
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	d := Dist{Total: total}
	run := 0.0
	for _, b := range bs {
		run = min(max(run, b.v), total) // increase() extrapolates: keep the counts cumulative
		d.Bounds = append(d.Bounds, b.le)
		d.Cum = append(d.Cum, run)
	}
	return d, nil
}

// burstiness estimates k from the arrivals per step: for a renewal process
// the counts in long intervals have variance/mean → 1/k (the index of
// dispersion is CV² of the gaps), so k ≈ mean/variance of the counts.
func (p *promReader) burstiness(ctx context.Context, s *Side) error {
	q := "sum(" + p.sel(promRequests, true) + ")"
	r := v1.Range{Start: p.o.Now.Add(-p.o.Window), End: p.o.Now, Step: p.o.Step}
	v, _, err := p.api.QueryRange(ctx, q, r)
	if err != nil {
		return p.explain(err, "/api/v1/query_range", q)
	}
	m, ok := v.(model.Matrix)
	if !ok {
		return inputErr("Prometheus at %s answered a %s, want a matrix; query: %s", p.base, typeOf(v), q)
	}
	for _, ser := range m {
		for _, pt := range ser.Values {
			if !remote.Count.Holds(float64(pt.Value)) {
				return p.badValue(q, ser.Metric, float64(pt.Value), remote.Count, pt.Timestamp.Time().UTC().Format(time.RFC3339Nano))
			}
		}
	}
	if len(m) == 0 || len(m[0].Values) < 11 {
		s.note("fewer than 10 steps of arrival counts: no burstiness (a longer --window or a shorter --prom-step)")
		return nil
	}
	vals := m[0].Values
	var counts []float64
	for i := 1; i < len(vals); i++ {
		c := float64(vals[i].Value - vals[i-1].Value)
		if c < 0 { // a replica restarted: its counter began again
			c = float64(vals[i].Value)
		}
		counts = append(counts, c)
	}
	var mean, v2 float64
	for _, c := range counts {
		mean += c
	}
	mean /= float64(len(counts))
	for _, c := range counts {
		v2 += (c - mean) * (c - mean)
	}
	v2 /= float64(len(counts))
	switch {
	case mean == 0:
		return nil
	case v2 == 0:
		s.Regular, s.Burstiness = true, Num(math.Inf(1))
	default:
		s.Burstiness = Num(mean / v2)
	}
	s.BurstinessFrom = fmt.Sprintf("estimated from arrivals per %s step (mean/variance of the counts; needs steps of many arrivals)", p.o.Step)
	return nil
}

// concurrency samples the in-flight gauge summed over replicas every step.
func (p *promReader) concurrency(ctx context.Context, s *Side) error {
	sub := "sum(" + p.sel(promInFlight, false) + ")[" + p.rng + ":" + promDur(p.o.Step) + "]"
	q := `label_replace(avg_over_time(` + sub + `), "q", "mean", "", "") or label_replace(max_over_time(` + sub + `), "q", "peak", "", "")`
	vec, err := p.vector(ctx, q, remote.Amount)
	if err != nil {
		return err
	}
	for _, smp := range vec {
		v := Num(smp.Value)
		switch smp.Metric["q"] {
		case "mean":
			s.ConcMean = v
		case "peak":
			s.ConcPeak = v
		}
	}
	came := s.Requests
	if known(s.Failed) {
		came += int(s.Failed)
	}
	if s.ConcPeak == 0 && came > 0 {
		// Requests came, yet no sample saw one in flight: the step is
		// longer than the traffic's bursts, and 0 would be a false figure
		// (a 30 s run sampled once a minute).
		s.note("no sample of goodput_in_flight_requests every %v saw a request in flight, though %d requests came: concurrency is unknown (set --prom-step to the scrape interval)", p.o.Step, came)
		s.ConcMean, s.ConcPeak = unknown, unknown
		return nil
	}
	if known(s.ConcMean) {
		s.ConcFrom = "goodput_in_flight_requests sampled every " + p.o.Step.String()
		if p.o.Model != "" {
			s.note("the in-flight gauge has no model label: concurrency is the tenant's (or fleet's), not the model's")
		}
	}
	return nil
}
