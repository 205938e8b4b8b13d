package sweep

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/goodput/goodput/bench"
	"github.com/goodput/goodput/internal/svgchart"
)

// The chart is inline SVG drawn by the page template from a chart value
// (html/template escapes every text and attribute): no script, no external
// resource, and well-formed XML. The colours and the shape model follow
// package report's charts.

const (
	colThroughput = "#4e79a7"
	colGoodput    = "#59a14f"
	colTTFT       = "#f28e2b"
	colITL        = "#b07aa1"
	colMarker     = "#222222"
	colGrid       = "#dddddd"
	colText       = "#333333"
	colBad        = "#e15759"

	dashP50 = "2 3" // dotted: a p50 line (right axis)
	dashP99 = "7 3" // dashed: a p99 line (right axis)
)

// chart is one SVG chart: its size, title and shapes, drawn in order.
type chart struct {
	W, H   string
	Title  string
	Shapes []shape
}

// shape is one element: a rect (X, Y, W, H, Fill), a circle (X, Y, R,
// Fill, Text as tooltip), a line (X1…Y2, Stroke, StrokeWidth, Dash), a
// polyline (Points, Stroke, StrokeWidth, Dash) or a text (X, Y, Size,
// Weight, Anchor, Fill, Text). ID and Step, when set, become the id and
// data-step attributes (tests and readers find the knee marker and the
// step of an element by them).
type shape struct {
	Kind                      string
	ID, Step                  string
	X, Y, W, H, R             string
	X1, Y1, X2, Y2            string
	Fill, Stroke, StrokeWidth string
	Dash                      string
	Points                    string
	Size, Weight, Anchor      string
	Text                      string
}

