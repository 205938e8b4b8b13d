package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goodput/goodput/dashboards/web"
	"github.com/goodput/goodput/export"
	"github.com/goodput/goodput/export/otlp"
	"github.com/goodput/goodput/identity"
	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/config"
	"github.com/goodput/goodput/internal/keyshape"
	"github.com/goodput/goodput/proxy"
	"github.com/goodput/goodput/ratelimit"
	"github.com/goodput/goodput/sim"
	"github.com/goodput/goodput/slo"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel"
)

// serveFlags are the command-line settings of `serve`; each, when given,
// overrides the configuration file.
type serveFlags struct {
	config      string
	upstream    string
	listen      string
	adminListen string
	requestLog  string
	logFormat   string
	logLevel    string
	tenantHdr   string
	maxBody     int
	connect     cfgtypes.Duration
	firstByte   cfgtypes.Duration
	firstToken  cfgtypes.Duration
	idle        cfgtypes.Duration
	total       cfgtypes.Duration
	keepalive   cfgtypes.Duration
}

// loadServeConfig reads --config (if any) and lays the flags that were set
// over it.
func loadServeConfig(args []string, stderr io.Writer) (*config.Config, error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = serveUsage(fs, stderr)
	var f serveFlags
	fs.StringVar(&f.config, "config", "", "YAML configuration file (flags override it)")
	fs.StringVar(&f.upstream, "upstream", "", "engine base URL, e.g. http://127.0.0.1:8000 (not given: built-in simulator)")
	fs.StringVar(&f.listen, "listen", "", "proxy listen address (default :8080)")
	fs.StringVar(&f.adminListen, "admin-listen", "", "admin listen address for /metrics, /healthz, /readyz (default 127.0.0.1:9090; \"off\" disables)")
	fs.StringVar(&f.requestLog, "request-log", "", "JSON Lines request log file (\"-\" for stdout)")
	fs.StringVar(&f.logFormat, "log-format", "", "format of the gateway's own log on standard error: text or json (default text)")
	fs.StringVar(&f.logLevel, "log-level", "", "least level of the gateway's own log: debug, info, warn or error (default info)")
	fs.StringVar(&f.tenantHdr, "tenant-header", "", "request header naming the tenant (default X-Tenant)")
	fs.IntVar(&f.maxBody, "max-body-bytes", 0, "request body limit in bytes (default 16 MiB)")
	fs.Var(&f.connect, "connect-timeout", "upstream connect timeout (default 5s)")
	fs.Var(&f.firstByte, "first-byte-timeout", "wait for the upstream's response headers (default 60s)")
	fs.Var(&f.firstToken, "first-token-timeout", "wait for a stream's first token, headers or not (default 300s)")
	fs.Var(&f.idle, "idle-timeout", "longest gap between upstream reads once tokens flow (default 30s)")
	fs.Var(&f.total, "total-timeout", "longest whole exchange (default 30m)")
	fs.Var(&f.keepalive, "upstream-keepalive", "how long an idle upstream connection is kept for reuse (default 90s)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (every setting is a flag or in the --config file; see goodput serve -h)", fs.Arg(0))
	}
	cfg := &config.Config{}
	if f.config != "" {
		var err error
		if cfg, err = config.Load(f.config); err != nil {
			return nil, err
		}
	}
	var emptyUpstream bool
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "upstream":
			cfg.Upstream = f.upstream
			emptyUpstream = strings.TrimSpace(f.upstream) == "" // --upstream "$UNSET"
		case "listen":
			cfg.Listen = f.listen
		case "admin-listen":
			cfg.AdminListen = f.adminListen
		case "request-log":
			cfg.RequestLog = f.requestLog
		case "log-format":
			cfg.LogFormat = f.logFormat
		case "log-level":
			cfg.LogLevel = f.logLevel
		case "tenant-header":
			cfg.TenantHeader = f.tenantHdr
		case "max-body-bytes":
			cfg.MaxBodyBytes = f.maxBody
		case "connect-timeout":
			cfg.Timeouts.Connect = f.connect
		case "first-byte-timeout":
			cfg.Timeouts.FirstByte = f.firstByte
		case "first-token-timeout":
			cfg.Timeouts.FirstToken = f.firstToken
		case "idle-timeout":
			cfg.Timeouts.Idle = f.idle
		case "total-timeout":
			cfg.Timeouts.Total = f.total
		case "upstream-keepalive":
			cfg.Timeouts.UpstreamKeepalive = f.keepalive
		}
	})
	if emptyUpstream {
		return nil, config.ErrEmptyUpstream
	}
	if err := cfg.Validate(); err != nil {
		return nil, cfg.RedactErr(err)
	}
	if cfg.Listen == "" {
		cfg.Listen = ":8080"
	}
	if cfg.AdminListen == "" {
		cfg.AdminListen = "127.0.0.1:9090"
	}
	return cfg, nil
}

