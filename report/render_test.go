package report

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"
)

// sampleReport is a fully known report over three hours.
func sampleReport() *Report {
	from := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	r := newReport("acme", Source{Kind: SourcePrometheus, URL: "http://prom:9090"}, from, from.Add(3*time.Hour))
	r.GeneratedAt = from.Add(3*time.Hour + time.Minute)
	r.Period.From, r.Period.To, r.Period.Seconds = from, from.Add(3*time.Hour), 10800
	r.SLO.Requests, r.SLO.Good = 2000, 1970
	r.SLO.Classes = []Class{{Name: "interactive", Objective: 0.99, Requests: 2000, Good: 1970}}
	r.SLO.MissReasons = reasonList(map[string]Num{"ttft": 20, "error": 12})
	r.Goodput.GoodOutputTokens, r.Throughput.OutputTokens = 394000, 400000
	d := Dist{Count: 1990, Mean: 0.2, P50: 0.15, P90: 0.35, P95: 0.45, P99: 0.8, Max: 2.5}
	r.Latency = Latency{Method: "sketch", TTFT: d, TPOT: d, ITL: d, E2E: d,
		TokenEvents: TokenEvents{Requests: 1990, OSLNotEvents: 1985, OSLAboveEvents: 12, OSLBelowEvents: 1973, MultiTokenEvents: 30}}
	for i, hr := range []struct{ req, good Num }{{700, 699}, {600, 575}, {700, 696}} {
		start := from.Add(time.Duration(i) * time.Hour)
		reasons := []ReasonCount{{"ttft", hr.req - hr.good}}
		r.Hours = append(r.Hours, Hour{Start: start, End: start.Add(time.Hour), Requests: hr.req, Good: hr.good, Reasons: reasons})
	}
	r.Models = []Model{{Model: "llama|3 <b>", Requests: 2000, Good: 1970, GoodOutputTokensPerSecond: 36.48, OutputTokensPerSecond: 37.04}}
	t := &r.Traffic
	t.Arrivals = 2001
	t.InterArrival = InterArrival{Mean: 5.4, CV: 1.2, GammaShape: 0.69}
	t.ISL = TokenDist{Count: 1990, Mean: 1800, Min: 12, Max: 30000, P50: 950, P90: 4100, P95: 6000, P99: 15000,
		Buckets: []Bucket{{"512", 100}, {"1024", 900}, {"2048", 600}, {"4096", 390}, {"+Inf", 0}}}
	t.OSL = t.ISL
	t.Concurrency = Concurrency{Method: "exact", Mean: 2.4, P95: 7, Peak: 12}
	t.Shapes = ShapeMix{Counts: map[string]Num{"chat": 1400, "rag": 500, "longgen": 90, "unknown": 10},
		Fractions: map[string]Num{"chat": 0.7035, "rag": 0.2513, "longgen": 0.0452}, Traffic: "mixed"}
	// Series: one point a minute; attainment dips at 10:30 and no request
	// came at 11:00 (a gap).
	r.Series = &Series{Step: 60}
	for i := 1; i <= 180; i++ {
		at := from.Add(time.Duration(i) * time.Minute)
		att, req, p99 := Num(1), Num(11), Num(0.8)
		switch i {
		case 90:
			att, p99 = 0.5, 3
		case 120:
			att, req, p99 = unknown(), 0, unknown()
		}
		r.Series.Attainment = append(r.Series.Attainment, Point{at, att})
		r.Series.Requests = append(r.Series.Requests, Point{at, req})
		r.Series.TTFTP50 = append(r.Series.TTFTP50, Point{at, 0.15})
		r.Series.TTFTP99 = append(r.Series.TTFTP99, Point{at, p99})
		r.Series.ITLP50 = append(r.Series.ITLP50, Point{at, 0.02})
		r.Series.ITLP99 = append(r.Series.ITLP99, Point{at, 0.05})
	}
	r.Notes = []string{"a note with <angle> brackets & an ampersand"}
	r.finish(2)
	return r
}

// unknownReport is a report where the source knew nothing.
func unknownReport() *Report {
	r := newReport("acme", Source{Kind: SourceAdmin, URL: "http://gw:9090", Window: "1h"}, now.Add(-time.Hour), now)
	r.finish(DefaultWorst)
	return r
}

