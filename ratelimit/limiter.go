package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Request is what a limiter decides on. The proxy fills it from the
// identity.KeyInfo and the request body; it may be reused between requests.
type Request struct {
	// Tenant is the tenant's name (KeyInfo.Tenant.Name).
	Tenant string
	// KeyID is the gateway key's id (KeyInfo.ID); it selects the key's own
	// limits, if it has any.
	KeyID string
	// Model is the model the request asks for; it selects the tenant's
	// per-model limits of the configured model it is matched to (by name,
	// alias or as Ollama reads names: see models.go), if any. Empty = no
	// model limits, unless NoModel.
	Model string
	// NoModel says that the request names no model where its route reads
	// one (a metered route's body without "model", or with null, "" or a
	// value that is not a string), or that it runs on a route whose engine
	// runs its one model whatever the body names (TGI's native routes):
	// the engine then runs its default model, and the request, Model "",
	// counts against the limits of the tenant's default model
	// (TenantConfig.ModelDefault), if it has one. With a Model, NoModel
	// says the engine runs that model if it has it and its default model
	// otherwise (a LoRA adapter TGI's native routes name in
	// parameters.adapter_id: an adapter it does not have runs the base
	// model): Model's limits when it matches a configured model, the
	// default model's when it matches none. False for a route the gateway
	// does not meter, which runs no model.
	NoModel bool
	// Adapter is a LoRA adapter the request names, which its engine runs
	// over its model: TGI's parameters.adapter_id, SGLang's lora_path, or
	// the adapter of SGLang's "base:adapter" model. When it matches a
	// configured model (as Model would), the request is held by that
	// model's limits. When it matches none, Model and NoModel decide, as
	// for the request without it: the engine runs an adapter the tenant
	// does not list as a model the tenant does not list (SGLang), or its
	// base model for one it has not loaded (TGI), and SGLang refuses one
	// it has not loaded; an adapter never takes a request off the limits
	// it would have without it.
	Adapter string
	// AdapterUnsure says the engine may not read Adapter (an
	// OpenAI-compatible route, which vLLM serves too: vLLM ignores
	// lora_path and reads "base:adapter" as one name): Adapter is tried
	// only when Model and NoModel match no configured model, so that a
	// client cannot take a request off its model's limits by naming an
	// adapter the engine does not run.
	AdapterUnsure bool
	// EstTokens is the token charge taken at admission (see EstimateTokens);
	// Reconcile corrects it. Negative counts as 0.
	EstTokens int64
	// DefaultOutput is the part of EstTokens that is a default output
	// allowance rather than the client's max_tokens (see EstimateRequest).
	// The limiter lowers it, down to 0, as far as needed for the request to
	// fit the tightest tpm that applies to it. 0 = none.
	DefaultOutput int64
}

// fitEstimate is the charge of a request estimated at est tokens, of which
// flex are a default allowance that may be dropped so that the charge fits
// capacity (the tightest tpm; 0 = none).
func fitEstimate(est, flex, capacity int64) int64 {
	if capacity <= 0 || est <= capacity {
		return est
	}
	return est - min(max(flex, 0), est-capacity)
}

// overrunChunk is how many tokens a stream that runs past what it was
// charged is charged at a time, ahead of its output (see Gate.Progress):
// 1/64 of the tightest tpm, between 16 and 256. So one backend call covers
// at least 16 tokens (at most 16 calls for a 4,000-token overrun once tpm is
// 16,384 or more), and what a stream holds ahead of its output is at most a
// 64th of a minute's tokens (refunded when it ends).
func overrunChunk(tightestTPM int64) int64 { return min(max(tightestTPM/64, 16), 256) }

// LimitKind names a limit. Its String is the `limit` label of the metrics
// and the `type` of the OpenAI error body.
type LimitKind uint8

const (
	limitNone        LimitKind = iota // no limit decided (an allowed request)
	limitRequests                     // requests per minute
	limitTokens                       // tokens per minute
	limitConcurrency                  // requests in flight
	limitBackend                      // the backend failed; on_backend_error decided
	numLimitKinds
)

var limitNames = [numLimitKinds]string{"none", "requests", "tokens", "concurrency", "backend"}

// String returns "none", "requests", "tokens", "concurrency" or "backend".
func (k LimitKind) String() string {
	if k < numLimitKinds {
		return limitNames[k]
	}
	return "unknown"
}

// Scope is the level a limit is configured at.
type Scope uint8

const (
	scopeTenant Scope = iota // TenantConfig.Limits
	scopeKey                 // KeyConfig.Limits
	scopeModel               // TenantConfig.Models[model]
)