func cmdServe(args []string, stdout, stderr io.Writer) int {
	cfg, err := loadServeConfig(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "goodput serve:", keyshape.RedactWhole(err.Error())) // as config check's
		return 2
	}
	logOut := newLogWriter(stderr, cfg.LogFormat, logWriterMax)
	defer logOut.Close(2 * time.Second)
	logger, err := newLogger(logOut, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		fmt.Fprintln(stderr, "goodput serve:", err)
		return 2
	}
	// A reader of stdout or stderr that goes away (a log shipper that
	// restarts, `| head`) must not end the gateway: Go's runtime kills a
	// process whose write to a broken pipe on descriptor 1 or 2 fails with
	// EPIPE, unless SIGPIPE is ignored. The write then fails like any
	// other, which the request log counts and the logger drops.
	signal.Ignore(syscall.SIGPIPE)
	note := embeddedDefaults(cfg)
	// Set here, not in serve, which tests run in their own process.
	gcNote := setGCPercent(cfg.GCPercent, os.Getenv("GOGC"))
	// The first SIGTERM or SIGINT drains; a second one cuts what is still
	// in flight at once (each request still gets its record).
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	cutNow, returned := make(chan struct{}), make(chan struct{})
	defer close(returned)
	go func() {
		select {
		case <-sigs:
		case <-returned:
			return
		}
		stop()
		select {
		case <-sigs:
			close(cutNow)
		case <-returned:
		}
	}()
	// The first log line says the simulator is the upstream; the demo
	// settings follow once the gateway is up.
	ready := func(serving) {
		if note != "" {
			logger.Print(note)
		}
		logger.Printf("collector target: %s", gcNote)
	}
	if err := serve(ctx, cfg, logger, ready, cutNow); err != nil {
		logger.Printf("ERROR: goodput serve: %s", cfg.RedactKeys(err.Error())) // it may quote the configuration
		return 1
	}
	return 0
}

// Demo settings of the embedded default (no upstream configured): an
// engine that takes a while to answer and streams at a human pace, and one
// SLO class, so that a first run shows every number the gateway measures.
const (
	demoTTFT  = 100 * time.Millisecond
	demoITL   = 20 * time.Millisecond
	demoClass = "interactive"
)

// embeddedDefaults fills in the demo settings when no upstream is
// configured and the configuration leaves them unset; it returns a line
// saying what it chose, or "".
func embeddedDefaults(cfg *config.Config) string {
	if cfg.Upstream != "" {
		return ""
	}
	var chose []string
	if cfg.Sim.TTFT == 0 && cfg.Sim.ITL == 0 {
		cfg.Sim.TTFT, cfg.Sim.ITL = cfgtypes.Duration(demoTTFT), cfgtypes.Duration(demoITL)
		chose = append(chose, fmt.Sprintf("simulator TTFT %s, ITL %s", demoTTFT, demoITL))
	}
	if len(cfg.SLO.SLOs) == 0 && cfg.DefaultSLO == "" {
		cfg.SLO.SLOs = map[string]*slo.Class{demoClass: {TTFT: cfgtypes.Duration(500 * time.Millisecond), TPOT: cfgtypes.Duration(50 * time.Millisecond), Objective: 0.99}}
		cfg.DefaultSLO = demoClass
		chose = append(chose, "SLO class interactive {ttft: 500ms, tpot: 50ms, objective: 0.99} for every tenant")
	}
	if len(chose) == 0 {
		return ""
	}
	return "embedded default (demo): " + strings.Join(chose, "; ")
}

// serving reports the addresses a running gateway listens on (for tests).
type serving struct {
	Proxy, Admin, Upstream string
}

