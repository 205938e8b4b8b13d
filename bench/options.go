package bench

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goodput/goodput/bench/workload"
	"github.com/goodput/goodput/internal/urlredact"
	"github.com/goodput/goodput/meter"
)

// Endpoints the benchmark can drive.
const (
	EndpointChat        = "/v1/chat/completions"
	EndpointCompletions = "/v1/completions"
	// EndpointResponses is OpenAI's Responses API.
	EndpointResponses = "/v1/responses"
	// EndpointMessages is Anthropic's Messages API.
	EndpointMessages = "/v1/messages"
)

// NormalizeEndpoint maps --endpoint values to a path: the four paths as
// they are, "chat", "completions", "responses" and "messages" as short
// names, and "" to EndpointCompletions (vLLM's default).
func NormalizeEndpoint(s string) (string, error) {
	switch strings.TrimSpace(s) {
	case "chat", EndpointChat:
		return EndpointChat, nil
	case "", "completions", EndpointCompletions:
		return EndpointCompletions, nil
	case "responses", EndpointResponses:
		return EndpointResponses, nil
	case "messages", EndpointMessages:
		return EndpointMessages, nil
	}
	return "", fmt.Errorf("endpoint %q: want %s (chat), %s (completions), %s (responses) or %s (messages)",
		s, EndpointChat, EndpointCompletions, EndpointResponses, EndpointMessages)
}

// endpointAPI is the API an endpoint speaks, as the meter names it.
func endpointAPI(endpoint string) meter.API {
	switch endpoint {
	case EndpointChat:
		return meter.APIChat
	case EndpointResponses:
		return meter.APIResponses
	case EndpointMessages:
		return meter.APIMessages
	}
	return meter.APICompletions
}

// Request is one request of a run: the prompt, its intended length in
// tokens and the output to ask for (sent as max_tokens with ignore_eos, so
// that the engine generates exactly that many; 0: max_tokens is not sent).
// Package workload makes them.
type Request = workload.Request

// Arrival says when requests are sent: an open loop (planned send times,
// whatever the server does) or a closed loop (a fixed number of clients,
// each sending its next request when the previous one ended).
type Arrival struct {
	// Rate is the open loop's mean rate in requests per second.
	// math.Inf(1): every request at once. 0: the workload's own arrival
	// process when it has one (a profile), else every request at once.
	Rate float64
	// Burstiness is the gamma shape of the gaps between planned sends (vLLM's
	// --burstiness): 1 (or 0, the default) is a Poisson process, below 1
	// burstier, above 1 more regular.
	Burstiness float64
	// MaxConcurrency, in the open loop, caps the requests in flight on the
	// client's side (vLLM's --max-concurrency): a request whose planned
	// time has come waits for a free slot, and its send, and so its clock,
	// starts after the wait. 0: no cap.
	MaxConcurrency int
	// Concurrency > 0 selects the closed loop with that many clients; Rate,
	// Burstiness and MaxConcurrency must then be zero.
	Concurrency int
	// Offsets, when not nil, are the planned send times from the start of
	// the run, one per request (open loop only), instead of ones drawn
	// from Rate and Burstiness.
	Offsets []time.Duration
}

// MinRate is the least request rate: below it the gaps between requests
// are days (1e-300 was taken, and the run waited without end).
const MinRate = 1e-6

// MaxRate is the greatest finite request rate: a microsecond between
// requests, past what one client sends; a higher rate is inf (every
// request at once), and 1e300 was taken and printed with 300 digits.
const MaxRate = 1e6

// Closed reports whether the arrival process is a closed loop.
func (a Arrival) Closed() bool { return a.Concurrency > 0 }

