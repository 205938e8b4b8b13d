package proxy

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/goodput/goodput/identity"
	"github.com/goodput/goodput/internal/keyshape"
	"github.com/goodput/goodput/internal/urlredact"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
)

// DefaultTenant is the tenant of a request that names none, without
// gateway keys.
const DefaultTenant = "default"

// Config configures a Proxy. The zero value of each field selects the
// default its comment names.
type Config struct {
	// Upstream is the engine's base URL, "http://host:port". Required: the
	// command line starts the simulator when no upstream is configured, the
	// proxy itself never guesses. Only http is supported (TLS to the engine
	// belongs to a sidecar or service mesh); a path prefix is not supported.
	Upstream string

	// TenantHeader names the request header that carries the tenant until
	// gateway keys exist. Empty means "X-Tenant". A request without it is
	// attributed to tenant DefaultTenant.
	TenantHeader string

	// MaxBodyBytes limits a request body. Zero means 16 MiB. A larger body
	// gets 413 and outcome "rejected".
	MaxBodyBytes int
	// MaxBodyMemory bounds the request bodies held in memory at once
	// (config max_body_memory): each body over 16 KiB counts from its head
	// on, at its announced length (a chunked one at MaxBodyBytes), until
	// its request went upstream or ended. A head whose body finds no room
	// is answered at once, 503 with Retry-After, and its record's outcome
	// is "rejected" (bodybudget.go). Zero means DefaultMaxBodyMemory
	// (goodput serve derives its default from the memory the process may
	// use); negative means no limit.
	MaxBodyMemory int64

	// ConnectTimeout bounds the TCP connect to the upstream. Zero means 5s.
	ConnectTimeout time.Duration
	// FirstByteTimeout bounds the wait from sending the request to receiving
	// the response headers. Zero means 60s. Engines that do not stream (a
	// non-streaming request) send headers only when generation ends, so keep
	// it above the longest non-streamed generation.
	FirstByteTimeout time.Duration
	// FirstTokenTimeout bounds the wait for a stream's first token event,
	// from sending the request, whether or not the engine sent its response
	// headers at once (llama.cpp and vLLM do, then queue and prefill). Zero
	// means 300s. It also bounds the wait for a stream's headers when it is
	// shorter than FirstByteTimeout.
	FirstTokenTimeout time.Duration
	// IdleTimeout bounds the gap between two reads of the response body
	// once a stream's first token came (of any body that has no token
	// events, from its headers on). Zero means 30s.
	IdleTimeout time.Duration
	// TotalTimeout bounds the whole exchange, from t0 to the last byte.
	// Zero means 30m: a response that never ends (an engine stuck in a
	// loop) must end some time, with its record. 30 minutes is 36,000
	// tokens at a slow 20 tokens/s, more than the longest outputs engines
	// allow today; a non-streamed response is bounded by FirstByteTimeout
	// long before. Raise it for longer generations.
	TotalTimeout time.Duration

	// ReadHeaderTimeout bounds reading a request's headers: on a new
	// connection from its accept, on a kept-alive one from the request's
	// first byte. Zero means 10s. A connection that sends nothing in that
	// time is closed silently; a request cut short gets an error answer
	// and a record (outcome rejected), and never reaches the upstream.
	ReadHeaderTimeout time.Duration
	// ReadBodyTimeout bounds reading a request's body, from the end of its
	// headers. Zero means 30s.
	ReadBodyTimeout time.Duration

	// MaxIdleConns is the number of idle upstream connections kept. Zero
	// means 256. goodput serve sets it to max_connections: every stream
	// holds one upstream connection, so at a steady load of N streams N
	// connections come back to the pool between requests, and a cap below
	// N closes the surplus only to dial it again. The pool holds no more
	// than the peak of concurrent streams, and idle ones expire after
	// IdleConnTTL.
	MaxIdleConns int
	// IdleConnTTL is how long an idle upstream connection is kept for
	// reuse (config timeouts.upstream_keepalive). Zero means 90s, as
	// net/http's IdleConnTimeout: a steady load then never dials (a new
	// connection costs ~0.7 ms of the first token). An engine that closes
	// idle connections sooner (uvicorn, under vLLM and SGLang: 5s) is
	// handled as it is: a connection it closed is found by a peek before
	// reuse and dropped (see upstream.get); set this below the engine's own
	// keep-alive to avoid even the rare reuse that races the engine's close.
	IdleConnTTL time.Duration

	// MaxEventBytes is the largest single stream event metered (config
	// max_event_bytes). Zero means 1 MiB. A larger event ends metering of
	// that response (it still passes through) and the outcome is
	// upstream_error; on the Responses and Messages APIs it passes
	// unmetered and the events around it are metered; an Ollama line is
	// metered without its context and logprobs (meter's NDJSON mode), a
	// chat, completions or llama.cpp event without llama.cpp's prompt,
	// settings and token ids (meter's SSEFramer.Lean).
	MaxEventBytes int
	// MaxJSONBytes is the largest non-streamed response body kept for
	// reading its usage. Zero means 8 MiB; a larger body passes through and
	// is recorded without counts, but for those a TGI answer's head gave
	// (x-prompt-tokens, x-generated-tokens: meter.Meter.ObserveHead).
	MaxJSONBytes int
	// MaxClientLag is how far, in bytes, the client may fall behind the
	// upstream before the proxy stops reading the upstream. Until then a
	// slow client does not delay the stamping of events. It is also what a
	// stream holds for its client in memory (plus one event larger than
	// half of it, should one come). Zero means 1 MiB.
	MaxClientLag int
	// MaxLagMemory bounds what the streams of clients that lag hold for
	// them in all (config max_lag_memory): past it, a client that lags is
	// held to 16 KiB queued, its stream waiting for it, instead of
	// MaxClientLag. Zero means DefaultMaxLagMemory (goodput serve derives
	// its default from the memory the process may use); negative means no
	// bound but MaxClientLag.
	MaxLagMemory int64

	// IOLoop (config io_loop; an experiment, off by default, Linux only):
	// a streamed response read on the direct path, once its head is out
	// and while its client keeps up, has its upstream socket read by one
	// of a few epoll loops (one per GOMAXPROCS) instead of by its own
	// goroutine, which is then not woken at every event
	// (ioloop_linux.go). Elsewhere it has no effect.
	IOLoop bool

	// Keys authenticates gateway keys (Authorization: Bearer, or x-api-key)
	// and maps them to tenants. Nil: no authentication; the tenant comes
	// from TenantHeader and the client's credentials pass through.
	Keys *identity.Store
	// Limits admits requests against their tenant's limits. Used only with
	// Keys. Nil: no limits.
	Limits *ratelimit.Gate
	// DefaultMaxTokens is the output charged at admission for a request
	// that sets no max_tokens (see ratelimit.EstimateRequest). Zero: 1024.
	DefaultMaxTokens int64

	// Judge completes every record before the sinks see it (the SLO
	// verdict, label values). Nil means records are not judged.
	Judge Judge

	// Sink receives every record, after Judge. Nil means records are
	// dropped (tests). It must not keep the record after it returns.
	Sink Sink

	// Trace follows every request as a span (package export/otlp): nil
	// means no tracing. It is never called per event.
	Trace Tracer

	// Logf logs operational messages. Nil means no logging.
	Logf func(format string, args ...any)
}

