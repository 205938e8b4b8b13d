package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goodput/goodput/bench"
	"github.com/goodput/goodput/sim"
)

const demoUsage = `usage: goodput demo [flags]

The whole picture on one machine: the batching simulator (an engine model),
the gateway in front of it with three tenants (acme: chat, interactive
class; globex: long generations, batch class, a tokens-per-minute limit;
initech: RAG, its own class, a concurrency limit), and a load per tenant
whose total rate ramps across the engine's predicted knee. It prints a live
per-tenant table (the gateway's own figures), serves the admin API and the
live page, and at the end (--duration, or Ctrl-C) prints a summary and
writes an HTML report; stopped by Ctrl-C, it exits with status 1.

Flags:
`

// demoArgs are the demo's settings.
type demoArgs struct {
	duration    time.Duration
	grace       time.Duration
	preset      string
	from, to    float64
	listen      string
	adminListen string
	reportFile  string
	seed        int64
	logLevel    string
	live        string // auto, table, lines

	// onPlan, when set (by tests), sees the plan once its keys are made.
	onPlan func(*demoPlan)
}

func parseDemoArgs(args []string, stderr io.Writer) (*demoArgs, int) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), demoUsage)
		fs.PrintDefaults()
	}
	a := &demoArgs{}
	fs.DurationVar(&a.duration, "duration", 60*time.Second, "how long the load runs")
	fs.DurationVar(&a.grace, "grace", 10*time.Second, "after --duration, how long requests still in flight may finish before they are cut")
	fs.StringVar(&a.preset, "preset", "a100-8b", "engine preset of the batching simulator: "+strings.Join(sim.PresetNames(), ", "))
	fs.Float64Var(&a.from, "load-from", 0.3, "offered load at the start, as a multiple of the engine's predicted knee")
	fs.Float64Var(&a.to, "load-to", 1.5, "offered load at the end, as a multiple of the knee")
	fs.StringVar(&a.listen, "listen", "127.0.0.1:8080", "the gateway's client address (:0: any free port)")
	fs.StringVar(&a.adminListen, "admin-listen", "127.0.0.1:9090", "the admin address: live page, /metrics, /admin/api/slo")
	fs.StringVar(&a.reportFile, "report", "goodput-demo.html", "HTML report written at the end")
	fs.Int64Var(&a.seed, "seed", 1, "seed of the workloads, the arrival times and the engine's jitter")
	fs.StringVar(&a.logLevel, "log-level", "warn", "least level of the gateway's own log on standard error: debug, info, warn or error")
	fs.StringVar(&a.live, "live", "auto", "live view: table (redrawn every second), lines (a line every 5s) or auto (table on a terminal)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, 0
		}
		return nil, 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "goodput demo: unexpected argument %q (every setting is a flag; see goodput demo -h)\n", fs.Arg(0))
		return nil, 2
	}
	if err := a.check(); err != nil {
		fmt.Fprintln(stderr, "goodput demo:", err)
		return nil, 2
	}
	return a, 0
}

// demoMaxDuration keeps the run inside the admin API's 24h window.
const demoMaxDuration = 12 * time.Hour

func (a *demoArgs) check() error {
	switch {
	case a.duration <= 0 || a.duration > demoMaxDuration:
		return fmt.Errorf("--duration %s: want more than 0 and at most %s", a.duration, demoMaxDuration)
	case a.grace < 0:
		return fmt.Errorf("--grace %s: must not be negative", a.grace)
	case !(a.from > 0) || !(a.to > 0) || a.from > 100 || a.to > 100:
		return fmt.Errorf("--load-from %g, --load-to %g: want multiples of the knee above 0 (at most 100)", a.from, a.to)
	case a.reportFile == "":
		return errors.New("--report: give a file name")
	case a.adminListen == "off":
		return errors.New("--admin-listen off: the demo reads its live table and report from the admin API")
	}
	switch a.live {
	case "auto", "table", "lines":
	default:
		return fmt.Errorf("--live %q: want auto, table or lines", a.live)
	}
	if st, err := os.Stat(filepath.Dir(a.reportFile)); err != nil || !st.IsDir() {
		return fmt.Errorf("--report %s: its folder does not exist", a.reportFile)
	}
	if _, err := sim.Preset(a.preset); err != nil {
		return fmt.Errorf("--preset: %v", err)
	}
	if _, err := parseLogLevel(a.logLevel); err != nil {
		return fmt.Errorf("--log-level: %v", err)
	}
	return nil
}