func render(t *testing.T, r *Report, kind string) string {
	t.Helper()
	var b bytes.Buffer
	var err error
	switch kind {
	case "md":
		err = r.Markdown(&b)
	case "html":
		err = r.HTML(&b)
	case "json":
		err = r.JSON(&b)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestMarkdown(t *testing.T) {
	md := render(t, sampleReport(), "md")
	for _, want := range []string{
		"# SLO report: acme\n",
		"2026-01-05 09:00:00 UTC to 2026-01-05 12:00:00 UTC (3h) · Prometheus http\\://prom:9090",
		"| SLO class | interactive |",
		"| Objective | 99.00% |",
		"| Attainment | 98.50% (1,970 good of 2,000 requests) |",
		"| Objective met | missed |",
		"| Error budget | 1.00% of requests (20 misses allowed in this period) |",
		"| Error budget used | 150.00% (30 misses) |",
		"| Error budget remaining | -50.00% |",
		"| Goodput | 0.1824 good requests/s · 36.48 good output tokens/s |",
		"| Throughput | 0.1852 requests/s · 37.04 output tokens/s |",
		"| interactive | 99.00% | 2,000 | 1,970 | 98.50% |",
		"| ttft | 20 | 66.67% |",
		"| TTFT | 1,990 | 200 ms | 150 ms | 350 ms | 450 ms | 800 ms | 2.5 s |",
		"Of 1,990 streamed requests with an output count from the engine, 1,985 had OSL ≠ token events: 12 more tokens than events",
		"and 1,973 fewer (token events carrying none",
		"In 30 an event is known to have carried several tokens.",
		"The 2 hours with the lowest attainment (of 3 hours in the period).",
		"| 2026-01-05 10:00–11:00 UTC | 600 | 25 | 95.83% | ttft (25) |",
		"| 2026-01-05 11:00–12:00 UTC | 700 | 4 | 99.43% | ttft (4) |",
		`| llama\|3 &lt;b&gt; | 2,000 |`,
		"| Burstiness (gamma shape) | 0.69 |",
		"| Concurrency (exact) | mean 2.4, p95 7, peak 12 |",
		"| ISL (prompt) | 1,990 | 1800 | 12 | 950 | 4100 | 6000 | 15,000 | 30,000 |",
		"| rag | 500 | 25.13% |",
		"- a note with &lt;angle&gt; brackets & an ampersand",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q", want)
		}
	}
	if strings.Contains(md, "09:00–10:00") {
		t.Error("the best hour is listed among the 2 worst")
	}
	checkMarkdownTables(t, md)
}

// checkMarkdownTables checks that every row of a table has as many cells as
// its header.
func checkMarkdownTables(t *testing.T, md string) {
	t.Helper()
	cells := func(line string) int { return len(regexp.MustCompile(`(^|[^\\])\|`).FindAllString(line, -1)) - 1 }
	want := -1
	for _, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "|") {
			want = -1
			continue
		}
		if want < 0 {
			want = cells(line)
			continue
		}
		if got := cells(line); got != want {
			t.Errorf("table row with %d cells, header has %d: %q", got, want, line)
		}
	}
}

func TestMarkdownUnknown(t *testing.T) {
	md := render(t, unknownReport(), "md")
	for _, key := range []string{"SLO class", "Objective", "Attainment", "Objective met", "Error budget", "Error budget used", "Error budget remaining"} {
		if !regexp.MustCompile(`\| ` + regexp.QuoteMeta(key) + ` \| unknown`).MatchString(md) {
			t.Errorf("%q is not printed as unknown", key)
		}
	}
	for _, want := range []string{
		"| Goodput | unknown · unknown |",
		"| TTFT | unknown | unknown | unknown | unknown | unknown | unknown | unknown |",
		"How OSL compared with the token events: unknown",
		"| Burstiness (gamma shape) | unknown |",
		"| chat | unknown | unknown |",
		"unknown: the source has no per-hour numbers.",
		"Percentile method: unknown.",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q", want)
		}
	}
	for _, bad := range []string{"NaN", "Inf", "<nil>"} {
		if strings.Contains(md, bad) {
			t.Errorf("Markdown prints %q for an unknown value", bad)
		}
	}
	checkMarkdownTables(t, md)
}

