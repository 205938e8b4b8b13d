package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// Result is one benchmark run. Its JSON is the file `vllm bench serve
// --save-result --save-detailed` writes, with vLLM's field names and units
// (latencies in milliseconds in the aggregates, seconds in the per-request
// arrays), plus one object of its own, "goodput_bench", whose name no vLLM
// field uses. `goodput compare` (package compare) reads both kinds of file.
type Result struct {
	Date           string  `json:"date"`
	EndpointType   string  `json:"endpoint_type"`
	Backend        string  `json:"backend"`
	Label          string  `json:"label"`
	ModelID        string  `json:"model_id"`
	TokenizerID    *string `json:"tokenizer_id"`
	NumPrompts     int     `json:"num_prompts"`
	RequestRate    Rate    `json:"request_rate"`
	Burstiness     float64 `json:"burstiness"`
	MaxConcurrency *int    `json:"max_concurrency"`

	Duration             float64  `json:"duration"`
	Completed            int      `json:"completed"`
	Failed               int      `json:"failed"`
	TotalInputTokens     int      `json:"total_input_tokens"`
	TotalOutputTokens    int      `json:"total_output_tokens"`
	RequestThroughput    float64  `json:"request_throughput"`
	RequestGoodput       *float64 `json:"request_goodput"`
	OutputThroughput     float64  `json:"output_throughput"`
	TotalTokenThroughput float64  `json:"total_token_throughput"`

	InputLens  []int       `json:"input_lens"`
	OutputLens []int       `json:"output_lens"`
	TTFTs      []float64   `json:"ttfts"`
	ITLs       [][]float64 `json:"itls"`
	Latencies  []float64   `json:"latencies"`
	StartTimes []float64   `json:"start_times"`
	QueueTimes []float64   `json:"queue_times"`
	Errors     []string    `json:"errors"`

	MaxOutputTokensPerS   float64 `json:"max_output_tokens_per_s"`
	MaxConcurrentRequests int     `json:"max_concurrent_requests"`

	// Metrics holds, per metric name ("ttft", "tpot", "itl", "e2el"),
	// vLLM's mean_X_ms, median_X_ms, std_X_ms and pNN_X_ms fields. A vLLM
	// file holds the metrics its --percentile-metrics selected; goodput's
	// holds all four.
	Metrics map[string]*Stats `json:"-"`

	// Goodput is what goodput adds; nil in a file vLLM wrote.
	Goodput *Extra `json:"goodput_bench,omitempty"`
}

// Extra is what a goodput result adds to vLLM's fields.
type Extra struct {
	Label    Label  `json:"label"`
	BaseURL  string `json:"base_url"`
	Endpoint string `json:"endpoint"`
	Workload string `json:"workload"`
	Seed     int64  `json:"seed"`
	// Arrival is the arrival process the run used.
	Arrival ArrivalInfo `json:"arrival"`
	// SLO is the --goodput bounds ("ttft:200 tpot:50", or "none"), and
	// GoodRequests the successful requests that met them.
	SLO          string `json:"slo"`
	GoodRequests int    `json:"good_requests"`
	// GoodOutputThroughput is the output tokens of the good requests per
	// second of the run's duration (0 without an SLO).
	GoodOutputThroughput float64 `json:"good_output_throughput"`
	// Good says, per request, whether it was good (always false without
	// an SLO).
	Good []bool `json:"good"`
	// ISLMean and OSLMean are over the successful requests.
	ISLMean float64 `json:"isl_mean"`
	OSLMean float64 `json:"osl_mean"`
	// MaxMs holds each metric's largest value (ms).
	MaxMs map[string]float64 `json:"max_ms"`
	// Lateness is the arrival lateness: actual send − planned send.
	Lateness LatenessStats `json:"arrival_lateness_ms"`
	// ArrivalLateness is each request's lateness, in seconds.
	ArrivalLateness []float64 `json:"arrival_lateness"`
	// Connect summarises the new connections the run opened: a request
	// that found no idle connection waited for one before its send (its
	// lateness includes it; the server's accept queue shows here).
	Connect ConnectStats `json:"connect_ms"`
	// ConnectTimes is, per request, the time to open its connection in
	// seconds (0 when it reused one).
	ConnectTimes []float64 `json:"connect_times"`
	// RequestIDs are the X-Request-Id headers sent, per request.
	RequestIDs []string `json:"request_ids"`
	// UsageSources counts the successful requests by where their token
	// counts came from (usage, continuous_usage, estimate, none).
	UsageSources map[string]int `json:"usage_sources"`
	// NotSent counts the requests a run stopped early (Ctrl-C) never sent:
	// they are not failed requests, and no per-request array holds them
	// (the arrays hold the requests sent, in order; num_prompts is the
	// number planned).
	NotSent int `json:"not_sent"`
	// CutInFlight counts the requests sent and still in flight when a run
	// stopped early: they were cut, and count as failed (their errors
	// begin "stopped with the run").
	CutInFlight int `json:"cut_in_flight"`
	// Warmup holds the warm-up requests' figures, never mixed into the
	// run's; nil without warm-up.
	Warmup *WarmupResult `json:"warmup,omitempty"`
	// Calibration is how the prompt synthesizer was fitted to the engine's
	// tokenizer before the run; nil when it was not (given prompts).
	Calibration *CalibrationInfo `json:"calibration,omitempty"`
}