// HeaderCarrier reads and writes the headers of a request, for a Tracer to
// take the client's trace context and pass its own to the engine. Its
// methods are those of OpenTelemetry's propagation.TextMapCarrier.
type HeaderCarrier = interface {
	Get(key string) string
	Set(key, value string)
	Keys() []string
}

// Tracer continues the client's trace through the gateway, once per
// request: Start when the request arrives (the record holds t0 and the
// request id), with the client's headers; Upstream when the engine's request
// is built (tenant, route and model are known), to write the gateway's trace
// context into it; End once the record is finished and judged, after the
// sinks. A request the gateway ends before it builds an upstream request
// gets Start and End only. The Tracer keeps its span in rec.Live.Span.
type Tracer interface {
	Start(rec *meter.Record, client HeaderCarrier)
	Upstream(rec *meter.Record, maxTokens int, upstream HeaderCarrier)
	End(rec *meter.Record)
}

// Judge is the one step besides the proxy that writes a record: Begin runs
// when a request arrives, before the sinks' Begin, and Judge when it ends,
// before the sinks' Record, so every sink sees the finished verdict
// whatever their order.
type Judge interface {
	Begin(rec *meter.Record)
	Judge(rec *meter.Record)
}

// Sink follows every request, and only reads the records it is given
// (Record.Live is the sinks' own scratch space: the gauge child a sink keeps
// between Begin and Record). Begin is called once when a request arrives
// (rec holds its start time, request id, route and tenant), Record exactly
// once when it ends, with the finished record. Neither may retain rec or its
// slices after returning.
type Sink interface {
	Begin(rec *meter.Record)
	Record(rec *meter.Record)
}