func (a Arrival) check() error {
	switch {
	case a.Concurrency < 0:
		return errors.New("concurrency must be at least 1")
	case a.MaxConcurrency < 0:
		return errors.New("max concurrency must be at least 1")
	case math.IsNaN(a.Rate) || a.Rate < 0:
		return fmt.Errorf("request rate %v: want a positive number or inf", a.Rate)
	case a.Rate != 0 && a.Rate < MinRate:
		return fmt.Errorf("request rate %v: want at least %g (one request in about 12 days), or inf", a.Rate, MinRate)
	case a.Rate > MaxRate && !math.IsInf(a.Rate, 1):
		return fmt.Errorf("request rate %v: want at most %g, or inf (every request at once)", a.Rate, MaxRate)
	case math.IsNaN(a.Burstiness) || a.Burstiness < 0 || math.IsInf(a.Burstiness, 0):
		return fmt.Errorf("burstiness %v: want a positive number", a.Burstiness)
	}
	if a.Concurrency > 0 && (a.Rate != 0 || a.MaxConcurrency != 0 || a.Offsets != nil) {
		return errors.New("a closed loop (concurrency) excludes a request rate, a max concurrency and planned offsets")
	}
	return nil
}

// SLO holds vLLM's --goodput bounds, in the same units and rule: a
// successful request is good when every bound given holds (inclusive ≤).
// A zero field is no bound; a negative one is a bound of 0 ms (what
// "--goodput ttft:0" asks for). TPOT counts as 0 for a request with at most
// one output token.
type SLO struct {
	TTFT, TPOT, E2EL time.Duration
}

// IsZero reports whether no bound is set.
func (s SLO) IsZero() bool { return s.TTFT == 0 && s.TPOT == 0 && s.E2EL == 0 }

// ParseSLO reads vLLM's --goodput pairs ("ttft:200", "tpot:50", "e2el:2000";
// milliseconds, non-negative). A pair may also hold several items separated
// by spaces or commas.
func ParseSLO(pairs []string) (SLO, error) {
	var s SLO
	for _, p := range pairs {
		for _, item := range strings.FieldsFunc(p, func(r rune) bool { return r == ' ' || r == ',' }) {
			name, val, ok := strings.Cut(item, ":")
			if !ok {
				return SLO{}, fmt.Errorf("goodput %q: want NAME:MILLISECONDS (ttft, tpot or e2el)", item)
			}
			ms, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
			if err != nil || ms < 0 || math.IsNaN(ms) || math.IsInf(ms, 0) {
				return SLO{}, fmt.Errorf("goodput %q: the value must be a non-negative number of milliseconds", item)
			}
			if ms > MaxBoundMs {
				return SLO{}, fmt.Errorf("goodput %q: at most %d milliseconds (a day)", item, MaxBoundMs)
			}
			d := time.Duration(math.Round(ms * float64(time.Millisecond)))
			if d == 0 && ms > 0 {
				return SLO{}, fmt.Errorf("goodput %q: under a nanosecond, which no latency is measured to; give 0 for a bound only 0 meets", item)
			}
			if d == 0 {
				// 0 ms is a bound (only a 0 can meet it), unlike no bound.
				d = zeroBound
			}
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "ttft":
				s.TTFT = d
			case "tpot":
				s.TPOT = d
			case "e2el":
				s.E2EL = d
			default:
				return SLO{}, fmt.Errorf("goodput %q: unknown metric %q (want ttft, tpot or e2el)", item, name)
			}
		}
	}
	return s, nil
}

// MaxBoundMs is the largest bound ParseSLO takes: a day, past anything a
// user waits for. Past about 9.2e12 the milliseconds overflowed a
// time.Duration into a bound of 0.
const MaxBoundMs = 86_400_000

// zeroBound stands for a bound of 0 ms (set, and met only by 0).
const zeroBound = time.Duration(-1)

// bound returns the bound in milliseconds and whether it is set.
func bound(d time.Duration) (float64, bool) {
	switch {
	case d < 0:
		return 0, true
	case d > 0:
		return float64(d) / 1e6, true
	}
	return 0, false
}

