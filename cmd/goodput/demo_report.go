package main

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/goodput/goodput/bench"
	"github.com/goodput/goodput/report"
)

// demoSummaryRow is one tenant's figures at the end of the run.
type demoSummaryRow struct {
	Tenant, Shape, Class                  string
	Requests, Good                        uint64
	Attainment, Objective                 string
	Met                                   string // "met", "missed" or "-"
	GoodRate, GoodTokRate, TokRate        string
	TTFTP50, TTFTP99, ITLP50, ITLP99, E2E string
	Misses                                string
	Client                                string // what the load generator saw
}

// summaryRows turns the final snapshot into one row per tenant: the
// gateway's own counts, rates over the whole load.
func (r *demoRun) summaryRows(s demoSnap, elapsed time.Duration) []demoSummaryRow {
	secs := elapsed.Seconds()
	var rows []demoSummaryRow
	for _, t := range r.plan.tenants {
		ts := s.tenants[t.name]
		row := demoSummaryRow{
			Tenant: t.name, Shape: t.shape, Class: t.class, Requests: ts.requests, Good: ts.good,
			Attainment: pct(ts.attainment), Objective: pct(ts.objective), Met: "-",
			GoodRate:    fmt.Sprintf("%.2f", float64(ts.good)/secs),
			GoodTokRate: fmt.Sprintf("%.0f", float64(ts.goodOutTokens)/secs),
			TokRate:     fmt.Sprintf("%.0f", float64(ts.outTokens)/secs),
			TTFTP50:     msOf(ts.ttft, ts.ttft.P50), TTFTP99: msOf(ts.ttft, ts.ttft.P99), ITLP50: msOf(ts.itl, ts.itl.P50), ITLP99: msOf(ts.itl, ts.itl.P99), E2E: msOf(ts.e2e, ts.e2e.P99),
			Misses: missText(ts.misses),
		}
		if !math.IsNaN(ts.attainment) && !math.IsNaN(ts.objective) {
			row.Met = "missed"
			if ts.attainment >= ts.objective {
				row.Met = "met"
			}
		}
		if res := r.results[t.name]; res != nil {
			row.Client = clientLine(res)
		} else {
			row.Client = "no requests"
		}
		rows = append(rows, row)
	}
	return rows
}

// missText is "ttft 12, rate_limited 3" (reasons by count), or "none".
func missText(m map[string]uint64) string {
	type rc struct {
		r string
		n uint64
	}
	var rs []rc
	for k, v := range m {
		if v > 0 {
			rs = append(rs, rc{k, v})
		}
	}
	if len(rs) == 0 {
		return "none"
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].n > rs[j].n || (rs[i].n == rs[j].n && rs[i].r < rs[j].r) })
	parts := make([]string, len(rs))
	for i, x := range rs {
		parts[i] = fmt.Sprintf("%s %d", x.r, x.n)
	}
	return strings.Join(parts, ", ")
}

// endNote says how the load ended.
func (r *demoRun) endNote(elapsed time.Duration, interrupted bool) string {
	switch {
	case interrupted:
		return fmt.Sprintf("interrupted after %s: the requests in flight were cut (the gateway counts each as a miss: aborted)", elapsed.Round(time.Second))
	case r.cut:
		return fmt.Sprintf("requests still in flight %s after the load ended were cut (the gateway counts each as a miss: aborted)", r.args.grace)
	}
	return "every request ended before the demo did"
}

// summary prints the per-tenant summary.
func (r *demoRun) summary(w io.Writer, s demoSnap, elapsed time.Duration, interrupted bool) {
	fmt.Fprintf(w, "summary after %s (offered load %.2f× → %.2f× the knee); the gateway's figures, goodput over the whole run:\n",
		elapsed.Round(time.Second), r.plan.from, s.load)
	fmt.Fprintf(w, "%-8s %-8s %-11s %8s %6s %10s %9s %-6s  %13s %7s %7s  %8s %8s  %7s %7s  %8s\n",
		"tenant", "shape", "SLO class", "requests", "good", "attainment", "objective", "", "goodput req/s", "tok/s", "out/s",
		"TTFT p50", "p99", "ITL p50", "p99", "E2E p99")
	rows := r.summaryRows(s, elapsed)
	for _, x := range rows {
		fmt.Fprintf(w, "%-8s %-8s %-11s %8d %6d %10s %9s %-6s  %13s %7s %7s  %8s %8s  %7s %7s  %8s\n",
			x.Tenant, x.Shape, x.Class, x.Requests, x.Good, x.Attainment, x.Objective, x.Met, x.GoodRate, x.GoodTokRate, x.TokRate,
			x.TTFTP50, x.TTFTP99, x.ITLP50, x.ITLP99, x.E2E)
	}
	for _, x := range rows {
		fmt.Fprintf(w, "  %-8s misses: %s; load generator: %s\n", x.Tenant, x.Misses, x.Client)
	}
	fmt.Fprintln(w, r.endNote(elapsed, interrupted))
}

