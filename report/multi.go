package report

import (
	"html/template"
	"io"
)

// multiPage is a page of several reports: the caller's introduction, then
// each report as an article with the same sections and charts as its own
// page. It shares the single page's style and chart markup.
var multiPage = template.Must(template.Must(htmlPage.Clone()).New("multi").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8"/>
<meta name="viewport" content="width=device-width, initial-scale=1"/>
<title>{{.Title}}</title>
<style>
` + htmlStyle + `
article{border-top:3px solid #444;margin-top:36px}
article h2.report{font-size:1.4em;border:none}
</style>
</head>
<body>
<main>
<h1>{{.Title}}</h1>
{{.Intro}}
{{range $i, $r := .Reports}}<article id="report-{{$i}}">
<h2 class="report">{{$r.Title}}</h2>
<p class="meta">{{$r.Period}} · {{$r.Source}} · generated {{$r.Generated}}</p>
{{range $r.Sections}}<section id="report-{{$i}}-{{.ID}}">
<h2>{{.Title}}</h2>
{{range .Text}}<p>{{.}}</p>
{{end}}{{with index $r.Charts .ID}}<div class="charts">
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
{{end}}</section>
{{end}}</article>
{{end}}</main>
</body>
</html>`))

// HTMLPage writes several reports (one per tenant, say) as one
// self-contained HTML page under title, after intro: markup the caller
// made and escaped (with html/template), which must be well-formed for the
// page to stay well-formed XML. Each report has the sections and charts of
// its own page (Report.HTML); no script, no external resource.
func HTMLPage(w io.Writer, title string, intro template.HTML, reports []*Report) error {
	type view struct {
		Title, Period, Source, Generated string
		Sections                         []section
		Charts                           map[string][]chart
	}
	views := make([]view, len(reports))
	for i, r := range reports {
		views[i] = view{r.title(), r.periodText(), r.sourceText(), fmtTime(r.GeneratedAt), r.sections(), r.charts()}
	}
	return multiPage.Execute(w, struct {
		Title   string
		Intro   template.HTML
		Reports []view
	}{title, intro, views})
}