// wellFormed parses page as XML and returns its element names in order.
func wellFormed(t *testing.T, page string) []string {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(page))
	dec.Strict = true
	var names []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatalf("HTML is not well-formed: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			names = append(names, se.Name.Local)
			for _, a := range se.Attr {
				if a.Name.Local == "src" || a.Name.Local == "href" {
					t.Errorf("<%s %s=%q>: the page must not load anything", se.Name.Local, a.Name.Local, a.Value)
				}
			}
		}
	}
}

func TestHTML(t *testing.T) {
	for name, r := range map[string]*Report{"sample": sampleReport(), "unknown": unknownReport()} {
		page := render(t, r, "html")
		names := wellFormed(t, page)
		count := map[string]int{}
		for _, n := range names {
			count[n]++
		}
		if count["script"] != 0 || count["link"] != 0 || count["img"] != 0 || count["iframe"] != 0 {
			t.Errorf("%s: the page has external content: %v", name, count)
		}
		for _, id := range []string{"summary", "slo", "latency", "over-time", "worst-hours", "models", "traffic", "notes"} {
			if !strings.Contains(page, `<section id="`+id+`">`) {
				t.Errorf("%s: no section %s", name, id)
			}
		}
		if strings.Contains(page, "NaN") || strings.Contains(page, "Inf\"") {
			t.Errorf("%s: NaN or Inf in the page", name)
		}
		if name == "sample" {
			// Attainment, budget, reasons, 4 latency charts, 3 series,
			// hours, ISL, OSL, shape mix.
			if count["svg"] != 14 {
				t.Errorf("sample: %d charts, want 14", count["svg"])
			}
			// The objective is a dashed line across the attainment chart:
			// at 99% of an axis from 40% (the dip to 50%, floored) to
			// 100%, 170 px high from y = 40.
			over := page[strings.Index(page, `<section id="over-time">`):]
			over = over[:strings.Index(over, "</section>")]
			if !strings.Contains(over, `<line x1="56.0" y1="42.8" x2="696.0" y2="42.8" stroke="#222222" stroke-width="2" stroke-dasharray="6 3"/>`) ||
				!strings.Contains(over, ">objective 99.00%</text>") {
				t.Error("sample: no objective line on the attainment chart")
			}
			// Attainment and TTFT p99 (a gap at 11:00: two lines each),
			// TTFT p50, ITL p50 and p99.
			if count["polyline"] != 7 {
				t.Errorf("sample: %d polylines, want 7", count["polyline"])
			}
			for _, want := range []string{
				"<td>Attainment</td><td>98.50% (1,970 good of 2,000 requests)</td>",
				"Attainment per hour (UTC)",
				"llama|3 &lt;b&gt;",
				"a note with &lt;angle&gt; brackets &amp; an ampersand",
				`fill="#e15759"`, // missed objective: the attainment bar is red
				"Attainment of acme per 1m (UTC)",
				"TTFT p50 and p99 of acme per 1m (UTC)",
				"ITL p50 and p99 of acme per 1m (UTC)",
			} {
				if !strings.Contains(page, want) {
					t.Errorf("sample: HTML lacks %q", want)
				}
			}
		} else {
			// Attainment, budget, reasons and 4 latency charts; no hours, no
			// histograms, no mix.
			if count["svg"] != 7 {
				t.Errorf("unknown: %d charts, want 7", count["svg"])
			}
			if !strings.Contains(page, "<td>Attainment</td><td>unknown</td>") {
				t.Error("unknown: attainment not printed as unknown")
			}
			// Where the series' charts would be, the page says why there are none.
			if count["polyline"] != 0 || !strings.Contains(page, `<section id="over-time">
<h2>Over the period</h2>
<p>No time series: the gateway&#39;s admin API keeps no history`) {
				t.Error("unknown: the admin report does not say it has no time series")
			}
		}
	}
}

