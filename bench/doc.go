// Package bench is goodput's load generator (`goodput bench`): it sends
// streamed chat, completions, Responses API (/v1/responses) or Anthropic
// Messages API (/v1/messages) requests to an OpenAI-compatible server (an
// engine, or a goodput gateway in front of one) with an open-loop arrival
// process (a rate, gamma-distributed gaps, an optional client-side
// concurrency cap: vLLM's --request-rate, --burstiness and
// --max-concurrency) or a closed loop (N clients), and measures every
// response with the gateway's own framer, parsers and meter.Meter: the same
// token-event rule, the same stamping of each event when the read that
// brought its last byte returns, the same usage counts and fallbacks
// (docs/MEASURES.md). Only the origin differs: the gateway counts from t0
// (its read of the request headers), bench from t_send (just before the
// request is handed to the HTTP client), so that for one request bench's
// TTFT and E2E are never below the gateway's.
//
// The figures follow `vllm bench serve` (calculate_metrics in vLLM's
// benchmarks/serve.py): completed and failed requests, duration from the
// run's start (before an open loop's wait for its first planned send: its
// first request goes one gap in, and the last of n at n/rate, vLLM's
// schedule) to the last end, token totals and throughputs, request
// goodput under --goodput bounds, and the mean, median, standard deviation
// and numpy-linear percentiles of TTFT, TPOT (per request, when it has more
// than one output token), ITL (every gap of every successful request,
// pooled) and E2EL. A Result writes and reads vLLM's result file, with
// goodput's additions (report label, arrival process, arrival lateness,
// warm-up) in an object of their own, "goodput_bench".
//
// Arrival lateness is, per request, the actual send minus the planned send
// (in the open loop the planned offset from the start; in the closed loop
// the moment its client became free). It includes the wait for a
// --max-concurrency slot, which vLLM also reports as queue_times.
package bench