// serve runs the gateway until ctx ends. ready, if not nil, receives the
// bound addresses once the gateway accepts requests. Its steps: the
// upstream (or the built-in simulator), the gateway (labels, tenants and
// limits, the judge, the sinks, OpenTelemetry, the proxy), the upstream
// check and the reloader, the listeners, then the wait and the drain.
func serve(ctx context.Context, cfg *config.Config, logger *log.Logger, ready func(serving), cutNow <-chan struct{}) error {
	// SIGHUP never ends the gateway (its default action is to exit): it is
	// caught from the start to the end, and acted on once serving.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	fileLimit, fileLimitNote := openFilesLimit()
	upstream, stopSim, err := upstreamOrSim(cfg, logger)
	if err != nil {
		return err
	}
	defer stopSim()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	maxConns := maxConnections(cfg, fileLimit)
	if w := maxConnectionsWarning(cfg, fileLimit); w != "" {
		logger.Print(w)
	}
	memLimit, memWhat := systemMemoryLimit()
	bodyMem, bodyMemNote := maxBodyMemory(cfg, memLimit, memWhat)
	lagMem, lagMemNote := maxLagMemory(cfg, memLimit, memWhat)
	gw, err := newGateway(ctx, cfg, logger, reg, upstream, maxConns, memBounds{bodyMem, lagMem})
	if err != nil {
		return err
	}
	defer gw.close(logger)
	logger.Printf("max_body_memory %d bytes (%s): request bodies held in memory at once; past it, requests are refused (503) before their bodies are read", bodyMem, bodyMemNote)
	logger.Printf("max_lag_memory %d bytes (%s): held in all for clients that read more slowly than their streams come; past it, each is held to 16 KiB", lagMem, lagMemNote)
	registerMemoryMetrics(reg, gw.p)

	check, err := newUpstreamCheck(upstream, cfg.Timeouts.Connect.D(), logger)
	if err != nil {
		return err
	}
	// As a request connects: one address of several that does not answer
	// is not the upstream down.
	check.dial = gw.p.CheckUpstream
	reg.MustRegister(check.collector())
	checkCtx, stopCheck := context.WithCancel(ctx)
	checkDone := make(chan struct{})
	go func() { defer close(checkDone); check.run(checkCtx, upstreamCheckEvery) }()
	defer func() { stopCheck(); <-checkDone }()

	r := &reloader{cfg: cfg, store: gw.store, judger: gw.judger, labels: gw.tenantLabels, reqLog: gw.reqLog, logger: logger}
	rctx, cancelReload := context.WithCancel(ctx)
	r.start(rctx, hup)
	stopReload := func() { // before the request log closes
		cancelReload()
		stopped := make(chan struct{})
		go func() { r.wait(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			// A reload stuck in a read that does not return (a tenants
			// file on a hung network mount) must not keep the process.
			logger.Printf("WARNING: shutdown: the reload of the tenants file did not stop within 5s (a read that does not return?); going on without it")
		}
	}
	var stopOnce sync.Once
	defer stopOnce.Do(stopReload)

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	pl := clientListener(ln, maxConns, fileLimitNote, reg, logger)
	logTimeouts(gw.p.Settings(), logger)
	srv := gw.p.Server()
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Serve(pl) }()

	admin, adminAddr, scrapes, err := startAdmin(ctx, cfg, reg, gw.judger, check, gw.p.Emitted, logger)
	if err != nil {
		_ = srv.Shutdown()
		_ = pl.Close() // a Serve that has not taken it yet would serve on (fasthttp closes only those it has)
		return err
	}
	logger.Printf("goodput gateway listening on %s, upstream %s, admin %s", ln.Addr(), upstream, orOff(adminAddr))
	if len(cfg.SLO.SLOs) == 0 {
		// Not an error (metering alone is a use), but the admin API and
		// the live page then stay empty, which looked broken (a new
		// user's probe).
		logger.Printf("no SLO classes (slos: in the configuration): requests are metered, logged and counted, but none is judged, so /admin/api/slo, the live page's table and the goodput_slo_* metrics stay empty")
	}
	if config.AdminExposed(cfg.AdminListen) {
		logger.Print(config.AdminExposedWarning(adminAddr))
	}
	if ready != nil {
		ready(serving{Proxy: ln.Addr().String(), Admin: adminAddr, Upstream: upstream})
	}

	var srvErr error
	select {
	case <-ctx.Done():
	case srvErr = <-srvDone:
		// Accept errors that pass are waited out (proxy.Listener): this
		// one does not. Drain and close the log all the same.
		if srvErr != nil {
			srvErr = fmt.Errorf("proxy server: %w", srvErr)
			logger.Printf("ERROR: %v; shutting down", srvErr)
		}
	}
	stopAt := scrapeClock()
	if err := drain(cfg, srv, gw.p, pl, logger, cutNow); err != nil && srvErr == nil {
		srvErr = err // the exit status is 1, once the log is closed
	}
	gw.p.CloseIdle()
	stopOnce.Do(stopReload)
	// Every record is written: the log is closed before the wait for the
	// last scrape, which a pod's grace period may cut short.
	if gw.reqLog != nil {
		if err := gw.reqLog.Close(); err != nil && srvErr == nil {
			srvErr = err
		}
	}
	if admin != nil {
		var logLost int64
		if gw.reqLog != nil {
			logLost = gw.reqLog.Dropped()
		}
		lastScrape(cfg, scrapes, stopAt, cutNow, logLost, logger)
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = admin.Shutdown(sctx)
		cancel()
	}
	return srvErr
}