// GapSink is an optional interface of a Sink. A record keeps its first
// meter.MaxKeptGaps inter-token gaps one by one and only a summary of the
// rest (Record.ITLRest); Gap receives each of those later gaps as it is
// measured (on the stream's reader goroutine, between Begin and Record), so
// that a sink keeping a histogram of every gap (Prometheus) stays exact: it
// observes these here and the kept ones from Record.ITL. It must not retain
// rec, and must not allocate: it runs once per event.
type GapSink interface {
	Gap(rec *meter.Record, gap time.Duration)
}

// Sinks fans a record out to several sinks, in order.
type Sinks []Sink

// Begin passes rec to every sink.
func (s Sinks) Begin(rec *meter.Record) {
	for _, k := range s {
		k.Begin(rec)
	}
}

// Record passes rec to every sink.
func (s Sinks) Record(rec *meter.Record) {
	for _, k := range s {
		k.Record(rec)
	}
}

// Gap passes a summarised gap to every sink that takes them (GapSink).
func (s Sinks) Gap(rec *meter.Record, gap time.Duration) {
	for _, k := range s {
		if g, ok := k.(GapSink); ok {
			g.Gap(rec, gap)
		}
	}
}

// DefaultTotalTimeout is the total timeout when none is configured.
const DefaultTotalTimeout = 30 * time.Minute

// DefaultMaxBodyMemory is MaxBodyMemory when none is configured.
const DefaultMaxBodyMemory = 1 << 30

// DefaultMaxLagMemory is MaxLagMemory when none is configured.
const DefaultMaxLagMemory = 1 << 30

// DefaultIdleConnTTL is how long an idle upstream connection is kept when
// no upstream_keepalive is configured.
const DefaultIdleConnTTL = 90 * time.Second

