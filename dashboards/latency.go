package dashboards

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

// A latency histogram of package export and what its panels say.
type latencyMeasure struct {
	name, what string
	hist       sel
	// What the histogram observes, per second: its heatmap's cells.
	cellUnit, cells string
}

var latencyMeasures = []latencyMeasure{
	{"TTFT", "Time to first token: from the gateway reading the request to the first token event (queueing in the gateway included).",
		metric("goodput_time_to_first_token_seconds", tenantIs, modelIs), unitReqPerS, "Requests"},
	{"ITL", "Inter-token latency: every gap between consecutive token events of a stream, one observation per gap.",
		metric("goodput_inter_token_latency_seconds", tenantIs, modelIs), unitGapPerS, "Gaps"},
	{"TPOT", "Time per output token: (E2E − TTFT) / (OSL − 1), one per request with more than one output token.",
		metric("goodput_time_per_output_token_seconds", tenantIs, modelIs), unitReqPerS, "Requests"},
	{"E2E", "End-to-end latency: from the gateway reading the request to the last token event (or the end of the response).",
		metric("goodput_request_duration_seconds", tenantIs, modelIs), unitReqPerS, "Requests"},
}

func latencyBoard() *dashboard.DashboardBuilder {
	b := newBoard("goodput-latency", "goodput: latency",
		"TTFT, ITL, TPOT and E2E as clients feel them, measured at the gateway (docs/MEASURES.md defines each).",
		tenantVar(), modelVar())
	for _, m := range latencyMeasures {
		b.WithRow(row(m.name)).
			WithPanel(heatMap(m.name+" distribution",
				m.what+" "+m.cells+" per second in each bucket.",
				unitSeconds, m.cellUnit, heat(bucketRates(m.hist)))).
			WithPanel(timeSeries(m.name+" p50 / p95 / p99",
				m.what+" Quantiles estimated from the histogram's buckets (linear within a bucket).",
				unitSeconds,
				series(quantile(0.5, m.hist), "p50"),
				series(quantile(0.95, m.hist), "p95"),
				series(quantile(0.99, m.hist), "p99"))).
			WithPanel(timeSeries(m.name+" p99 by tenant",
				m.what+" The 99th percentile of each tenant.",
				unitSeconds,
				series(quantile(0.99, m.hist, "tenant"), "{{tenant}}")))
	}
	events := metric("goodput_token_event_requests_total", tenantIs, modelIs)
	return b.WithRow(row("What ITL measured")).
		WithPanel(stacked("Streams by output tokens against token events",
			"Streamed requests with an output count from the engine, by how OSL compares with their token events: "+
				"equal (one token per event), above (some events carried several tokens: an ITL gap then spans several tokens), "+
				"below (some events carried none).",
			unitReqPerS,
			series(sum(rate(events), "osl_vs_events"), "{{osl_vs_events}}")).Span(12)).
		WithPanel(timeSeries("Share of streams with multi-token events",
			"Streams where an event is known to have carried several tokens, as a share of the streams with an output count.",
			unitRatio,
			series(ratio(sum(rate(metric("goodput_multi_token_event_requests_total", tenantIs, modelIs))), sum(rate(events))), "multi-token")).Span(12))
}