// lastScrape waits, at shutdown, for a scrape of /metrics that has the
// counts of every request's record (finalscrape.go), when something
// scrapes the gateway: up to one and a half of the longest interval
// between its last scrapes (scrapeGaps), and never past shutdown_grace plus finalScrapeSlack
// after stopAt (the signal), nor past a second signal. logLost is how many
// records the request log could not write (its Dropped): when the scrape
// does not come, the log line that says where the counts since the last
// one are (unscraped) does not send the reader to the request log for
// those, nor to a request log when there is none.
func lastScrape(cfg *config.Config, w *scrapeWatch, stopAt time.Time, cutNow <-chan struct{}, logLost int64, logger *log.Logger) {
	if w.counts != nil && w.counts.current() {
		logger.Printf("shutdown: no request was counted since /metrics was last answered: no last scrape to wait for")
		return
	}
	now := scrapeClock()
	every, ok := w.arm(now)
	if !ok {
		return
	}
	grace := cfg.ShutdownGrace.D()
	if grace <= 0 {
		grace = 25 * time.Second
	}
	deadline := now.Add(every + every/2)
	if latest := stopAt.Add(grace + finalScrapeSlack); deadline.After(latest) {
		deadline = latest
	}
	if !deadline.After(now) {
		logger.Printf("shutdown: no time left to wait for the last scrape of /metrics (scraped every %v): %s", every.Round(time.Millisecond), unscraped(cfg.RequestLog != "", logLost))
		return
	}
	logger.Printf("shutdown: waiting up to %v for the last scrape of /metrics (scraped every %v), for the counts of every request", deadline.Sub(now).Round(time.Millisecond), every.Round(time.Millisecond))
	if w.wait(deadline.Sub(now), cutNow) {
		logger.Printf("shutdown: /metrics scraped with every request counted")
		return
	}
	logger.Printf("shutdown: no scrape of /metrics in time: %s", unscraped(cfg.RequestLog != "", logLost))
}

// unscraped says where what was counted since the last scrape is, when no
// scrape comes at shutdown: in the request log only, when there is one
// (but for the records it could not write: a full disk at shutdown, those
// are neither there nor scraped); without one (request_log is not set, the
// default) the log does not send the reader to a request log that does not
// exist.
func unscraped(requestLog bool, lost int64) string {
	if !requestLog {
		return "what was counted since the last one was not scraped, and there is no request log to find it in (request_log is not set)"
	}
	const inLog = "what was counted since the last one is in the request log only"
	if lost == 0 {
		return inLog
	}
	return fmt.Sprintf("%s, but for the records the request log could not write (%d in all, goodput_request_log_errors_total): those of them counted since the last scrape are in neither", inLog, lost)
}

// getOnly answers 405 to a method other than GET and HEAD, as the other
// admin endpoints do (answerCache): a probe's POST or DELETE was answered
// "ok", as if the gateway had acted on it.
func getOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h(w, r)
	}
}

// defaultGCPercent is gc_percent's default (config.Config.GCPercent).
const defaultGCPercent = 10

// setGCPercent sets the collector's target to gc_percent (0: the
// default), unless GOGC is set in the environment (env, its value); it
// returns what is in force, for the log.
func setGCPercent(percent int, env string) string {
	if env != "" {
		return "GOGC=" + env + " from the environment (gc_percent not applied)"
	}
	if percent == 0 {
		percent = defaultGCPercent
	}
	debug.SetGCPercent(percent)
	return "gc_percent " + strconv.Itoa(percent)
}

// openFilesLimit raises the soft open-files limit to the hard one and
// returns the limit with a note on what happened, for the start-up log.
func openFilesLimit() (uint64, string) {
	fileLimit, raised, err := raiseFileLimit()
	note := fmt.Sprint(fileLimit)
	switch {
	case err != nil:
		note += fmt.Sprintf(" (could not raise it to the hard limit: %v)", err)
	case raised:
		note += " (soft limit raised to the hard limit)"
	case fileLimit == 0:
		note = "unknown"
	}
	return fileLimit, note
}

// upstreamOrSim returns the configured upstream, or starts the built-in
// simulator on loopback when none is configured; stop ends the simulator.
func upstreamOrSim(cfg *config.Config, logger *log.Logger) (upstream string, stop func(), err error) {
	if cfg.Upstream != "" {
		return cfg.Upstream, func() {}, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("built-in simulator: %w", err)
	}
	simSrv := sim.New(sim.Config{Model: cfg.Sim.Model, TTFT: cfg.Sim.TTFT.D(), ITL: cfg.Sim.ITL.D()})
	go func() { _ = simSrv.Serve(ln) }()
	upstream = "http://" + ln.Addr().String()
	logger.Printf("no upstream configured: serving the built-in simulator at %s as the upstream (set --upstream to meter a real engine)", upstream)
	return upstream, func() { simSrv.Shutdown() }, nil
}

// gateway is what serve builds around the proxy: the parts the reloader,
// the admin listener and the shutdown need.
type gateway struct {
	p            *proxy.Proxy
	judger       *slo.Judger
	store        *identity.Store
	gate         *ratelimit.Gate
	tenantLabels *export.LabelSet
	reqLog       *export.RequestLog
	tel          *otlp.Telemetry
}

// testIOLoop, set by the tests' TestMain (GOODPUT_TEST_IO_LOOP=1), turns
// the proxy's I/O loops on in every gateway they serve, as if each
// configuration said io_loop: true.
var testIOLoop bool