// CalibrationInfo is the fit of the prompt synthesizer to the engine's
// prompt token counts: tokens = TokensPerWord·words + Overhead.
type CalibrationInfo struct {
	Samples       int     `json:"samples"`
	TokensPerWord float64 `json:"tokens_per_word"`
	Overhead      float64 `json:"overhead"`
	// MaxError is the fit's largest relative miss over the samples.
	MaxError float64 `json:"max_error"`
	// Error says why calibration failed ("" when it did not).
	Error string `json:"error,omitempty"`
	// Reused: the synthesizer had been calibrated by an earlier run (a
	// sweep's previous step) and no request was sent for it.
	Reused bool `json:"reused,omitempty"`
}

// ArrivalInfo describes the arrival process of a run.
type ArrivalInfo struct {
	Loop           string  `json:"loop"` // "open" or "closed"
	Rate           Rate    `json:"request_rate"`
	Burstiness     float64 `json:"burstiness"`
	MaxConcurrency int     `json:"max_concurrency"` // 0: none
	Concurrency    int     `json:"concurrency"`     // closed loop: clients
	Source         string  `json:"source"`          // "flags", "workload" (a profile's own), "offsets"
}

// LatenessStats summarise arrival lateness (ms).
type LatenessStats struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// ConnectStats summarise the time to open new connections (ms).
type ConnectStats struct {
	New int     `json:"new_connections"`
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// WarmupResult is the figures of the warm-up requests.
type WarmupResult struct {
	Requests  int               `json:"num_prompts"`
	Duration  float64           `json:"duration"`
	Completed int               `json:"completed"`
	Failed    int               `json:"failed"`
	Metrics   map[string]*Stats `json:"-"`
}

// Rate is a request rate that writes +Inf as vLLM does: the string "inf".
type Rate float64

// MarshalJSON writes a number, or "inf".
func (r Rate) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(r), 1) {
		return []byte(`"inf"`), nil
	}
	if math.IsNaN(float64(r)) || math.IsInf(float64(r), 0) {
		return []byte(`null`), nil
	}
	return json.Marshal(float64(r))
}

// UnmarshalJSON reads a number, "inf" or null (0).
func (r *Rate) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		*r = 0
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return fmt.Errorf("request rate %q: not a number", s)
		}
		*r = Rate(f)
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*r = Rate(f)
	return nil
}

// metricFieldRE matches vLLM's per-metric fields: mean_ttft_ms, p99_itl_ms,
// p99.9_e2el_ms, ...
var metricFieldRE = regexp.MustCompile(`^(mean|median|std|p[0-9]+(?:\.[0-9]+)?)_([a-z0-9_]+)_ms$`)

