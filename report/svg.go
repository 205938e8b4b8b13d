package report

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/goodput/goodput/internal/svgchart"
)

// Charts are inline SVG, drawn by the HTML template from a chart value
// (every text is escaped by html/template): no script, no external
// resource, and XML-well-formed markup (every element closed, attributes
// quoted), so the HTML page is also well-formed XML.

const (
	colBar    = "#4e79a7"
	colGood   = "#59a14f"
	colBad    = "#e15759"
	colMarker = "#222222"
	colGrid   = "#dddddd"
	colText   = "#333333"
)

// bar is one bar of a chart: v is its length (NaN: unknown, no bar drawn),
// text what is printed next to it.
type bar struct {
	label string
	v     float64
	text  string
	color string
}

// chart is one SVG chart: its size, title and shapes, drawn in order.
type chart struct {
	W, H   string
	Title  string
	Shapes []shape
}

// shape is one element of a chart: a rect (X, Y, W, H, Fill and an
// optional tooltip in Text), a line (X1…Y2, Stroke, StrokeWidth, Dash), a
// polyline (Points, Stroke, StrokeWidth) or a text (X, Y, Size, Weight, Anchor, Fill, Text). Coordinates are printed
// numbers.
type shape struct {
	Kind                      string // "rect", "line", "polyline" or "text"
	X, Y, W, H                string
	X1, Y1, X2, Y2            string
	Fill, Stroke, StrokeWidth string
	Dash                      string
	Points                    string // a polyline's points
	Size, Weight, Anchor      string
	Text                      string
}