// String returns "tenant", "key" or "model".
func (s Scope) String() string {
	switch s {
	case scopeTenant:
		return "tenant"
	case scopeKey:
		return "key"
	case scopeModel:
		return "model"
	}
	return "unknown"
}

// Quota describes one kind of limit as the client sees it, at the most
// constrained level that has such a limit.
type Quota struct {
	// Limit is the configured value (rpm, tpm or max_concurrency); 0 means no
	// limit of this kind applies to the request, and no header is written.
	Limit int64
	// Remaining is how many units could still be admitted now (after this
	// request's own charge when it was allowed).
	Remaining int64
	// Reset is how long until the bucket is full again (0 for concurrency).
	Reset time.Duration
}

// concurrencyRetryHint is the Retry-After given for a concurrency rejection:
// when a slot frees up cannot be known.
const concurrencyRetryHint = time.Second

// backendRetryHint is the Retry-After given when the backend failed and the
// policy is fail_closed.
const backendRetryHint = time.Second

// Decision is the result of one admission. Admit resets it before filling it,
// so a caller can keep one per request (or per connection) and reuse it.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Limit is the limit that rejected the request; limitNone when allowed,
	// or limitBackend when the backend failed and the policy decided (either
	// way).
	Limit LimitKind
	// Scope is the level of the limit that rejected the request.
	Scope Scope
	// TooLarge is set when the token estimate exceeds the tokens capacity
	// (tpm) of a level: waiting cannot help. RetryAfter is 0.
	TooLarge bool
	// RetryAfter is how long to wait before the request could be admitted
	// (for rate limits, exact when nothing else happens meanwhile).
	RetryAfter time.Duration
	// Requests, Tokens and Concurrency describe the most constrained level
	// of each kind; they feed the x-ratelimit-* headers and gauges.
	Requests, Tokens, Concurrency Quota
	// Model is the configured model of the tenant (its name under
	// models:) that the request's model was matched to (see models.go):
	// by name, alias or as Ollama reads names, and for a request that
	// names no model the tenant's default model; "" for none. It is set
	// whatever the decision, a backend failure's included, so that the
	// SLO judge can find the model's class by the model the limits
	// matched, not the spelling the request gave.
	Model string
	// ByAdapter says Model is the model the request's Adapter matched:
	// the engine runs it whatever name the request's model gives, and the
	// judge finds the class by it.
	ByAdapter bool

	limitValue int64 // configured value of the limit that rejected
	buf        [24]byte
}

// statusCode is the HTTP status to answer with: 200 when allowed, 503 when a
// failed backend rejected the request (fail_closed), 429 otherwise.
func (d *Decision) statusCode() int {
	switch {
	case d.Allowed:
		return 200
	case d.Limit == limitBackend:
		return 503
	}
	return 429
}

// ErrorInfo returns the OpenAI error body fields for a rejection: the HTTP
// status, the message, the error type and the code. It allocates; it is meant
// for the rejection path only.
func (d *Decision) ErrorInfo(tenant string) (status int, message, typ, code string) {
	status = d.statusCode()
	switch {
	case d.Allowed:
		return status, "", "", ""
	case d.Limit == limitBackend:
		return status, "Rate limiting is unavailable; try again later.", "server_error", "rate_limiter_unavailable"
	case d.TooLarge:
		return status, fmt.Sprintf("Request too large for tenant %s: its estimated tokens exceed the %s limit of %d tokens per minute. Lower max_tokens, the number of outputs asked for (n, best_of, prompts, conversations) or the prompt size.",
			tenant, d.Scope, d.limitValue), d.Limit.String(), "rate_limit_exceeded"
	}
	what := "concurrent requests"
	switch d.Limit {
	case limitRequests:
		what = "requests per minute"
	case limitTokens:
		what = "tokens per minute"
	}
	return status, fmt.Sprintf("Rate limit reached for tenant %s on %s (%s limit: %d). Please try again in %s.",
		tenant, what, d.Scope, d.limitValue, formatResetString(d.RetryAfter)), d.Limit.String(), "rate_limit_exceeded"
}

// HeaderSetter receives response headers. *fasthttp.ResponseHeader has this
// method.
type HeaderSetter interface {
	SetBytesKV(key, value []byte)
}

var (
	hdrLimitRequests     = []byte("x-ratelimit-limit-requests")
	hdrRemainingRequests = []byte("x-ratelimit-remaining-requests")
	hdrResetRequests     = []byte("x-ratelimit-reset-requests")
	hdrLimitTokens       = []byte("x-ratelimit-limit-tokens")
	hdrRemainingTokens   = []byte("x-ratelimit-remaining-tokens")
	hdrResetTokens       = []byte("x-ratelimit-reset-tokens")
	hdrRetryAfter        = []byte("retry-after")
	hdrRetryAfterMs      = []byte("retry-after-ms")
	hdrShouldRetry       = []byte("x-should-retry")
	strFalse             = []byte("false")
)

