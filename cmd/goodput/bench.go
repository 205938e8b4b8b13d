package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goodput/goodput/bench"
	"github.com/goodput/goodput/bench/sweep"
	"github.com/goodput/goodput/bench/workload"
)

const benchUsage = `usage: goodput bench [flags]

Sends streamed requests to an OpenAI-compatible server (an engine, or a
goodput gateway in front of one; chat, completions, Responses API or
Anthropic Messages API requests) and measures them with the gateway's own
definitions (TTFT, ITL, TPOT, E2E, ISL/OSL, goodput), printing the figures
as vllm bench serve does. The flags follow vllm bench serve where the
concept exists.

Arrival: an open loop (--request-rate, --burstiness, --max-concurrency) or
a closed loop (--concurrency N clients, each sending its next request when
the previous one ended); not both.

Example, against the built-in simulator (goodput sim):
  goodput bench --base-url http://127.0.0.1:8000 --endpoint chat \
    --num-prompts 200 --request-rate 50 --goodput ttft:200 tpot:50

Flags:
`

// benchArgs are the bench command's settings, checked.
type benchArgs struct {
	opts        bench.Options
	metrics     []string
	percentiles []float64
	result      string
	shape       string
	profile     string
	dataset     string
	sweep       *sweepArgs // nil without --sweep (sweep.go)
}