// f prints a coordinate.
func f(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func newChart(w, h float64, title string) *chart {
	c := &chart{W: f(w), H: f(h), Title: title}
	c.Shapes = append(c.Shapes, shape{Kind: "text", X: "0", Y: "14", Size: "13", Weight: "bold", Fill: colText, Text: title})
	return c
}

func (c *chart) rect(x, y, w, h float64, fill, tip string) {
	c.Shapes = append(c.Shapes, shape{Kind: "rect", X: f(x), Y: f(y), W: f(w), H: f(h), Fill: fill, Text: tip})
}

func (c *chart) line(x1, y1, x2, y2 float64, stroke string, width int, dash string) {
	c.Shapes = append(c.Shapes, shape{Kind: "line", X1: f(x1), Y1: f(y1), X2: f(x2), Y2: f(y2), Stroke: stroke, StrokeWidth: strconv.Itoa(width), Dash: dash})
}

func (c *chart) polyline(points []string, stroke string, width int) {
	c.Shapes = append(c.Shapes, shape{Kind: "polyline", Points: strings.Join(points, " "), Stroke: stroke, StrokeWidth: strconv.Itoa(width)})
}

func (c *chart) text(x, y float64, size int, anchor, fill, text string) {
	c.Shapes = append(c.Shapes, shape{Kind: "text", X: f(x), Y: f(y), Size: strconv.Itoa(size), Anchor: anchor, Fill: fill, Text: text})
}

// hbarChart draws horizontal bars scaled to max; marker, when not NaN, is a
// vertical line at that value (a target).
func hbarChart(title string, bars []bar, max, marker float64, markerLabel string) chart {
	const (
		width  = 520.0
		labelW = 130.0
		textW  = 150.0
		rowH   = 22.0
		top    = 26.0
	)
	plotW := width - labelW - textW
	h := top + rowH*float64(len(bars)) + 18
	c := newChart(width, h, title)
	if !(max > 0) || math.IsInf(max, 0) {
		max = 1
	}
	scale := func(v float64) float64 { return math.Max(0, math.Min(v, max)) / max * plotW }
	for i, br := range bars {
		y := top + rowH*float64(i)
		c.text(labelW-6, y+15, 12, "end", colText, br.label)
		c.rect(labelW, y+3, plotW, rowH-6, "#f2f2f2", "")
		if !math.IsNaN(br.v) {
			col := br.color
			if col == "" {
				col = colBar
			}
			c.rect(labelW, y+3, scale(br.v), rowH-6, col, "")
		}
		c.text(labelW+plotW+6, y+15, 12, "", colText, br.text)
	}
	if !math.IsNaN(marker) {
		x := labelW + scale(marker)
		c.line(x, top, x, h-16, colMarker, 2, "4 2")
		c.text(x, h-4, 11, "middle", colMarker, markerLabel)
	}
	return *c
}

// yAxis draws the y axis of a plot at (left, top) of plotW × plotH: five
// grid lines with their labels from yMin to yMax. It returns the function
// that maps a value to its y coordinate (clamped to the plot).
func (c *chart) yAxis(left, top, plotW, plotH, yMin, yMax float64, yFmt func(float64) string) func(float64) float64 {
	if !(yMax > yMin) {
		yMax = yMin + 1
	}
	y := func(v float64) float64 {
		v = math.Max(yMin, math.Min(yMax, v))
		return top + plotH - (v-yMin)/(yMax-yMin)*plotH
	}
	for i := 0; i <= 4; i++ {
		v := yMin + (yMax-yMin)*float64(i)/4
		c.line(left, y(v), left+plotW, y(v), colGrid, 1, "")
		c.text(left-4, y(v)+4, 11, "end", colText, yFmt(v))
	}
	return y
}

// columnChart draws vertical columns between yMin and yMax; ref, when not
// NaN, is a horizontal reference line. Every labelEvery-th column is
// labelled on the x axis.
func columnChart(title string, cols []bar, yMin, yMax, ref float64, refLabel string, yFmt func(float64) string) chart {
	const (
		width  = 720.0
		height = 240.0
		left   = 56.0
		right  = 10.0
		top    = 26.0
		bottom = 42.0
	)
	plotW, plotH := width-left-right, height-top-bottom
	c := newChart(width, height, title)
	y := c.yAxis(left, top, plotW, plotH, yMin, yMax, yFmt)
	n := len(cols)
	if n == 0 {
		c.text(left+8, top+plotH/2, 12, "", colText, "no data")
		return *c
	}
	slot := plotW / float64(n)
	gap := math.Min(slot*0.2, 4)
	labelEvery := int(math.Ceil(float64(n) / 12))
	for i, col := range cols {
		x := left + slot*float64(i)
		if !math.IsNaN(col.v) {
			fill := col.color
			if fill == "" {
				fill = colBar
			}
			c.rect(x+gap/2, y(col.v), math.Max(slot-gap, 0.5), top+plotH-y(col.v), fill, col.label+": "+col.text)
		} else {
			c.text(x+slot/2, top+plotH-4, 10, "middle", colText, "?")
		}
		if i%labelEvery == 0 {
			c.text(x+slot/2, top+plotH+14, 10, "middle", colText, col.label)
		}
	}
	if !math.IsNaN(ref) {
		c.line(left, y(ref), left+plotW, y(ref), colMarker, 2, "6 3")
		c.text(left+plotW, 14, 11, "end", colMarker, "dashed line: "+refLabel)
	}
	c.line(left, top+plotH, left+plotW, top+plotH, colText, 1, "")
	return *c
}

// num returns n as a float64 (NaN when unknown).
func num(n Num) float64 {
	if !Known(n) {
		return math.NaN()
	}
	return float64(n)
}

// charts returns the SVG charts of each section, by section id.
func (r *Report) charts() map[string][]chart {
	out := map[string][]chart{
		"summary": r.summaryCharts(),
		"slo":     {r.reasonsChart()},
		"latency": r.latencyCharts(),
		"traffic": r.trafficCharts(),
	}
	if r.Series != nil {
		out["over-time"] = r.seriesCharts()
	}
	if len(r.Hours) > 0 {
		out["worst-hours"] = []chart{r.hoursChart()}
	}
	return out
}

// summaryCharts: attainment against the objective, and the error budget.
func (r *Report) summaryCharts() []chart {
	s := &r.SLO
	att := []bar{{label: "attainment", v: num(s.Attainment), text: fmtPct(s.Attainment), color: colGood}}
	if s.Met != nil && !*s.Met {
		att[0].color = colBad
	}
	used := num(s.ErrorBudgetUsed)
	uc := colGood
	if used > 1 {
		uc = colBad
	}
	return []chart{
		hbarChart("Attainment against the objective", att, 1, num(s.Objective), "objective "+fmtPct(s.Objective)),
		hbarChart("Error budget used", []bar{{label: "budget used", v: used, text: fmtPct(s.ErrorBudgetUsed), color: uc}},
			math.Max(1, svgchart.Finite(used, 0)), 1, "whole budget"),
	}
}

// reasonsChart: misses by reason.
func (r *Report) reasonsChart() chart {
	var rb []bar
	maxR := 0.0
	for _, rc := range r.SLO.MissReasons {
		rb = append(rb, bar{label: rc.Reason, v: num(rc.Count), text: fmtCount(rc.Count), color: colBad})
		maxR = math.Max(maxR, svgchart.Finite(num(rc.Count), 0))
	}
	return hbarChart("Misses by reason", rb, maxR, math.NaN(), "")
}

// latencyCharts: the percentiles of each latency measure, one chart each.
func (r *Report) latencyCharts() []chart {
	var out []chart
	for _, m := range []struct {
		name string
		d    Dist
	}{{"TTFT", r.Latency.TTFT}, {"TPOT", r.Latency.TPOT}, {"ITL", r.Latency.ITL}, {"E2E", r.Latency.E2E}} {
		ps := []struct {
			l string
			v Num
		}{{"p50", m.d.P50}, {"p90", m.d.P90}, {"p95", m.d.P95}, {"p99", m.d.P99}}
		var bs []bar
		mx := 0.0
		for _, p := range ps {
			bs = append(bs, bar{label: p.l, v: num(p.v), text: fmtSeconds(p.v)})
			mx = math.Max(mx, svgchart.Finite(num(p.v), 0))
		}
		out = append(out, hbarChart(m.name+" percentiles", bs, mx, math.NaN(), ""))
	}
	return out
}

// hoursChart: attainment per hour against the objective, the y axis from
// a tenth below the lowest hour (or the objective's double miss rate).
func (r *Report) hoursChart() chart {
	s := &r.SLO
	var cols []bar
	var atts []float64
	for _, h := range r.Hours {
		c := bar{label: h.Start.UTC().Format("15:04"), v: num(h.Attainment), text: fmtPct(h.Attainment) + " of " + fmtCount(h.Requests) + " requests", color: colGood}
		if Known(h.Attainment) {
			atts = append(atts, float64(h.Attainment))
			if Known(s.Objective) && h.Attainment < s.Objective {
				c.color = colBad
			}
		}
		cols = append(cols, c)
	}
	lo := attainmentFloor(s.Objective, atts)
	return columnChart("Attainment per hour (UTC)", cols, lo, 1, num(s.Objective), "objective "+fmtPct(s.Objective),
		func(v float64) string { return fmtPct(Num(v)) })
}

// attainmentFloor is the bottom of an attainment axis: a tenth below the
// lowest value or the objective's double miss rate, at most 90%.
func attainmentFloor(objective Num, vals []float64) float64 {
	lo := 1.0
	if Known(objective) {
		lo = math.Min(lo, float64(objective)-(1-float64(objective)))
	}
	for _, v := range vals {
		lo = math.Min(lo, v)
	}
	lo = math.Max(0, math.Floor(lo*10-1e-9)/10)
	if lo >= 1 {
		lo = 0.9
	}
	return lo
}

// seriesLine is one line of a line chart: its values at the chart's
// times (NaN: unknown, a gap in the line).
type seriesLine struct {
	name, color string
	v           []float64
}

// lineChart draws lines over times between yMin and yMax; ref, when not
// NaN, is a horizontal reference line. A legend names the lines.
func lineChart(title string, times []time.Time, lines []seriesLine, yMin, yMax, ref float64, refLabel string, yFmt func(float64) string) chart {
	const (
		width  = 720.0
		height = 240.0
		left   = 56.0
		right  = 24.0
		top    = 40.0
		bottom = 30.0
	)
	plotW, plotH := width-left-right, height-top-bottom
	c := newChart(width, height, title)
	y := c.yAxis(left, top, plotW, plotH, yMin, yMax, yFmt)
	c.line(left, top+plotH, left+plotW, top+plotH, colText, 1, "")
	n := len(times)
	if n == 0 {
		c.text(left+8, top+plotH/2, 12, "", colText, "no data")
		return *c
	}
	t0, span := times[0], times[n-1].Sub(times[0])
	xt := func(t time.Time) float64 {
		if span <= 0 {
			return left + plotW/2
		}
		return left + plotW*float64(t.Sub(t0))/float64(span)
	}
	x := func(i int) float64 { return xt(times[i]) }
	// Ticks at round times (UTC): the smallest nice interval that gives at
	// most 7.
	tick := 24 * time.Hour
	for _, d := range niceSteps {
		if d >= time.Minute && span/d <= 6 {
			tick = d
			break
		}
	}
	for tick < span/6 {
		tick += 24 * time.Hour
	}
	layout := "15:04"
	if span >= 24*time.Hour {
		layout = "01-02 15:04"
	}
	for t := t0.Truncate(tick); !t.After(times[n-1]); t = t.Add(tick) {
		if t.Before(t0) {
			continue
		}
		c.line(xt(t), top+plotH, xt(t), top+plotH+4, colText, 1, "")
		c.text(xt(t), top+plotH+16, 10, "middle", colText, t.UTC().Format(layout))
	}
	c.text(left+plotW, height-2, 10, "end", colText, "UTC")
	if !math.IsNaN(ref) {
		c.line(left, y(ref), left+plotW, y(ref), colMarker, 2, "6 3")
	}
	lx := left
	for _, l := range lines {
		c.rect(lx, 24, 14, 4, l.color, "")
		c.text(lx+18, 30, 11, "", colText, l.name)
		lx += 18 + 7*float64(len(l.name)) + 16
	}
	if !math.IsNaN(ref) {
		c.line(lx, 26, lx+14, 26, colMarker, 2, "6 3")
		c.text(lx+18, 30, 11, "", colMarker, refLabel)
	}
	for _, l := range lines {
		var run []string
		flush := func(end int) {
			switch len(run) {
			case 0:
			case 1: // an isolated point: a dot
				i := end - 1
				c.rect(x(i)-1.5, y(l.v[i])-1.5, 3, 3, l.color, "")
			default:
				c.polyline(run, l.color, 2)
			}
			run = run[:0]
		}
		for i, v := range l.v {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				flush(i)
				continue
			}
			run = append(run, f(x(i))+","+f(y(v)))
		}
		flush(len(l.v))
	}
	return *c
}

