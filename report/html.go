package report

import (
	"html/template"
	"io"
)

// htmlStyle is the page's style sheet (no external resource).
const htmlStyle = `body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#222;margin:0;background:#fafafa}
main{max-width:980px;margin:0 auto;padding:24px;background:#fff}
h1{font-size:1.6em;margin:0 0 4px}
h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
p.meta{color:#555;margin:0 0 12px}
table{border-collapse:collapse;margin:8px 0 16px}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:right;font-variant-numeric:tabular-nums}
th:first-child,td:first-child{text-align:left}
table.kv td{text-align:left}
table.kv td:first-child{font-weight:600;white-space:nowrap}
caption{text-align:left;font-weight:600;padding:4px 0}
.charts{display:flex;flex-wrap:wrap;gap:12px}
svg.chart{max-width:100%;height:auto;font-family:inherit}
li{margin:4px 0}`

// HTMLShell returns the template text of a self-contained goodput HTML
// page (the reports here, a sweep's page in package bench/sweep): the
// document head with the title {{.Title}} and the style sheet style (CSS
// without external resources), then body inside <main>. The page ends at
// </html>, without a newline after it; the caller may append template
// definitions.
func HTMLShell(style, body string) string {
	return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8"/>
<meta name="viewport" content="width=device-width, initial-scale=1"/>
<title>{{.Title}}</title>
<style>
` + style + `
</style>
</head>
<body>
<main>
` + body + `</main>
</body>
</html>`
}

// htmlPage is the page's template: html/template escapes every text and
// attribute value it prints; the markup is well-formed XML. Template
// "section" prints a section's content (a sectionView), on this page and
// on a page of several reports (multi.go).
var htmlPage = template.Must(template.New("page").Parse(HTMLShell(htmlStyle, `<h1>{{.Title}}</h1>
<p class="meta">{{.Period}} · {{.Source}} · generated {{.Generated}}</p>
{{range .Sections}}<section id="{{.ID}}">
{{template "section" .}}</section>
{{end}}`) + `
{{define "section"}}<h2>{{.Title}}</h2>
{{range .Text}}<p>{{.}}</p>
{{end}}{{with .Charts}}<div class="charts">
{{range .}}{{template "chart" .}}
{{end}}</div>
{{end}}{{with .KVs}}<table class="kv">
{{range .}}<tr><td>{{.K}}</td><td>{{.V}}</td></tr>
{{end}}</table>
{{end}}{{range .Tables}}<table>
{{with .Caption}}<caption>{{.}}</caption>
{{end}}<thead><tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</tbody>
</table>
{{end}}{{with .Bullets}}<ul>
{{range .}}<li>{{.}}</li>
{{end}}</ul>
{{end}}{{end}}{{define "chart"}}<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {{.W}} {{.H}}" width="{{.W}}" height="{{.H}}" role="img" aria-label="{{.Title}}"><title>{{.Title}}</title>
{{- range .Shapes}}
{{- if eq .Kind "rect"}}<rect x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}" fill="{{.Fill}}"{{if .Text}}><title>{{.Text}}</title></rect>{{else}}/>{{end}}
{{- else if eq .Kind "polyline"}}<polyline points="{{.Points}}" fill="none" stroke="{{.Stroke}}" stroke-width="{{.StrokeWidth}}" stroke-linejoin="round"/>
{{- else if eq .Kind "line"}}<line x1="{{.X1}}" y1="{{.Y1}}" x2="{{.X2}}" y2="{{.Y2}}" stroke="{{.Stroke}}" stroke-width="{{.StrokeWidth}}"{{with .Dash}} stroke-dasharray="{{.}}"{{end}}/>
{{- else}}<text x="{{.X}}" y="{{.Y}}" font-size="{{.Size}}"{{with .Weight}} font-weight="{{.}}"{{end}}{{with .Anchor}} text-anchor="{{.}}"{{end}} fill="{{.Fill}}">{{.Text}}</text>
{{- end}}
{{- end}}</svg>{{end}}`))

// HTML writes the report as one self-contained HTML page: the same content
// as the Markdown, with inline SVG charts, no script and no external
// resource. The markup is also well-formed XML.
func (r *Report) HTML(w io.Writer) error {
	return htmlPage.Execute(w, r.pageView())
}

// sectionView is a section with its charts, as template "section" prints
// it.
type sectionView struct {
	section
	Charts []chart
}

// pageView is what a page prints of a report.
type pageView struct {
	Title, Period, Source, Generated string
	Sections                         []sectionView
}

func (r *Report) pageView() pageView {
	charts := r.charts()
	secs := r.sections()
	views := make([]sectionView, len(secs))
	for i, s := range secs {
		views[i] = sectionView{s, charts[s.ID]}
	}
	return pageView{r.title(), r.periodText(), r.sourceText(), fmtTime(r.GeneratedAt), views}
}