// f prints a coordinate.
func f(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func (c *chart) add(s shape) *shape {
	c.Shapes = append(c.Shapes, s)
	return &c.Shapes[len(c.Shapes)-1]
}

func (c *chart) line(x1, y1, x2, y2 float64, stroke string, width float64, dash string) *shape {
	return c.add(shape{Kind: "line", X1: f(x1), Y1: f(y1), X2: f(x2), Y2: f(y2), Stroke: stroke, StrokeWidth: f(width), Dash: dash})
}

func (c *chart) text(x, y float64, size int, anchor, fill, text string) *shape {
	return c.add(shape{Kind: "text", X: f(x), Y: f(y), Size: strconv.Itoa(size), Anchor: anchor, Fill: fill, Text: text})
}

// series is one line of the chart: a value per step (NaN: unknown, a gap),
// on the left or the right axis.
type series struct {
	name, color, dash string
	right             bool
	v                 []float64
	unit              string // in tooltips
}

// fmtAxis prints an axis value: 1.5, 20, 1200, 1.2k above 10,000.
func fmtAxis(v float64) string {
	switch {
	case v >= 10000:
		return strconv.FormatFloat(v/1000, 'g', 3, 64) + "k"
	case v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// The charts' width and side margins: the attainment chart's steps line up
// under the capacity chart's.
const (
	width = 800.0
	left  = 64.0
	right = 72.0
)

// capacityChart draws the capacity curve: throughput and goodput (req/s,
// left axis, linear from 0) and TTFT and ITL p50 and p99 (ms, right axis,
// logarithmic: past the knee TTFT grows by orders of magnitude while ITL
// stays in tens of milliseconds) against the steps, evenly spaced in
// order of load; the knee, when found, as a vertical line with a note.
func capacityChart(s *Sweep) chart {
	const (
		height = 380.0
		top    = 64.0
		bottom = 52.0
	)
	plotW, plotH := width-left-right, height-top-bottom
	c := chart{W: f(width), H: f(height), Title: "Capacity curve: throughput and goodput (left), TTFT and ITL (right) against " + string(s.Kind)}
	c.add(shape{Kind: "text", X: "0", Y: "14", Size: "13", Weight: "bold", Fill: colText, Text: c.Title})
	n := len(s.Steps)
	if n == 0 {
		c.text(left+8, top+plotH/2, 12, "", colText, "no steps")
		return c
	}
	ls := stepSeries(s.Steps)
	// Left axis: req/s from 0.
	lmax := 0.0
	for _, l := range ls {
		if !l.right {
			for _, v := range l.v {
				lmax = math.Max(lmax, svgchart.Finite(v, 0))
			}
		}
	}
	lTop := svgchart.NiceCeil(lmax * 1.05)
	yl := func(v float64) float64 {
		return top + plotH - math.Max(0, math.Min(v, lTop))/lTop*plotH
	}
	for i := 0; i <= 4; i++ {
		v := lTop * float64(i) / 4
		c.line(left, yl(v), left+plotW, yl(v), colGrid, 1, "")
		c.text(left-4, yl(v)+4, 11, "end", colText, fmtAxis(v))
	}
	c.text(left-4, top-8, 11, "end", colText, "req/s")
	// Right axis: ms, one grid tick per decade.
	lo, hi := math.Inf(1), 0.0
	for _, l := range ls {
		if l.right {
			for _, v := range l.v {
				if v > 0 && !math.IsInf(v, 0) {
					lo, hi = math.Min(lo, v), math.Max(hi, v)
				}
			}
		}
	}
	var yr func(float64) float64
	if hi > 0 {
		dLo, dHi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if dHi <= dLo {
			dHi = dLo + 1
		}
		yr = func(v float64) float64 {
			d := math.Max(dLo, math.Min(dHi, math.Log10(v)))
			return top + plotH - (d-dLo)/(dHi-dLo)*plotH
		}
		for d := dLo; d <= dHi; d++ {
			v := math.Pow(10, d)
			c.line(left+plotW, yr(v), left+plotW+4, yr(v), colText, 1, "")
			c.text(left+plotW+6, yr(v)+4, 11, "", colText, fmtAxis(v))
		}
		c.text(left+plotW+6, top-8, 11, "", colText, "ms (log)")
		if b := ttftBound(s.SLO); b > 0 {
			c.line(left, yr(b), left+plotW, yr(b), colTTFT, 1, "3 3")
			c.text(left+plotW-4, yr(b)-5, 10, "end", colTTFT, "TTFT bound "+fmtAxis(b)+" ms")
		}
	} else {
		c.text(left+plotW+6, top-8, 11, "", colText, "ms: no data")
	}
	c.line(left, top, left, top+plotH, colText, 1, "")
	c.line(left+plotW, top, left+plotW, top+plotH, colText, 1, "")
	c.line(left, top+plotH, left+plotW, top+plotH, colText, 1, "")
	// X axis: one slot per step.
	slot := plotW / float64(n)
	x := func(i int) float64 { return left + slot*(float64(i)+0.5) }
	for i := range s.Steps {
		c.line(x(i), top+plotH, x(i), top+plotH+4, colText, 1, "")
		t := c.text(x(i), top+plotH+16, 10, "middle", colText, s.Steps[i].Load.String())
		t.Step = strconv.Itoa(i)
	}
	c.text(left+plotW/2, height-6, 11, "middle", colText, string(s.Kind)+" ("+s.Kind.Unit()+"), one step per slot")
	// Legend, two rows.
	lx, ly := left, 30.0
	for i, l := range ls {
		if i == 2 {
			lx, ly = left, 46
		}
		name := l.name + " (left)"
		if l.right {
			name = l.name + " (right)"
		}
		c.line(lx, ly-4, lx+22, ly-4, l.color, 2, l.dash)
		c.text(lx+26, ly, 11, "", colText, name)
		lx += 26 + 6.5*float64(len([]rune(name))) + 18
	}
	// The knee.
	if k := s.Knee; k.Found && k.Index >= 0 && k.Index < n {
		kx := x(k.Index)
		m := c.line(kx, top, kx, top+plotH, colMarker, 2, "4 2")
		m.ID, m.Step = "knee", strconv.Itoa(k.Index)
		anchor := "start"
		tx := kx + 4
		if k.Index > n/2 {
			anchor, tx = "end", kx-4
		}
		c.text(tx, top+12, 11, anchor, colMarker, "knee: "+fmtLoad(s.Kind, k.Load))
	}
	// The lines and their points.
	for _, l := range ls {
		y := yl
		if l.right {
			if yr == nil {
				continue
			}
			y = yr
		}
		var run []string
		flush := func() {
			if len(run) > 1 {
				c.add(shape{Kind: "polyline", Points: strings.Join(run, " "), Stroke: l.color, StrokeWidth: "2", Dash: l.dash})
			}
			run = run[:0]
		}
		for i, v := range l.v {
			if math.IsNaN(v) || math.IsInf(v, 0) || (l.right && v <= 0) {
				flush()
				continue
			}
			run = append(run, f(x(i))+","+f(y(v)))
			c.add(shape{Kind: "circle", X: f(x(i)), Y: f(y(v)), R: "2.5", Fill: l.color, Step: strconv.Itoa(i),
				Text: l.name + " at " + fmtLoad(s.Kind, s.Steps[i].Load) + ": " + fmtRate(v) + " " + l.unit})
		}
		flush()
	}
	return c
}

// stepSeries returns the chart's lines from the steps.
func stepSeries(steps []Step) []series {
	n := len(steps)
	mk := func(name, color, dash, unit string, right bool, get func(*Step) Num) series {
		s := series{name: name, color: color, dash: dash, right: right, unit: unit, v: make([]float64, n)}
		for i := range steps {
			s.v[i] = float64(get(&steps[i]))
			if !Num(s.v[i]).Known() {
				s.v[i] = math.NaN()
			}
		}
		return s
	}
	return []series{
		mk("throughput", colThroughput, "", "req/s", false, func(s *Step) Num { return Num(s.RequestThroughput) }),
		mk("goodput", colGoodput, "", "req/s", false, func(s *Step) Num { return Num(s.Goodput()) }),
		mk("TTFT p50", colTTFT, dashP50, "ms", true, func(s *Step) Num { return s.TTFT.P50 }),
		mk("TTFT p99", colTTFT, dashP99, "ms", true, func(s *Step) Num { return s.TTFT.P99 }),
		mk("ITL p50", colITL, dashP50, "ms", true, func(s *Step) Num { return s.ITL.P50 }),
		mk("ITL p99", colITL, dashP99, "ms", true, func(s *Step) Num { return s.ITL.P99 }),
	}
}

// ttftBound returns the SLO's TTFT bound in ms (0: none, or not positive).
func ttftBound(slo string) float64 {
	if slo == "" || slo == "none" {
		return 0
	}
	b, err := bench.ParseSLO([]string{slo})
	if err != nil || b.TTFT <= 0 {
		return 0
	}
	return float64(b.TTFT) / float64(time.Millisecond)
}

// attainmentChart draws each step's attainment as a column, green when it
// meets the objective and red below it, the objective as a dashed line and
// the knee as in the capacity chart, the steps in the same slots.
func attainmentChart(s *Sweep) chart {
	const (
		height = 170.0
		top    = 26.0
		bottom = 24.0
	)
	plotW, plotH := width-left-right, height-top-bottom
	obj := s.Knee.Rule.Objective
	c := chart{W: f(width), H: f(height), Title: "Attainment per step (good requests over completed and failed)"}
	c.add(shape{Kind: "text", X: "0", Y: "14", Size: "13", Weight: "bold", Fill: colText, Text: c.Title})
	n := len(s.Steps)
	if n == 0 {
		c.text(left+8, top+plotH/2, 12, "", colText, "no steps")
		return c
	}
	// Up to 100% from below the lowest attainment and the objective's
	// double miss rate, by a multiple of 20% (so that the quarters print
	// whole: 85%, 90%, 95%).
	lo := 1.0
	if obj > 0 {
		lo = math.Min(lo, obj-(1-obj))
	}
	for i := range s.Steps {
		if a := s.Steps[i].Attainment; a.Known() {
			lo = math.Min(lo, float64(a))
		}
	}
	lo = math.Max(0, 1-0.2*math.Max(1, math.Ceil((1-lo)/0.2-1e-9)))
	y := func(v float64) float64 { return top + plotH - (math.Max(lo, math.Min(1, v))-lo)/(1-lo)*plotH }
	for i := 0; i <= 4; i++ {
		v := lo + (1-lo)*float64(i)/4
		c.line(left, y(v), left+plotW, y(v), colGrid, 1, "")
		c.text(left-4, y(v)+4, 11, "end", colText, fmtPct(Num(v)))
	}
	slot := plotW / float64(n)
	for i := range s.Steps {
		st := &s.Steps[i]
		x := left + slot*float64(i)
		if a := st.Attainment; a.Known() {
			fill := colGoodput
			if obj > 0 && float64(a) < obj {
				fill = colBad
			}
			r := c.add(shape{Kind: "rect", X: f(x + slot*0.2), Y: f(y(float64(a))), W: f(slot * 0.6), H: f(top + plotH - y(float64(a))), Fill: fill,
				Text: fmtLoad(st.Kind, st.Load) + ": " + fmtPct(a)})
			r.Step = strconv.Itoa(i)
		} else {
			c.text(x+slot/2, top+plotH-4, 10, "middle", colText, "?")
		}
		c.text(x+slot/2, top+plotH+14, 10, "middle", colText, st.Load.String())
	}
	c.line(left, top+plotH, left+plotW, top+plotH, colText, 1, "")
	if obj > 0 {
		c.line(left, y(obj), left+plotW, y(obj), colMarker, 2, "6 3")
		c.text(left+plotW-4, y(obj)-5, 11, "end", colMarker, "objective "+fmtPct(Num(obj)))
	}
	if k := s.Knee; k.Found && k.Index >= 0 && k.Index < n {
		kx := left + slot*(float64(k.Index)+0.5)
		c.line(kx, top, kx, top+plotH, colMarker, 2, "4 2").Step = strconv.Itoa(k.Index)
	}
	return c
}