// seriesCharts: attainment against the objective, and TTFT and ITL p50
// and p99, over the period.
func (r *Report) seriesCharts() []chart {
	s := r.Series
	times := make([]time.Time, len(s.Attainment))
	att := make([]float64, len(s.Attainment))
	var known []float64
	for i, p := range s.Attainment {
		times[i], att[i] = p.T, num(p.V)
		if Known(p.V) {
			known = append(known, att[i])
		}
	}
	step := fmtSpan(s.Step)
	out := []chart{lineChart("Attainment of "+r.Tenant+" per "+step+" (UTC)", times,
		[]seriesLine{{"attainment", colGood, att}}, attainmentFloor(r.SLO.Objective, known), 1,
		num(r.SLO.Objective), "objective "+fmtPct(r.SLO.Objective), func(v float64) string { return fmtPct(Num(v)) })}
	for _, m := range []struct {
		name     string
		p50, p99 []Point
	}{{"TTFT", s.TTFTP50, s.TTFTP99}, {"ITL", s.ITLP50, s.ITLP99}} {
		mx := 0.0
		vals := func(ps []Point) []float64 {
			out := make([]float64, len(times))
			for i := range out {
				out[i] = math.NaN()
				if i < len(ps) {
					out[i] = num(ps[i].V)
					mx = math.Max(mx, svgchart.Finite(out[i], 0))
				}
			}
			return out
		}
		lines := []seriesLine{{"p50", colBar, vals(m.p50)}, {"p99", colBad, vals(m.p99)}}
		out = append(out, lineChart(m.name+" p50 and p99 of "+r.Tenant+" per "+step+" (UTC)", times, lines, 0, svgchart.NiceCeil(mx*1.05), math.NaN(), "",
			func(v float64) string { return fmtSeconds(Num(v)) }))
	}
	return out
}