// appendMetrics adds the metrics' fields to the JSON object b.
func appendMetrics(b []byte, metrics map[string]*Stats) []byte {
	if len(metrics) == 0 {
		return b
	}
	b = bytes.TrimRight(b, " \n")
	if len(b) == 0 || b[len(b)-1] != '}' {
		return b
	}
	b = b[:len(b)-1]
	empty := bytes.HasSuffix(bytes.TrimRight(b, " \n"), []byte("{"))
	for _, name := range metricNames(metrics) {
		s := metrics[name]
		add := func(key string, v float64) {
			if !empty {
				b = append(b, ',')
			}
			empty = false
			b = strconv.AppendQuote(b, key)
			b = append(b, ':')
			b = appendFloat(b, v)
		}
		add("mean_"+name+"_ms", s.Mean)
		add("median_"+name+"_ms", s.Median)
		add("std_"+name+"_ms", s.Std)
		for _, p := range s.Percentiles {
			add("p"+pWord(p.P)+"_"+name+"_ms", p.Value)
		}
	}
	return append(b, '}')
}

func appendFloat(b []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

// metricNames lists the metrics in vLLM's order, then any others sorted.
func metricNames(metrics map[string]*Stats) []string {
	var out []string
	for _, m := range AllMetrics {
		if metrics[m] != nil {
			out = append(out, m)
		}
	}
	var rest []string
	for m, s := range metrics {
		if s != nil && !isStdMetric(m) {
			rest = append(rest, m)
		}
	}
	sortStrings(rest)
	return append(out, rest...)
}

func isStdMetric(m string) bool {
	for _, s := range AllMetrics {
		if s == m {
			return true
		}
	}
	return false
}

// pWord writes a percentile as vLLM names it: 99 → "99", 99.9 → "99.9".
func pWord(p float64) string { return strconv.FormatFloat(p, 'f', -1, 64) }

// readMetrics collects the per-metric fields of a JSON object.
func readMetrics(data []byte) (map[string]*Stats, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	out := map[string]*Stats{}
	for key, v := range raw {
		m := metricFieldRE.FindStringSubmatch(key)
		if m == nil {
			continue
		}
		var f *float64
		if err := json.Unmarshal(v, &f); err != nil || f == nil {
			continue
		}
		s := out[m[2]]
		if s == nil {
			s = &Stats{}
			out[m[2]] = s
		}
		switch kind := m[1]; kind {
		case "mean":
			s.Mean = *f
		case "median":
			s.Median = *f
		case "std":
			s.Std = *f
		default:
			p, err := strconv.ParseFloat(kind[1:], 64)
			if err != nil {
				continue
			}
			s.Percentiles = append(s.Percentiles, Percentile{p, *f})
		}
	}
	for _, s := range out {
		sortPercentiles(s.Percentiles)
	}
	return out, nil
}

type resultFields Result

// MarshalJSON writes vLLM's fields (the per-metric ones included) and
// goodput_bench.
func (r *Result) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal((*resultFields)(r))
	if err != nil {
		return nil, err
	}
	return appendMetrics(b, r.Metrics), nil
}

// UnmarshalJSON reads a goodput result or a file of `vllm bench serve`.
func (r *Result) UnmarshalJSON(data []byte) error {
	if err := json.Unmarshal(data, (*resultFields)(r)); err != nil {
		return err
	}
	m, err := readMetrics(data)
	if err != nil {
		return err
	}
	r.Metrics = m
	return nil
}

type warmupFields WarmupResult

// MarshalJSON writes the warm-up figures with vLLM's metric field names.
func (w *WarmupResult) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal((*warmupFields)(w))
	if err != nil {
		return nil, err
	}
	return appendMetrics(b, w.Metrics), nil
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (w *WarmupResult) UnmarshalJSON(data []byte) error {
	if err := json.Unmarshal(data, (*warmupFields)(w)); err != nil {
		return err
	}
	m, err := readMetrics(data)
	if err != nil {
		return err
	}
	w.Metrics = m
	return nil
}

// WriteFile writes the result as JSON (indented) to path.
func (r *Result) WriteFile(path string) error {
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
