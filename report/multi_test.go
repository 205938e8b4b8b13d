package report

import (
	"bytes"
	"html/template"
	"strings"
	"testing"
)

// TestHTMLPage: several reports on one page, each with its own page's
// sections and charts, after the caller's introduction; well-formed, no
// external content, section ids unique across the reports.
func TestHTMLPage(t *testing.T) {
	a, b := sampleReport(), unknownReport()
	b.Tenant = "globex"
	var buf bytes.Buffer
	intro := template.HTML(`<p id="intro">three tenants &amp; one engine</p>`)
	if err := HTMLPage(&buf, "demo <report>", intro, []*Report{a, b}); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	names := wellFormed(t, page)
	count := map[string]int{}
	for _, n := range names {
		count[n]++
	}
	if count["script"] != 0 || count["link"] != 0 || count["img"] != 0 || count["iframe"] != 0 {
		t.Errorf("the page has external content: %v", count)
	}
	if count["article"] != 2 {
		t.Errorf("%d articles, want one per report (2)", count["article"])
	}
	var one, two bytes.Buffer
	if err := a.HTML(&one); err != nil {
		t.Fatal(err)
	}
	if err := b.HTML(&two); err != nil {
		t.Fatal(err)
	}
	single := strings.Count(one.String(), "<svg") + strings.Count(two.String(), "<svg")
	if got := strings.Count(page, "<svg"); got != single {
		t.Errorf("%d charts on the page, want %d (those of the two reports' own pages)", got, single)
	}
	for _, want := range []string{
		"<title>demo &lt;report&gt;</title>", `<p id="intro">three tenants &amp; one engine</p>`,
		"SLO report: acme", "SLO report: globex", `<section id="report-0-summary">`, `<section id="report-1-summary">`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if i, j := strings.Index(page, `id="intro"`), strings.Index(page, "<article"); i < 0 || j < i {
		t.Error("the introduction does not come before the reports")
	}
	seen := map[string]bool{}
	for _, m := range strings.Split(page, `id="`)[1:] {
		id := m[:strings.IndexByte(m, '"')]
		if seen[id] {
			t.Errorf("id %q twice", id)
		}
		seen[id] = true
	}
}
