package sweep

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
)

// Num is a figure that may be unknown: NaN stands for unknown, written
// null in JSON and "unknown" (or "-" in a table) in print.
type Num float64

// Unknown is the unknown Num.
var Unknown = Num(math.NaN())

// Known reports whether n holds a value.
func (n Num) Known() bool { return !math.IsNaN(float64(n)) && !math.IsInf(float64(n), 0) }

// MarshalJSON writes the number, or null when unknown.
func (n Num) MarshalJSON() ([]byte, error) {
	if !n.Known() {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, float64(n), 'g', -1, 64), nil
}

// UnmarshalJSON reads a number, or null (unknown).
func (n *Num) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		*n = Unknown
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*n = Num(v)
	return nil
}

// Pct is the median and the 99th percentile of a latency, in milliseconds.
type Pct struct {
	P50 Num `json:"p50"`
	P99 Num `json:"p99"`
}

// Step is the summary of one step of a sweep: its load and the figures of
// the benchmark run at that load, with vLLM's field names where vLLM has
// the figure. Unknown figures are Unknown (null in JSON); a Step built by
// hand must set them so, since a zero is a measured zero.
type Step struct {
	Kind Kind `json:"kind"`
	Load Load `json:"load"`

	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	// Duration is the run's length in seconds (vLLM's duration).
	Duration float64 `json:"duration"`
	// RequestThroughput is completed requests per second, OutputThroughput
	// output tokens per second (vLLM's).
	RequestThroughput float64 `json:"request_throughput"`
	OutputThroughput  float64 `json:"output_throughput"`
	// RequestGoodput is good requests per second (vLLM's: successful
	// requests within every --goodput bound); unknown without an SLO.
	RequestGoodput Num `json:"request_goodput"`
	// GoodOutputThroughput is the output tokens of the good requests per
	// second; unknown when the per-request figures are not there.
	GoodOutputThroughput Num `json:"good_output_throughput"`
	// Good is the number of good requests: those within the SLO, or every
	// successful request without one.
	Good int `json:"good"`
	// Attainment is Good / (Completed + Failed): a failed request is a
	// miss, never dropped. Unknown for a step that sent nothing.
	Attainment Num `json:"attainment"`

	TTFT Pct `json:"ttft_ms"`
	ITL  Pct `json:"itl_ms"`
	TPOT Pct `json:"tpot_ms"`
	E2EL Pct `json:"e2el_ms"`

	// Error is why the step's run ended early or failed, if it did.
	Error string `json:"error,omitempty"`
}

// Goodput is the figure the knee rule follows: RequestGoodput, or, without
// an SLO (every successful request is good), RequestThroughput.
func (s *Step) Goodput() float64 {
	if s.RequestGoodput.Known() {
		return float64(s.RequestGoodput)
	}
	return s.RequestThroughput
}

// Total is the requests the step judged: completed and failed.
func (s *Step) Total() int { return s.Completed + s.Failed }
