// Package workload decides what `goodput bench` sends and when: the
// requests (prompt text, intended prompt length, max_tokens) and their send
// times. The runner in package bench sends them; this package never talks
// to an engine.
//
// # Choosing a workload
//
// FromFlags takes at most one of a shape preset, a profile and a dataset;
// with none it is the chat preset. Every random choice comes from the seed
// (math/rand/v2's PCG, a separate stream per use, so that changing the
// workload does not change the arrival times): the same seed (and the same
// calibration) gives the same requests and the same schedule with a given
// Go release, whatever was asked of the workload before.
//
// # Arrivals
//
// Arrivals(n, rate, k, seed) returns send offsets: the first request at 0,
// then gaps drawn from a gamma distribution of shape k and scale 1/(k·rate)
// (mean 1/rate, k = mean²/variance), as vLLM bench's --burstiness. k = 1 is
// a Poisson process; k < 1 is burstier; k > 1 more regular; k = +Inf evenly
// spaced. rate = +Inf (or above 10⁹/s, or not positive) sends everything
// at 0; a k that is not positive is taken as 1. Gamma variates use
// Marsaglia and Tsang's method (with the U^(1/k) boost below k = 1): a few
// lines, so no dependency.
//
// # Shape presets
//
// Each preset draws ISL and OSL independently from a lognormal
// distribution (median m, log-spread σ: p90 = m·e^(1.2816σ)), rounded and
// clamped. Under the gateway's default shape thresholds (rag: ISL ≥ 2048
// and OSL ≤ 256; longgen: ISL ≤ 1024 and OSL ≥ 1024; a traffic's shape is
// the one with at least 80% of its requests) each classifies as its own
// shape; the tests check it with the gateway's own profiler.
//
//	shape    ISL: median  p90    clamp          OSL: median  p90   clamp
//	chat          512     1427   [16, 8192]          256     628   [16, 2048]
//	rag           4096    6839   [1024, 32768]       96      182   [16, 1024]
//	longgen       200     490    [16, 4096]          2048    3419  [256, 8192]
//	mixed    50% chat, 30% rag, 20% longgen (each drawn from its preset)
//
// Expected shares under the default thresholds: chat ≈ 96% chat, rag ≈ 93%
// rag, longgen ≈ 95% longgen, mixed ≈ 51% chat / 28% rag / 19% longgen
// (so mixed).
//
// # Replaying a profile
//
// A profile is a goodput.profile document (the gateway's
// /admin/api/profile; slo/PROFILE_FORMAT.md), read from a file or an
// http(s) URL (at most 64 MiB; 30 s timeout). Another format, or a version
// newer than slo.ProfileVersion, is an error. Unknown fields are ignored.
//
// Which traffic: a "#tenant" suffix replays one tenant, "#tenant/model" one
// model of a tenant (the model is everything after the first "/", so model
// names with slashes work). Without a selector the workload is the whole
// traffic: a mixture of every tenant's series, each weighted by its
// measured requests. A URL keeps its query, so the gateway's ?window=5m|1h|24h
// and ?tenant= apply (with ?tenant= the document holds that tenant only).
//
// Lengths: each request picks a cell of the joint ISL×OSL histogram
// (isl_osl) with probability count/measured, which keeps the correlation of
// prompt and output lengths (long prompts with short answers for RAG), then
// draws ISL and OSL within their cells' buckets from the series' marginal
// distribution: a piecewise log-linear CDF through the bucket bounds'
// cumulative shares (exact), the p50/p90/p95/p99 percentiles where they
// agree with the buckets (the sketch is within 0.5%), and the exact min
// and max (which close the first and the open last bucket). Without
// percentiles this is log-uniform within each bucket, the format's
// suggested default. An ISL or OSL of 0 is sent as 1 token (InputTokens 0
// would mean unknown; max_tokens 0 asks for nothing).
//
// Arrivals: Rate returns arrival_rate_per_second and
// inter_arrival.gamma_shape of the selected series. A null shape means
// Poisson (k = 1) with fewer than two gaps and evenly spaced (k = +Inf) when
// the gaps had zero variance. For the whole traffic of several tenants the
// rates add up and k = Σλ/Σ(λ/k): the dispersion of counts of independent
// renewal streams adds up weighted by rate (an approximation: the exact
// shape of a superposition is not in the profile). Rate's ok is false when
// the profile has no arrival rate.
//
// # Datasets
//
// A dataset is a file of prompts: JSON Lines, one entry per line (blank
// lines skipped; a line is at most 16 MiB), or one JSON array of entries
// (how ShareGPT is distributed). An entry is either vLLM's custom dataset
// format, {"prompt": "...", "output_tokens": 128} (output_tokens optional,
// default 256 like vLLM's --custom-output-len), or a ShareGPT record,
// {"conversations": [{"from": "human", "value": "..."}, {"from": "gpt",
// "value": "..."}, ...]}, whose first human (or "user") turn is the prompt
// and whose max_tokens is estimated from the reply that follows as
// ceil(1.3 × its words) (a typical English BPE ratio; 256 without a
// reply). A bad entry is an error naming its line (or array index).
// Requests returns the entries in a seeded shuffled order (like vLLM's
// custom dataset), starting over when more are asked than the file holds.
// InputTokens is 0 (unknown): without the engine's tokenizer any number
// would be a guess, and the engine reports the real count in usage.
//
// # Prompt text and calibration
//
// Presets and profiles give each request a length in tokens; Synth writes
// text of that length without a tokenizer. The text is common English
// words (128 of them, each a single token with its leading space in the
// usual BPE vocabularies) separated by single spaces, so the engine's count
// is close to perWord·words + overhead, where overhead is the chat
// template's framing (or a completion's beginning-of-sequence token). The
// goodput simulator counts exactly words + 4 per chat message (words + 1
// for a completion).
//
// The model starts at 1 token per word and no overhead. Calibrate fits both
// by least squares from the engine's reported prompt_tokens for at least
// two of Synth's texts of different lengths: Probes gives three (16, 128
// and 1024 tokens), to send with max_tokens 1 on the endpoint the benchmark
// uses (the chat template is part of the overhead). Error reports the fit's
// worst relative miss over the samples. The text is made of blocks, each a
// random order of all 128 words once, so any long stretch holds every word
// equally often: the count stays linear in words even when the words' own
// token counts differ (then only prompts shorter than a few blocks vary).
// Lengths are capped at 2^21 tokens.
//
// Text costs no allocation: every prompt is a slice of one corpus (about
// 2 MB with its word index, grown for the longest prompt),
// starting at one of 2^18 places. The requests of one Requests call start
// at distinct places (up to 2^18 requests), so prompts share no prefix
// that an engine's prefix cache could reuse.
package workload