// WriteHeaders writes the x-ratelimit-{limit,remaining,reset}-{requests,tokens}
// headers for the kinds that apply (as OpenAI does, on allowed and rejected
// responses alike) and, on a rejection with a known wait, Retry-After (whole
// seconds, rounded up) and retry-after-ms; on one too large for a limit,
// which no wait admits, X-Should-Retry: false. Reset values are durations such as
// "1s", "6m0s" or "250ms". It does not allocate.
func (d *Decision) WriteHeaders(h HeaderSetter) {
	if q := &d.Requests; q.Limit > 0 {
		h.SetBytesKV(hdrLimitRequests, strconv.AppendInt(d.buf[:0], q.Limit, 10))
		h.SetBytesKV(hdrRemainingRequests, strconv.AppendInt(d.buf[:0], q.Remaining, 10))
		h.SetBytesKV(hdrResetRequests, appendReset(d.buf[:0], q.Reset))
	}
	if q := &d.Tokens; q.Limit > 0 {
		h.SetBytesKV(hdrLimitTokens, strconv.AppendInt(d.buf[:0], q.Limit, 10))
		h.SetBytesKV(hdrRemainingTokens, strconv.AppendInt(d.buf[:0], q.Remaining, 10))
		h.SetBytesKV(hdrResetTokens, appendReset(d.buf[:0], q.Reset))
	}
	if !d.Allowed && d.RetryAfter > 0 {
		secs := (d.RetryAfter + time.Second - 1) / time.Second
		h.SetBytesKV(hdrRetryAfter, strconv.AppendInt(d.buf[:0], int64(secs), 10))
		ms := (d.RetryAfter + time.Millisecond - 1) / time.Millisecond
		h.SetBytesKV(hdrRetryAfterMs, strconv.AppendInt(d.buf[:0], int64(ms), 10))
	}
	if !d.Allowed && d.TooLarge {
		// No wait admits it, but the openai SDKs retry every 429 (twice,
		// by default) unless this says not to: the same refusal three
		// times, three records, for one call.
		h.SetBytesKV(hdrShouldRetry, strFalse)
	}
}

