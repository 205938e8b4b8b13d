// Package otlp exports the gateway's requests over OpenTelemetry's OTLP
// (HTTP/protobuf): a span per request with the GenAI semantic conventions'
// attributes, continuing the client's W3C trace context and passing the
// gateway's on to the engine (Tracer, the proxy's Config.Trace), and the
// GenAI metric instruments recorded from each finished record (Metrics, a
// proxy.Sink). Neither works per event: the stream's hot path is the same
// with or without them.
//
// Both are off unless the configuration file's `otel:` section or the
// standard OTEL_* environment variables turn them on (see Config, New).
package otlp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/goodput/goodput/internal/cfgtypes"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Config is the configuration file's `otel:` section. What it sets wins
// over the environment; what it leaves unset comes from the standard
// OTEL_* variables (endpoint, headers, timeouts, sampler, batching,
// resource attributes), read by the OpenTelemetry SDK.
type Config struct {
	// Traces turns on a span per request. The environment turns it on too:
	// OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint variable
	// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
	// while OTEL_TRACES_EXPORTER is unset. OTEL_TRACES_EXPORTER=none and
	// OTEL_SDK_DISABLED=true turn it off whatever the file says.
	Traces bool `yaml:"traces"`
	// Metrics turns on the GenAI metrics over OTLP, alike
	// (OTEL_METRICS_EXPORTER, OTEL_EXPORTER_OTLP_METRICS_ENDPOINT).
	Metrics bool `yaml:"metrics"`
	// Endpoint is the collector's OTLP/HTTP base URL, such as
	// http://otel-collector:4318; /v1/traces and /v1/metrics are appended.
	// Empty: OTEL_EXPORTER_OTLP_ENDPOINT (and the per-signal variables),
	// else http://localhost:4318.
	Endpoint string `yaml:"endpoint"`
	// ServiceName is the resource's service.name. Empty: OTEL_SERVICE_NAME,
	// else "goodput".
	ServiceName string `yaml:"service_name"`
	// MetricInterval is how often metrics are exported, at least
	// MinMetricInterval. Zero: OTEL_METRIC_EXPORT_INTERVAL (milliseconds,
	// as much at least), else 60s.
	MetricInterval cfgtypes.Duration `yaml:"metric_interval"`
}

// The shortest export intervals. Every metric export collects every
// instrument and sends a request, whether anything was recorded or not:
// 1ms (or 1ns) made an idle gateway export about 880 times a second, on
// 196 ms of CPU a second. The SDK's default is 60s, the specification's
// examples and this README's 15s. A span batch is exported when it is
// full or when the delay (OTEL_BSP_SCHEDULE_DELAY, default 5s) passes,
// and each delay wakes the exporter even with no span: 1 ms cost 39 ms of
// CPU a second, idle, and a request to the collector per millisecond
// under load.
const (
	MinMetricInterval = time.Second
	MinBatchDelay     = 100 * time.Millisecond
)

// Validate checks the section on its own.
func (c *Config) Validate() error {
	if c.Endpoint != "" && !strings.HasPrefix(c.Endpoint, "http://") && !strings.HasPrefix(c.Endpoint, "https://") {
		return fmt.Errorf("otel.endpoint: %q must be an http:// or https:// URL (OTLP over HTTP)", c.Endpoint)
	}
	if c.MetricInterval < 0 {
		return fmt.Errorf("otel.metric_interval: must not be negative, got %s", c.MetricInterval.D())
	}
	if c.MetricInterval > 0 && c.MetricInterval.D() < MinMetricInterval {
		return fmt.Errorf("otel.metric_interval: %s is less than %s, the shortest (each export collects and sends every metric, recorded or not; 15s to 60s is usual), or 0 for the default", c.MetricInterval.D(), MinMetricInterval)
	}
	return nil
}

