package dashboards

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

var (
	decisions = metric("goodput_ratelimit_decisions_total", tenantIs)
	denied    = decisions.where(`decision="denied"`)
	queued    = metric("goodput_ratelimit_queued_requests", tenantIs)
	remaining = metric("goodput_ratelimit_remaining", tenantIs)
	decideLat = metric("goodput_ratelimit_decision_seconds")
)

func rateLimitBoard() *dashboard.DashboardBuilder {
	return newBoard("goodput-ratelimit", "goodput: rate limiting and queueing",
		"Admission decisions of the tenants' limits (rpm, tpm, concurrency), the queue (max_queue_wait), "+
			"and the limits backend (local or Redis). These metrics exist when gateway keys are configured.",
		tenantVar(), modelVar()).
		WithRow(row("Admission")).
		WithPanel(stacked("Admission decisions",
			"Decisions per second: allowed, or denied (429, or 503 when the backend is down under fail_closed).",
			unitReqPerS,
			series(sum(rate(decisions), "decision"), "{{decision}}"))).
		WithPanel(stacked("Denials by tenant and limit",
			"Denials per second by the limit that decided: requests (rpm), tokens (tpm), concurrency, "+
				"or backend (on_backend_error: fail_closed).",
			unitReqPerS,
			series(sum(rate(denied), "tenant", "limit"), "{{tenant}} · {{limit}}"))).
		WithPanel(statPanel("Denied share over the time range",
			"Denied decisions / all decisions of each tenant over the dashboard's time range.",
			unitRatio,
			latest(ratio(sum(exactIncrease(denied, rangeWindow), "tenant"), sum(exactIncrease(decisions, rangeWindow), "tenant")), "{{tenant}}")).
			Thresholds(thresholds("green", level{0.01, "orange"}, level{0.1, "red"}))).
		WithPanel(stacked("Rate-limited requests",
			"Requests that ended rate_limited, as clients saw them: refused at admission, or streams cut under on_overrun: cut.",
			unitReqPerS,
			series(sum(rate(requests.where(`outcome="rate_limited"`)), "tenant"), "{{tenant}}"))).
		WithPanel(timeSeries("Capacity left",
			"What the tenant's most constrained level had left after its latest decision on each replica (lowest replica shown): "+
				"requests, tokens, concurrency slots. A kind of limit the tenant does not have draws no line (a tenant without limits, none).",
			unitCount,
			series(minOf(remaining.expr(), "tenant", "limit"), "{{tenant}} · {{limit}}"))).
		WithPanel(timeSeries("Queued requests",
			"Requests waiting for capacity (max_queue_wait), summed over replicas. Their wait is part of their TTFT "+
				"and of the gateway overhead.",
			unitCount,
			series(sum(queued.expr(), "tenant"), "{{tenant}}"))).
		WithRow(row("Backend")).
		WithPanel(timeSeries("Decision latency",
			"Time one admission decision takes in the backend: p50 and p99 (Redis: a round trip; local: memory).",
			unitSeconds,
			series(quantile(0.5, decideLat, "backend"), "{{backend}} p50"),
			series(quantile(0.99, decideLat, "backend"), "{{backend}} p99"))).
		WithPanel(timeSeries("Backend errors",
			"Admissions and reconciliations per second the limits backend did not decide: failed calls, and those not made while its breaker is open (no latency then).",
			unitReqPerS,
			series(sum(rate(metric("goodput_ratelimit_backend_errors_total")), "backend"), "{{backend}}"))).
		WithPanel(statPanel("Backend up",
			"Per replica: 1 while decisions reach Redis, 0 during an outage (on_backend_error decides meanwhile; "+
				"an alert pages after 2 minutes). Redis backend only.",
			unitFraction,
			latest(minOf(metric("goodput_ratelimit_backend_up").expr(), "instance", "backend"), "{{instance}} · {{backend}}")).
			Thresholds(thresholds("red", level{1, "green"})))
}