// String is the SLO as --goodput takes it ("ttft:200 tpot:50"), or "none".
func (s SLO) String() string {
	var parts []string
	for _, b := range []struct {
		name string
		d    time.Duration
	}{{"ttft", s.TTFT}, {"tpot", s.TPOT}, {"e2el", s.E2EL}} {
		if v, ok := bound(b.d); ok {
			parts = append(parts, b.name+":"+strconv.FormatFloat(v, 'f', -1, 64))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// Label describes what was measured (the report label: engine, version,
// precision, GPUs, tensor parallelism). An empty field is unknown and is
// printed "unknown", never left out.
type Label struct {
	Engine    string `json:"engine"`
	Version   string `json:"version"`
	Precision string `json:"precision"`
	GPUs      string `json:"gpus"`
	TP        string `json:"tp"`
}

// labelKeys are the --label keys, in print order.
var labelKeys = []string{"engine", "version", "precision", "gpus", "tp"}

func (l *Label) field(key string) *string {
	switch key {
	case "engine":
		return &l.Engine
	case "version":
		return &l.Version
	case "precision":
		return &l.Precision
	case "gpus":
		return &l.GPUs
	case "tp":
		return &l.TP
	}
	return nil
}

// ParseLabel reads "engine=vllm,version=0.11,precision=fp16,gpus=1,tp=1";
// any subset, in any order.
func ParseLabel(s string) (Label, error) {
	var l Label
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		k = strings.ToLower(strings.TrimSpace(k))
		f := l.field(k)
		if !ok || f == nil {
			return Label{}, fmt.Errorf("label %q: want KEY=VALUE with KEY one of %s", item, strings.Join(labelKeys, ", "))
		}
		*f = strings.TrimSpace(v)
	}
	return l, nil
}

// Fields returns the label's values in print order, "unknown" for the
// empty ones.
func (l Label) Fields() [][2]string {
	out := make([][2]string, 0, len(labelKeys))
	for _, k := range labelKeys {
		v := *l.field(k)
		if v == "" {
			v = "unknown"
		}
		out = append(out, [2]string{k, v})
	}
	return out
}

// String is "engine=vllm,version=unknown,…", every field present.
func (l Label) String() string {
	var parts []string
	for _, kv := range l.Fields() {
		parts = append(parts, kv[0]+"="+kv[1])
	}
	return strings.Join(parts, ",")
}

// Secret holds a credential. It never prints itself: fmt, %v of a struct
// holding it and JSON all show "[redacted]".
type Secret string

func (Secret) String() string   { return "[redacted]" }
func (Secret) GoString() string { return `"[redacted]"` }

// MarshalJSON writes "[redacted]" (or "" when empty).
func (s Secret) MarshalJSON() ([]byte, error) {
	if s == "" {
		return []byte(`""`), nil
	}
	return []byte(`"[redacted]"`), nil
}

// Header is one extra request header.
type Header struct{ Key, Value string }

// ParseHeader reads "Key:Value" (as curl) or "Key=Value" (as vLLM), at the
// first of the two separators.
func ParseHeader(s string) (Header, error) {
	i := strings.IndexAny(s, ":=")
	if i <= 0 {
		return Header{}, fmt.Errorf("header %q: want KEY:VALUE", redactHeader(s))
	}
	k, v := strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+1:])
	if k == "" || strings.ContainsAny(k, " \t\r\n") || strings.ContainsAny(v, "\r\n") {
		return Header{}, fmt.Errorf("header %q: want KEY:VALUE on one line, KEY without spaces", redactHeader(s))
	}
	return Header{k, v}, nil
}

// redactHeader shows a bad --header argument without its value (it may be
// a credential).
func redactHeader(s string) string {
	if i := strings.IndexAny(s, ":="); i >= 0 {
		return s[:i+1] + "…"
	}
	if len(s) > 12 {
		return s[:4] + "…"
	}
	return s
}