func cmdBench(args []string, stdout, stderr io.Writer) int {
	a, code := loadBenchArgs(args, stderr)
	if a == nil {
		return code
	}
	if isTerminal(stderr) {
		a.opts.Progress = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Collect garbage less often while measuring (vLLM's client freezes its
	// heap for the same reason): a collection's pauses would show as
	// arrival lateness and as TTFT and ITL tails of the client's own.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	return runBench(ctx, a, stdout, stderr)
}

// loadBenchArgs parses the flags and makes the workload. A nil result comes
// with the exit code, as parseBenchArgs.
func loadBenchArgs(args []string, stderr io.Writer) (*benchArgs, int) {
	a, code := parseBenchArgs(args, stderr)
	if a == nil {
		return nil, code
	}
	w, err := workload.FromFlags(a.shape, a.profile, a.dataset, a.opts.Seed)
	if err != nil {
		return nil, benchFail(stderr, 2, "%v", err)
	}
	a.opts.Workload = w
	return a, 0
}

// runBench runs the benchmark, or the sweep, until it ends or ctx does
// (Ctrl-C), prints it and writes its files; it returns the exit status.
func runBench(ctx context.Context, a *benchArgs, stdout, stderr io.Writer) int {
	if a.sweep != nil {
		return runSweep(ctx, a, stdout, stderr)
	}
	res, err := bench.Run(ctx, a.opts)
	if res == nil {
		return benchFail(stderr, 1, "%v", err)
	}
	bench.WriteSummary(stdout, res, a.metrics, a.percentiles)
	if err != nil {
		fmt.Fprintf(stderr, "goodput bench: stopped early (%v): the figures cover the %d of %d requests sent%s\n",
			err, res.Completed+res.Failed, res.NumPrompts, stopCounts(res))
	}
	listErrors(stderr, res)
	if a.result != "" {
		if werr := res.WriteFile(a.result); werr != nil {
			return benchFail(stderr, 1, "writing the result: %v", werr)
		}
		fmt.Fprintf(stderr, "goodput bench: result written to %s\n", a.result)
	}
	if err != nil || res.Completed == 0 {
		return 1
	}
	return 0
}

// stopCounts says how a run stopped early counts its requests: those cut
// in flight are failed, those never sent are in no figure.
func stopCounts(r *bench.Result) string {
	if r.Goodput == nil {
		return ""
	}
	return fmt.Sprintf("; the %d cut in flight count as failed, the %d never sent are left out", r.Goodput.CutInFlight, r.Goodput.NotSent)
}

func benchFail(stderr io.Writer, code int, format string, a ...any) int {
	fmt.Fprintf(stderr, "goodput bench: "+format+"\n", a...)
	return code
}

// listErrors prints the first failed requests' errors, as vLLM does.
func listErrors(stderr io.Writer, r *bench.Result) {
	if r.Failed == 0 {
		return
	}
	fmt.Fprintf(stderr, "goodput bench: %d failed requests; the first errors:\n", r.Failed)
	n := 0
	for i, e := range r.Errors {
		if e == "" {
			continue
		}
		id := ""
		if r.Goodput != nil && i < len(r.Goodput.RequestIDs) {
			id = r.Goodput.RequestIDs[i] + ": "
		}
		fmt.Fprintf(stderr, "  %s%s\n", id, e)
		if n++; n == 10 {
			break
		}
	}
}

// isTerminal reports whether w is a character device (a terminal): the
// progress line is for people, not for logs or pipes.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

// headerFlag is a repeatable --header whose values are never printed (a
// header may carry a credential).
type headerFlag []bench.Header

func (h *headerFlag) String() string { return "" }
func (h *headerFlag) Set(s string) error {
	hd, err := bench.ParseHeader(s)
	if err != nil {
		return err
	}
	*h = append(*h, hd)
	return nil
}

// secretFlag holds --api-key; its value is never printed.
type secretFlag struct{ v string }

func (s *secretFlag) String() string     { return "" }
func (s *secretFlag) Set(v string) error { s.v = v; return nil }

// sloItemRE matches the values vLLM's --goodput takes after the flag
// (nargs="+"): "ttft:200 tpot:50".
var sloItemRE = regexp.MustCompile(`^(?i:ttft|tpot|e2el):`)

// spreadGoodput rewrites vLLM's "--goodput ttft:200 tpot:50" (several
// values after one flag) as one --goodput per value, which the flag package
// reads.
func spreadGoodput(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		out = append(out, a)
		if a != "--goodput" && a != "-goodput" {
			continue
		}
		if i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
		for i+1 < len(args) && sloItemRE.MatchString(args[i+1]) {
			i++
			out = append(out, "--goodput", args[i])
		}
	}
	return out
}

// parseBenchArgs parses and checks the flags. A nil result comes with the
// exit code: 0 after -h, 2 for a usage error (said on stderr).
func parseBenchArgs(args []string, stderr io.Writer) (*benchArgs, int) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), benchUsage)
		fs.PrintDefaults()
	}
	baseURL := fs.String("base-url", "http://127.0.0.1:8000", "server base URL, without /v1 (an engine, or a goodput gateway)")
	endpoint := fs.String("endpoint", bench.EndpointCompletions, "API endpoint: /v1/completions, /v1/chat/completions, /v1/responses (OpenAI's Responses API) or /v1/messages (Anthropic's Messages API); also: completions, chat, responses, messages")
	model := fs.String("model", "", "model name (default: the first model the server's /v1/models lists)")
	numPrompts := fs.Int("num-prompts", 1000, "number of measured requests")
	rateS := fs.String("request-rate", "", "open loop: requests per second; inf sends every request at once (default: a --profile's own rate, else inf)")
	burstiness := fs.Float64("burstiness", 1, "open loop: gamma shape of the gaps between sends (1: Poisson; below 1 burstier, above 1 more regular)")
	maxConc := fs.Int("max-concurrency", 0, "open loop: most requests in flight; a request waits for a free slot, which shifts its start (0: no limit)")
	conc := fs.Int("concurrency", 0, "closed loop with N clients, each sending its next request when its previous one ended (excludes --request-rate)")
	seed := fs.Int64("seed", 0, "seed of the workload and the arrival times")
	var slo multiFlag
	fs.Var(&slo, "goodput", "SLO bounds in ms as vLLM: ttft:MS tpot:MS e2el:MS; a request is good when every bound holds (inclusive)")
	pMetrics := fs.String("percentile-metrics", strings.Join(bench.DefaultPercentileMetrics, ","), "metrics whose percentiles are printed: ttft, tpot, itl, e2el, client_queue_time, e2el_including_client_queue (the last two with --max-concurrency)")
	mPercentiles := fs.String("metric-percentiles", "99", "percentiles printed, comma-separated (e.g. 50,90,99)")
	result := fs.String("result", "", "write the result to this JSON file (vLLM's result format, plus goodput_bench)")
	warmup := fs.Int("warmup", 0, "warm-up requests sent first and reported apart (never in the figures)")
	fs.IntVar(warmup, "num-warmups", 0, "same as --warmup (vLLM's name)")
	var headers headerFlag
	fs.Var(&headers, "header", "extra request header KEY:VALUE (or KEY=VALUE); repeatable")
	var apiKey secretFlag
	fs.Var(&apiKey, "api-key", "sent as Authorization: Bearer KEY (default: $OPENAI_API_KEY); never printed")
	labelS := fs.String("label", "", "report label: engine=vllm,version=0.11,precision=fp16,gpus=1,tp=1 (missing fields print unknown)")
	shape := fs.String("shape", "", "workload preset: chat, rag, longgen or mixed (default chat)")
	profile := fs.String("profile", "", "workload profile exported by a gateway: a file or an http(s) URL")
	dataset := fs.String("dataset", "", "JSONL file of prompts")
	timeout := fs.Duration("timeout", 10*time.Minute, "time limit of one request")
	idPrefix := fs.String("request-id-prefix", "", "X-Request-Id prefix (default bench-<8 hex digits>-)")
	sweepF := addSweepFlags(fs)
	noCal := fs.Bool("no-calibrate", false, "do not fit the synthetic prompts to the server's token counts first (3 requests of max_tokens 1)")
	if err := fs.Parse(spreadGoodput(args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, 0
		}
		return nil, 2
	}
	if fs.NArg() > 0 {
		return nil, benchFail(stderr, 2, "unexpected argument %q (every setting is a flag; see goodput bench -h)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	a := &benchArgs{result: *result, shape: *shape, profile: *profile, dataset: *dataset}
	fail := func(format string, v ...any) (*benchArgs, int) { return nil, benchFail(stderr, 2, format, v...) }
	o := &a.opts
	o.BaseURL, o.Model, o.Seed, o.Warmup, o.Timeout = *baseURL, *model, *seed, *warmup, *timeout
	o.NumPrompts, o.Headers, o.RequestIDPrefix, o.NoCalibrate = *numPrompts, headers, *idPrefix, *noCal
	var err error
	if o.Endpoint, err = bench.NormalizeEndpoint(*endpoint); err != nil {
		return fail("--endpoint: %v", err)
	}
	if *numPrompts < 1 || *numPrompts > bench.MaxRequests {
		return fail("--num-prompts must be from 1 to %d, got %d", bench.MaxRequests, *numPrompts)
	}
	if *warmup < 0 || *warmup > bench.MaxRequests {
		return fail("--warmup must be from 0 to %d, got %d", bench.MaxRequests, *warmup)
	}
	if *timeout <= 0 {
		return fail("--timeout must be positive, got %s", *timeout)
	}
	rate := math.Inf(1) // used only when set
	if set["request-rate"] {
		if rate, err = parseRate(*rateS); err != nil {
			return fail("--request-rate: %v", err)
		}
	}
	if !(*burstiness > 0) || math.IsInf(*burstiness, 0) {
		return fail("--burstiness must be a positive number, got %v", *burstiness)
	}
	if *maxConc < 0 || (set["max-concurrency"] && *maxConc == 0) {
		return fail("--max-concurrency must be at least 1, got %d", *maxConc)
	}
	if *conc < 0 || (set["concurrency"] && *conc == 0) {
		return fail("--concurrency must be at least 1, got %d", *conc)
	}
	if *conc > 0 {
		for _, f := range []string{"request-rate", "burstiness", "max-concurrency"} {
			if set[f] {
				return fail("--concurrency (closed loop) excludes --%s (open loop)", f)
			}
		}
		o.Arrival = bench.Arrival{Concurrency: *conc}
	} else {
		o.Arrival = bench.Arrival{Burstiness: *burstiness, MaxConcurrency: *maxConc}
		if set["request-rate"] {
			o.Arrival.Rate = rate
		}
	}
	if o.Goodput, err = bench.ParseSLO(slo); err != nil {
		return fail("--goodput: %v", err)
	}
	if a.metrics, err = bench.ParsePercentileMetrics(*pMetrics); err != nil {
		return fail("--percentile-metrics: %v", err)
	}
	if a.percentiles, err = bench.ParsePercentiles(*mPercentiles); err != nil {
		return fail("--metric-percentiles: %v", err)
	}
	o.Percentiles = a.percentiles
	if o.Label, err = bench.ParseLabel(*labelS); err != nil {
		return fail("--label: %v", err)
	}
	if apiKey.v != "" {
		o.APIKey = bench.Secret(apiKey.v)
	} else if k := os.Getenv("OPENAI_API_KEY"); k != "" {
		o.APIKey = bench.Secret(k)
	}
	if err := bench.CheckBaseURL(o.BaseURL); err != nil {
		return fail("--base-url: %v", err)
	}
	if a.sweep, err = sweepF.check(set); err != nil {
		return fail("%v", err)
	}
	var swept sweep.Kind
	if a.sweep != nil {
		swept = a.sweep.ladder.Kind
	}
	for _, m := range a.metrics {
		// Asked for and never printed (a probe): these exist only for an
		// open loop's client-side queue, which a sweep may set per step.
		switch {
		case (m == bench.MetricClientQueue || m == bench.MetricE2ELQueue) && *maxConc == 0 && swept != sweep.MaxConcurrency:
			return fail("--percentile-metrics %s: needs --max-concurrency (the wait for a slot it measures)", m)
		case m == bench.MetricE2ELQueue && math.IsInf(rate, 1) && swept != sweep.RequestRate &&
			(set["request-rate"] || *profile == ""): // a profile brings its rate
			return fail("--percentile-metrics %s: needs a finite --request-rate", m)
		}
	}
	// No file the run writes is one it reads or another it writes: the
	// sweep's page overwrote its result (--report x.html --result x.html,
	// or --result x.html alone), a result its dataset (a new user's probe).
	files := []struct{ flag, path string }{{"--dataset", a.dataset}, {"--result", a.result}}
	if a.sweep != nil {
		files = append(files, struct{ flag, path string }{"--report", a.sweep.reportPath(a.result)})
	}
	for i, x := range files {
		for _, y := range files[i+1:] {
			if x.path != "" && samePath(x.path, y.path) {
				return fail("%s and %s are the same file (%s): one would overwrite the other", x.flag, y.flag, x.path)
			}
		}
	}
	return a, 0
}

// samePath reports whether a and b name the same file: the same path once
// made absolute, or (both existing) the same file by another name.
func samePath(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	aa, err1 := filepath.Abs(a)
	ab, err2 := filepath.Abs(b)
	if err1 == nil && err2 == nil && aa == ab {
		return true
	}
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

// parseRate reads --request-rate: a number from bench.MinRate to
// bench.MaxRate, or inf.
func parseRate(s string) (float64, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	if s == "inf" || s == "+inf" || s == "infinity" {
		return math.Inf(1), nil
	}
	r, err := strconv.ParseFloat(s, 64)
	if err != nil || !(r >= bench.MinRate) || !(r <= bench.MaxRate) {
		return 0, fmt.Errorf("%q: want a number of requests per second from %g (one in about 12 days) to %g, or inf (every request at once)", s, bench.MinRate, bench.MaxRate)
	}
	return r, nil
}
