package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/goodput/goodput/compare"
)

const compareUsage = `usage: goodput compare --bench RESULT.json --real SOURCE [flags]

Puts a benchmark beside the real traffic it is meant to represent: ISL and
OSL distributions (two-sample Kolmogorov–Smirnov), arrival rate and
burstiness, concurrency, TTFT/TPOT/ITL/E2E percentiles and SLO attainment
under the same SLO, with findings in words.

--bench is a result JSON with vLLM bench serve's field names: goodput
bench's, or one saved by vllm bench serve --save-result (per-request
figures need --save-detailed). Of a goodput bench --sweep result,
--bench-run STEP picks the step to compare.

--real SOURCE is one of:
  a gateway request log file (JSON Lines)     exact, per request
  a profile file, or a gateway's URL ending in /admin/api/profile
                                              ISL/OSL histograms, no latencies
  a Prometheus base URL (http://host:9090)    the fleet's goodput_* histograms

Exit status: 0 within the tolerances, 1 when a tolerance is exceeded,
2 for a usage or input error.

Flags:
`

func cmdCompare(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, compareUsage)
		fs.PrintDefaults()
	}
	tol := compare.DefaultTolerances()
	var (
		bench    = fs.String("bench", "", "benchmark result `file` (JSON with vLLM bench serve's fields)")
		realSrc  = fs.String("real", "", "real traffic: request log or profile `file`, profile URL or Prometheus base URL")
		run      = fs.Int("bench-run", 0, "which result of a file holding several (1 = first, -1 = last; default the last); of a goodput bench --sweep result, which step (needed)")
		tenant   = fs.String("tenant", "", "only this tenant's real traffic")
		model    = fs.String("model", "", "only this model's real traffic")
		idPrefix = fs.String("request-id-prefix", "", "only the request log's records whose request_id starts with `P` (one benchmark run's requests, less its calibration and warm-up)")
		window   = fs.Duration("window", 0, "span of real traffic read from Prometheus or a live profile (profile: 5m, 1h or 24h; default a profile URL's ?window=, else 1h)")
		step     = fs.Duration("prom-step", time.Minute, "Prometheus sampling step for arrivals and concurrency (at least the scrape interval)")
		sloFlag  = fs.String("slo", "", "judge both sides against `ttft:MS,tpot:MS,e2el:MS` (default: the benchmark result's own goodput SLO, if any)")
		format   = fs.String("format", "text", "output format: text, json or html")
		out      = fs.String("out", "", "write the output to this `file` instead of standard output")
		timeout  = fs.Duration("timeout", time.Minute, "time limit for reading a URL source")
		maxKS    = fs.Float64("max-ks", tol.MaxKS, "largest ISL and OSL KS statistic (0: not checked)")
		maxRate  = fs.Float64("max-rate-ratio", tol.MaxRateRatio, "largest ratio of the arrival rates, either way (0: not checked)")
		maxBurst = fs.Float64("max-burstiness-ratio", tol.MaxBurstinessRatio, "largest ratio of the burstiness k, either way (0: not checked)")
		maxConc  = fs.Float64("max-concurrency-ratio", tol.MaxConcurrencyRatio, "largest ratio of the mean concurrency, either way (0: not checked)")
		maxAtt   = fs.Float64("max-attainment-diff", tol.MaxAttainmentDiff, "largest difference of SLO attainment, as a fraction (0: not checked)")
	)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "goodput compare: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return fail("unexpected argument %q (sources are given with --bench and --real)", fs.Arg(0))
	}
	if *bench == "" || *realSrc == "" {
		return fail("both --bench RESULT.json and --real SOURCE are needed (goodput compare -h)")
	}
	*format = strings.ToLower(*format)
	if *format != "text" && *format != "json" && *format != "html" {
		return fail("--format %q: want text, json or html", *format)
	}
	for _, f := range []struct {
		name string
		v    float64
		one  bool // a ratio: 0 or at least 1
	}{{"max-ks", *maxKS, false}, {"max-rate-ratio", *maxRate, true}, {"max-burstiness-ratio", *maxBurst, true},
		{"max-concurrency-ratio", *maxConc, true}, {"max-attainment-diff", *maxAtt, false}} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) || (f.one && f.v != 0 && f.v < 1) || (!f.one && f.v > 1) {
			if f.one {
				return fail("--%s %v: want 0 (not checked) or a ratio of at least 1", f.name, f.v)
			}
			return fail("--%s %v: want a number from 0 (not checked) to 1", f.name, f.v)
		}
	}
	tol = compare.Tolerances{MaxKS: *maxKS, MaxRateRatio: *maxRate, MaxBurstinessRatio: *maxBurst, MaxConcurrencyRatio: *maxConc, MaxAttainmentDiff: *maxAtt}
	var o compare.SLO
	if *sloFlag != "" {
		var err error
		if o, err = compare.ParseSLO(*sloFlag); err != nil {
			return fail("--slo: %v", err)
		}
	}
	windowSet := false
	fs.Visit(func(f *flag.Flag) { windowSet = windowSet || f.Name == "window" })
	if (windowSet && *window <= 0) || *step <= 0 || *timeout <= 0 {
		return fail("--window, --prom-step and --timeout must be positive")
	}
	syn, err := compare.ReadBenchFile(*bench, compare.BenchOptions{Run: *run})
	if err != nil {
		return fail("--bench %v", err)
	}
	if err := syn.OwnSLOError(); err != nil && o.IsZero() {
		return fail("--bench %s: the result's own SLO cannot be read: %v (give --slo to judge both sides with another)", *bench, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	rl, err := compare.ReadReal(ctx, *realSrc, compare.RealOptions{
		Filter: compare.Filter{Tenant: *tenant, Model: *model, RequestIDPrefix: *idPrefix}, Window: *window, Step: *step,
	})
	if err != nil {
		return fail("--real %v", err)
	}
	res := compare.Compare(syn, rl, o, tol)
	w := stdout
	var f *os.File
	if *out != "" {
		if f, err = os.Create(*out); err != nil {
			return fail("%v", err)
		}
		w = f
	}
	switch *format {
	case "json":
		err = res.WriteJSON(w)
	case "html":
		err = res.WriteHTML(w)
	default:
		err = res.WriteText(w)
	}
	if f != nil {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fail("writing the output: %v", err)
	}
	if !res.Pass {
		return 1
	}
	return 0
}
