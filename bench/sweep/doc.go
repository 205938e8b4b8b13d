// Package sweep runs a benchmark at a ladder of loads and draws the
// capacity curve: throughput and goodput against load, with TTFT and ITL
// p50 and p99, and the knee where a fast engine becomes a constrained
// service (`goodput bench --sweep request-rate=1,2,4,8,16`).
//
// A sweep's steps are run in order of increasing load (ParseLadder refuses
// any other order); each step's figures are summarised in a Step, with
// vLLM's field names where vLLM has the figure. FindKnee applies the knee
// rule (its doc states it exactly): the knee is the first step at which
// goodput stops rising — no later step raises goodput above the best one
// before it by more than Rule.MinGain (0.25) times the load's relative
// growth — or attainment falls below the objective (0.99 by default).
//
// WriteHTML writes the self-contained report (inline SVG, no script, no
// network; well-formed XML); WriteTable the same table as text.
package sweep
