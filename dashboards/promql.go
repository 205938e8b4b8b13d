package dashboards

import (
	"strconv"
	"strings"

	"github.com/goodput/goodput/report"
)

// PromQL is put together from these helpers, never written inline, so that
// every panel filters, aggregates and windows the same way: a selector
// carries the dashboard variables as regex matchers (an "All" selection is
// ".*"), rates use Grafana's $__rate_interval, figures "over the time range"
// count exactly over $__range (exactIncrease), and a histogram's quantile
// is always taken from its summed buckets.

// expr is a PromQL expression.
type expr string

// Grafana's built-in windows.
const (
	rateWindow  = "$__rate_interval" // at least four scrapes: the window of every rate()
	rangeWindow = "$__range"         // the dashboard's whole time range
)

// Matchers set by the dashboard variables.
const (
	tenantIs    = `tenant=~"$tenant"`
	modelIs     = `model=~"$model"`
	modelNameIs = `model_name=~"$model"` // vLLM's label for the served model
)

// sel is a series selector: a metric name and label matchers.
type sel struct {
	name     string
	matchers []string
}

func metric(name string, matchers ...string) sel { return sel{name: name, matchers: matchers} }

// where adds matchers.
func (s sel) where(m ...string) sel {
	return sel{name: s.name, matchers: append(append([]string(nil), s.matchers...), m...)}
}

// suffix names one of a histogram's series (_bucket, _sum, _count).
func (s sel) suffix(suf string) sel { return sel{name: s.name + suf, matchers: s.matchers} }

func (s sel) expr() expr {
	if len(s.matchers) == 0 {
		return expr(s.name)
	}
	if s.name == "" {
		return expr("{" + strings.Join(s.matchers, ", ") + "}")
	}
	return expr(s.name + "{" + strings.Join(s.matchers, ", ") + "}")
}

func (s sel) over(window string) string { return string(s.expr()) + "[" + window + "]" }

// rate is the per-second rate over $__rate_interval.
func rate(s sel) expr { return expr("rate(" + s.over(rateWindow) + ")") }

// rateOver is the per-second rate over a fixed window (5m for attainment,
// as the recording rules and alerts use).
func rateOver(s sel, window string) expr { return expr("rate(" + s.over(window) + ")") }

// exactIncrease is the count added over window as goodput report counts it
// (report.ExactIncrease): a series born in the window counts from zero, and
// nothing is extrapolated. increase() leaves out what a new series (a
// replica started, a tenant's first request of a model) counted before its
// first scrape, and stretches the rest: over the time range, where a
// figure should be the count, the figures over the range use this.
func exactIncrease(s sel, window string) expr {
	return expr(report.ExactIncrease(string(s.expr()), window))
}

// agg applies an aggregation operator (sum, max, min) by labels; no labels
// aggregates everything.
func agg(op string, e expr, by ...string) expr {
	if len(by) == 0 {
		return expr(op + "(" + string(e) + ")")
	}
	return expr(op + " by (" + strings.Join(by, ", ") + ") (" + string(e) + ")")
}

func sum(e expr, by ...string) expr   { return agg("sum", e, by...) }
func maxOf(e expr, by ...string) expr { return agg("max", e, by...) }
func minOf(e expr, by ...string) expr { return agg("min", e, by...) }

// ratio is a / b; both sides are aggregations or selectors, so no
// parentheses are needed.
func ratio(a, b expr) expr { return a + " / " + b }

// ratioOn is a / on (labels) b.
func ratioOn(a, b expr, on ...string) expr {
	return a + " / on (" + expr(strings.Join(on, ", ")) + ") " + b
}

// oneMinus is 1 - (e).
func oneMinus(e expr) expr { return "1 - (" + e + ")" }

// paren wraps e in parentheses.
func paren(e expr) expr { return "(" + e + ")" }

// quantile is the q-quantile of a classic histogram (name without _bucket)
// over $__rate_interval, by labels.
func quantile(q float64, hist sel, by ...string) expr {
	return expr("histogram_quantile("+strconv.FormatFloat(q, 'f', -1, 64)+", ") +
		sum(rate(hist.suffix("_bucket")), append([]string{"le"}, by...)...) + ")"
}

// buckets is a histogram's per-bucket counts over window, for a
// distribution over the time range (Grafana's "heatmap" format turns the
// cumulative buckets into per-bucket counts).
func buckets(hist sel, window string) expr {
	return sum(exactIncrease(hist.suffix("_bucket"), window), "le")
}

// bucketRates is a histogram's per-bucket rates over $__rate_interval, for
// a heatmap: observations per second in each cell. Not counts: the window
// is longer than a step (at least four scrapes), so a count over it puts
// each observation in up to four cells.
func bucketRates(hist sel) expr {
	return sum(rate(hist.suffix("_bucket")), "le")
}

// mean is _sum / _count over $__rate_interval.
func mean(hist sel) expr {
	return ratio(sum(rate(hist.suffix("_sum"))), sum(rate(hist.suffix("_count"))))
}

// onGateways keeps the series of e that come from the targets that export
// goodput's metrics (process and Go runtime metrics have no label of their
// own that says so).
func onGateways(e expr) expr {
	return paren(e) + " and on (job, instance) goodput_upstream_up"
}
