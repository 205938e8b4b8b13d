// Package report builds the per-tenant SLO report that a platform team sends
// its tenant (`goodput report`): the SLO class and objective, attainment,
// error budget used and remaining, goodput (good requests/s and good output
// tokens/s), throughput, latency percentiles (TTFT, TPOT, ITL, E2E at
// p50/p90/p95/p99, with mean and max), the worst hours, and the shape of the
// traffic (ISL/OSL distributions, arrival rate, burstiness, concurrency,
// shape mix). docs/MEASURES.md defines every figure.
//
// # Sources
//
// FromAdmin reads one gateway's live view (GET /admin/api/slo and GET
// /admin/api/profile on its admin listener). That view only has rolling
// windows ending now (5m, 1h, 24h): the report uses the smallest window that
// covers the requested range and says so in its notes; it counts that one
// replica only, and has no per-hour numbers (the worst hours are unknown).
//
// FromPrometheus reads a Prometheus server that scrapes every replica, over
// its HTTP API. Counts are each counter's growth over the period (its last
// value in the period minus its value at the start; a series created during
// the period counts from zero, and so does one whose replica restarted
// between the period's start and its next scrape), summed over replicas
// ("exact increase", see ExactIncrease): unlike increase(), this neither
// extrapolates nor loses a series' first scraped value, so integer counts
// stay integers. Series that
// reset during the period (a replica restarted) fall back to increase().
// Latency and token percentiles come from histogram_quantile over the summed
// bucket differences, so they are interpolated within the histogram buckets.
// Time series over the period (Report.Series: attainment, TTFT and ITL p50
// and p99) come from range queries whose step gives 60 to 150 points (never
// below 15 s), each point the exact increase over its step.
//
// # Output
//
// A Report renders as Markdown (Report.Markdown), a self-contained HTML page
// with inline SVG charts and no script (Report.HTML), or JSON
// (Report.JSON). The JSON document is the Report struct: `format` is
// "goodput.report" and `version` 1; within a version fields may be added,
// never removed or changed in meaning. Every number that is unknown (not
// provided by the source, or a ratio over zero) is null in JSON and printed
// as "unknown" in Markdown and HTML; no field is ever left out.
// Times are RFC 3339; durations are seconds; rates are per second; ratios
// (attainment, objective, error budget) are fractions, not percentages.
package report
