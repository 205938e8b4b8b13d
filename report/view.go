package report

import (
	"fmt"
	"strings"
)

// The Markdown and HTML renderers print the same content, laid out by
// view: a title, then sections of key/value lines and tables.

// kv is one key/value line.
type kv struct{ K, V string }

// table is a table of text cells.
type table struct {
	Caption string
	Head    []string
	Rows    [][]string
}

// section is one part of the report. Its fields are exported for the HTML
// template.
type section struct {
	ID, Title string
	Text      []string // paragraphs before the rest
	KVs       []kv
	Tables    []table
	Bullets   []string
}

func (r *Report) title() string { return "SLO report: " + r.Tenant }

func (r *Report) sourceText() string {
	switch r.Source.Kind {
	case SourceAdmin:
		return fmt.Sprintf("gateway admin API %s (rolling %s window)", r.Source.URL, r.Source.Window)
	case SourcePrometheus:
		return "Prometheus " + r.Source.URL
	}
	return unknownText
}

func (r *Report) periodText() string {
	return fmt.Sprintf("%s to %s (%s)", fmtTime(r.Period.From), fmtTime(r.Period.To), fmtSpan(r.Period.Seconds))
}

// sections lays the report out, in order.
func (r *Report) sections() []section {
	return []section{r.summarySection(), r.sloSection(), r.latencySection(), r.seriesSection(), r.worstHoursSection(), r.modelsSection(), r.trafficSection(), r.notesSection()}
}

func (r *Report) summarySection() section {
	s := &r.SLO
	attain := fmtPct(s.Attainment)
	if Known(s.Good) && Known(s.Requests) {
		attain += fmt.Sprintf(" (%s good of %s requests)", fmtCount(s.Good), fmtCount(s.Requests))
	}
	budget := fmtPct(s.ErrorBudget)
	if Known(s.ErrorBudget) {
		budget += " of requests (" + fmtNum(s.AllowedMisses) + " misses allowed in this period)"
	}
	used := fmtPct(s.ErrorBudgetUsed)
	if Known(s.Misses) {
		misses := " misses)"
		if s.Misses == 1 {
			misses = " miss)"
		}
		used += " (" + fmtCount(s.Misses) + misses
	}
	return section{ID: "summary", Title: "Summary", KVs: []kv{
		{"Tenant", r.Tenant},
		{"Period", r.periodText()},
		{"Source", r.sourceText()},
		{"SLO class", classNames(s.Classes)},
		{"Objective", fmtPct(s.Objective)},
		{"Attainment", attain},
		{"Objective met", fmtMet(s.Met)},
		{"Error budget", budget},
		{"Error budget used", used},
		{"Error budget remaining", fmtPct(s.ErrorBudgetRemaining)},
		{"Goodput", fmtRate(r.Goodput.GoodRequestsPerSecond, "good requests") + " · " + fmtRate(r.Goodput.GoodOutputTokensPerSecond, "good output tokens")},
		{"Throughput", fmtRate(r.Throughput.RequestsPerSecond, "requests") + " · " + fmtRate(r.Throughput.OutputTokensPerSecond, "output tokens")},
		{"Output tokens", fmtCount(r.Goodput.GoodOutputTokens) + " good of " + fmtCount(r.Throughput.OutputTokens)},
	}}
}

func (r *Report) sloSection() section {
	s := &r.SLO
	classes := table{Head: []string{"class", "objective", "requests", "good", "attainment"}}
	for _, c := range s.Classes {
		classes.Rows = append(classes.Rows, []string{c.Name, fmtPct(c.Objective), fmtCount(c.Requests), fmtCount(c.Good), fmtPct(ratio(c.Good, c.Requests))})
	}
	if len(classes.Rows) == 0 {
		classes.Rows = [][]string{{unknownText, unknownText, unknownText, unknownText, unknownText}}
	}
	reasons := table{Caption: "Misses by reason (a miss can have several reasons)", Head: []string{"reason", "misses", "share of misses"}}
	for _, rc := range s.MissReasons {
		reasons.Rows = append(reasons.Rows, []string{rc.Reason, fmtCount(rc.Count), fmtPct(ratio(rc.Count, s.Misses))})
	}
	return section{ID: "slo", Title: "SLO classes and misses", Tables: []table{classes, reasons}}
}

