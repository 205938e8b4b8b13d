package main

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/goodput/goodput/export/otlp"
	"github.com/goodput/goodput/internal/config"
	"github.com/goodput/goodput/proxy"
	"github.com/goodput/goodput/ratelimit"
)

const configUsage = `usage: goodput config check FILE

Reads and checks a configuration file the way "goodput serve --config FILE"
does (its tenants_file too), without starting anything or connecting to
anything, prints what it would run with, and exits 0 when it is valid, 1
when it is not (each error with its line).
`

// cmdConfig: `goodput config check FILE`.
func cmdConfig(args []string, stdout, stderr io.Writer) int {
	help := func(a string) bool { return a == "-h" || a == "--help" || a == "help" }
	if (len(args) == 1 && help(args[0])) || (len(args) == 2 && args[0] == "check" && (args[1] == "-h" || args[1] == "--help")) {
		fmt.Fprint(stdout, configUsage)
		return 0
	}
	if len(args) != 2 || args[0] != "check" {
		fmt.Fprint(stderr, configUsage)
		return 2
	}
	path := args[1]
	cfg, tenants, err := checkConfig(path)
	if err != nil {
		fmt.Fprintf(stderr, "goodput config check: %s\n", cfg.RedactKeys(err.Error())) // a key pasted in the wrong field is quoted
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok\n", path)
	if cfg.KeysEnabled() {
		// serve refuses to start when a tenant's upstream credential names
		// an unset variable; the check often runs where the secrets are
		// not (CI, a chart rendered on a laptop), so it warns.
		for i, t := range tenants {
			if env := t.Upstream.APIKeyEnv; env != "" {
				if v, ok := os.LookupEnv(env); !ok || v == "" {
					fmt.Fprintln(stderr, cfg.RedactKeys(fmt.Sprintf("warning: tenants[%d].upstream.api_key_env: environment variable %s is not set here; serve refuses to start without it", i, env)))
				}
			}
		}
	}
	// The OTEL_* variables, as serve would read them here: a warning, as
	// for a credential variable (the check may run where serve does not).
	if err := otlp.CheckEnvironment(cfg.OTel, os.Getenv); err != nil {
		fmt.Fprintf(stderr, "warning: the environment here: %v; serve refuses to start with it\n", err)
	}
	// serve fills in the same demo settings when no upstream is set.
	if note := embeddedDefaults(cfg); note != "" {
		fmt.Fprintf(stdout, "  %s\n", note)
	}
	describeConfig(stdout, cfg, tenants)
	if config.AdminExposed(cfg.AdminListen) {
		fmt.Fprintln(stderr, config.AdminExposedWarning(cfg.AdminListen))
	}
	for _, w := range cfg.KeysFileWarnings() {
		fmt.Fprintln(stderr, cfg.RedactKeys(w))
	}
	return 0
}

// checkConfig loads the file and everything it names, and checks what serve
// would check before it listens. On an error it returns the configuration
// too once it was read (its RedactKeys).
func checkConfig(path string) (*config.Config, []ratelimit.TenantConfig, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, nil, err
	}
	tenants, err := cfg.LoadTenants()
	if err != nil {
		return cfg, nil, err
	}
	if cfg.Upstream != "" {
		// The proxy's own checks of the upstream URL and the timeouts.
		if _, err := proxy.New(proxy.Config{
			Upstream:         cfg.Upstream,
			MaxBodyBytes:     cfg.MaxBodyBytes,
			MaxEventBytes:    cfg.MaxEventBytes,
			ConnectTimeout:   cfg.Timeouts.Connect.D(),
			FirstByteTimeout: cfg.Timeouts.FirstByte.D(),
			IdleTimeout:      cfg.Timeouts.Idle.D(),
			TotalTimeout:     cfg.Timeouts.Total.D(),
		}); err != nil {
			return cfg, nil, fmt.Errorf("config %s: %w", path, err)
		}
	}
	if cfg.Listen == "" {
		cfg.Listen = ":8080"
	}
	if cfg.AdminListen == "" {
		cfg.AdminListen = "127.0.0.1:9090"
	}
	return cfg, tenants, nil
}

