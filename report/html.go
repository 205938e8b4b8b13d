package report

import (
	"bufio"
	"fmt"
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

// HTML writes the report as one self-contained HTML page: the same content
// as the Markdown, with inline SVG charts, no script and no external
// resource. The markup is also well-formed XML.
func (r *Report) HTML(w io.Writer) error {
	bw := bufio.NewWriter(w)
	charts := r.charts()
	fmt.Fprintf(bw, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n<title>%s</title>\n<style>\n%s\n</style>\n</head>\n<body>\n<main>\n",
		esc(r.title()), htmlStyle)
	fmt.Fprintf(bw, "<h1>%s</h1>\n<p class=\"meta\">%s · %s · generated %s</p>\n", esc(r.title()), esc(r.periodText()), esc(r.sourceText()), esc(fmtTime(r.GeneratedAt)))
	for _, s := range r.sections() {
		fmt.Fprintf(bw, "<section id=\"%s\">\n<h2>%s</h2>\n", esc(s.id), esc(s.title))
		for _, p := range s.text {
			fmt.Fprintf(bw, "<p>%s</p>\n", esc(p))
		}
		if cs := charts[s.id]; len(cs) > 0 {
			bw.WriteString("<div class=\"charts\">\n")
			for _, c := range cs {
				bw.WriteString(c)
				bw.WriteString("\n")
			}
			bw.WriteString("</div>\n")
		}
		if len(s.kvs) > 0 {
			bw.WriteString("<table class=\"kv\">\n")
			for _, kv := range s.kvs {
				fmt.Fprintf(bw, "<tr><td>%s</td><td>%s</td></tr>\n", esc(kv.k), esc(kv.v))
			}
			bw.WriteString("</table>\n")
		}
		for _, t := range s.tables {
			bw.WriteString("<table>\n")
			if t.caption != "" {
				fmt.Fprintf(bw, "<caption>%s</caption>\n", esc(t.caption))
			}
			bw.WriteString("<thead><tr>")
			for _, h := range t.head {
				fmt.Fprintf(bw, "<th>%s</th>", esc(h))
			}
			bw.WriteString("</tr></thead>\n<tbody>\n")
			for _, row := range t.rows {
				bw.WriteString("<tr>")
				for _, c := range row {
					fmt.Fprintf(bw, "<td>%s</td>", esc(c))
				}
				bw.WriteString("</tr>\n")
			}
			bw.WriteString("</tbody>\n</table>\n")
		}
		if len(s.bullets) > 0 {
			bw.WriteString("<ul>\n")
			for _, b := range s.bullets {
				fmt.Fprintf(bw, "<li>%s</li>\n", esc(b))
			}
			bw.WriteString("</ul>\n")
		}
		bw.WriteString("</section>\n")
	}
	bw.WriteString("</main>\n</body>\n</html>\n")
	return bw.Flush()
}
