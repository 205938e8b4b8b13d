package dashboards

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

var (
	goodTokens  = metric("goodput_good_output_tokens_total", tenantIs, modelIs)
	judgedTok   = metric("goodput_output_tokens_total", tenantIs, modelIs)
	inputHist   = metric("goodput_input_tokens", tenantIs, modelIs)
	outputHist  = metric("goodput_output_tokens", tenantIs, modelIs)
	inFlight    = metric("goodput_in_flight_requests", tenantIs)
	meteredOnly = `route!="other"`
)

func trafficBoard() *dashboard.DashboardBuilder {
	return newBoard("goodput-traffic", "goodput: goodput, throughput and workload",
		"Goodput (what met its SLO) against throughput (everything judged), and the shape of the traffic: "+
			"arrival rate, ISL and OSL, concurrency.",
		tenantVar(), modelVar()).
		WithRow(row("Goodput against throughput")).
		WithPanel(timeSeries("Requests per second: good against judged",
			"Goodput: requests that met their SLO, per second. Throughput: every judged request, per second.",
			unitReqPerS,
			series(sum(rate(sloGood)), "goodput"),
			series(sum(rate(sloRequests)), "throughput"))).
		WithPanel(timeSeries("Output tokens per second: good against judged",
			"Output tokens of requests that met their SLO, against those of every judged request with a known output count.",
			unitTokPerS,
			series(sum(rate(goodTokens)), "goodput"),
			series(sum(rate(judgedTok)), "throughput"))).
		WithPanel(timeSeries("Goodput share of output tokens by tenant",
			"Good output tokens / all judged output tokens, per tenant.",
			unitRatio,
			series(ratio(sum(rate(goodTokens), "tenant"), sum(rate(judgedTok), "tenant")), "{{tenant}}")).Max(1)).
		WithPanel(stacked("Good output tokens per second by tenant",
			"Goodput in tokens, per tenant.",
			unitTokPerS,
			series(sum(rate(goodTokens), "tenant"), "{{tenant}}")).Span(12)).
		WithPanel(stacked("Good requests per second by tenant and class",
			"Goodput in requests, per tenant and SLO class.",
			unitReqPerS,
			series(sum(rate(sloGood), "tenant", "slo"), perClass)).Span(12)).
		WithRow(row("Workload shape")).
		WithPanel(stacked("Request rate by tenant and route",
			"Requests per second reaching the gateway (every outcome), by tenant and route (chat, completions, responses, messages; other: requests passed through unmetered, which are not inference arrivals).",
			unitReqPerS,
			series(sum(rate(requests), "tenant", "route"), "{{tenant}} · {{route}}"))).
		WithPanel(timeSeries("Mean ISL and OSL",
			"Mean prompt (ISL) and generated (OSL) tokens per request.",
			unitTokens,
			series(mean(inputHist), "ISL"),
			series(mean(outputHist), "OSL"))).
		WithPanel(timeSeries("Tokens per second in and out",
			"Prompt tokens and generated tokens per second, from the engine's usage.",
			unitTokPerS,
			series(sum(rate(inputHist.suffix("_sum"))), "input"),
			series(sum(rate(outputHist.suffix("_sum"))), "output"))).
		WithPanel(heatMap("ISL over time",
			"Prompt tokens per request (ISL): requests per second in each bucket.",
			unitTokens, unitReqPerS, heat(bucketRates(inputHist.where(meteredOnly))))).
		WithPanel(heatMap("OSL over time",
			"Generated tokens per request (OSL): requests per second in each bucket.",
			unitTokens, unitReqPerS, heat(bucketRates(outputHist.where(meteredOnly))))).
		WithPanel(timeSeries("Requests in flight by tenant",
			"Concurrency: requests in the gateway whose record is not yet written (queued ones included).",
			unitCount,
			series(sum(inFlight.expr(), "tenant"), "{{tenant}}"))).
		WithPanel(bars("ISL distribution over the time range",
			"Requests per ISL bucket (upper bound, in tokens) over the dashboard's time range.",
			unitCount, distribution(buckets(inputHist.where(meteredOnly), rangeWindow))).Span(12)).
		WithPanel(bars("OSL distribution over the time range",
			"Requests per OSL bucket (upper bound, in tokens) over the dashboard's time range.",
			unitCount, distribution(buckets(outputHist.where(meteredOnly), rangeWindow))).Span(12))
}