// Options configures Run. BaseURL and (Requests or Workload) are
// required; everything else has a default.
type Options struct {
	// BaseURL is the server's base, e.g. http://127.0.0.1:8000 (a path
	// prefix is kept: https://host/prefix).
	BaseURL string
	// Endpoint is EndpointCompletions (the default, as vLLM's),
	// EndpointChat, EndpointResponses or EndpointMessages.
	Endpoint string
	// Model is sent in every request; empty: the first model /v1/models
	// lists.
	Model string

	// Requests are the measured requests, in order. When nil, Workload
	// makes NumPrompts of them.
	Requests []Request
	// Workload makes the requests when Requests is nil; its own arrival
	// process (a profile) applies when Arrival.Rate is 0.
	Workload workload.Workload
	// NumPrompts is how many requests Workload makes (default 1000, as vLLM).
	NumPrompts int
	// NoCalibrate skips the calibration of the workload's prompt
	// synthesizer. By default, when the workload writes its prompts
	// (Workload.Synth is not nil), Run first sends the synthesizer's three
	// probes (about 16, 128 and 1024 tokens; max_tokens 1; X-Request-Id
	// PREFIX+"calibrate-"+i) and fits it to the prompt_tokens the server
	// reports, so that prompts have the intended length in the engine's
	// tokens. They are not in the figures. A synthesizer already calibrated
	// (by an earlier run with the same workload) is not calibrated again.
	NoCalibrate bool
	// Seed seeds the planned arrival times (and is recorded in the result).
	Seed int64

	// Arrival is the arrival process: open loop (rate, burstiness, max
	// concurrency) or closed loop (concurrency).
	Arrival Arrival
	// Warmup requests run first, with the same concurrency limit, and are
	// reported apart: they never enter the figures. They repeat the first
	// measured requests.
	Warmup int

	// Headers are sent with every request (after the defaults, before
	// X-Request-Id and Authorization).
	Headers []Header
	// APIKey, when set, is sent as "Authorization: Bearer KEY". It never
	// appears in any output.
	APIKey Secret
	// RequestIDPrefix starts every X-Request-Id (default
	// "bench-<8 hex digits>-"); the measured request i is PREFIX+i, the
	// warm-up request i PREFIX+"warmup-"+i.
	RequestIDPrefix string
	// Timeout bounds one request from send to its end (default 10 minutes).
	Timeout time.Duration

	// Label describes the server measured (the report label).
	Label Label
	// Goodput holds the --goodput bounds; zero: no goodput is computed.
	Goodput SLO
	// Percentiles are the percentiles of every metric in the result
	// (default 99, as vLLM's --metric-percentiles). The result file also
	// always holds p50, p90, p95 and p99.
	Percentiles []float64

	// Progress, when not nil, receives a progress line (carriage-return
	// updated) a few times a second, and a newline at the end.
	Progress io.Writer
}

// CheckBaseURL checks a server base URL: http or https, a host, no
// credentials, no query.
func CheckBaseURL(s string) error {
	if s == "" {
		return errors.New("no base URL")
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		// Its password not quoted (urlredact), however url.Parse split it.
		return urlredact.Err(s, fmt.Errorf("%q: want http://HOST:PORT or https://HOST[/PREFIX]", s))
	}
	if u.User != nil {
		return errors.New("credentials in the URL are not supported (use --api-key)")
	}
	return nil
}

// defaultNumPrompts is vLLM's --num-prompts default.
const defaultNumPrompts = 1000

// MaxRequests caps the measured requests a workload makes (NumPrompts) and
// the warm-up's, each: a million, days of load at the rates a server
// takes, and the run holds every request and its result in memory (2^31
// was taken and ended the process out of memory while the workload was
// made). Requests given whole (Options.Requests: the demo's plan) are the
// caller's to size.
const MaxRequests = 1_000_000

func (o *Options) withDefaults() (Options, error) {
	d := *o
	if err := CheckBaseURL(d.BaseURL); err != nil {
		return d, err
	}
	d.BaseURL = strings.TrimRight(d.BaseURL, "/")
	var err error
	if d.Endpoint, err = NormalizeEndpoint(d.Endpoint); err != nil {
		return d, err
	}
	if d.Requests == nil {
		if d.Workload == nil {
			return d, errors.New("no requests and no workload")
		}
		if d.NumPrompts == 0 {
			d.NumPrompts = defaultNumPrompts
		}
		if d.NumPrompts < 0 || d.NumPrompts > MaxRequests {
			return d, fmt.Errorf("the number of prompts must be from 1 to %d", MaxRequests)
		}
	}
	if d.Warmup < 0 || d.Warmup > MaxRequests {
		return d, fmt.Errorf("warmup must be from 0 to %d requests", MaxRequests)
	}
	if err := checkIDPrefix(d.RequestIDPrefix); err != nil {
		return d, err
	}
	if err := d.Arrival.check(); err != nil {
		return d, err
	}
	if d.Timeout <= 0 {
		d.Timeout = 10 * time.Minute
	}
	if len(d.Percentiles) == 0 {
		d.Percentiles = []float64{99}
	}
	for _, p := range d.Percentiles {
		if math.IsNaN(p) || p < 0 || p > 100 {
			return d, fmt.Errorf("percentile %v: want a number from 0 to 100", p)
		}
	}
	return d, nil
}

