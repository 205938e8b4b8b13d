// Package slo judges metered requests against a tenant's SLO class and keeps
// the numbers built from those verdicts: Prometheus counters (the source of
// truth for attainment across replicas), a bounded in-process live view over
// rolling windows (5m, 1h, 24h) with latency percentiles from a mergeable
// quantile sketch, and the workload profile of the real traffic (ISL/OSL,
// arrivals, burstiness, concurrency, shape mix). docs/MEASURES.md defines
// every figure.
//
// The pieces, in the order a request meets them:
//
//   - Config, Class: the `slos:` section of the configuration and its
//     validation; a resolver picks a tenant's class for a (model, shape).
//   - ShapeThresholds.classify: the shape of one request (chat, rag, longgen).
//   - judge: good, or a miss with every reason (a Reasons bitset).
//   - Metrics: the goodput_* Prometheus counters and the objective gauge.
//   - Tracker: the live view served at GET /admin/api/slo.
//   - Profile: the workload profile served at GET /admin/api/profile, in the
//     format described by PROFILE_FORMAT.md.
//
// Only inference requests (meter.Record.Inference) are judged and profiled.
// Label values (tenant, model, SLO class) must be bounded by the caller:
// JudgerOptions.Labels chooses them once per request (export.Labeler).
// Tracker and Profile also fold series beyond a maximum count into "other"
// so that memory stays bounded even if a caller does not.
package slo