// checkEnvMillis refuses the environment variable name (milliseconds, as
// the SDK reads it) when it is set to less than min, or to what is no
// positive whole number (which the SDK ignores without a word); what says
// what it sets.
func checkEnvMillis(getenv func(string) string, name string, min time.Duration, what string) error {
	v := strings.TrimSpace(getenv(name))
	ms, err := strconv.ParseInt(v, 10, 64)
	if v != "" && (err != nil || ms <= 0) {
		return fmt.Errorf("%s=%s: not a positive whole number of milliseconds (the %s)", name, v, what)
	}
	if v == "" || ms >= min.Milliseconds() {
		return nil
	}
	unit := "milliseconds"
	if min >= time.Second {
		unit += ", " + min.String()
	}
	return fmt.Errorf("%s=%s: less than %d (%s), the shortest %s", name, v, min.Milliseconds(), unit, what)
}

// checkEnvCount refuses the environment variable name (a count, as the SDK
// reads it) when it is set to what is no whole number from 1 to max: the
// SDK ignores a word without one, and makes a queue of a negative or huge
// size, which ends the process (a new user's probe).
func checkEnvCount(getenv func(string) string, name string, max int64, what string) error {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 1 || n > max {
		return fmt.Errorf("%s=%s: want a whole number from 1 to %d (the %s)", name, v, max, what)
	}
	return nil
}

// checkResource refuses resource attributes that are not UTF-8: the
// resource goes with every export, and a string that is not UTF-8 fails
// its marshalling, so OTEL_RESOURCE_ATTRIBUTES=env=%ff (a byte that is no
// UTF-8 once percent-decoded, as the SDK decodes it) lost every span and
// metric, said only by a warning a minute ("string field contains invalid
// UTF-8"). A value is not quoted: it may be anything.
func checkResource(cfg Config, getenv func(string) string) error {
	if !utf8.ValidString(cfg.ServiceName) {
		return errors.New("otel.service_name: not valid UTF-8 (every export would fail)")
	}
	if cfg.ServiceName == "" && !utf8.ValidString(getenv("OTEL_SERVICE_NAME")) {
		return errors.New("OTEL_SERVICE_NAME: not valid UTF-8 (every export would fail)")
	}
	for _, f := range strings.Split(getenv("OTEL_RESOURCE_ATTRIBUTES"), ",") {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue // the SDK leaves it out
		}
		if !utf8.ValidString(k) {
			return errors.New("OTEL_RESOURCE_ATTRIBUTES: the name of an attribute is not valid UTF-8 (every export would fail)")
		}
		if d, err := url.PathUnescape(strings.TrimSpace(v)); err == nil {
			v = d // else the SDK keeps it as it is
		}
		if !utf8.ValidString(v) {
			return fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: the value of %.64q is not valid UTF-8 once percent-decoded (every export would fail)", strings.TrimSpace(k))
		}
	}
	return nil
}

// maxSpanQueue bounds OTEL_BSP_MAX_QUEUE_SIZE and its batch size: the
// queue is made whole at start (the default is 2048).
const maxSpanQueue = 1 << 20

// Telemetry is what New turned on; either field may be nil.
type Telemetry struct {
	// Tracer follows each request as a span (proxy.Config.Trace).
	Tracer *Tracer
	// Metrics records the GenAI instruments of each finished record (a
	// proxy.Sink).
	Metrics *Metrics

	tp    *sdktrace.TracerProvider
	spans *lastSpans
	mp    *sdkmetric.MeterProvider
}

// lastSpans is the span exporter, keeping the error of the exports made
// while the tracer provider shuts down: the batch processor hands an
// export's error to the global error handler (ErrorLog, one a minute)
// and its Shutdown returns nil, so the last spans lost at exit went
// unsaid after an error in the minute before (a collector answering 500
// all along). The metrics' last export error is Shutdown's own.
type lastSpans struct {
	sdktrace.SpanExporter
	mu      sync.Mutex
	closing bool
	err     error
}

func (e *lastSpans) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		e.mu.Lock()
		if e.closing {
			e.err = err
		}
		e.mu.Unlock()
	}
	return err
}

// close marks the shutdown's start; closed returns its exports' error.
func (e *lastSpans) close() {
	e.mu.Lock()
	e.closing = true
	e.mu.Unlock()
}