// appendReset formats d rounded up to the millisecond the way Go prints a
// duration ("0s", "250ms", "1s", "1.5s", "6m0s", "1h2m3s").
func appendReset(b []byte, d time.Duration) []byte {
	if d <= 0 {
		return append(b, "0s"...)
	}
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	if ms < 1000 {
		b = strconv.AppendInt(b, ms, 10)
		return append(b, "ms"...)
	}
	h, m, s, frac := ms/3_600_000, ms/60_000%60, ms/1000%60, ms%1000
	if h > 0 {
		b = strconv.AppendInt(b, h, 10)
		b = append(b, 'h')
	}
	if h > 0 || m > 0 {
		b = strconv.AppendInt(b, m, 10)
		b = append(b, 'm')
	}
	b = strconv.AppendInt(b, s, 10)
	if frac > 0 {
		b = append(b, '.')
		digits := [3]byte{byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
		n := 3
		for n > 0 && digits[n-1] == '0' {
			n--
		}
		b = append(b, digits[:n]...)
	}
	return append(b, 's')
}

func formatResetString(d time.Duration) string { return string(appendReset(nil, d)) }

// Ticket is the handle of an admitted request. Pass it to Reconcile exactly
// once, when the response has ended (whatever the outcome), to correct the
// token charge and release the concurrency slot. The zero Ticket (a rejected
// request) needs no Reconcile; reconciling it does nothing.
type Ticket struct {
	est    int64
	tenant string // set by the Gate, whose queue it wakes on Reconcile
	// covered is the usage the charges cover: est plus every chunk asked
	// for by Gate.Progress (math.MaxInt64: no token limit to follow).
	covered int64
	chunk   int64 // see overrunChunk
	cut     bool  // the tenant's on_overrun is "cut"
	refused bool  // local backend: a chunk was refused (cut)
	// local backend
	lt   *localTenant
	lv   [3]*localLevel
	tokm uint8 // bit i: lv[i]'s token bucket was charged est
	// redis backend
	rt *redisTicket
}

// EstTokens returns the token charge taken at admission (plus, on the local
// backend, every chunk charged since by Gate.Progress).
func (t Ticket) EstTokens() int64 { return t.est }

// MayCut reports whether Gate.Progress may cut the stream of an admitted
// ticket: its tenant's on_overrun is cut and a token limit applies. When it
// is false, Progress only charges, and always returns true.
func (t *Ticket) MayCut() bool { return t.cut }

// ErrUnknownTenant is returned by Admit for a tenant the limiter has no
// configuration for (a tenant removed by a reload while a request that had
// authenticated with the old keys was arriving). The decision is a rejection;
// answer it as unauthorized.
var ErrUnknownTenant = errors.New("ratelimit: unknown tenant")

// Limiter decides admissions for every tenant. Implementations: Local (one
// replica) and Redis (replicas sharing a Redis). All methods are safe for
// concurrent use.
//
// One Admit covers every limit that applies to the request (requests, tokens
// and concurrency, at the tenant, key and model levels): either all of them
// admit it and all are charged, or it is rejected and nothing is charged.
type Limiter interface {
	// Admit decides on req at time now and fills d. When d.Allowed the
	// returned Ticket must be passed to Reconcile. A non-nil error reports a
	// backend failure (d then holds what on_backend_error decided),
	// ErrUnknownTenant, or ctx's error when ctx ended during the decision (d
	// is then a rejection with limitNone).
	Admit(ctx context.Context, now time.Time, req *Request, d *Decision) (Ticket, error)
	// Reconcile charges actualTokens-EstTokens (a refund when negative) to
	// the token buckets the request was charged at, and releases its
	// concurrency slots. The error reports a backend failure (the slots then
	// expire on their own), or ctx's end, which a backend that waits for a
	// network call stops waiting at (the call goes on without the caller).
	Reconcile(ctx context.Context, now time.Time, t Ticket, actualTokens int64) error
	// SetTenants replaces the limits; buckets of levels that remain keep
	// their state, and in-flight tickets stay valid.
	SetTenants(now time.Time, tenants []TenantConfig)
	// Name returns the backend name ("local" or "redis").
	Name() string
	// Close releases the backend's resources.
	Close() error
}

// New builds the limiter named by cfg.Backend for tenants, wrapped in a Gate
// with metrics registered in reg (nil: no metrics) and cfg.MaxQueueWait.
// cfg must be valid (see BackendConfig.Validate).
func New(cfg BackendConfig, tenants []TenantConfig, reg prometheus.Registerer, opts ...Option) (*Gate, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := ValidateTenants(tenants); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var lim Limiter
	switch cfg.Backend {
	case backendRedis:
		r, err := newRedis(cfg, tenants, redisOptions{Logf: o.logf})
		if err != nil {
			return nil, err
		}
		lim = r
	default:
		lim = newLocal(tenants)
	}
	var m *Metrics
	if reg != nil {
		var err error
		if m, err = newMetrics(reg, lim.Name()); err != nil {
			lim.Close()
			return nil, err
		}
		m.label = o.tenantLabel
		m.SetTenants(time.Now(), tenants)
		if h, ok := lim.(healthReporter); ok {
			if err := m.registerBackendUp(reg, h.Healthy); err != nil {
				lim.Close()
				return nil, err
			}
		}
	}
	return newGate(lim, m, cfg.MaxQueueWait.D()), nil
}

// healthReporter is a limiter whose backend can be out of reach.
type healthReporter interface {
	// Healthy reports whether decisions currently reach the backend.
	Healthy() bool
}

// levelPick keeps, for one kind, the quota of the most constrained level.
func pickQuota(q *Quota, limit, remaining int64, reset time.Duration) {
	if q.Limit == 0 || remaining < q.Remaining || remaining == q.Remaining && reset > q.Reset {
		*q = Quota{Limit: limit, Remaining: remaining, Reset: reset}
	}
}

// floorUnits is floor(x) for a count of units computed in floating point, with
// a tolerance for rounding (59.9999999 is 60) and clamped at 0.
func floorUnits(x float64) int64 {
	if x <= 0 {
		return 0
	}
	return int64(math.Floor(x + 1e-6))
}

// Option is an optional setting of New.
type Option func(*options)

type options struct {
	logf        func(format string, args ...any)
	tenantLabel func(tenant string) string
}

// WithTenantLabel gives the metrics the tenant label value of each
// tenant: label(name) is the name, or "other" for a tenant whose label the
// configuration leaves out (the gateway's labels: tenants). Without it
// every tenant has its own label value, and its own series from the start.
func WithTenantLabel(label func(tenant string) string) Option {
	return func(o *options) { o.tenantLabel = label }
}

// WithLogf sends the backend's state changes (Redis failing, Redis back) to
// logf, one line each. Without it they are not logged (still counted).
func WithLogf(logf func(format string, args ...any)) Option {
	return func(o *options) { o.logf = logf }
}