// newGateway builds the label sets, tenants and limits, the judge, the
// sinks and the proxy.
//
// maxConns is the cap on client connections; the upstream idle pool keeps
// as many (each stream holds one upstream connection, so at steady load
// every one that comes back is reused and none is dialled again).
func newGateway(ctx context.Context, cfg *config.Config, logger *log.Logger, reg *prometheus.Registry, upstream string, maxConns int, mem memBounds) (*gateway, error) {
	gw := &gateway{}
	gw.tenantLabels = export.NewLabelSet(cfg.Labels.Tenants, cfg.Labels.MaxValues)
	modelLabels := export.NewLabelSet(cfg.Labels.Models, cfg.Labels.MaxValues)
	// The gateway's own name for requests without a tenant is a label value
	// from the start (others take a slot with a request the engine accepts).
	gw.tenantLabels.Admit(proxy.DefaultTenant)
	// Every metric of a request uses the same label values, chosen once.
	labeler := export.NewLabeler(gw.tenantLabels, modelLabels)
	labeler.LimitPairs(cfg.Labels.MaxPairs)

	// With tenants configured every request needs a gateway key, and the
	// tenant label values are the tenants, unless labels: tenants lists
	// the ones to keep (a platform with thousands of tenants: each has
	// its own series otherwise).
	tenants, err := cfg.LoadTenants()
	if err != nil {
		return nil, err
	}
	if cfg.KeysEnabled() {
		if len(cfg.Labels.Tenants) == 0 {
			gw.tenantLabels.SetConfigured(tenantNames(tenants))
		}
		if gw.gate, err = ratelimit.New(cfg.RateLimit, tenants, reg, ratelimit.WithLogf(logger.Printf), ratelimit.WithTenantLabel(gw.tenantLabels.Value)); err != nil {
			return nil, err
		}
		if gw.store, err = identity.NewStore(tenants, gw.gate); err != nil {
			gw.close(logger)
			return nil, err
		}
		logger.Printf("gateway keys required: %d tenants, %s limits", len(tenants), orDefault(cfg.RateLimit.Backend, ratelimit.BackendLocal))
		// A Redis out of reach is said now, as an engine is (its error is
		// logged by the backend, with what on_backend_error does).
		_ = gw.gate.CheckBackend(context.Background())
		for _, w := range append(labelsNote(cfg.Labels.Tenants, tenants), cfg.KeysFileWarnings()...) {
			logger.Print(cfg.RedactKeys(w)) // labels: tenants may quote a key pasted there
		}
	}
	if gw.judger, err = slo.NewJudger(slo.JudgerOptions{
		Config: cfg.SLO, DefaultClass: cfg.DefaultSLO, Tenants: config.TenantClasses(tenants),
		Labels: labeler, Registry: reg,
	}); err != nil {
		gw.close(logger)
		return nil, err
	}
	sinks, tracer, err := gw.sinks(ctx, cfg, logger, reg, labeler)
	if err != nil {
		gw.close(logger)
		return nil, err
	}
	if gw.p, err = proxy.New(proxy.Config{
		Upstream:          upstream,
		TenantHeader:      cfg.TenantHeader,
		MaxBodyBytes:      cfg.MaxBodyBytes,
		MaxBodyMemory:     mem.body,
		MaxLagMemory:      mem.lag,
		MaxEventBytes:     cfg.MaxEventBytes,
		IOLoop:            cfg.IOLoop || testIOLoop,
		ConnectTimeout:    cfg.Timeouts.Connect.D(),
		FirstByteTimeout:  cfg.Timeouts.FirstByte.D(),
		FirstTokenTimeout: cfg.Timeouts.FirstToken.D(),
		IdleTimeout:       cfg.Timeouts.Idle.D(),
		TotalTimeout:      cfg.Timeouts.Total.D(),
		ReadHeaderTimeout: cfg.Timeouts.ReadHeader.D(),
		ReadBodyTimeout:   cfg.Timeouts.ReadBody.D(),
		IdleConnTTL:       cfg.Timeouts.UpstreamKeepalive.D(),
		MaxIdleConns:      maxConns,
		Keys:              gw.store,
		Limits:            gw.gate,
		DefaultMaxTokens:  cfg.RateLimit.DefaultMaxTokens,
		Judge:             gw.judger, // writes the verdict before the sinks export it
		Sink:              sinks,
		Trace:             tracer,
		Logf:              logger.Printf,
	}); err != nil {
		gw.close(logger)
		return nil, err
	}
	return gw, nil
}

