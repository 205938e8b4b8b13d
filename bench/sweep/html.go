package sweep

import (
	"html/template"
	"io"
	"strconv"

	"github.com/goodput/goodput/report"
)

// htmlStyle is the page's style sheet (no external resource), as package
// report's pages; report.HTMLShell makes the page around it.
const htmlStyle = `body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#222;margin:0;background:#fafafa}
main{max-width:1100px;margin:0 auto;padding:24px;background:#fff}
h1{font-size:1.6em;margin:0 0 4px}
h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
p.meta{color:#555;margin:0 0 12px}
p.knee{font-weight:600}
table{border-collapse:collapse;margin:8px 0 16px;font-size:0.9em}
th,td{border:1px solid #ddd;padding:4px 6px;text-align:right;font-variant-numeric:tabular-nums}
th:first-child,td:first-child{text-align:left}
tr.knee td{background:#fff3cd;font-weight:600}
svg.chart{max-width:100%;height:auto;font-family:inherit}`

// htmlPage is the page's template: html/template escapes every text and
// attribute value it prints; the markup is well-formed XML.
var htmlPage = template.Must(template.New("page").Parse(report.HTMLShell(htmlStyle, `<h1>{{.Title}}</h1>
<p class="meta">{{.Label}}</p>
<p class="knee" id="knee-note">{{.Knee.Note}}</p>
{{with .Stopped}}<p class="meta" id="stopped">{{.}}</p>
{{end}}{{range .Charts}}{{template "chart" .}}
{{end}}<h2>Steps</h2>
<table id="steps">
<thead><tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>
{{range .Rows}}<tr data-step="{{.Step}}"{{if .Knee}} class="knee"{{end}}>{{range .Cells}}<td>{{.}}</td>{{end}}</tr>
{{end}}</tbody>
</table>
<h2>How the knee is found</h2>
<p>{{.Rule}}</p>
<p class="meta">SLO {{.SLO}} · started {{.Date}} · latencies in milliseconds; goodput is good requests per second (without an SLO, every successful request is good); attainment is good requests over completed and failed ones.</p>
`) + `
{{define "chart"}}<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {{.W}} {{.H}}" width="{{.W}}" height="{{.H}}" role="img" aria-label="{{.Title}}"><title>{{.Title}}</title>
{{- range .Shapes}}
{{- if eq .Kind "rect"}}<rect{{with .Step}} data-step="{{.}}"{{end}} x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}" fill="{{.Fill}}"{{if .Text}}><title>{{.Text}}</title></rect>{{else}}/>{{end}}
{{- else if eq .Kind "circle"}}<circle cx="{{.X}}" cy="{{.Y}}" r="{{.R}}" fill="{{.Fill}}"{{with .Step}} data-step="{{.}}"{{end}}{{if .Text}}><title>{{.Text}}</title></circle>{{else}}/>{{end}}
{{- else if eq .Kind "polyline"}}<polyline points="{{.Points}}" fill="none" stroke="{{.Stroke}}" stroke-width="{{.StrokeWidth}}" stroke-linejoin="round"{{with .Dash}} stroke-dasharray="{{.}}"{{end}}/>
{{- else if eq .Kind "line"}}<line{{with .ID}} id="{{.}}"{{end}}{{with .Step}} data-step="{{.}}"{{end}} x1="{{.X1}}" y1="{{.Y1}}" x2="{{.X2}}" y2="{{.Y2}}" stroke="{{.Stroke}}" stroke-width="{{.StrokeWidth}}"{{with .Dash}} stroke-dasharray="{{.}}"{{end}}/>
{{- else}}<text{{with .Step}} data-step="{{.}}"{{end}} x="{{.X}}" y="{{.Y}}" font-size="{{.Size}}"{{with .Weight}} font-weight="{{.}}"{{end}}{{with .Anchor}} text-anchor="{{.}}"{{end}} fill="{{.Fill}}">{{.Text}}</text>
{{- end}}
{{- end}}</svg>{{end}}`))

// ruleText explains the knee rule on the page.
func ruleText(r Rule) string {
	s := "The knee is the first step at which goodput stops rising"
	if r.Objective > 0 {
		s += " or attainment falls below the objective (" + fmtPct(Num(r.Objective)) + ")"
	}
	s += ". Goodput stops rising at a step when, from that step on, no step raises goodput above the best goodput before it by more than " +
		strconv.FormatFloat(r.MinGain, 'g', -1, 64) + " times the relative growth of the load since that best step (an infinite rate counts as twice the rate before it). The step before the knee is the highest load sustained."
	return s
}

type htmlRow struct {
	Step  int
	Knee  bool
	Cells []string
}

// tableHead is the steps table's header, for the page and the text table.
var tableHead = []string{"step", "load", "completed", "failed", "req/s", "goodput req/s", "attainment", "out tok/s", "good tok/s",
	"TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "TPOT p50", "TPOT p99", "E2EL p50", "E2EL p99", "note"}

// stepCells is one step's table row.
func stepCells(s *Sweep, i int) []string {
	st := &s.Steps[i]
	note := st.Error
	if s.Knee.Found && s.Knee.Index == i {
		note = join("knee", note)
	}
	gp := fmtNum(st.RequestGoodput)
	if !st.RequestGoodput.Known() {
		gp = fmtRate(st.Goodput()) + "*"
	}
	return []string{
		strconv.Itoa(i + 1), fmtLoad(st.Kind, st.Load), strconv.Itoa(st.Completed), strconv.Itoa(st.Failed),
		fmtRate(st.RequestThroughput), gp, fmtPct(st.Attainment), fmtRate(st.OutputThroughput), fmtNum(st.GoodOutputThroughput),
		fmtMs(st.TTFT.P50), fmtMs(st.TTFT.P99), fmtMs(st.ITL.P50), fmtMs(st.ITL.P99),
		fmtMs(st.TPOT.P50), fmtMs(st.TPOT.P99), fmtMs(st.E2EL.P50), fmtMs(st.E2EL.P99), note,
	}
}

func join(a, b string) string {
	if b == "" {
		return a
	}
	return a + "; " + b
}

// WriteHTML writes the sweep as one self-contained HTML page: the label as
// subtitle, the knee's note (and, for a sweep stopped early, when it
// stopped), the capacity chart and the attainment per
// step (inline SVG) and the table of steps; no script, no external resource, and well-formed XML.
func WriteHTML(w io.Writer, s *Sweep) error {
	rows := make([]htmlRow, len(s.Steps))
	for i := range s.Steps {
		rows[i] = htmlRow{Step: i, Knee: s.Knee.Found && s.Knee.Index == i, Cells: stepCells(s, i)}
	}
	rule := s.Knee.Rule
	if rule.MinGain <= 0 {
		rule.MinGain = DefaultMinGain
	}
	date := s.Date
	if date == "" {
		date = "unknown"
	}
	slo := s.SLO
	if slo == "" {
		slo = "none"
	}
	return htmlPage.Execute(w, struct {
		Title, Label, SLO, Date, Rule string
		Stopped                       string
		Knee                          Knee
		Charts                        []chart
		Head                          []string
		Rows                          []htmlRow
	}{"Capacity curve: " + s.Ladder, s.Label, slo, date, ruleText(rule), s.Stopped, s.Knee, []chart{capacityChart(s), attainmentChart(s)}, tableHead, rows})
}