func TestJSONRoundTrip(t *testing.T) {
	for name, r := range map[string]*Report{"sample": sampleReport(), "unknown": unknownReport()} {
		first := render(t, r, "json")
		var back Report
		if err := json.Unmarshal([]byte(first), &back); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if again := render(t, &back, "json"); again != first {
			t.Errorf("%s: JSON does not round-trip:\n%s\n---\n%s", name, first, again)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(first), &m); err != nil {
			t.Fatal(err)
		}
		if m["format"] != Format || m["version"] != float64(Version) {
			t.Errorf("%s: format %v version %v", name, m["format"], m["version"])
		}
		s := m["slo"].(map[string]any)
		for _, k := range []string{"objective", "requests", "good", "misses", "attainment", "met", "error_budget", "allowed_misses", "error_budget_used", "error_budget_remaining", "miss_reasons", "classes"} {
			if _, ok := s[k]; !ok {
				t.Errorf("%s: slo.%s left out", name, k)
			}
		}
		for _, k := range []string{"generated_at", "tenant", "source", "period", "goodput", "throughput", "latency", "series", "hours", "worst_hours", "models", "traffic", "notes"} {
			if _, ok := m[k]; !ok {
				t.Errorf("%s: %s left out", name, k)
			}
		}
		if name == "unknown" {
			if s["attainment"] != nil || s["met"] != nil || m["hours"] != nil || m["series"] != nil {
				t.Errorf("unknown values must be null: attainment %v met %v hours %v", s["attainment"], s["met"], m["hours"])
			}
			ttft := m["latency"].(map[string]any)["ttft_seconds"].(map[string]any)
			if v, ok := ttft["p99"]; !ok || v != nil {
				t.Errorf("latency p99 %v (present %v), want null", v, ok)
			}
		} else if s["attainment"] != 0.985 || s["met"] != false {
			t.Errorf("sample: attainment %v met %v", s["attainment"], s["met"])
		}
	}
}

// Text from the source (a reason, a model) is escaped wherever the page
// prints it, in the SVG charts as in the tables.
func TestHTMLEscapesChartText(t *testing.T) {
	r := sampleReport()
	r.SLO.MissReasons = append(r.SLO.MissReasons, ReasonCount{Reason: `</title><script>alert("x")</script>`, Count: 3})
	page := render(t, r, "html")
	for _, n := range wellFormed(t, page) {
		if n == "script" {
			t.Fatal("a reason became a script element")
		}
	}
	if !strings.Contains(page, `>&lt;/title&gt;&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;</text>`) {
		t.Error("the reason is not escaped in the chart's bar label")
	}
}

// The series' charts draw the tenant's name (from the command line) in
// their titles: it is escaped there too, and the lines are plain numbers.
func TestHTMLEscapesSeriesCharts(t *testing.T) {
	r := sampleReport()
	r.Tenant = `a"><script>alert(1)</script>`
	page := render(t, r, "html")
	names := wellFormed(t, page)
	for _, n := range names {
		if n == "script" {
			t.Fatal("the tenant became a script element")
		}
	}
	const esc = `a&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;`
	for _, want := range []string{
		`aria-label="Attainment of ` + esc + ` per 1m (UTC)"`,
		`<title>TTFT p50 and p99 of ` + esc + ` per 1m (UTC)</title>`,
		`>ITL p50 and p99 of ` + esc + ` per 1m (UTC)</text>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	points := regexp.MustCompile(`<polyline points="([^"]*)"`).FindAllStringSubmatch(page, -1)
	if len(points) != 7 {
		t.Fatalf("%d polylines, want 7", len(points))
	}
	num := regexp.MustCompile(`^[0-9.]+,[0-9.]+( [0-9.]+,[0-9.]+)+$`)
	for _, p := range points {
		if !num.MatchString(p[1]) {
			t.Errorf("polyline points %q", p[1])
		}
	}
	md := render(t, r, "md")
	if !strings.Contains(md, "180 steps of 1m; attainment per 1m from 50.00% (lowest at 10:30 UTC) to 100.00%; TTFT p50 150 ms to 150 ms (highest at 09:01 UTC); TTFT p99 800 ms to 3 s (highest at 10:30 UTC); ITL p50 20 ms to 20 ms") {
		t.Errorf("Markdown lacks the series' summary:\n%s", md)
	}
}

// One miss is "1 miss", not "1 misses" (a new user's run).
func TestMarkdownOneMiss(t *testing.T) {
	r := sampleReport()
	r.SLO.Misses = 1
	if md := render(t, r, "md"); !strings.Contains(md, "% (1 miss) |") {
		t.Fatalf("one miss: %s", md)
	}
}
