package compare

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// WriteJSON writes the result as one indented JSON document.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func sideTitle(s *Side) string {
	t := s.Kind + " " + s.Source
	if s.Label != "" {
		t += " (" + s.Label + ")"
	}
	return t
}

func rowCell(row Row, n Num) string {
	if row.Name == "attainment" && present(n) {
		return fmtPct(float64(n))
	}
	return fmtNum(float64(n))
}

func verdict(c Check) string {
	switch {
	case c.Skipped != "":
		return "skip"
	case c.Pass:
		return "ok"
	}
	return "FAIL"
}

func checkLine(c Check) string {
	if c.Skipped != "" {
		return fmt.Sprintf("%s: not checked: %s", c.Name, c.Skipped)
	}
	op := "≤"
	if !c.Pass {
		op = ">"
	}
	s := fmt.Sprintf("%s %s %s %s", c.Name, fmtNum(float64(c.Value)), op, fmtNum(c.Limit))
	if c.Detail != "" {
		s += " (" + c.Detail + ")"
	}
	return s
}

// WriteText writes the comparison as a plain-text table with the checks,
// the findings and the notes on what each side lacks.
func (r *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	b.WriteString("goodput compare\n")
	fmt.Fprintf(&b, "  synthetic: %s\n", sideTitle(r.Synthetic))
	fmt.Fprintf(&b, "  real:      %s\n", sideTitle(r.Real))
	if r.SLO != nil {
		fmt.Fprintf(&b, "  SLO:       %s (%s)\n", r.SLO, r.SLOFrom)
	}
	b.WriteString("\n")
	cells := [][4]string{{"", "", "synthetic", "real"}}
	last := ""
	for _, row := range r.Rows {
		g := row.Group
		if g == last {
			g = ""
		}
		last = row.Group
		name := row.Name
		if row.Unit != "" {
			name += " (" + row.Unit + ")"
		}
		cells = append(cells, [4]string{g, name, rowCell(row, row.Synthetic), rowCell(row, row.Real)})
	}
	var wd [4]int
	for _, c := range cells {
		for i, v := range c {
			wd[i] = max(wd[i], utf8.RuneCountInString(v))
		}
	}
	for _, c := range cells {
		fmt.Fprintf(&b, "  %s  %s  %s  %s\n", pad(c[0], wd[0], false), pad(c[1], wd[1], false), pad(c[2], wd[2], true), pad(c[3], wd[3], true))
	}
	b.WriteString("\nchecks:\n")
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "  %-4s %s\n", verdict(c), checkLine(c))
	}
	if r.SLO != nil {
		fmt.Fprintf(&b, "\nattainment under %s: synthetic %s (%s), real %s (%s)\n", r.SLO, fmtAttain(r.AttainSynth), orWhy(r.AttainSynth), fmtAttain(r.AttainReal), orWhy(r.AttainReal))
	}
	b.WriteString("\nfindings:\n")
	for _, f := range r.Findings {
		fmt.Fprintf(&b, "  - %s\n", f)
	}
	for _, s := range []struct {
		name string
		side *Side
	}{{"synthetic", r.Synthetic}, {"real", r.Real}} {
		if len(s.side.Notes) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\nnotes (%s):\n", s.name)
		for _, n := range s.side.Notes {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	if r.Pass {
		b.WriteString("\nresult: within tolerances\n")
	} else {
		n := 0
		for _, c := range r.Checks {
			if !c.Pass {
				n++
			}
		}
		fmt.Fprintf(&b, "\nresult: %d of %d checks exceeded\n", n, len(r.Checks))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// pad pads s with spaces to w runes, on the left when right-aligned.
func pad(s string, w int, right bool) string {
	p := strings.Repeat(" ", max(0, w-utf8.RuneCountInString(s)))
	if right {
		return p + s
	}
	return s + p
}

func orWhy(a Attainment) string {
	if a.Method != "" {
		if a.Why != "" {
			return a.Method + "; " + a.Why
		}
		return a.Method
	}
	return a.Why
}

// cdfPlot is one SVG chart of two CDFs.
type cdfPlot struct {
	Title                string
	Synthetic, Real      string // polyline points
	SynthForm, RealForm  string
	Ticks                []tick
	Width, Height, Left  int
	Bottom, PlotW, PlotH int
}

type tick struct {
	X     float64
	Label string
}

// plotCDF draws the CDFs of a and b on a log x axis.
func plotCDF(title string, a, b *Dist) *cdfPlot {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, d := range []*Dist{a, b} {
		switch {
		case d.hasSamples():
			lo = min(lo, d.Samples[0])
			hi = max(hi, d.Samples[len(d.Samples)-1])
		case d.hasHist():
			lo = min(lo, d.Bounds[0])
			hi = max(hi, d.Bounds[len(d.Bounds)-1])
		}
	}
	if math.IsInf(lo, 0) || math.IsInf(hi, 0) {
		return nil
	}
	lo, hi = math.Max(lo, 1), math.Max(hi, 2)
	if hi <= lo {
		hi = lo * 2
	}
	p := &cdfPlot{Title: title, Width: 520, Height: 260, Left: 40, Bottom: 230, PlotW: 460, PlotH: 210,
		SynthForm: a.Form(), RealForm: b.Form()}
	l0, l1 := math.Log10(lo), math.Log10(hi)
	x := func(v float64) float64 {
		return float64(p.Left) + (math.Log10(math.Max(v, lo))-l0)/(l1-l0)*float64(p.PlotW)
	}
	y := func(f float64) float64 { return float64(p.Bottom) - f*float64(p.PlotH) }
	line := func(d *Dist) string {
		var pts []string
		addPt := func(v, f float64) {
			pts = append(pts, strconv.FormatFloat(x(v), 'f', 1, 64)+","+strconv.FormatFloat(y(f), 'f', 1, 64))
		}
		switch {
		case d.hasSamples():
			for i := 0; i <= 200; i++ {
				v := math.Pow(10, l0+(l1-l0)*float64(i)/200)
				addPt(v, d.ecdf(v))
			}
		case d.hasHist():
			for i, bd := range d.Bounds {
				if bd >= lo && bd <= hi {
					addPt(bd, d.Cum[i]/d.Total)
				}
			}
		}
		return strings.Join(pts, " ")
	}
	p.Synthetic, p.Real = line(a), line(b)
	mults := []float64{1}
	if l1-l0 < 2 { // less than two decades: ticks at 1, 2 and 5
		mults = []float64{1, 2, 5}
	}
	for e := math.Floor(l0); e <= math.Ceil(l1); e++ {
		for _, m := range mults {
			v := m * math.Pow(10, e)
			if v >= lo && v <= hi {
				p.Ticks = append(p.Ticks, tick{X: x(v), Label: fmtNum(v)})
			}
		}
	}
	return p
}

var htmlTmpl = template.Must(template.New("compare").Funcs(template.FuncMap{
	"cell":    rowCell,
	"verdict": verdict,
	"line":    checkLine,
	"title":   sideTitle,
	"attain":  fmtAttain,
	"why":     orWhy,
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>goodput compare</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:70em}
table{border-collapse:collapse;margin:1em 0}td,th{padding:.2em .8em;border-bottom:1px solid #ddd;text-align:right}
td:first-child,th:first-child,td.l{text-align:left}.FAIL{color:#b00;font-weight:bold}.ok{color:#070}.skip{color:#888}
.syn{stroke:#d62728}.real{stroke:#1f77b4}svg{margin:.5em 1em .5em 0;border:1px solid #eee}
.verdict{font-size:1.2em;font-weight:bold}
</style></head><body>
<h1>Benchmark vs real traffic</h1>
<p><span style="color:#d62728">synthetic</span>: {{title .R.Synthetic}}<br>
<span style="color:#1f77b4">real</span>: {{title .R.Real}}{{if .R.SLO}}<br>SLO: {{.R.SLO}} ({{.R.SLOFrom}}){{end}}</p>
<p class="verdict {{if .R.Pass}}ok{{else}}FAIL{{end}}">{{if .R.Pass}}Within tolerances{{else}}Tolerances exceeded{{end}}</p>
<h2>Findings</h2><ul>{{range .R.Findings}}<li>{{.}}</li>{{end}}</ul>
<h2>Checks</h2><table>{{range .R.Checks}}<tr><td class="{{verdict .}}">{{verdict .}}</td><td class="l">{{line .}}</td></tr>{{end}}</table>
{{range .Plots}}{{if .}}<svg width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" role="img" aria-label="{{.Title}}">
<text x="{{.Left}}" y="14" font-size="13">{{.Title}} CDF (synthetic: {{.SynthForm}}, real: {{.RealForm}})</text>
<line x1="{{.Left}}" y1="{{.Bottom}}" x2="500" y2="{{.Bottom}}" stroke="#999"/><line x1="{{.Left}}" y1="20" x2="{{.Left}}" y2="{{.Bottom}}" stroke="#999"/>
<text x="4" y="24" font-size="10">1.0</text><text x="4" y="{{.Bottom}}" font-size="10">0</text>
{{$b := .Bottom}}{{range .Ticks}}<text x="{{.X}}" y="{{$b}}" dy="14" font-size="10" text-anchor="middle">{{.Label}}</text>{{end}}
<polyline class="syn" fill="none" stroke-width="2" points="{{.Synthetic}}"/>
<polyline class="real" fill="none" stroke-width="2" points="{{.Real}}"/>
</svg>{{end}}{{end}}
<h2>Side by side</h2><table><tr><th></th><th></th><th>synthetic</th><th>real</th></tr>
{{range .R.Rows}}<tr><td>{{.Group}}</td><td class="l">{{.Name}}{{if .Unit}} ({{.Unit}}){{end}}</td><td>{{cell . .Synthetic}}</td><td>{{cell . .Real}}</td></tr>{{end}}</table>
{{if .R.SLO}}<p>Attainment under {{.R.SLO}}: synthetic {{attain .R.AttainSynth}} ({{why .R.AttainSynth}}), real {{attain .R.AttainReal}} ({{why .R.AttainReal}})</p>{{end}}
<h2>Notes</h2><ul>{{range .R.Synthetic.Notes}}<li>synthetic: {{.}}</li>{{end}}{{range .R.Real.Notes}}<li>real: {{.}}</li>{{end}}</ul>
</body></html>
`))

// WriteHTML writes a self-contained page (no script, no network): the
// verdict, findings, checks, CDF overlays of ISL and OSL as inline SVG and
// the side-by-side table.
func (r *Result) WriteHTML(w io.Writer) error {
	return htmlTmpl.Execute(w, struct {
		R     *Result
		Plots []*cdfPlot
	}{r, []*cdfPlot{
		plotCDF("ISL (tokens)", &r.Synthetic.ISL, &r.Real.ISL),
		plotCDF("OSL (tokens)", &r.Synthetic.OSL, &r.Real.OSL),
	}})
}