func cmdDemo(args []string, stdout, stderr io.Writer) int {
	a, code := parseDemoArgs(args, stderr)
	if a == nil {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	table := a.live == "table" || (a.live == "auto" && isTerminal(stdout))
	return runDemo(ctx, a, stdout, stderr, table)
}

// demoRun is one run of the demo: the plan, the simulator, the gateway and
// the load.
type demoRun struct {
	args    *demoArgs
	plan    *demoPlan
	stdout  io.Writer
	logger  *log.Logger
	serving serving
	results map[string]*bench.Result // per tenant, once its load ended
	start   time.Time                // of the load
	cut     bool                     // requests were still in flight --grace after --duration
	// stoppedAfter is how long the load ran when Ctrl-C stopped it (0:
	// not stopped early): the capacity curve keeps the slices it finished.
	stoppedAfter time.Duration
}

// runDemo runs the demo until its duration (then a grace for the requests
// in flight) or until ctx ends (then it cuts them at once), and returns
// the exit code.
func runDemo(ctx context.Context, a *demoArgs, stdout, stderr io.Writer, table bool) int {
	fail := func(code int, err error) int {
		fmt.Fprintln(stderr, "goodput demo:", err)
		return code
	}
	plan, err := newDemoPlan(a.preset, a.duration, a.from, a.to, a.seed)
	if err != nil {
		return fail(2, err)
	}
	logger, err := newLogger(stderr, "text", a.logLevel)
	if err != nil {
		return fail(2, err)
	}

	// The engine: the batching simulator on loopback.
	engine, err := sim.NewBatching(plan.engine)
	if err != nil {
		return fail(2, err)
	}
	defer engine.Close()
	simLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(1, fmt.Errorf("simulator: %w", err))
	}
	simSrv := sim.New(sim.Config{Scheduler: engine, Seed: a.seed})
	go func() { _ = simSrv.Serve(simLn) }()
	defer func() { _ = simSrv.Shutdown() }()
	upstream := "http://" + simLn.Addr().String()

	// The gateway: serve itself, with the demo's configuration.
	cfg, err := plan.gatewayConfig(upstream, a.listen, a.adminListen, a.logLevel)
	if err != nil {
		return fail(1, err)
	}
	if a.onPlan != nil {
		a.onPlan(plan)
	}
	gwCtx, stopGateway := context.WithCancel(context.Background())
	defer stopGateway()
	ready := make(chan serving, 1)
	gwDone := make(chan error, 1)
	go func() { gwDone <- serve(gwCtx, cfg, logger, func(s serving) { ready <- s }, nil) }()
	r := &demoRun{args: a, plan: plan, stdout: stdout, logger: logger}
	select {
	case r.serving = <-ready:
	case err := <-gwDone:
		if errors.Is(err, syscall.EADDRINUSE) {
			err = fmt.Errorf("%w (another gateway? --listen and --admin-listen 127.0.0.1:0 pick free ports)", err)
		}
		return fail(1, fmt.Errorf("the gateway did not start: %w", err))
	}
	stopped := false
	stopGW := func() error {
		if stopped {
			return nil
		}
		stopped = true
		stopGateway()
		return <-gwDone
	}
	defer func() { _ = stopGW() }()

	admin := "http://" + r.serving.Admin
	fmt.Fprintf(stdout, "goodput demo: gateway http://%s → engine %s (simulator; vLLM-style metrics at %s/metrics)\n", r.serving.Proxy, upstream, upstream)
	fmt.Fprintf(stdout, "live page: %s/   metrics: %s/metrics   admin API: %s/admin/api/slo\n", admin, admin, admin)
	for _, l := range plan.describe() {
		fmt.Fprintln(stdout, l)
	}
	fmt.Fprintf(stdout, "running for %s (Ctrl-C ends it early); report: %s\n\n", a.duration, a.reportFile)

	view := newDemoView(admin, plan, a.duration+a.grace)
	r.start = time.Now()
	interrupted := r.load(ctx, view, table)
	if interrupted {
		r.stoppedAfter = time.Since(r.start)
		view.endLoad(time.Since(view.start))
	}

	view.settle(context.Background(), 5*time.Second)
	final, err := view.snapshot(context.Background())
	if err != nil {
		return fail(1, fmt.Errorf("reading the gateway's figures: %w", err))
	}
	elapsed := time.Since(r.start)
	fmt.Fprintln(stdout)
	r.summary(stdout, final, elapsed, interrupted)
	curve, reportErr := r.writeCurve()
	if reportErr == nil {
		reportErr = r.writeReport(final, view, elapsed, interrupted, curve)
	}
	gwErr := stopGW()
	if reportErr != nil {
		return fail(1, reportErr)
	}
	if curve != "" {
		fmt.Fprintf(stdout, "%s: %s\n", curve, curveFile(a.reportFile))
	}
	fmt.Fprintf(stdout, "\nreport: %s\n", a.reportFile)
	if gwErr != nil {
		return fail(1, fmt.Errorf("gateway: %w", gwErr))
	}
	if interrupted {
		// The report is written, but of a run cut short: a script that
		// waits on the demo learns it, as from bench.
		return 1
	}
	return 0
}

