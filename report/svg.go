package report

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Charts are inline SVG, written here: no script, no external resource. The
// markup is XML-well-formed (every element closed, attributes quoted, text
// escaped), so the HTML page is also well-formed XML.

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

func esc(s string) string { return html.EscapeString(s) }

// f prints a coordinate.
func f(v float64) string { return fmt.Sprintf("%.1f", v) }

func svgOpen(b *strings.Builder, w, h float64, title string) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 %s %s" width="%s" height="%s" role="img" aria-label="%s">`,
		f(w), f(h), f(w), f(h), esc(title))
	fmt.Fprintf(b, `<title>%s</title>`, esc(title))
	fmt.Fprintf(b, `<text x="0" y="14" font-size="13" font-weight="bold" fill="%s">%s</text>`, colText, esc(title))
}

// hbarChart draws horizontal bars scaled to max; marker, when not NaN, is a
// vertical line at that value (a target).
func hbarChart(title string, bars []bar, max, marker float64, markerLabel string) string {
	const (
		width  = 520.0
		labelW = 130.0
		textW  = 150.0
		rowH   = 22.0
		top    = 26.0
	)
	plotW := width - labelW - textW
	h := top + rowH*float64(len(bars)) + 18
	var b strings.Builder
	svgOpen(&b, width, h, title)
	if !(max > 0) || math.IsInf(max, 0) {
		max = 1
	}
	scale := func(v float64) float64 { return math.Max(0, math.Min(v, max)) / max * plotW }
	for i, br := range bars {
		y := top + rowH*float64(i)
		fmt.Fprintf(&b, `<text x="%s" y="%s" font-size="12" text-anchor="end" fill="%s">%s</text>`, f(labelW-6), f(y+15), colText, esc(br.label))
		fmt.Fprintf(&b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"/>`, f(labelW), f(y+3), f(plotW), f(rowH-6), "#f2f2f2")
		if !math.IsNaN(br.v) {
			c := br.color
			if c == "" {
				c = colBar
			}
			fmt.Fprintf(&b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"/>`, f(labelW), f(y+3), f(scale(br.v)), f(rowH-6), c)
		}
		fmt.Fprintf(&b, `<text x="%s" y="%s" font-size="12" fill="%s">%s</text>`, f(labelW+plotW+6), f(y+15), colText, esc(br.text))
	}
	if !math.IsNaN(marker) {
		x := labelW + scale(marker)
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2" stroke-dasharray="4 2"/>`, f(x), f(top), f(x), f(h-16), colMarker)
		fmt.Fprintf(&b, `<text x="%s" y="%s" font-size="11" text-anchor="middle" fill="%s">%s</text>`, f(x), f(h-4), colMarker, esc(markerLabel))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// columnChart draws vertical columns between yMin and yMax; ref, when not
// NaN, is a horizontal reference line. Every labelEvery-th column is
// labelled on the x axis.
func columnChart(title string, cols []bar, yMin, yMax, ref float64, refLabel string, yFmt func(float64) string) string {
	const (
		width  = 720.0
		height = 240.0
		left   = 56.0
		right  = 10.0
		top    = 26.0
		bottom = 42.0
	)
	plotW, plotH := width-left-right, height-top-bottom
	var b strings.Builder
	svgOpen(&b, width, height, title)
	if !(yMax > yMin) {
		yMax = yMin + 1
	}
	y := func(v float64) float64 {
		v = math.Max(yMin, math.Min(yMax, v))
		return top + plotH - (v-yMin)/(yMax-yMin)*plotH
	}
	for i := 0; i <= 4; i++ {
		v := yMin + (yMax-yMin)*float64(i)/4
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="1"/>`, f(left), f(y(v)), f(left+plotW), f(y(v)), colGrid)
		fmt.Fprintf(&b, `<text x="%s" y="%s" font-size="11" text-anchor="end" fill="%s">%s</text>`, f(left-4), f(y(v)+4), colText, esc(yFmt(v)))
	}
	n := len(cols)
	if n == 0 {
		fmt.Fprintf(&b, `<text x="%s" y="%s" font-size="12" fill="%s">no data</text>`, f(left+8), f(top+plotH/2), colText)
		b.WriteString(`</svg>`)
		return b.String()
	}
	slot := plotW / float64(n)
	gap := math.Min(slot*0.2, 4)
	labelEvery := int(math.Ceil(float64(n) / 12))
	for i, c := range cols {
		x := left + slot*float64(i)
		if !math.IsNaN(c.v) {
			col := c.color
			if col == "" {
				col = colBar
			}
			fmt.Fprintf(&b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s</title></rect>`,
				f(x+gap/2), f(y(c.v)), f(math.Max(slot-gap, 0.5)), f(top+plotH-y(c.v)), col, esc(c.label+": "+c.text))
		} else {
			fmt.Fprintf(&b, `<text x="%s" y="%s" font-size="10" text-anchor="middle" fill="%s">?</text>`, f(x+slot/2), f(top+plotH-4), colText)
		}
		if i%labelEvery == 0 {
			fmt.Fprintf(&b, `<text x="%s" y="%s" font-size="10" text-anchor="middle" fill="%s">%s</text>`, f(x+slot/2), f(top+plotH+14), colText, esc(c.label))
		}
	}
	if !math.IsNaN(ref) {
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2" stroke-dasharray="6 3"/>`, f(left), f(y(ref)), f(left+plotW), f(y(ref)), colMarker)
		fmt.Fprintf(&b, `<text x="%s" y="14" font-size="11" text-anchor="end" fill="%s">%s</text>`, f(left+plotW), colMarker, esc("dashed line: "+refLabel))
	}
	fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="1"/>`, f(left), f(top+plotH), f(left+plotW), f(top+plotH), colText)
	b.WriteString(`</svg>`)
	return b.String()
}

// num returns n as a float64 (NaN when unknown).
func num(n Num) float64 {
	if !Known(n) {
		return math.NaN()
	}
	return float64(n)
}

// charts returns the SVG charts of each section, by section id.
func (r *Report) charts() map[string][]string {
	out := map[string][]string{}
	s := &r.SLO

	// Attainment against the objective, and the error budget.
	att := []bar{{label: "attainment", v: num(s.Attainment), text: fmtPct(s.Attainment), color: colGood}}
	if s.Met != nil && !*s.Met {
		att[0].color = colBad
	}
	out["summary"] = append(out["summary"], hbarChart("Attainment against the objective", att, 1, num(s.Objective), "objective "+fmtPct(s.Objective)))
	used := num(s.ErrorBudgetUsed)
	uc := colGood
	if used > 1 {
		uc = colBad
	}
	out["summary"] = append(out["summary"], hbarChart("Error budget used", []bar{{label: "budget used", v: used, text: fmtPct(s.ErrorBudgetUsed), color: uc}},
		math.Max(1, nanTo(used, 0)), 1, "whole budget"))

	// Misses by reason.
	var rb []bar
	maxR := 0.0
	for _, rc := range s.MissReasons {
		rb = append(rb, bar{label: rc.Reason, v: num(rc.Count), text: fmtCount(rc.Count), color: colBad})
		maxR = math.Max(maxR, nanTo(num(rc.Count), 0))
	}
	out["slo"] = append(out["slo"], hbarChart("Misses by reason", rb, maxR, math.NaN(), ""))

	// Latency percentiles, one chart per measure.
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
			mx = math.Max(mx, nanTo(num(p.v), 0))
		}
		out["latency"] = append(out["latency"], hbarChart(m.name+" percentiles", bs, mx, math.NaN(), ""))
	}

	// Attainment per hour.
	if len(r.Hours) > 0 {
		lo := 1.0
		if Known(s.Objective) {
			lo = math.Min(lo, float64(s.Objective)-(1-float64(s.Objective)))
		}
		var cols []bar
		for _, h := range r.Hours {
			c := bar{label: h.Start.UTC().Format("15:04"), v: num(h.Attainment), text: fmtPct(h.Attainment) + " of " + fmtCount(h.Requests) + " requests", color: colGood}
			if Known(h.Attainment) {
				lo = math.Min(lo, float64(h.Attainment))
				if Known(s.Objective) && h.Attainment < s.Objective {
					c.color = colBad
				}
			}
			cols = append(cols, c)
		}
		lo = math.Max(0, math.Floor(lo*10-1e-9)/10)
		if lo >= 1 {
			lo = 0.9
		}
		out["worst-hours"] = append(out["worst-hours"], columnChart("Attainment per hour (UTC)", cols, lo, 1, num(s.Objective), "objective "+fmtPct(s.Objective),
			func(v float64) string { return fmtPct(Num(v)) }))
	}

	// ISL and OSL histograms, and the shape mix.
	for _, d := range []struct {
		name string
		t    TokenDist
	}{{"ISL (prompt tokens)", r.Traffic.ISL}, {"OSL (output tokens)", r.Traffic.OSL}} {
		if d.t.Buckets == nil {
			continue
		}
		var cols []bar
		mx := 0.0
		for _, bk := range trimBuckets(d.t.Buckets) {
			label := "≤" + bk.LE
			if bk.LE == "+Inf" {
				label = "more"
			}
			cols = append(cols, bar{label: label, v: num(bk.Count), text: fmtCount(bk.Count) + " requests"})
			mx = math.Max(mx, nanTo(num(bk.Count), 0))
		}
		// Four grid steps of whole requests.
		top := 4 * math.Max(1, math.Ceil(mx/4))
		out["traffic"] = append(out["traffic"], columnChart(d.name+": requests per bucket", cols, 0, top, math.NaN(), "",
			func(v float64) string { return fmtNum(Num(v)) }))
	}
	if r.Traffic.Shapes.Counts != nil {
		var bs []bar
		mx := 0.0
		for _, name := range shapeOrder {
			c := r.Traffic.Shapes.Counts[name]
			bs = append(bs, bar{label: name, v: num(c), text: fmtCount(c)})
			mx = math.Max(mx, nanTo(num(c), 0))
		}
		out["traffic"] = append(out["traffic"], hbarChart("Shape mix (requests)", bs, mx, math.NaN(), ""))
	}
	return out
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

func nanTo(v, d float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return d
	}
	return v
}