func (e *lastSpans) closed() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// enabled decides whether a signal ("traces" or "metrics") is exported.
func enabled(signal string, file bool, getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	upper := strings.ToUpper(signal)
	exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_" + upper + "_EXPORTER")))
	var on bool
	switch exp {
	case "none":
		return false, nil
	case "otlp":
		on = true
	case "":
		on = file || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_"+upper+"_ENDPOINT") != ""
	default:
		return false, fmt.Errorf("OTEL_%s_EXPORTER=%s: only otlp and none are supported", upper, exp)
	}
	if !on {
		return false, nil
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_" + upper + "_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(v)); p != "" {
			if p != "http/protobuf" {
				return false, fmt.Errorf("%s=%s: only http/protobuf is supported (OTLP over HTTP; point it at the collector's port 4318)", v, p)
			}
			break
		}
	}
	return true, nil
}

// defaultEndpoint is the collector's OTLP/HTTP address when neither the
// file nor the environment names one: OpenTelemetry's default, in plain
// HTTP as a local collector listens (the SDK's own default asks for TLS).
const defaultEndpoint = "http://localhost:4318"

// endpoint returns the URL a signal ("traces" or "metrics") is exported
// to: the file's endpoint, else the default when no OTEL_* variable names
// one; "" leaves it to the SDK's reading of those variables.
func endpoint(cfg Config, signal string, getenv func(string) string) string {
	base := cfg.Endpoint
	if base == "" {
		up := strings.ToUpper(signal)
		for _, v := range []string{"ENDPOINT", "INSECURE", "CERTIFICATE"} {
			// An endpoint, or TLS settings for the default one: the SDK's.
			if getenv("OTEL_EXPORTER_OTLP_"+v) != "" || getenv("OTEL_EXPORTER_OTLP_"+up+"_"+v) != "" {
				return ""
			}
		}
		base = defaultEndpoint
	}
	return strings.TrimSuffix(base, "/") + "/v1/" + signal
}

// CheckEnvironment reports what New would refuse in cfg and the
// environment (getenv), without starting anything: for a configuration
// check run where the gateway will run.
func CheckEnvironment(cfg Config, getenv func(string) string) error {
	_, _, err := check(cfg, getenv)
	return err
}

