package report

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/common/model"

	"github.com/goodput/goodput/internal/remote"
)

// Series holds the report's time series over the period, from a
// Prometheus range query: each point covers the step that ends at its time
// (the points tile the period's end, the first step starting at or after
// the period's start). Null in a report from the admin API, which keeps
// no history.
type Series struct {
	// Step is the time between points, and what each point covers.
	Step float64 `json:"step_seconds"`
	// Attainment is good / judged requests of each step (unknown in a step
	// without requests); Requests the judged requests of each step.
	Attainment []Point `json:"attainment"`
	Requests   []Point `json:"requests"`
	// TTFT and ITL percentiles of each step, in seconds
	// (histogram_quantile over the step's summed bucket growth; unknown in a
	// step without observations).
	TTFTP50 []Point `json:"ttft_p50_seconds"`
	TTFTP99 []Point `json:"ttft_p99_seconds"`
	ITLP50  []Point `json:"itl_p50_seconds"`
	ITLP99  []Point `json:"itl_p99_seconds"`
}

// Point is one value of a series at the end of its step.
type Point struct {
	T time.Time `json:"t"`
	V Num       `json:"v"`
}

// The series have between 60 and 150 points (fewer only when the period
// is shorter than 60 of the shortest step).
const (
	seriesTarget  = 150
	seriesMinStep = 15 * time.Second // a common scrape interval: a step below it mostly sees no sample
)

// niceSteps are the steps a series may use (then whole days).
var niceSteps = []time.Duration{
	15 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute,
	15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
}

// seriesStep returns the step for a period: the smallest nice step that
// gives at most seriesTarget points. Consecutive nice steps differ by at
// most 2.5×, so there are at least 60 points unless the step is
// seriesMinStep.
func seriesStep(period time.Duration) time.Duration {
	want := period / seriesTarget
	for _, s := range niceSteps {
		if s >= want {
			return max(s, seriesMinStep)
		}
	}
	day := 24 * time.Hour
	return (want + day - 1) / day * day
}

// attainmentSeries: good and missed requests of each step (rng is the
// step).
func (p promQueries) attainmentSeries() string {
	return "sum by (result) (" + p.inc(metricSLORequests) + ")"
}

// quantileSeries: p50 and p99 of a histogram, told apart by a q label.
func (p promQueries) quantileSeries(metric string) string {
	buckets := "sum by (le) (" + p.inc(metric+"_bucket") + ")"
	return `label_replace(histogram_quantile(0.5, ` + buckets + `), "q", "p50", "", "")` +
		` or label_replace(histogram_quantile(0.99, ` + buckets + `), "q", "p99", "", "")`
}

// series: the time series over the period.
func (b *promReport) series(ctx context.Context) error {
	r := b.r
	period := r.Period.To.Sub(r.Period.From)
	step := seriesStep(period)
	n := int(period / step)
	if n < 1 {
		r.Notes = append(r.Notes, fmt.Sprintf("No time series: the period is shorter than one step of %s.", step))
		return nil
	}
	// Prometheus keeps times to the millisecond.
	end := r.Period.To.Round(time.Millisecond)
	times := make([]time.Time, n)
	for i := range times {
		times[i] = end.Add(-time.Duration(n-1-i) * step)
	}
	pq := promQueries{tenant: b.tenant, rng: promDuration(step)}
	s := &Series{Step: step.Seconds()}
	m, err := b.c.queryRange(ctx, pq.attainmentSeries(), times[0], times[n-1], step, all(remote.Count))
	if err != nil {
		return err
	}
	good, all := make([]float64, n), make([]float64, n)
	for _, ser := range m {
		for i, v := range align(ser, times) {
			if math.IsNaN(v) { // no point at this step
				continue
			}
			all[i] += v
			if ser.Metric["result"] == "good" {
				good[i] += v
			}
		}
	}
	for i, t := range times {
		s.Requests = append(s.Requests, Point{t, Num(all[i])})
		s.Attainment = append(s.Attainment, Point{t, ratio(Num(good[i]), Num(all[i]))})
	}
	for _, h := range []struct {
		metric   string
		p50, p99 *[]Point
	}{{metricTTFT, &s.TTFTP50, &s.TTFTP99}, {metricITL, &s.ITLP50, &s.ITLP99}} {
		m, err := b.c.queryRange(ctx, pq.quantileSeries(h.metric), times[0], times[n-1], step, histKinds)
		if err != nil {
			return err
		}
		vals := map[string][]float64{}
		for _, ser := range m {
			vals[string(ser.Metric["q"])] = align(ser, times)
		}
		for q, into := range map[string]*[]Point{"p50": h.p50, "p99": h.p99} {
			*into = make([]Point, n)
			for i, t := range times {
				v := unknown()
				if vs := vals[q]; vs != nil && Known(Num(vs[i])) {
					v = Num(vs[i])
				}
				(*into)[i] = Point{t, v}
			}
		}
	}
	r.Series = s
	return nil
}

// align returns the values of ser at times (NaN where it has none).
func align(ser *model.SampleStream, times []time.Time) []float64 {
	out := make([]float64, len(times))
	at := make(map[int64]float64, len(ser.Values))
	for _, p := range ser.Values {
		at[int64(p.Timestamp)] = float64(p.Value)
	}
	for i, t := range times {
		v, ok := at[t.UnixMilli()]
		if !ok {
			v = math.NaN()
		}
		out[i] = v
	}
	return out
}

// seriesRange returns the lowest and highest known values of ps and the
// time of the lowest and highest; ok is false when none is known.
func seriesRange(ps []Point) (lo, hi Point, ok bool) {
	for _, p := range ps {
		if !Known(p.V) {
			continue
		}
		if !ok || p.V < lo.V {
			lo = p
		}
		if !ok || p.V > hi.V {
			hi = p
		}
		ok = true
	}
	return lo, hi, ok
}