// sinks opens what exports each record: the Prometheus metrics, the
// request log, and OpenTelemetry when it is on (its tracer too).
func (gw *gateway) sinks(ctx context.Context, cfg *config.Config, logger *log.Logger, reg *prometheus.Registry, labeler *export.Labeler) (proxy.Sinks, proxy.Tracer, error) {
	sinks := proxy.Sinks{export.NewMetrics(reg, labeler)}
	if cfg.RequestLog != "" {
		reqLog, err := export.OpenRequestLog(cfg.RequestLog, 0, logger.Printf)
		if err != nil {
			return nil, nil, err
		}
		gw.reqLog = reqLog
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "goodput_request_log_errors_total",
			Help: "Records the request log lost because it could not be written (beyond what it keeps in memory while it retries).",
		}, func() float64 { return float64(reqLog.Dropped()) }))
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "goodput_request_log_write_wait_seconds",
			Help: "How long the request log has been trying to write the records it holds: 0 while writes succeed; it grows while they fail (a full disk) or one does not return, records kept in memory meanwhile up to 64 MiB, then dropped.",
		}, func() float64 { return reqLog.WriteWait(time.Now()).Seconds() }))
		sinks = append(sinks, reqLog)
	}
	tel, err := otlp.New(ctx, cfg.OTel, os.Getenv)
	if err != nil || tel == nil {
		return sinks, nil, err
	}
	gw.tel = tel
	// The SDK's own errors (a collector that cannot be reached) go to the
	// gateway's log, at most one a minute.
	otel.SetErrorHandler(otlp.ErrorLog(logger.Printf, time.Minute, time.Now))
	// Its own warnings too, and the spans it drops (a full queue), which
	// it says only in debug messages.
	otel.SetLogger(otlp.SDKLog(logger.Printf, time.Minute, time.Now))
	var tracer proxy.Tracer
	if tel.Tracer != nil {
		tracer = tel.Tracer
	}
	if tel.Metrics != nil {
		sinks = append(sinks, tel.Metrics)
	}
	logger.Printf("OpenTelemetry over OTLP/HTTP: traces %s, metrics %s", onOff(tel.Tracer != nil), onOff(tel.Metrics != nil))
	return sinks, tracer, nil
}

// close flushes OpenTelemetry (after the last record: the last spans and
// metrics go out) and closes the limits backend. The request log is closed
// by serve, after the drain.
func (gw *gateway) close(logger *log.Logger) {
	if gw.tel != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := gw.tel.Shutdown(sctx); err != nil {
			logger.Printf("WARNING: opentelemetry: flushing at shutdown: %v", err)
		}
	}
	if gw.gate != nil {
		gw.gate.Close()
	}
}

// clientListener wraps the client listener: accept errors waited out, and
// at most max_connections open (a default from the open-files limit).
func clientListener(ln net.Listener, maxConns int, fileLimitNote string, reg *prometheus.Registry, logger *log.Logger) *proxy.Listener {
	pl := proxy.NewListener(ln, maxConns, logger.Printf)
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "goodput_client_connections", Help: "Open client connections."},
			func() float64 { return float64(pl.Open()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "goodput_accept_errors_total", Help: "Accept errors waited out (out of file descriptors, mostly); connections wait in the backlog meanwhile."},
			func() float64 { return float64(pl.AcceptRetries()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "goodput_client_connections_reclaimed_total", Help: "Idle client connections closed at max_connections to make room for a new one."},
			func() float64 { return float64(pl.Reclaimed()) }))
	logger.Printf("open files limit %s; max_connections %d (and as many idle upstream connections kept)", fileLimitNote, maxConns)
	return pl
}

// memBounds are max_body_memory and max_lag_memory, defaults filled in.
type memBounds struct{ body, lag int64 }

// registerMemoryMetrics exports what max_body_memory and max_lag_memory
// count: the request bodies held, the requests refused for want of room,
// and what clients that lag are held.
func registerMemoryMetrics(reg *prometheus.Registry, p *proxy.Proxy) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "goodput_client_lag_bytes", Help: "Bytes of responses queued for clients that read more slowly than their streams come, as max_lag_memory counts them."},
			func() float64 { return float64(p.LagMemory()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "goodput_request_body_bytes", Help: "Bytes of request bodies held in memory, as max_body_memory counts them."},
			func() float64 { return float64(p.BodyMemory()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "goodput_request_bodies_refused_total", Help: "Requests refused (503) before their bodies were read because the request bodies held in memory left no room (max_body_memory)."},
			func() float64 { return float64(p.BodiesRefused()) }))
}

// logTimeouts logs (at debug) the timeouts, the body and event limits the
// gateway runs with: the configuration's, with every default filled in.
func logTimeouts(c proxy.Config, logger *log.Logger) {
	logger.Printf("DEBUG: timeouts: connect %v, first_byte %v, first_token %v, idle %v, total %v, read_header %v, read_body %v, upstream_keepalive %v; max_body_bytes %d, max_event_bytes %d",
		c.ConnectTimeout, c.FirstByteTimeout, c.FirstTokenTimeout, c.IdleTimeout, c.TotalTimeout,
		c.ReadHeaderTimeout, c.ReadBodyTimeout, c.IdleConnTTL, c.MaxBodyBytes, c.MaxEventBytes)
}

// adminMaxConns bounds the admin listener's open connections (Prometheus,
// the live page's browsers, health checks); beyond, new ones wait while
// the one idle the longest is closed. adminIdle bounds how long one may
// idle, adminWrite how long an answer may take to be taken.
const (
	adminMaxConns = 32
	adminIdle     = 2 * time.Minute
	adminWrite    = time.Minute
)