// check is New's checks; it says which signals are on.
func check(cfg Config, getenv func(string) string) (traces, metrics bool, err error) {
	if err := cfg.Validate(); err != nil {
		return false, false, err
	}
	if traces, err = enabled("traces", cfg.Traces, getenv); err != nil {
		return false, false, err
	}
	if metrics, err = enabled("metrics", cfg.Metrics, getenv); err != nil {
		return false, false, err
	}
	if !traces && !metrics {
		return false, false, nil
	}
	// The SDK takes an endpoint variable of another scheme (ftp://) for
	// https:// without a word; the file's endpoint is checked the same,
	// and wins over the variables.
	if cfg.Endpoint == "" {
		for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"} {
			e := strings.TrimSpace(getenv(v))
			if e == "" {
				continue
			}
			if u, err := url.Parse(e); err != nil || u.Scheme != "http" && u.Scheme != "https" {
				if err == nil {
					e = u.Redacted() // a password in it is not quoted
				} else {
					e = "(not a URL)"
				}
				return false, false, fmt.Errorf("%s=%s: must be an http:// or https:// URL (OTLP over HTTP)", v, e)
			}
		}
	}
	if err := checkResource(cfg, getenv); err != nil {
		return false, false, err
	}
	var checks []error
	if traces {
		checks = append(checks,
			checkEnvMillis(getenv, "OTEL_BSP_SCHEDULE_DELAY", MinBatchDelay, "delay between span batch exports (each wakes the exporter, spans or not; the default is 5000)"),
			checkEnvMillis(getenv, "OTEL_BSP_EXPORT_TIMEOUT", time.Millisecond, "timeout of a span batch's export; the default is 30000"),
			checkEnvCount(getenv, "OTEL_BSP_MAX_QUEUE_SIZE", maxSpanQueue, "spans queued for export; the default is 2048"),
			checkEnvCount(getenv, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", maxSpanQueue, "spans exported at once; the default is 512"))
	}
	if metrics {
		if cfg.MetricInterval == 0 { // otel.metric_interval, when set, wins over the variable
			checks = append(checks, checkEnvMillis(getenv, "OTEL_METRIC_EXPORT_INTERVAL", MinMetricInterval, "metric export interval (each export collects and sends every metric, recorded or not; the default is 60000)"))
		}
		checks = append(checks, checkEnvMillis(getenv, "OTEL_METRIC_EXPORT_TIMEOUT", time.Millisecond, "timeout of a metric export; the default is 30000"))
	}
	for _, err := range checks {
		if err != nil {
			return false, false, err
		}
	}
	return traces, metrics, nil
}

// New sets up what cfg and the environment (getenv, os.Getenv outside
// tests) turn on. It returns nil when nothing is: telemetry is off by
// default. Shutdown flushes and stops what it started.
func New(ctx context.Context, cfg Config, getenv func(string) string) (*Telemetry, error) {
	traces, metrics, err := check(cfg, getenv)
	if err != nil || !traces && !metrics {
		return nil, err
	}
	res, err := newResource(ctx, cfg)
	if err != nil {
		return nil, err
	}
	t := &Telemetry{}
	if traces {
		var opts []otlptracehttp.Option
		if ep := endpoint(cfg, "traces", getenv); ep != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(ep))
		}
		exp, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("otel traces: %w", err)
		}
		// The sampler is the SDK's: parent-based, always on for a new
		// trace, and OTEL_TRACES_SAMPLER sets another.
		t.spans = &lastSpans{SpanExporter: exp}
		t.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(t.spans), sdktrace.WithResource(res))
		prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
		t.Tracer = newTracer(t.tp.Tracer(scope), prop)
	}
	if metrics {
		var opts []otlpmetrichttp.Option
		if ep := endpoint(cfg, "metrics", getenv); ep != "" {
			opts = append(opts, otlpmetrichttp.WithEndpointURL(ep))
		}
		exp, err := otlpmetrichttp.New(ctx, opts...)
		if err != nil {
			_ = t.Shutdown(ctx)
			return nil, fmt.Errorf("otel metrics: %w", err)
		}
		var ropts []sdkmetric.PeriodicReaderOption
		if cfg.MetricInterval > 0 {
			ropts = append(ropts, sdkmetric.WithInterval(cfg.MetricInterval.D()))
		}
		t.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, ropts...)), sdkmetric.WithResource(res))
		if t.Metrics, err = newMetrics(t.mp.Meter(scope)); err != nil {
			_ = t.Shutdown(ctx)
			return nil, fmt.Errorf("otel metrics: %w", err)
		}
	}
	return t, nil
}

// scope is the instrumentation scope of the spans and instruments.
const scope = "github.com/goodput/goodput"

// newResource describes the gateway: service.name from the file, else
// OTEL_SERVICE_NAME, else "goodput"; OTEL_RESOURCE_ATTRIBUTES adds more.
func newResource(ctx context.Context, cfg Config) (*resource.Resource, error) {
	opts := []resource.Option{
		resource.WithAttributes(attribute.String("service.name", "goodput")),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	}
	if cfg.ServiceName != "" {
		opts = append(opts, resource.WithAttributes(attribute.String("service.name", cfg.ServiceName)))
	}
	res, err := resource.New(ctx, opts...)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("otel resource: %w", err)
	}
	return res, nil
}

// Shutdown exports what is still buffered (the last spans, a last
// collection of metrics) and stops, within ctx. Its error's text is one
// line of at most clip.Max bytes, as ErrorLog's.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	var errs []error
	// Each says which it was: two timeouts read as one message twice.
	if t.tp != nil {
		t.spans.close()
		err := t.tp.Shutdown(ctx)
		if err == nil {
			err = t.spans.closed()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("traces (the spans not yet sent are lost): %w", err))
		}
	}
	if t.mp != nil {
		if err := t.mp.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("metrics (the last interval's are lost): %w", err))
		}
	}
	return clipError(errors.Join(errs...))
}