func (r *Report) latencySection() section {
	lat := table{Head: []string{"measure", "count", "mean", "p50", "p90", "p95", "p99", "max"}}
	for _, m := range []struct {
		name string
		d    Dist
	}{{"TTFT", r.Latency.TTFT}, {"TPOT", r.Latency.TPOT}, {"ITL", r.Latency.ITL}, {"E2E", r.Latency.E2E}} {
		lat.Rows = append(lat.Rows, []string{m.name, fmtCount(m.d.Count), fmtSeconds(m.d.Mean), fmtSeconds(m.d.P50), fmtSeconds(m.d.P90), fmtSeconds(m.d.P95), fmtSeconds(m.d.P99), fmtSeconds(m.d.Max)})
	}
	method := map[string]string{
		"sketch":    "Percentiles from the gateway's quantile sketch (within 0.5%), requests with outcome ok.",
		"histogram": "Percentiles interpolated within histogram buckets (histogram_quantile), every request with the measure.",
	}[r.Latency.Method]
	if method == "" {
		method = "Percentile method: unknown."
	}
	return section{ID: "latency", Title: "Latency", Text: []string{method, r.tokenEventsText()}, Tables: []table{lat}}
}

// seriesSection: the time series, summed up in one line (the HTML draws
// them).
func (r *Report) seriesSection() section {
	sec := section{ID: "over-time", Title: "Over the period"}
	s := r.Series
	switch {
	case s == nil && r.Source.Kind == SourceAdmin:
		sec.Text = []string{"No time series: the gateway's admin API keeps no history (it has rolling windows that end now). A report from Prometheus (--prometheus) charts attainment, TTFT and ITL over the period."}
		return sec
	case s == nil:
		sec.Text = []string{"No time series: the source has none for this period."}
		return sec
	}
	step := fmtSpan(s.Step)
	parts := []string{fmt.Sprintf("%s of %s", plural(len(s.Attainment), "step"), step)}
	lo, hi, ok := seriesRange(s.Attainment)
	if ok {
		parts = append(parts, fmt.Sprintf("attainment per %s from %s (lowest at %s) to %s", step, fmtPct(lo.V), fmtClock(lo.T), fmtPct(hi.V)))
	} else {
		parts = append(parts, "attainment unknown (no step had requests)")
	}
	for _, l := range []struct {
		name string
		ps   []Point
	}{{"TTFT p50", s.TTFTP50}, {"TTFT p99", s.TTFTP99}, {"ITL p50", s.ITLP50}, {"ITL p99", s.ITLP99}} {
		lo, hi, ok := seriesRange(l.ps)
		if !ok {
			parts = append(parts, l.name+" unknown")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s to %s (highest at %s)", l.name, fmtSeconds(lo.V), fmtSeconds(hi.V), fmtClock(hi.T)))
	}
	sec.Text = []string{strings.Join(parts, "; ") + "."}
	return sec
}

func (r *Report) worstHoursSection() section {
	worst := section{ID: "worst-hours", Title: "Worst hours"}
	switch {
	case r.WorstHours == nil:
		worst.Text = []string{"unknown: the source has no per-hour numbers."}
	case len(r.WorstHours) == 0:
		worst.Text = []string{"No hour of the period had requests."}
	default:
		t := table{Head: []string{"hour", "requests", "misses", "attainment", "main miss reasons"}}
		for _, h := range r.WorstHours {
			t.Rows = append(t.Rows, []string{fmtHour(h), fmtCount(h.Requests), fmtCount(h.Misses), fmtPct(h.Attainment), reasonsText(h.Reasons)})
		}
		worst.Text = []string{fmt.Sprintf("The %s with the lowest attainment (of %s in the period).", plural(len(r.WorstHours), "hour"), plural(len(r.Hours), "hour"))}
		worst.Tables = []table{t}
	}
	return worst
}

func (r *Report) modelsSection() section {
	models := table{Head: []string{"model", "requests", "good", "attainment", "good output tokens/s", "output tokens/s"}}
	for _, m := range r.Models {
		models.Rows = append(models.Rows, []string{m.Model, fmtCount(m.Requests), fmtCount(m.Good), fmtPct(m.Attainment), fmtNum(m.GoodOutputTokensPerSecond), fmtNum(m.OutputTokensPerSecond)})
	}
	if len(models.Rows) == 0 {
		return section{ID: "models", Title: "By model", Text: []string{"No requests."}}
	}
	return section{ID: "models", Title: "By model", Tables: []table{models}}
}

func (r *Report) trafficSection() section {
	t := &r.Traffic
	tr := section{ID: "traffic", Title: "Traffic shape", KVs: []kv{
		{"Arrivals", fmtCount(t.Arrivals)},
		{"Arrival rate", fmtRate(t.ArrivalRate, "requests")},
		{"Inter-arrival gap", "mean " + fmtSeconds(t.InterArrival.Mean) + ", CV " + fmtNum(t.InterArrival.CV)},
		{"Burstiness (gamma shape)", fmtNum(t.InterArrival.GammaShape)},
		{"Concurrency (" + orUnknown(t.Concurrency.Method) + ")", "mean " + fmtNum(t.Concurrency.Mean) + ", p95 " + fmtNum(t.Concurrency.P95) + ", peak " + fmtNum(t.Concurrency.Peak)},
		{"Traffic shape", orUnknown(t.Shapes.Traffic)},
	}}
	tok := table{Head: []string{"tokens", "count", "mean", "min", "p50", "p90", "p95", "p99", "max"}}
	for _, d := range []struct {
		name string
		d    TokenDist
	}{{"ISL (prompt)", t.ISL}, {"OSL (output)", t.OSL}} {
		tok.Rows = append(tok.Rows, []string{d.name, fmtCount(d.d.Count), fmtNum(d.d.Mean), fmtNum(d.d.Min), fmtNum(d.d.P50), fmtNum(d.d.P90), fmtNum(d.d.P95), fmtNum(d.d.P99), fmtNum(d.d.Max)})
	}
	mix := table{Caption: "Shape mix", Head: []string{"shape", "requests", "share of measured"}}
	for _, name := range shapeOrder {
		c, f := unknown(), unknown()
		if v, ok := t.Shapes.Counts[name]; ok {
			c = v
		}
		if v, ok := t.Shapes.Fractions[name]; ok {
			f = v
		}
		share := fmtPct(f)
		if name == "unknown" {
			share = "not measured"
		}
		mix.Rows = append(mix.Rows, []string{name, fmtCount(c), share})
	}
	tr.Tables = []table{tok, mix}
	return tr
}

func (r *Report) notesSection() section {
	notes := section{ID: "notes", Title: "Notes", Bullets: r.Notes}
	if len(r.Notes) == 0 {
		notes.Bullets = []string{"none"}
	}
	return notes
}

// tokenEventsText says what the ITL figures measured.
func (r *Report) tokenEventsText() string {
	te := r.Latency.TokenEvents
	const rule = "ITL is one gap per token event (as vllm bench serve counts it), so a gap is a per-token time only where an event carried one token."
	switch {
	case !Known(te.Requests):
		return rule + " How OSL compared with the token events: unknown (the source does not count it)."
	case te.Requests == 0:
		return rule + " No streamed request with an output count from the engine to compare OSL with token events."
	}
	return fmt.Sprintf("%s Of %s streamed requests with an output count from the engine, %s had OSL ≠ token events: "+
		"%s more tokens than events (events carrying several tokens: the gap before such an event spans them all, and mean ITL exceeds TPOT) "+
		"and %s fewer (token events carrying none, such as a role-only first chunk or a separate finish chunk: their gaps are near zero). "+
		"In %s an event is known to have carried several tokens.",
		rule, fmtCount(te.Requests), fmtCount(te.OSLNotEvents), fmtCount(te.OSLAboveEvents), fmtCount(te.OSLBelowEvents), fmtCount(te.MultiTokenEvents))
}

// plural prints "1 hour", "2 hours".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func orUnknown(s string) string {
	if s == "" {
		return unknownText
	}
	return s
}

// mdCell escapes a table cell for Markdown.
func mdCell(s string) string {
	return strings.ReplaceAll(mdText(s), "|", `\|`)
}