// load runs every tenant's load and the live view until the load is done:
// every planned request sent and ended, or cut --grace after --duration,
// or cut at once when ctx ends. It reports whether ctx ended it.
func (r *demoRun) load(ctx context.Context, view *demoView, table bool) (interrupted bool) {
	loadCtx, cut := context.WithCancel(context.Background())
	defer cut()
	var wg sync.WaitGroup
	var mu sync.Mutex
	r.results = map[string]*bench.Result{}
	for _, t := range r.plan.tenants {
		if len(t.reqs) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := bench.Run(loadCtx, bench.Options{
				BaseURL:         "http://" + r.serving.Proxy,
				Endpoint:        bench.EndpointChat,
				Requests:        t.reqs,
				Seed:            r.args.seed,
				Arrival:         bench.Arrival{Offsets: t.offsets},
				APIKey:          bench.Secret(t.key),
				RequestIDPrefix: "demo-" + t.name + "-",
				Label:           bench.Label{Engine: "goodput-sim", Version: r.plan.preset},
				Goodput:         demoSLO(t.class), // per-request good flags, for the capacity curve
			})
			if err != nil && loadCtx.Err() == nil {
				r.logger.Printf("WARNING: goodput demo: %s's load: %v", t.name, err)
			}
			mu.Lock()
			r.results[t.name] = res
			mu.Unlock()
		}()
	}
	loadDone := make(chan struct{})
	go func() { wg.Wait(); close(loadDone) }()

	printer := newDemoPrinter(r.stdout, table, r.plan.tenants)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	end := time.NewTimer(r.args.duration + r.args.grace)
	defer end.Stop()
	for {
		select {
		case <-loadDone:
			return false
		case <-ctx.Done():
			cut()
			<-loadDone
			return true
		case <-end.C:
			r.cut = true
			cut()
			<-loadDone
			return false
		case <-tick.C:
			snap, err := view.snapshot(ctx)
			if err != nil {
				continue // the next tick tries again
			}
			printer.print(snap, time.Since(r.start))
		}
	}
}
