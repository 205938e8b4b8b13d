package dashboards

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

// vLLM's engine metrics (its /metrics, scraped next to the gateway's): the
// names of vLLM's V1 engine. KV cache usage was vllm:gpu_cache_usage_perc
// before 0.10 and is vllm:kv_cache_usage_perc since; both are read.
var (
	engineRunning = metric("vllm:num_requests_running", modelNameIs)
	engineWaiting = metric("vllm:num_requests_waiting", modelNameIs)
	kvCacheUsage  = metric("", `__name__=~"vllm:(kv|gpu)_cache_usage_perc"`, modelNameIs)
	preemptions   = metric("vllm:num_preemptions_total", modelNameIs)
)

func engineBoard() *dashboard.DashboardBuilder {
	return newBoard("goodput-engine", "goodput: engine health (vLLM)",
		"The engines behind the gateway, from their own metrics (vLLM's /metrics, scraped by Prometheus): "+
			"batch occupancy, queue, KV cache and preemptions, next to what the gateway sees. "+
			"Empty unless Prometheus scrapes the engines.",
		tenantVar(),
		labelVar("model", "Model", "label_values(vllm:num_requests_running, model_name)")).
		WithRow(row("Engine")).
		WithPanel(timeSeries("Running and waiting requests",
			"Requests in the engine's running batch and waiting for a slot, per engine instance.",
			unitCount,
			series(sum(engineRunning.expr(), "instance", "model_name"), "{{instance}} · {{model_name}} running"),
			series(sum(engineWaiting.expr(), "instance", "model_name"), "{{instance}} · {{model_name}} waiting"))).
		WithPanel(withThresholdLines(timeSeries("KV cache usage",
			"Share of the KV cache blocks in use, per engine instance. Near 100%, new requests wait and running ones "+
				"are preempted.",
			unitRatio,
			series(maxOf(kvCacheUsage.expr(), "instance", "model_name"), "{{instance}} · {{model_name}}")).Max(1), 0.8, 0.95)).
		WithPanel(timeSeries("Preemptions",
			"Requests preempted per second (their KV cache is dropped and recomputed later): a sign the cache is too small "+
				"for the batch.",
			unitReqPerS,
			series(sum(rate(preemptions), "instance", "model_name"), "{{instance}} · {{model_name}}"))).
		WithRow(row("Gateway against engine")).
		WithPanel(timeSeries("In flight at the gateway against in the engine",
			"Requests in flight at the gateway (selected tenants; queued ones included) against requests running and waiting "+
				"in the engines (selected models). A gap that grows is queueing in front of the engine.",
			unitCount,
			series(sum(inFlight.expr()), "gateway in flight"),
			series(sum(engineRunning.expr()), "engine running"),
			series(sum(engineWaiting.expr()), "engine waiting")).Span(12)).
		WithPanel(timeSeries("Gateway TTFT p99 against engine waiting",
			"The gateway's TTFT p99 (selected tenants) next to the requests waiting in the engines: a TTFT that rises "+
				"with the engine's queue is the engine's, not the gateway's.",
			unitSeconds,
			series(quantile(0.99, metric("goodput_time_to_first_token_seconds", tenantIs)), "gateway TTFT p99"),
			series(sum(engineWaiting.expr()), "engine waiting")).
			OverrideByQuery("B", []dashboard.DynamicConfigValue{
				{Id: "unit", Value: unitCount},
				{Id: "custom.axisPlacement", Value: "right"},
			}).Span(12))
}