// startAdmin serves the admin listener (unless "off"): /metrics, the admin
// API, the live page, /healthz and /readyz. counted is how many records
// have been counted (the proxy's Emitted), noted with each answer of
// /metrics (answerCounts).
func startAdmin(ctx context.Context, cfg *config.Config, reg *prometheus.Registry, judger *slo.Judger, check *upstreamCheck, counted func() uint64, logger *log.Logger) (*http.Server, string, *scrapeWatch, error) {
	if cfg.AdminListen == "off" {
		return nil, "", nil, nil
	}
	aln, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		return nil, "", nil, fmt.Errorf("admin_listen: %w", err)
	}
	// The admin listener's connections come out of the 64 descriptors
	// max_connections leaves (defaultMaxConnections): uncapped, a few
	// hundred kept-alive admin clients used up the open-files limit, and
	// the gateway could accept no client for minutes. At the cap, the
	// connection idle the longest (10 ms or more) is closed to make
	// room, so that idle clients cannot keep the health checks out.
	al := proxy.NewAdminListener(aln, adminMaxConns, logger.Printf)
	mux := http.NewServeMux()
	scrapes := newCountedScrapeWatch(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true}), adminAnswerTTL, counted)
	mux.Handle("/metrics", scrapes)
	mux.Handle("/admin/api/slo", newAnswerCache(judger.SLOHandler(), adminAnswerTTL, true))
	mux.Handle("/admin/api/profile", newAnswerCache(judger.ProfileHandler(), adminAnswerTTL, true))
	mux.Handle("/", web.Handler()) // the live page
	mux.HandleFunc("/healthz", getOnly(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") }))
	mux.HandleFunc("/readyz", getOnly(func(w http.ResponseWriter, r *http.Request) {
		if ctx.Err() != nil {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		// ?upstream=false: the gateway alone. A replica taken out of its
		// Service while the engine is down records nothing of the outage;
		// one left in answers 502 and records each request as an error,
		// which each tenant's SLO counts (the chart's default).
		withUpstream := true
		switch v := r.URL.Query()["upstream"]; {
		case len(v) == 0:
		case len(v) == 1 && v[0] == "false":
			withUpstream = false
		case len(v) == 1 && v[0] == "true":
		default:
			http.Error(w, "upstream: want true or false, once", http.StatusBadRequest)
			return
		}
		if ok, why := check.ready(); withUpstream && !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	}))
	// Idle admin connections close after adminIdle (a scrape every 15 s to
	// 1 min keeps its connection); without it they were kept forever.
	// WriteTimeout bounds an answer to a client that does not read it.
	//
	// A connection counts as idle from its accept (StateNew) until its
	// first request's head is whole (net/http's StateActive comes only
	// then), so that connections that send nothing, or trickle a head, are
	// closed at the cap after 10 ms, as idle ones are, instead of
	// holding their slots for ReadHeaderTimeout, again and again, while
	// health checks wait.
	admin := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: adminIdle, WriteTimeout: adminWrite,
		ConnState: func(c net.Conn, st http.ConnState) { al.SetIdle(c, st == http.StateIdle || st == http.StateNew) }}
	go func() { _ = admin.Serve(al) }()
	return admin, aln.Addr().String(), scrapes, nil
}

// adminAnswerTTL is how long a computed /metrics or live-page answer
// serves every admin client that asks (answerCache); a variable for tests.
var adminAnswerTTL = time.Second

// drain stops accepting and waits shutdown_grace (default 25s) for the
// requests in flight, or until cutNow closes (a second signal), then cuts
// the rest so that each still ends as one record before the process exits.
//
// It returns an error when requests are still without a record after the
// cut's wait: their records are lost, as the request log's when it cannot
// write them, and the exit status says so. No known cause reaches that
// branch: a cut request ends at once, and its record follows at most the
// release of its limits, which waits for a Redis that does not answer a
// second at most after the cut (proxy.Cut;
// TestServeRecordsARequestWhoseReleaseRedisDoesNotAnswer); the request log
// takes records without waiting for its writes. It stays so that a record
// lost to a cause not known yet is not lost silently.
func drain(cfg *config.Config, srv *fasthttp.Server, p *proxy.Proxy, pl *proxy.Listener, logger *log.Logger, cutNow <-chan struct{}) error {
	grace := cfg.ShutdownGrace.D()
	if grace <= 0 {
		grace = 25 * time.Second
	}
	logger.Printf("shutting down: waiting up to %v for %d in-flight requests (a second signal cuts them now)", grace, p.InFlight())
	shutdownDone := make(chan struct{})
	go func() {
		_ = srv.Shutdown()
		// fasthttp closes the listener its Serve has taken; one signalled
		// just after the start may come before that.
		_ = pl.Close()
		p.Wait()
		// An error answer given before its request was read to the end
		// (413) is delivered by a lingering close, which the exit would
		// turn into a reset, losing the answer.
		<-pl.Closed()
		close(shutdownDone)
	}()
	var why string
	select {
	case <-shutdownDone:
	case <-time.After(grace):
		why = "after " + grace.String()
	case <-cutNow:
		why = "on a second signal"
	}
	if why != "" {
		// Streams outlive the grace period (long generations): cut them.
		closing := ""
		if n := p.Closing(); n > 0 {
			// Recorded, but their close waits on the client (http10.go).
			closing = fmt.Sprintf(" (and %d HTTP/1.0 connections waiting to close)", n)
		}
		if n := pl.Lingering(); n > 0 {
			// Recorded and answered; the close drains what the client sends.
			closing += fmt.Sprintf(" (and %d connections closing after an error answer)", n)
		}
		logger.Printf("shutdown: cutting %d requests still in flight%s %s", p.InFlight(), closing, why)
		p.Cut()
		// Requests still being read (a slow body) are not in flight yet:
		// their reads end now, each with its record.
		pl.CutReads()
		select {
		case <-shutdownDone:
			return nil
		case <-time.After(cutWait):
		}
		// The last resort: every client connection closes, which fails
		// what still writes to one; the records that follow are waited
		// for, as the request log is closed next.
		logger.Printf("shutdown: %d requests still without a record %v after the cut; closing every client connection", p.InFlight(), cutWait)
		pl.CloseAll()
		select {
		case <-shutdownDone:
		case <-time.After(closeAllWait):
		}
		if n := p.InFlight(); n > 0 {
			return fmt.Errorf("shutdown: %d requests ended without a record", n)
		}
	}
	return nil
}

// cutWait is how long a shutdown waits for the records of the requests it
// cut before it closes the client connections, and closeAllWait how long
// it then waits for the rest: 5 s in all (README, Shutdown). cutWait
// covers the second a cut request's record may wait for the release of its
// limits in a Redis that does not answer (proxy.Cut).
const (
	cutWait      = 4 * time.Second
	closeAllWait = time.Second
)

// maxConnections is the configured max_connections, or the default from the
// open-files limit.
func maxConnections(cfg *config.Config, fileLimit uint64) int {
	if cfg.MaxConnections > 0 {
		return cfg.MaxConnections
	}
	return defaultMaxConnections(fileLimit)
}

// maxConnectionsWarning says, when max_connections is set above what the
// open-files limit holds (a descriptor for every client connection and its
// engine connection, and 64 for the rest, as defaultMaxConnections leaves),
// what happens past it; "" otherwise (unset, or no limit known). A new
// user's run set 80 under a limit of 60 without a word at start.
func maxConnectionsWarning(cfg *config.Config, fileLimit uint64) string {
	n := cfg.MaxConnections
	if n <= 0 || fileLimit == 0 || uint64(2*n+64) <= fileLimit {
		return ""
	}
	return fmt.Sprintf("WARNING: max_connections %d needs about %d open files (one for each client connection and one for its engine connection, and 64 more), over the open files limit %d: past about %d connections, new ones wait in the backlog and requests that need a new engine connection are refused (503)", n, 2*n+64, fileLimit, defaultMaxConnections(fileLimit))
}

// defaultMaxConnections leaves, under the open-files limit, a descriptor
// for the upstream connection of every client connection and 64 for the
// rest (listeners, log, Redis, the upstream pool's spares); at most 16384,
// which bounds the memory of idle connections (about 10 KiB each).
func defaultMaxConnections(fileLimit uint64) int {
	const most, least = 16384, 16
	if fileLimit == 0 || fileLimit > 2*most+64 {
		return most
	}
	return max(least, (int(fileLimit)-64)/2)
}

// labelsNote says, when labels: tenants lists the tenants that have a label
// value of their own (gateway keys on), how many of them do, and names the
// listed ones that are no tenant (a typo sends that tenant to other): the
// rest of the tenants count under other in every metric, and an upgrade
// from a build that ignored the list with keys would otherwise merge them
// without a word (found by review).
func labelsNote(listed []string, ts []ratelimit.TenantConfig) []string {
	if len(listed) == 0 {
		return nil
	}
	names := make(map[string]bool, len(ts))
	for _, t := range ts {
		names[t.Name] = true
	}
	own := 0
	var unknown []string
	for _, l := range listed {
		if names[l] {
			own++
		} else {
			unknown = append(unknown, l)
		}
	}
	out := []string{fmt.Sprintf("labels: tenants: %d of %d tenants have a label value of their own; the others count under other in every metric", own, len(ts))}
	if len(unknown) > 0 {
		if len(unknown) > 5 {
			unknown = append(unknown[:5:5], fmt.Sprintf("and %d more", len(unknown)-5))
		}
		out = append(out, fmt.Sprintf("WARNING: labels: tenants lists %s, which is no tenant", strings.Join(unknown, ", ")))
	}
	return out
}

func tenantNames(ts []ratelimit.TenantConfig) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

func orOff(s string) string {
	if s == "" {
		return "off"
	}
	return s
}
