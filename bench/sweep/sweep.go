package sweep

import (
	"strings"
)

// Sweep is a sweep's outcome: its ladder, its label, the summary of every
// step and the knee. The result file and the HTML report are made from it.
type Sweep struct {
	// Ladder is the sweep as --sweep took it ("request-rate=1,2,4").
	Ladder string `json:"sweep"`
	Kind   Kind   `json:"kind"`
	// Label is the report label (LabelFields.String).
	Label string `json:"label"`
	// SLO is the --goodput bounds ("ttft:200 tpot:50"), or "none".
	SLO string `json:"slo"`
	// Date is when the sweep started (RFC 3339, UTC).
	Date string `json:"date"`
	// Steps are in the order run, which is the order of load.
	Steps []Step `json:"steps"`
	Knee  Knee   `json:"knee"`
	// Stopped says, for a sweep stopped before its last step ended
	// (Ctrl-C), when it stopped and how many steps ran; a step cut by the
	// stop is in neither the steps nor the knee. Empty for a sweep that ran
	// every step.
	Stopped string `json:"stopped,omitempty"`
}

// LabelFields are the report label's fields, in the label's order; an
// empty field prints "unknown", never left out.
type LabelFields struct {
	Engine, Version, Precision, GPUs, TP string
	// ISL and OSL describe the workload's lengths ("1024 (mean)").
	ISL, OSL string
	// Load is the arrival process and the ladder ("open loop, request-rate
	// 1, 2, 4 req/s, burstiness 1").
	Load string
	// Percentile names the percentiles shown ("p50, p99").
	Percentile string
	// Goodput is the goodput definition: its SLO and objective.
	Goodput string
}

// String is "engine vllm · version unknown · … · goodput …".
func (l LabelFields) String() string {
	parts := make([]string, 0, 10)
	for _, kv := range [][2]string{
		{"engine", l.Engine}, {"version", l.Version}, {"precision", l.Precision}, {"gpus", l.GPUs}, {"tp", l.TP},
		{"ISL", l.ISL}, {"OSL", l.OSL}, {"", l.Load}, {"percentile", l.Percentile}, {"goodput", l.Goodput},
	} {
		v := strings.TrimSpace(kv[1])
		if v == "" {
			v = "unknown"
		}
		if kv[0] == "" {
			parts = append(parts, v)
			continue
		}
		parts = append(parts, kv[0]+" "+v)
	}
	return strings.Join(parts, " · ")
}
