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
	"strings"

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
	// MetricInterval is how often metrics are exported. Zero:
	// OTEL_METRIC_EXPORT_INTERVAL, else 60s.
	MetricInterval cfgtypes.Duration `yaml:"metric_interval"`
}

// Validate checks the section on its own.
func (c *Config) Validate() error {
	if c.Endpoint != "" && !strings.HasPrefix(c.Endpoint, "http://") && !strings.HasPrefix(c.Endpoint, "https://") {
		return fmt.Errorf("otel.endpoint: %q must be an http:// or https:// URL (OTLP over HTTP)", c.Endpoint)
	}
	if c.MetricInterval < 0 {
		return fmt.Errorf("otel.metric_interval: must not be negative, got %s", c.MetricInterval.D())
	}
	return nil
}

// Telemetry is what New turned on; either field may be nil.
type Telemetry struct {
	// Tracer follows each request as a span (proxy.Config.Trace).
	Tracer *Tracer
	// Metrics records the GenAI instruments of each finished record (a
	// proxy.Sink).
	Metrics *Metrics

	tp *sdktrace.TracerProvider
	mp *sdkmetric.MeterProvider
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

// New sets up what cfg and the environment (getenv, os.Getenv outside
// tests) turn on. It returns nil when nothing is: telemetry is off by
// default. Shutdown flushes and stops what it started.
func New(ctx context.Context, cfg Config, getenv func(string) string) (*Telemetry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	traces, err := enabled("traces", cfg.Traces, getenv)
	if err != nil {
		return nil, err
	}
	metrics, err := enabled("metrics", cfg.Metrics, getenv)
	if err != nil {
		return nil, err
	}
	if !traces && !metrics {
		return nil, nil
	}
	res, err := newResource(ctx, cfg)
	if err != nil {
		return nil, err
	}
	t := &Telemetry{}
	if traces {
		var opts []otlptracehttp.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimSuffix(cfg.Endpoint, "/")+"/v1/traces"))
		}
		exp, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("otel traces: %w", err)
		}
		// The sampler is the SDK's: parent-based, always on for a new
		// trace, and OTEL_TRACES_SAMPLER sets another.
		t.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
		t.Tracer = newTracer(t.tp.Tracer(scope), prop)
	}
	if metrics {
		var opts []otlpmetrichttp.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlpmetrichttp.WithEndpointURL(strings.TrimSuffix(cfg.Endpoint, "/")+"/v1/metrics"))
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
	if t.tp != nil {
		errs = append(errs, t.tp.Shutdown(ctx))
	}
	if t.mp != nil {
		errs = append(errs, t.mp.Shutdown(ctx))
	}
	return clipError(errors.Join(errs...))
}
