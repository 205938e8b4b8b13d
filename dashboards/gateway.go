package dashboards

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

var (
	overhead   = metric("goodput_proxy_overhead_seconds", tenantIs, modelIs)
	writeDelay = metric("goodput_proxy_write_delay_seconds", tenantIs, modelIs)
)

func gatewayBoard() *dashboard.DashboardBuilder {
	return newBoard("goodput-gateway", "goodput: gateway overhead and health",
		"What the gateway itself costs (overhead before the engine, delay in relaying events) and its health: "+
			"the upstream, connections, requests in flight, lost records, CPU and memory, "+
			"and the request bodies and lagging clients max_body_memory and max_lag_memory bound.",
		tenantVar(), modelVar()).
		WithRow(row("Overhead and write delay")).
		WithPanel(timeSeries("Overhead p50 / p95 / p99",
			"Time the gateway added before handing the request to the engine (from the end of the body's upload): "+
				"auth, limits and any queue wait, body rewrite.",
			unitSeconds,
			series(quantile(0.5, overhead), "p50"),
			series(quantile(0.95, overhead), "p95"),
			series(quantile(0.99, overhead), "p99"))).
		WithPanel(heatMap("Overhead distribution",
			"Overhead per request: requests per second in each bucket.",
			unitSeconds, unitReqPerS, heat(bucketRates(overhead)))).
		WithPanel(timeSeries("Overhead p99 by tenant",
			"The 99th percentile of each tenant's overhead (a tenant whose requests queue shows it here).",
			unitSeconds,
			series(quantile(0.99, overhead, "tenant"), "{{tenant}}"))).
		WithPanel(timeSeries("Write delay p50 / p95 / p99",
			"Per request, the longest time from reading bytes from the engine to writing them to the client: "+
				"what the gateway adds to every token's latency at worst.",
			unitSeconds,
			series(quantile(0.5, writeDelay), "p50"),
			series(quantile(0.95, writeDelay), "p95"),
			series(quantile(0.99, writeDelay), "p99"))).
		WithPanel(heatMap("Write delay distribution",
			"Write delay per request: requests per second in each bucket.",
			unitSeconds, unitReqPerS, heat(bucketRates(writeDelay)))).
		WithPanel(timeSeries("Mean overhead and write delay",
			"Means over each interval, next to the quantiles.",
			unitSeconds,
			series(mean(overhead), "overhead"),
			series(mean(writeDelay), "write delay"))).
		WithRow(row("Health")).
		WithPanel(statPanel("Upstream up",
			"Per replica: 1 while the engine accepts TCP connections (checked every 2 s), 0 otherwise (/readyz answers 503).",
			unitFraction,
			latest(minOf(metric("goodput_upstream_up").expr(), "instance"), "{{instance}}")).
			Thresholds(thresholds("red", level{1, "green"}))).
		WithPanel(timeSeries("Client connections and requests in flight",
			"Open client connections and requests in flight, per replica.",
			unitCount,
			series(sum(metric("goodput_client_connections").expr(), "instance"), "{{instance}} connections"),
			series(sum(metric("goodput_in_flight_requests").expr(), "instance"), "{{instance}} in flight"))).
		WithPanel(timeSeries("Accept errors, reclaimed connections and lost records",
			"Accept errors waited out (out of file descriptors, mostly), idle client connections closed "+
				"at max_connections to make room, and request-log records lost "+
				"(beyond the 64 MiB kept in memory while the log cannot be written), per second.",
			unitReqPerS,
			series(sum(rate(metric("goodput_accept_errors_total")), "instance"), "{{instance}} accept errors"),
			series(sum(rate(metric("goodput_client_connections_reclaimed_total")), "instance"), "{{instance}} reclaimed connections"),
			series(sum(rate(metric("goodput_request_log_errors_total")), "instance"), "{{instance}} lost records"))).
		WithPanel(timeSeries("Request log write wait",
			"Per replica: how long the request log's records have waited for a write that succeeds. 0 while writes "+
				"succeed; it grows through a full disk or a write that does not return, the records kept in memory "+
				"up to 64 MiB, then dropped (GoodputRequestLogNotWriting fires past a minute, for a minute).",
			unitSeconds,
			series(maxOf(metric("goodput_request_log_write_wait_seconds").expr(), "instance"), "{{instance}}"))).
		WithPanel(timeSeries("CPU",
			"CPU seconds per second of each gateway process (1 is one core busy).",
			unitCount,
			series(onGateways(rate(metric("process_cpu_seconds_total"))), "{{instance}}"))).
		WithPanel(timeSeries("Memory",
			"Resident memory and Go heap in use of each gateway process.",
			unitBytes,
			series(onGateways(metric("process_resident_memory_bytes").expr()), "{{instance}} resident"),
			series(onGateways(metric("go_memstats_heap_inuse_bytes").expr()), "{{instance}} heap in use"))).
		WithPanel(timeSeries("Request bodies and lagging clients held",
			"Bytes of request bodies held in memory (max_body_memory bounds them: past it a request is refused, 503, "+
				"before its body is read) and of responses queued for clients that read more slowly than their streams "+
				"come (max_lag_memory bounds them: past it such a client is held to 16 KiB and its stream waits), per replica.",
			unitBytes,
			series(sum(metric("goodput_request_body_bytes").expr(), "instance"), "{{instance}} request bodies"),
			series(sum(metric("goodput_client_lag_bytes").expr(), "instance"), "{{instance}} lagging clients"))).
		WithPanel(timeSeries("Requests refused for body memory",
			"Requests answered 503 (Retry-After: 1) before their bodies were read because the request bodies held "+
				"left no room under max_body_memory, per second and replica. Steadily above zero: raise max_body_memory "+
				"(and the memory the gateway may use) or add replicas.",
			unitReqPerS,
			series(sum(rate(metric("goodput_request_bodies_refused_total")), "instance"), "{{instance}} refused"))).
		WithPanel(timeSeries("Goroutines",
			"Goroutines of each gateway process: about two per stream in flight.",
			unitCount,
			series(onGateways(metric("go_goroutines").expr()), "{{instance}}")))
}
