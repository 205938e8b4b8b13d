// Package compare tells whether a benchmark represents real traffic: it
// puts a load generator's result (goodput bench, or vLLM's `vllm bench
// serve`) beside the traffic a goodput gateway recorded and says, with
// figures and in words, where they differ.
//
// The synthetic side is a benchmark result JSON with vLLM bench serve's
// field names (ReadBench). The real side is one of (ReadReal):
//
//   - a gateway request log (JSON Lines of meter.Record): per-request ISL,
//     OSL, TTFT, ITL gaps, outcome and start time; exact figures;
//   - a workload profile (goodput.profile, a file or a gateway's
//     /admin/api/profile URL): ISL/OSL histograms and percentiles,
//     arrival rate, burstiness and concurrency; no latencies;
//   - a Prometheus server scraping the gateways: the goodput_* histograms
//     over a window, for a whole fleet.
//
// Compare computes, on both sides with one rule each:
//
//   - the two-sample Kolmogorov–Smirnov statistic of ISL and of OSL: exact
//     on per-request values, or at the bucket bounds when a side is a
//     histogram (a lower bound of the exact statistic);
//   - the arrival rate and the burstiness k = mean²/variance of the
//     inter-arrival gaps (vLLM bench's --burstiness: 1 Poisson, below 1
//     bursty);
//   - concurrency (time-weighted mean and peak of requests in flight);
//   - TTFT, TPOT, ITL and E2E percentiles;
//   - SLO attainment under one SLO with vLLM's goodput rule (a completed
//     request is good when TTFT, TPOT and E2E are each within their bound;
//     TPOT is 0 for one output token).
//
// Tolerances decide the verdict (Result.Pass); findings put the
// differences in words ("synthetic ISL median 128 vs real 3,987: prefill
// is understated"). docs/COMPARE.md describes the command.
package compare