// writeReport writes the HTML report: the plan, the summary and a chart of
// the run over time, then each tenant's SLO report (package report, from
// the admin API, as `goodput report` makes it).
func (r *demoRun) writeReport(s demoSnap, view *demoView, elapsed time.Duration, interrupted bool, curve string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now()
	var reports []*report.Report
	for _, t := range r.plan.tenants {
		rep, err := report.FromAdmin(ctx, "http://"+r.serving.Admin, report.Query{
			Tenant: t.name, From: r.start, To: now, Now: now, Client: &http.Client{Timeout: 10 * time.Second},
		})
		if err != nil {
			return fmt.Errorf("report of %s: %w", t.name, err)
		}
		reports = append(reports, rep)
	}
	var intro bytes.Buffer
	if err := demoIntro.Execute(&intro, struct {
		Plan    []string
		Rows    []demoSummaryRow
		End     string
		Chart   *demoChart
		Elapsed string
		Curve   string
		Link    string
	}{r.plan.describe(), r.summaryRows(s, elapsed), r.endNote(elapsed, interrupted), newDemoChart(r.plan, view.samples()), elapsed.Round(time.Second).String(),
		curve, filepath.Base(curveFile(r.args.reportFile))}); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	var page bytes.Buffer
	title := fmt.Sprintf("goodput demo: three tenants on one engine (%s)", r.plan.preset)
	if err := report.HTMLPage(&page, title, template.HTML(intro.String()), reports); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.WriteFile(r.args.reportFile, page.Bytes(), 0o644); err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	return nil
}

var demoIntro = template.Must(template.New("intro").Parse(`<section id="demo">
<h2>The run</h2>
<ul>
{{range .Plan}}<li>{{.}}</li>
{{end}}</ul>
<table>
<caption>Per tenant over {{.Elapsed}}: the gateway's own figures (goodput and throughput over the whole run)</caption>
<thead><tr><th>tenant</th><th>SLO class</th><th>requests</th><th>good</th><th>attainment</th><th>objective</th><th>goodput req/s</th><th>good / all tok/s</th><th>TTFT p50 / p99</th><th>ITL p50 / p99</th><th>E2E p99</th></tr></thead>
<tbody>
{{range .Rows}}<tr><td>{{.Tenant}} ({{.Shape}})</td><td>{{.Class}}</td><td>{{.Requests}}</td><td>{{.Good}}</td><td>{{.Attainment}} ({{.Met}})</td><td>{{.Objective}}</td><td>{{.GoodRate}}</td><td>{{.GoodTokRate}} / {{.TokRate}}</td><td>{{.TTFTP50}} / {{.TTFTP99}}</td><td>{{.ITLP50}} / {{.ITLP99}}</td><td>{{.E2E}}</td></tr>
{{end}}</tbody>
</table>
<ul>
{{range .Rows}}<li>{{.Tenant}}: misses {{.Misses}}; load generator: {{.Client}}</li>
{{end}}<li>{{.End}}</li>
</ul>
{{with .Curve}}<p>{{.}}: <a href="{{$.Link}}">{{$.Link}}</a> (package sweep's capacity chart and table).</p>
{{end}}
{{with .Chart}}<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {{.W}} {{.H}}" width="{{.W}}" height="{{.H}}" role="img" aria-label="{{.Title}}"><title>{{.Title}}</title>
<text x="{{.Left}}" y="16" font-size="13" font-weight="600" fill="#222">{{.Title}}</text>
{{range .Grid}}<line x1="{{$.Chart.Left}}" y1="{{.Y}}" x2="{{$.Chart.Right}}" y2="{{.Y}}" stroke="#eee" stroke-width="1"/>
<text x="{{$.Chart.LabelX}}" y="{{.TextY}}" font-size="10" text-anchor="end" fill="#555">{{.Label}}</text>
{{end}}{{with .Knee}}<line x1="{{$.Chart.Left}}" y1="{{.Y}}" x2="{{$.Chart.Right}}" y2="{{.Y}}" stroke="#c00" stroke-width="1" stroke-dasharray="4 3"/>
<text x="{{$.Chart.Right}}" y="{{.TextY}}" font-size="10" text-anchor="end" fill="#c00">{{.Label}}</text>
{{end}}{{range .Lines}}<polyline points="{{.Points}}" fill="none" stroke="{{.Color}}" stroke-width="2" stroke-linejoin="round"/>
{{end}}{{range .Legend}}<rect x="{{.X}}" y="{{.Y}}" width="10" height="10" fill="{{.Color}}"/><text x="{{.TextX}}" y="{{.TextY}}" font-size="11" fill="#222">{{.Label}}</text>
{{end}}<text x="{{.Left}}" y="{{.AxisY}}" font-size="10" fill="#555">0s</text><text x="{{.Right}}" y="{{.AxisY}}" font-size="10" text-anchor="end" fill="#555">{{.End}}</text>
</svg>
{{end}}</section>
`))