// describeConfig prints the settings a reader most wants to confirm.
func describeConfig(w io.Writer, cfg *config.Config, tenants []ratelimit.TenantConfig) {
	line := func(k, v string) { fmt.Fprintf(w, "  %-13s %s\n", k, v) }
	if cfg.Upstream == "" {
		line("upstream", "none: the built-in simulator")
	} else {
		line("upstream", cfg.Upstream)
	}
	line("listen", cfg.Listen)
	line("admin_listen", cfg.AdminListen)
	line("request_log", orDefault(cfg.RequestLog, "none"))
	if cfg.KeysEnabled() {
		keys := 0
		for _, t := range tenants {
			keys += len(t.Keys)
		}
		from := "in the file"
		if cfg.TenantsFile != "" {
			from = "from " + cfg.TenantsFile
		}
		line("tenants", fmt.Sprintf("%d with %d gateway keys, %s; limits %s", len(tenants), keys, from, orDefault(cfg.RateLimit.Backend, ratelimit.BackendLocal)))
	} else {
		line("tenants", "none: no gateway keys, the tenant comes from the "+orDefault(cfg.TenantHeader, "X-Tenant")+" header")
	}
	if len(cfg.SLO.SLOs) == 0 {
		line("slos", "none: requests are not judged")
	} else {
		line("slos", strings.Join(slices.Sorted(maps.Keys(cfg.SLO.SLOs)), ", ")+"; default "+orDefault(cfg.DefaultSLO, "none"))
	}
	line("log", orDefault(cfg.LogFormat, "text")+", level "+orDefault(strings.ToLower(cfg.LogLevel), "info"))
	switch {
	case !cfg.IOLoop:
		line("io_loop", "off")
	case runtime.GOOS != "linux":
		line("io_loop", "on, but without effect: the I/O loops are Linux's")
	default:
		line("io_loop", "on (experimental): streams are read by I/O loops, not a goroutine woken per event")
	}
	if o := cfg.OTel; o.Traces || o.Metrics {
		ep := o.Endpoint
		if u, err := url.Parse(ep); err == nil {
			ep = u.Redacted() // a password in it is not printed, as serve does not log it
		}
		line("otel", "traces "+onOff(o.Traces)+", metrics "+onOff(o.Metrics)+" over OTLP/HTTP to "+orDefault(ep, "the OTEL_EXPORTER_OTLP_ENDPOINT variable's endpoint, else http://localhost:4318"))
	} else {
		line("otel", "off in the file (OTEL_* variables may turn it on)")
	}
}

// serveFileOnly lists the settings that have no flag: serve -h shows it
// under the flags.
const serveFileOnly = `
Settings only in the configuration file (--config FILE; "goodput config check FILE"
checks one without starting anything; README.md describes every key):
  shutdown_grace  on SIGTERM, wait this long for requests in flight (or until a second signal),
                  then cut them (default 25s; 0: the default)
  timeouts        also read_header (10s, from a new connection's accept) and read_body (30s):
                  how long a client may take to send its request's headers, then its body
  max_body_memory request bodies held in memory at once: past it, a request is refused (503,
                  Retry-After) before its body is read (default a quarter of the memory the
                  process may use, its cgroup's limit or the machine's; at least max_body_bytes)
  max_lag_memory  held in all for clients that read more slowly than their streams come: past
                  it, each is held to 16 KiB, its stream waiting (default a quarter of the memory
                  the process may use)
  max_event_bytes the largest stream event metered (default 1 MiB; 4 KiB to 64 MiB): a larger
                  one passes through and ends the metering (skipped, on the Responses and
                  Messages APIs)
  max_connections open client connections at most; more wait to be accepted (default
                  (open-files limit - 64) / 2, at most 16384); as many idle upstream
                  connections are kept for reuse
  gc_percent      the Go collector's target (GOGC) for serve: how far the heap may grow past
                  what is live, in percent (default 10; the GOGC variable, when set, wins)
  io_loop         true: streams are read by a few epoll loops, not by a goroutine woken per
                  event (experimental; off by default; Linux only)
  labels          tenant and model label values metrics may carry: tenants, models, max_values, max_pairs
  sim             the built-in simulator's model, ttft and itl (when there is no upstream)
  tenants         tenants with their gateway keys, limits, per-model limits and SLO class
  tenants_file    a file holding the tenants: list instead, relative to the configuration file
  ratelimit       limits backend: local or redis (url, timeout), on_backend_error,
                  max_queue_wait, default_max_tokens
  slos            SLO classes: ttft, tpot, itl, deadline, e2e, objective
  default_slo     the class of tenants that name none, and of every request without tenants
  shapes          thresholds of the request shapes (rag_min_isl, ...)
  otel            OpenTelemetry over OTLP/HTTP: traces, metrics, endpoint, service_name,
                  metric_interval (off by default; the OTEL_* variables turn it on too)
SIGHUP reopens the request log and reloads tenants and keys (as does a change to their
file); other settings take effect at restart.
`

// serveUsage is serve's -h: its flags, then the settings only the
// configuration file has.
func serveUsage(fs *flag.FlagSet, w io.Writer) func() {
	return func() {
		fmt.Fprint(w, "usage: goodput serve [--config FILE] [flags]\n\nRuns the metering gateway. Flags override the configuration file.\n\nFlags:\n")
		fs.PrintDefaults()
		fmt.Fprint(w, serveFileOnly)
	}
}
