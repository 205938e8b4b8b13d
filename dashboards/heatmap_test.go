package dashboards

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/goodput/goodput/internal/testenv"
)

// A histogram panel's cells, read in their unit, add up to the
// observations: in the real PromQL engine (promtool), over a histogram
// that two replicas each observe once a second (half of them under 0.1),
// scraped every minute as Grafana's data source is told, the cells of a
// heatmap over ten one-minute steps hold 1,200 observations in all, 600 of
// them in the bucket up to 0.1, and a distribution over the ten minutes
// the same. Grafana's $__rate_interval is then 4m (four scrapes), longer
// than a step: a heatmap of increase() over it counted each observation in
// four cells (4,800).
func TestHistogramPanelsAddUp(t *testing.T) {
	const step = 60 // seconds: $__interval, and the scrape interval
	vals := map[string]string{
		"tenant": ".*", "model": ".*",
		"__interval": "1m", "__rate_interval": "4m", "__range": "10m",
	}
	var series, tests strings.Builder
	seen := map[string]bool{}
	n := 0
	for _, bq := range boardQueries(t) {
		file, p, q := bq.file, bq.panel, bq.q
		if q.Format != "heatmap" {
			continue
		}
		m := bucketSeries.FindStringSubmatch(q.Expr)
		if m == nil {
			t.Fatalf("%s: %q: no _bucket series in %s", file, p.Title, q.Expr)
		}
		if !seen[m[1]] {
			seen[m[1]] = true
			for _, inst := range []string{"gw-1", "gw-2"} {
				fmt.Fprintf(&series, "      - series: '%s{instance=%q,tenant=\"acme\",model=\"m\",route=\"chat\",le=\"0.1\"}'\n        values: '0+30x30'\n", m[1], inst)
				fmt.Fprintf(&series, "      - series: '%s{instance=%q,tenant=\"acme\",model=\"m\",route=\"chat\",le=\"+Inf\"}'\n        values: '0+60x30'\n", m[1], inst)
			}
		}
		e := Substitute(q.Expr, vals)
		what := "over the range"
		if !q.Instant {
			// The cells of the ten steps that end at 30m: the
			// subquery's range leaves out its start, in any
			// version of Prometheus.
			e = fmt.Sprintf("sum_over_time((%s)[%ds:1m])", e, 10*step-1)
			what = "in ten steps"
		}
		perSecond := p.Options.CellValues.Unit == unitReqPerS || strings.HasSuffix(p.Options.CellValues.Unit, "/s")
		if perSecond && !q.Instant {
			e = fmt.Sprintf("(%s) * %d", e, step)
		} else if perSecond || p.Options.CellValues.Unit != unitCount && p.Type == "heatmap" {
			t.Errorf("%s: %q: cells in %q: neither a count nor per second", file, p.Title, p.Options.CellValues.Unit)
			continue
		}
		n++
		fmt.Fprintf(&tests, `      # %s: %s, %s
      - expr: %q
        eval_time: 30m
        exp_samples:
          - labels: '{le="0.1"}'
            value: 600
          - labels: '{le="+Inf"}'
            value: 1200
`, file, p.Title, what, e)
	}
	if n < 8 {
		t.Fatalf("%d histogram panels", n)
	}
	testenv.PromtoolTest(t, "rule_files: [rules.yaml]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n"+
		series.String()+"    promql_expr_test:\n"+tests.String())
}

// bucketSeries finds a histogram's bucket series in a query.
var bucketSeries = regexp.MustCompile(`(\w+_bucket)\{`)

// heatPanel is what the test reads of a panel: its queries and its cells'
// unit.
type heatPanel struct {
	Type    string      `json:"type"`
	Title   string      `json:"title"`
	Targets []Target    `json:"targets"`
	Panels  []heatPanel `json:"panels"`
	Options struct {
		CellValues struct {
			Unit string `json:"unit"`
		} `json:"cellValues"`
	} `json:"options"`
}

// boardQuery is a query of a dashboard, with its file and panel.
type boardQuery struct {
	file  string
	panel heatPanel
	q     Target
}

// boardQueries returns every query of every dashboard (rows opened).
func boardQueries(t *testing.T) []boardQuery {
	t.Helper()
	var out []boardQuery
	for _, b := range Boards() {
		data, err := b.JSON()
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Panels []heatPanel `json:"panels"`
		}
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatal(err)
		}
		for _, p := range flatten(d.Panels) {
			for _, q := range p.Targets {
				out = append(out, boardQuery{b.File, p, q})
			}
		}
	}
	return out
}

func flatten(ps []heatPanel) []heatPanel {
	var out []heatPanel
	for _, p := range ps {
		if p.Type == "row" {
			out = append(out, flatten(p.Panels)...)
			continue
		}
		out = append(out, p)
	}
	return out
}