// ParsePercentiles reads vLLM's --metric-percentiles ("50,90,99").
func ParsePercentiles(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := strconv.ParseFloat(f, 64)
		if err != nil || math.IsNaN(p) || p < 0 || p > 100 {
			return nil, fmt.Errorf("metric percentile %q: want numbers from 0 to 100, separated by commas", f)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, errors.New("metric percentiles: none given")
	}
	return out, nil
}

// Metric names, as vLLM's --percentile-metrics.
const (
	MetricTTFT = "ttft"
	MetricTPOT = "tpot"
	MetricITL  = "itl"
	MetricE2EL = "e2el"
	// MetricClientQueue is the wait for a --max-concurrency slot (vLLM's
	// client_queue_time), over the successful requests; only with a
	// --max-concurrency.
	MetricClientQueue = "client_queue_time"
	// MetricE2ELQueue is E2EL plus that wait (vLLM's
	// e2el_including_client_queue); only with a --max-concurrency and a
	// finite --request-rate.
	MetricE2ELQueue = "e2el_including_client_queue"
)

// AllMetrics lists the latency metrics, in vLLM's print order.
var AllMetrics = []string{MetricTTFT, MetricTPOT, MetricITL, MetricE2EL, MetricClientQueue, MetricE2ELQueue}

// DefaultPercentileMetrics is vLLM's default for generation.
var DefaultPercentileMetrics = []string{MetricTTFT, MetricTPOT, MetricITL}

// ParsePercentileMetrics reads vLLM's --percentile-metrics ("ttft,tpot,itl").
func ParsePercentileMetrics(s string) ([]string, error) {
	seen := map[string]bool{}
	for _, m := range strings.Split(s, ",") {
		m = strings.ToLower(strings.TrimSpace(m))
		if m == "" {
			continue
		}
		switch m {
		case MetricTTFT, MetricTPOT, MetricITL, MetricE2EL, MetricClientQueue, MetricE2ELQueue:
			seen[m] = true
		default:
			return nil, fmt.Errorf("percentile metric %q: want ttft, tpot, itl, e2el, %s or %s", m, MetricClientQueue, MetricE2ELQueue)
		}
	}
	if len(seen) == 0 {
		return nil, errors.New("percentile metrics: none given")
	}
	var out []string
	for _, m := range AllMetrics {
		if seen[m] {
			out = append(out, m)
		}
	}
	return out, nil
}

// resultPercentiles is the set written to the result: the ones asked for
// and p50, p90, p95, p99 (the report label's set), sorted.
func resultPercentiles(asked []float64) []float64 {
	set := map[float64]bool{50: true, 90: true, 95: true, 99: true}
	for _, p := range asked {
		set[p] = true
	}
	out := make([]float64, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Float64s(out)
	return out
}

// maxIDPrefix is the longest RequestIDPrefix: the longest id a run sends,
// PREFIX+"warmup-"+"999999", is then the 128 characters a gateway keeps as
// a record's request_id.
const maxIDPrefix = 128 - len("warmup-999999")

// checkIDPrefix refuses a request id prefix that would make ids a gateway
// does not keep (it keeps 1 to 128 visible ASCII characters, and replaces
// any other id with one of its own): with a longer prefix every record
// had a generated id, and goodput compare --request-id-prefix found none
// of the run's requests; with a control character every request was
// refused (400).
func checkIDPrefix(p string) error {
	if len(p) > maxIDPrefix {
		return fmt.Errorf("the request id prefix has %d characters; at most %d, so that every id (prefix, warmup-, the number) is one a gateway keeps (128 characters)", len(p), maxIDPrefix)
	}
	for i := 0; i < len(p); i++ {
		if p[i] <= ' ' || p[i] > '~' {
			return fmt.Errorf("the request id prefix holds %q at byte %d: want visible ASCII characters (a gateway keeps no other id, and an HTTP header holds no control character)", p[i:i+1], i)
		}
	}
	return nil
}
