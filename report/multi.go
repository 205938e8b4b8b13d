package report

import (
	"html/template"
	"io"
)

// multiPage is a page of several reports: the caller's introduction, then
// each report as an article with the same sections and charts as its own
// page. It shares the single page's style and chart markup.
var multiPage = template.Must(template.Must(htmlPage.Clone()).New("multi").Parse(HTMLShell(htmlStyle+`
article{border-top:3px solid #444;margin-top:36px}
article h2.report{font-size:1.4em;border:none}`, `<h1>{{.Title}}</h1>
{{.Intro}}
{{range $i, $r := .Reports}}<article id="report-{{$i}}">
<h2 class="report">{{$r.Title}}</h2>
<p class="meta">{{$r.Period}} · {{$r.Source}} · generated {{$r.Generated}}</p>
{{range $r.Sections}}<section id="report-{{$i}}-{{.ID}}">
{{template "section" .}}</section>
{{end}}</article>
{{end}}`)))

// HTMLPage writes several reports (one per tenant, say) as one
// self-contained HTML page under title, after intro: markup the caller
// made and escaped (with html/template), which must be well-formed for the
// page to stay well-formed XML. Each report has the sections and charts of
// its own page (Report.HTML); no script, no external resource.
func HTMLPage(w io.Writer, title string, intro template.HTML, reports []*Report) error {
	views := make([]pageView, len(reports))
	for i, r := range reports {
		views[i] = r.pageView()
	}
	return multiPage.Execute(w, struct {
		Title   string
		Intro   template.HTML
		Reports []pageView
	}{title, intro, views})
}