// demoChart is the run over time: the offered request rate, the rate of
// requests the gateway ended and of good ones (each over the last 5 s),
// against the engine's predicted knee.
type demoChart struct {
	Title                            string
	W, H, Left, Right, LabelX, AxisY float64
	Grid                             []demoChartMark
	Knee                             *demoChartMark
	Lines                            []demoChartLine
	Legend                           []demoChartKey
	End                              string
}

type demoChartMark struct {
	Y, TextY float64
	Label    string
}

type demoChartLine struct {
	Points, Color string
}

type demoChartKey struct {
	X, Y, TextX, TextY float64
	Color, Label       string
}

func newDemoChart(p *demoPlan, samples []demoSnap) *demoChart {
	if len(samples) < 2 {
		return nil
	}
	c := &demoChart{Title: "Requests per second over the run (last 5 s) against the predicted knee", W: 860, H: 300, Left: 50, Right: 840, LabelX: 44, AxisY: 292}
	top, bottom := 40.0, 270.0
	end := samples[len(samples)-1].at
	type series struct {
		label, color string
		val          func(demoSnap) float64
	}
	total := func(f func(*demoTenantSnap) float64) func(demoSnap) float64 {
		return func(s demoSnap) float64 {
			var sum float64
			for _, ts := range s.tenants {
				sum += f(ts)
			}
			return sum
		}
	}
	ss := []series{
		{"offered", "#888", func(s demoSnap) float64 {
			if s.ended {
				return 0
			}
			return p.rateAt(s.at)
		}},
		{"ended (throughput)", "#1f77b4", total(func(t *demoTenantSnap) float64 { return t.reqRate })},
		{"good (goodput)", "#2ca02c", total(func(t *demoTenantSnap) float64 { return t.goodRate })},
	}
	yMax := p.capacity.MaxRate * 1.1
	for _, s := range samples {
		for _, se := range ss {
			yMax = max(yMax, se.val(s))
		}
	}
	yMax = niceUp(yMax)
	x := func(at time.Duration) float64 {
		return c.Left + (c.Right-c.Left)*at.Seconds()/max(end.Seconds(), 1e-9)
	}
	y := func(v float64) float64 { return bottom - (bottom-top)*v/yMax }
	for i := 0; i <= 4; i++ {
		v := yMax * float64(i) / 4
		c.Grid = append(c.Grid, demoChartMark{Y: y(v), TextY: y(v) + 3, Label: fmt.Sprintf("%.3g", v)})
	}
	c.Knee = &demoChartMark{Y: y(p.capacity.MaxRate), TextY: y(p.capacity.MaxRate) - 3, Label: fmt.Sprintf("predicted knee %.2f req/s", p.capacity.MaxRate)}
	for i, se := range ss {
		var pts []string
		for _, s := range samples {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.at), y(se.val(s))))
		}
		c.Lines = append(c.Lines, demoChartLine{Points: strings.Join(pts, " "), Color: se.color})
		lx := c.Left + 10 + float64(i)*170
		c.Legend = append(c.Legend, demoChartKey{X: lx, Y: 24, TextX: lx + 14, TextY: 33, Color: se.color, Label: se.label})
	}
	c.End = end.Round(time.Second).String()
	return c
}

// niceUp rounds v up to 1, 2 or 5 times a power of ten.
func niceUp(v float64) float64 {
	if !(v > 0) {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*e {
			return m * e
		}
	}
	return 10 * e
}

// clientLine is what a tenant's load generator saw: the requests that
// completed and failed, and apart from them those the demo's end cut in
// flight or kept from being sent, which did not fail.
func clientLine(res *bench.Result) string {
	var cut, unsent int
	for _, e := range res.Errors {
		if strings.HasPrefix(e, "stopped with the run") {
			cut++
		}
	}
	if res.Goodput != nil {
		unsent = res.Goodput.NotSent
	}
	line := fmt.Sprintf("%d completed, %d failed", res.Completed, max(res.Failed-cut, 0))
	if cut > 0 {
		line += fmt.Sprintf(", %d cut in flight by the end", cut)
	}
	if unsent > 0 {
		line += fmt.Sprintf(", %d never sent (the run stopped)", unsent)
	}
	return line
}