func (c *Config) withDefaults() (Config, string, error) {
	d := *c
	if d.TenantHeader == "" {
		d.TenantHeader = "X-Tenant"
	}
	if keyshape.CredentialHeader(d.TenantHeader) {
		return d, "", fmt.Errorf("tenant header %s carries credentials: each client's key would be its tenant, in every record, metric and log", d.TenantHeader)
	}
	if d.MaxBodyBytes == 0 {
		d.MaxBodyBytes = 16 << 20
	}
	if d.MaxBodyMemory == 0 {
		d.MaxBodyMemory = DefaultMaxBodyMemory
	}
	if d.ConnectTimeout == 0 {
		d.ConnectTimeout = 5 * time.Second
	}
	if d.FirstByteTimeout == 0 {
		d.FirstByteTimeout = 60 * time.Second
	}
	if d.FirstTokenTimeout == 0 {
		d.FirstTokenTimeout = 300 * time.Second
	}
	if d.IdleTimeout == 0 {
		d.IdleTimeout = 30 * time.Second
	}
	if d.TotalTimeout == 0 {
		d.TotalTimeout = DefaultTotalTimeout
	}
	if d.ReadHeaderTimeout == 0 {
		d.ReadHeaderTimeout = 10 * time.Second
	}
	if d.ReadBodyTimeout == 0 {
		d.ReadBodyTimeout = 30 * time.Second
	}
	if d.MaxIdleConns == 0 {
		d.MaxIdleConns = 256
	}
	if d.IdleConnTTL == 0 {
		d.IdleConnTTL = DefaultIdleConnTTL
	}
	if d.MaxEventBytes == 0 {
		d.MaxEventBytes = 1 << 20
	}
	if d.MaxJSONBytes == 0 {
		d.MaxJSONBytes = 8 << 20
	}
	if d.MaxClientLag == 0 {
		d.MaxClientLag = 1 << 20
	}
	if d.MaxLagMemory == 0 {
		d.MaxLagMemory = DefaultMaxLagMemory
	}
	if d.Logf == nil {
		d.Logf = func(string, ...any) {}
	}
	for _, v := range []struct {
		name string
		d    time.Duration
	}{{"connect", d.ConnectTimeout}, {"first_byte", d.FirstByteTimeout}, {"first_token", d.FirstTokenTimeout}, {"idle", d.IdleTimeout}, {"total", d.TotalTimeout},
		{"read_header", d.ReadHeaderTimeout}, {"read_body", d.ReadBodyTimeout}, {"upstream_keepalive", d.IdleConnTTL}} {
		if v.d < 0 {
			return d, "", fmt.Errorf("timeouts.%s: must not be negative, got %s", v.name, v.d)
		}
	}
	if d.MaxBodyBytes < 0 {
		return d, "", fmt.Errorf("max_body_bytes: must not be negative, got %d", d.MaxBodyBytes)
	}
	if d.MaxEventBytes < 0 { // the framer would read it as no limit
		return d, "", fmt.Errorf("max_event_bytes: must not be negative, got %d", d.MaxEventBytes)
	}
	addr, err := upstreamAddr(d.Upstream)
	return d, addr, err
}

// validPort reports whether p (digits, as url.Parse leaves a port) is a
// TCP port one can dial: 1 to 65535.
func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535
}

// upstreamAddr validates an upstream URL and returns its host:port. Its
// errors quote the URL without a password in it (urlredact): one is
// refused, and the refusal goes to the start's log. A password that
// url.Parse splits elsewhere ("http://user:1234#pw@engine": a port, then a
// fragment) is hidden too, and such a URL refused.
func upstreamAddr(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("upstream: required (an engine URL such as http://127.0.0.1:8000)")
	}
	host, err := checkUpstreamURL(s)
	if err != nil {
		return "", urlredact.Err(s, err)
	}
	return host, nil
}

func checkUpstreamURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("upstream: %q is not a URL: %v", s, err)
	}
	if u.Scheme != "http" {
		return "", fmt.Errorf("upstream: %q: scheme must be http (got %q)", s, u.Scheme)
	}
	if u.Host == "" {
		return "", fmt.Errorf("upstream: %q has no host", s)
	}
	if u.Path != "" && u.Path != "/" {
		return "", fmt.Errorf("upstream: %q: a path prefix is not supported; give the engine's base URL", s)
	}
	// A fragment is never sent: one was taken without a word, the URL
	// quoted whole in the start's log and in /readyz.
	if u.RawQuery != "" || strings.Contains(s, "#") || u.User != nil {
		return "", fmt.Errorf("upstream: %q: must not carry a query, a fragment or credentials", s)
	}
	host := u.Host
	switch port := u.Port(); {
	case port == "" && !strings.HasSuffix(host, ":"):
		host += ":80"
	case !validPort(port): // "http://engine:" has an empty port
		// url.Parse takes any digits: 99999 would be refused at each
		// dial, every request answered 502, and the process up.
		return "", fmt.Errorf("upstream: %q: the port must be a number from 1 to 65535", s)
	}
	return host, nil
}