// trafficCharts: the ISL and OSL histograms, and the shape mix.
func (r *Report) trafficCharts() []chart {
	var out []chart
	for _, d := range []struct {
		name string
		t    TokenDist
	}{{"ISL (prompt tokens)", r.Traffic.ISL}, {"OSL (output tokens)", r.Traffic.OSL}} {
		if d.t.Buckets != nil {
			out = append(out, tokenChart(d.name, d.t.Buckets))
		}
	}
	if r.Traffic.Shapes.Counts != nil {
		var bs []bar
		mx := 0.0
		for _, name := range shapeOrder {
			c := r.Traffic.Shapes.Counts[name]
			bs = append(bs, bar{label: name, v: num(c), text: fmtCount(c)})
			mx = math.Max(mx, svgchart.Finite(num(c), 0))
		}
		out = append(out, hbarChart("Shape mix (requests)", bs, mx, math.NaN(), ""))
	}
	return out
}

// tokenChart: requests per token-count bucket.
func tokenChart(name string, buckets []Bucket) chart {
	var cols []bar
	mx := 0.0
	for _, bk := range trimBuckets(buckets) {
		label := "≤" + bk.LE
		if bk.LE == "+Inf" {
			label = "more"
		}
		cols = append(cols, bar{label: label, v: num(bk.Count), text: fmtCount(bk.Count) + " requests"})
		mx = math.Max(mx, svgchart.Finite(num(bk.Count), 0))
	}
	// Four grid steps of whole requests.
	top := 4 * math.Max(1, math.Ceil(mx/4))
	return columnChart(name+": requests per bucket", cols, 0, top, math.NaN(), "",
		func(v float64) string { return fmtNum(Num(v)) })
}

// trimBuckets drops empty buckets at both ends (keeping one of each side
// for context).
func trimBuckets(bs []Bucket) []Bucket {
	first, last := -1, -1
	for i, b := range bs {
		if Known(b.Count) && b.Count > 0 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return bs
	}
	first = max(first-1, 0)
	last = min(last+1, len(bs)-1)
	return bs[first : last+1]
}
