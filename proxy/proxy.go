// Package proxy is goodput's reverse proxy: it streams every response from
// the engine to the client untouched, flushing each event as it arrives,
// and meters metered routes on the way through (package meter).
//
// Data flow: client → Proxy.Handler → upstream exchange → stream (reader
// goroutine: frame, stamp, parse, meter; writer: fasthttp's connection
// goroutine) → Judge (the SLO verdict, written into the record) → Sinks
// (metrics, request log), which only read the record.
package proxy

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goodput/goodput/internal/peek"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// Proxy is a metering reverse proxy for one upstream.
type Proxy struct {
	cfg      Config
	up       *upstream
	upHost   string
	inFlight atomic.Int64
	wg       sync.WaitGroup // one per request until its record is emitted

	remoteLimits bool    // Limits decides over the network: settle off the client's path
	gapSink      GapSink // the Sink, when it takes summarised gaps

	cutCtx context.Context // ends at Cut
	cut    context.CancelFunc

	parsers fastjson.ParserPool
	records sync.Pool // *meter.Record
	bodies  sync.Pool // *[]byte for rewritten request bodies
}

// New validates cfg and returns a Proxy.
func New(cfg Config) (*Proxy, error) {
	c, addr, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		cfg:    c,
		up:     newUpstream(addr, c.ConnectTimeout, c.MaxIdleConns, c.IdleConnTTL),
		upHost: addr,
	}
	p.remoteLimits = c.Limits != nil && c.Limits.Remote()
	p.gapSink, _ = c.Sink.(GapSink)
	p.cutCtx, p.cut = context.WithCancel(context.Background())
	p.records.New = func() any { return new(meter.Record) }
	return p, nil
}

// Cut ends every request still in flight, for a shutdown whose drain period
// is over, and fails every later one at its start:
//   - a stream is cut at once, and its client sees an abnormal end (never a
//     clean end of stream);
//   - a request queued for capacity, or waiting for the engine's first byte,
//     gets 503.
//
// Each ends as one record with outcome timeout and the reason "gateway
// shutting down". A connect in progress is not interrupted; it fails when it
// completes (within the connect timeout).
func (p *Proxy) Cut() {
	p.up.cutAll()
	p.cut()
}

// InFlight returns the number of requests whose record is not yet emitted.
func (p *Proxy) InFlight() int64 { return p.inFlight.Load() }

// Wait blocks until every request's record has been emitted.
func (p *Proxy) Wait() { p.wg.Wait() }

// CloseIdle closes idle upstream connections.
func (p *Proxy) CloseIdle() { p.up.closeIdle() }

// Server returns a fasthttp server configured to run the proxy.
func (p *Proxy) Server() *fasthttp.Server {
	return &fasthttp.Server{
		Handler:               p.Handler,
		ErrorHandler:          p.errorHandler,
		Name:                  "",
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		NoDefaultContentType:  true,
		// A body over the limit is refused by fasthttp before the handler
		// runs; errorHandler answers it (413) and records it.
		MaxRequestBodySize: p.cfg.MaxBodyBytes,
		// Release a connection's read buffer while its response streams.
		ReduceMemoryUsage: true,
		// The request line and headers must fit in the read buffer (431
		// above it). fasthttp's 4 KiB refuses real clients with a large
		// bearer token or cookies; 16 KiB is nginx's order of magnitude, and
		// the buffer is pooled and released while a response streams.
		ReadBufferSize: 16 << 10,
		// fasthttp's parse errors quote the raw request (a gateway key
		// with it) unless told not to; errorHandler never uses their text
		// either.
		SecureErrorLogMessage: true,
		// A stream writes one event (a few hundred bytes) per flush, and
		// bufio passes larger writes straight through: a small buffer
		// keeps the memory of many streams in flight low.
		WriteBufferSize: 1024,
		// Slow clients (slowloris) cannot hold a connection: its first
		// byte and headers must come within ReadHeaderTimeout, its body
		// within ReadBodyTimeout after them. The read deadline left set
		// from the body is harmless: nothing reads the client while the
		// response streams, and the client-gone peek ignores deadlines.
		ReadTimeout:     p.cfg.ReadHeaderTimeout,
		HeaderReceived:  p.headerReceived, // also stamps t0, see t0.go
		IdleTimeout:     90 * time.Second,
		CloseOnShutdown: true,
		// fasthttp logs every connection that ends with an error; for a
		// proxy those are clients leaving and broken upstreams, which the
		// records already tell. Keep its log quiet.
		Logger: quietLogger{},
	}
}

// headerReceived runs once a request's headers are read: it stamps t0
// (t0.go) and gives the body its own read deadline.
func (p *Proxy) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	stampT0(h)
	return fasthttp.RequestConfig{ReadTimeout: p.cfg.ReadBodyTimeout}
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

var (
	pathChat        = []byte("/v1/chat/completions")
	pathCompletions = []byte("/v1/completions")
	hdrRequestID    = []byte("X-Request-Id")
)

// routeOf returns the metered API of a request: POST to the OpenAI routes,
// with or without the /v1 prefix (llama.cpp, and other engines, serve both).
func routeOf(ctx *fasthttp.RequestCtx) meter.API {
	if !ctx.IsPost() {
		return meter.APIOther
	}
	path := ctx.Path()
	switch {
	case bytes.Equal(path, pathChat), bytes.Equal(path, pathChat[3:]):
		return meter.APIChat
	case bytes.Equal(path, pathCompletions), bytes.Equal(path, pathCompletions[3:]):
		return meter.APICompletions
	}
	return meter.APIOther
}

// newRecord starts a record at t0.
func (p *Proxy) newRecord(t0 time.Time, reqID []byte) *meter.Record {
	rec := p.records.Get().(*meter.Record)
	rec.Reset()
	rec.Start = t0
	if validRequestID(reqID) {
		rec.RequestID = string(reqID)
	} else {
		rec.RequestID = newRequestID()
	}
	rec.Upstream = p.cfg.Upstream
	return rec
}

// maxRequestIDLen bounds a client's X-Request-Id.
const maxRequestIDLen = 128

// validRequestID reports whether a client's X-Request-Id is kept: 1 to 128
// visible ASCII characters. Any other value (empty, too long, spaces,
// control or non-ASCII bytes) is replaced by a generated id, which is the
// one logged, returned to the client and sent to the engine.
func validRequestID(id []byte) bool {
	if len(id) == 0 || len(id) > maxRequestIDLen {
		return false
	}
	for _, c := range id {
		if c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

// newRequestID returns 32 random hex digits.
func newRequestID() string {
	var b [16]byte
	for i := 0; i < 16; i += 8 {
		v := rand.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return hex.EncodeToString(b[:])
}

func (p *Proxy) begin(rec *meter.Record) {
	if p.cfg.Judge != nil {
		func() {
			defer p.containSinkPanic(rec, "Judge.Begin")
			p.cfg.Judge.Begin(rec)
		}()
	}
	if p.cfg.Sink != nil {
		defer p.containSinkPanic(rec, "Begin")
		p.cfg.Sink.Begin(rec)
	}
}

// emit judges a finished record, hands it to the sinks and recycles it. A
// judge or sink that panics is logged; the request's bookkeeping is done all the same, so Wait
// and InFlight stay right.
func (p *Proxy) emit(rec *meter.Record) {
	if p.cfg.Judge != nil {
		func() {
			defer p.containSinkPanic(rec, "Judge")
			p.cfg.Judge.Judge(rec)
		}()
	}
	if p.cfg.Sink != nil {
		func() {
			defer p.containSinkPanic(rec, "Record")
			p.cfg.Sink.Record(rec)
		}()
	}
	p.records.Put(rec)
	p.inFlight.Add(-1)
	p.wg.Done()
}

func (p *Proxy) containSinkPanic(rec *meter.Record, what string) {
	if r := recover(); r != nil {
		p.cfg.Logf("proxy: panic in a record sink (%s) for request %s: %v\n%s", what, rec.RequestID, r, debug.Stack())
	}
}

// Handler serves one client request.
func (p *Proxy) Handler(ctx *fasthttp.RequestCtx) {
	t0 := requestStart(&ctx.Request.Header) // headers read, before the body
	tBody := time.Now()                     // the body is read
	p.inFlight.Add(1)
	p.wg.Add(1)
	rec := p.newRecord(t0, ctx.Request.Header.PeekBytes(hdrRequestID))
	// owned: this goroutine still owns rec, whose record is neither emitted
	// nor handed on (to a stream, or to one of the functions below that end
	// the request). A panic while it is owned ends the request with one
	// record (500) instead of the process.
	owned := true
	var adm admission
	var guard *clientGuard // watches the client until a stream takes it over
	defer func() {
		if r := recover(); r != nil {
			if owned {
				guard.stop()
			}
			p.handlerPanic(ctx, rec, owned, &adm, r)
		}
	}()
	ctx.Response.Header.SetBytesKV(hdrRequestID, []byte(rec.RequestID))
	api := routeOf(ctx)
	rec.Route = api.String()
	key, ok, missing := p.identify(ctx, rec)
	if !ok {
		owned = false
		p.unauthorized(ctx, rec, missing)
		return
	}

	if testHookRequest != nil {
		testHookRequest()
	}
	body, err := p.readBody(ctx)
	if err != nil {
		owned = false
		p.reject(ctx, rec, err)
		return
	}

	upReq := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(upReq)
	ctx.Request.Header.CopyTo(&upReq.Header)
	removeHopRequest(&upReq.Header)
	upReq.Header.SetHost(p.upHost)
	upReq.UseHostHeader = false
	upReq.SetRequestURIBytes(ctx.Request.RequestURI())
	appendForwardedFor(&upReq.Header, ctx.RemoteIP())
	upReq.Header.SetBytesKV(hdrRequestID, []byte(rec.RequestID))
	if p.cfg.Keys != nil {
		// The gateway key stays here; the engine gets the tenant's own
		// upstream credential, or none. The tenant comes from the key, so a
		// client's tenant header is not passed on for the engine to trust.
		upReq.Header.Del("Authorization")
		upReq.Header.Del("X-Api-Key")
		upReq.Header.Del(p.cfg.TenantHeader)
		if key.Tenant.UpstreamKey != "" {
			upReq.Header.Set("Authorization", "Bearer "+key.Tenant.UpstreamKey)
		}
	}

	var ri reqInfo
	var bodyBuf *[]byte
	if api != meter.APIOther {
		// Compressed responses cannot be parsed as they pass (and break
		// streaming in some clients): ask the engine for identity.
		upReq.Header.Set("Accept-Encoding", "identity")
		jp := p.parsers.Get()
		var v *fastjson.Value
		ri, v = parseRequest(jp, body)
		if ri.valid {
			if dup := duplicateKey(v); dup != "" {
				// The engine (Python's json: the last value wins) and the
				// gateway (the first) would read different requests: a
				// cheap model charged, an expensive one run.
				p.parsers.Put(jp)
				owned = false
				p.reject(ctx, rec, errBadBody{errors.New("duplicate key " + strconv.Quote(dup) + " in the request body")})
				return
			}
			rec.Model = ri.model
			rec.Stream = ri.stream
			if ri.stream && ri.usage == usageNotAsked {
				bodyBuf = p.getBodyBuf()
				*bodyBuf = injectUsage((*bodyBuf)[:0], body, v)
				body = *bodyBuf
			}
		}
		p.parsers.Put(jp)
	}
	p.begin(rec) // tenant, route and model are known
	upReq.SetBodyRaw(body)
	if bodyBuf != nil {
		defer p.bodies.Put(bodyBuf)
	}

	var d ratelimit.Decision
	if p.cfg.Keys != nil && p.cfg.Limits != nil {
		owned = false // admit ends a request it refuses
		if !p.admit(ctx, rec, &adm, &d, len(body), ri) {
			return
		}
		owned = true
	}

	var deadline time.Time
	if p.cfg.TotalTimeout > 0 {
		deadline = t0.Add(p.cfg.TotalTimeout)
	}
	resp := fasthttp.AcquireResponse()
	tUp := time.Now()
	// The gateway's own time, from the end of the body's upload (which is
	// the client's, and part of TTFT) to the upstream write.
	rec.Overhead = tUp.Sub(tBody)
	// first_token bounds the wait for a stream's first token from the
	// upstream request on, response headers or not; a token cannot come
	// before the headers, so it bounds their wait too.
	firstToken := tUp.Add(p.cfg.FirstTokenTimeout)
	firstByte := tUp.Add(p.cfg.FirstByteTimeout)
	if ri.stream && firstToken.Before(firstByte) {
		firstByte = firstToken
	}
	if !deadline.IsZero() && deadline.Before(firstByte) {
		firstByte = deadline
	}
	if api != meter.APIOther {
		// Watches the client until its first token is written (the stream
		// stops it then), or until the exchange ends here.
		guard = startGuard(ctx.Conn())
	}
	conn, err := p.up.exchange(upReq, resp, firstByte, ctx.IsHead(), guard)
	if guard.clientLeft() || err != nil {
		if guard.stop() {
			// The client left before the first byte: the exchange was cut
			// short (or its connection's deadline spoiled); nobody to answer.
			if err == nil {
				_ = resp.CloseBodyStream()
				p.up.discard(conn)
			}
			fasthttp.ReleaseResponse(resp)
			owned = false
			p.clientLeft(ctx, rec, &adm, "client went away before the first byte")
			return
		}
		fasthttp.ReleaseResponse(resp)
		owned = false
		p.upstreamFailed(ctx, rec, err, &adm)
		return
	}

	status := resp.StatusCode()
	rec.Status, rec.UpstreamStatus = status, status
	ctx.Response.SetStatusCode(status)
	resp.Header.CopyTo(&ctx.Response.Header)
	removeHopResponse(&ctx.Response.Header)
	ctx.Response.Header.SetBytesKV(hdrRequestID, []byte(rec.RequestID))
	if adm.admitted {
		d.WriteHeaders(&ctx.Response.Header)
	}

	s := acquireStream()
	s.p, s.rec, s.api, s.conn, s.resp = p, rec, api, conn, resp
	s.body = resp.BodyStream()
	s.deadline = deadline
	s.firstToken = firstToken
	s.guard = guard
	s.adm = adm
	s.metering = api != meter.APIOther
	s.stripUsage = ri.valid && ri.stream && ri.usage == usageNotAsked
	s.mode = modeRaw
	ce := resp.Header.ContentEncoding()
	gunzip := false
	switch {
	case !s.metering || len(ce) == 0 || bytes.EqualFold(ce, []byte("identity")):
	case isGzip(ce) && s.body != nil:
		// Decoded as it streams, metered, and sent identity-encoded (see
		// gunzip.go): the client gets what the gateway asked the engine for.
		gunzip = true
		s.body = &gunzipBody{src: s.body}
		ctx.Response.Header.Del(fasthttp.HeaderContentEncoding)
	default:
		s.metering = false
		s.contentErr = "response is " + string(ce) + "-encoded; not metered"
		if s.stripUsage {
			// It cannot be decoded, so the usage chunk the gateway asked
			// for on the client's behalf reaches the client.
			s.contentErr += "; the usage chunk the gateway requested passes to the client"
		}
	}
	if s.metering {
		ct := resp.Header.ContentType()
		switch {
		case bytes.HasPrefix(ct, []byte("text/event-stream")):
			s.mode = modeSSE
			rec.Stream = true
		case bytes.HasPrefix(ct, []byte("application/json")):
			s.mode = modeJSON
			rec.Stream = false
		case ri.stream && status < 300:
			// A stream under another type (text/plain, none): engines that
			// mislabel their SSE. It is framed as SSE, so it is metered and
			// a usage chunk the client did not ask for is removed; bytes
			// that are not SSE pass through as they are.
			s.mode = modeSSE
		}
	}
	// A metered stream waits for its first token under first_token, then
	// each read under idle; the guard watches the client until the first
	// token (any body byte, for a body without token events) is written.
	s.awaitToken = s.mode == modeSSE && s.metering
	s.markNext = !s.awaitToken
	s.meter.Start(t0)
	s.framer.MaxEventSize = p.cfg.MaxEventBytes
	if s.body == nil {
		// No body at all (HEAD, 204, 304): the exchange is complete.
		s.finishBody(time.Now())
		s.setEnd(endEOF, "")
		owned = false
		p.finishStream(s)
		return
	}
	cl := resp.Header.ContentLength()
	if s.mode == modeSSE || cl < 0 || gunzip {
		cl = -1
		ctx.Response.ImmediateHeaderFlush = true
	}
	owned = false
	s.start()
	ctx.Response.SetBodyStream(s, cl)
}

// testHookRequest, when set by a test, runs in the handler of every request
// once it is identified.
var testHookRequest func()

// handlerPanic ends a request whose handling panicked. While the handler
// still owned the record it answers 500 and emits the record (outcome
// upstream_error, "gateway internal error"); once the record was handed on,
// whoever holds it ends it, and only the log says what happened.
func (p *Proxy) handlerPanic(ctx *fasthttp.RequestCtx, rec *meter.Record, owned bool, adm *admission, r any) {
	id := "?"
	if owned {
		id = rec.RequestID
	}
	p.cfg.Logf("proxy: panic while handling request %s: %v\n%s", id, r, debug.Stack())
	if !owned {
		return
	}
	ctx.SetConnectionClose()
	ctx.Response.SetBodyStream(nil, 0)
	writeError(ctx, fasthttp.StatusInternalServerError, "gateway internal error", "server_error", "internal_error")
	rec.Status = fasthttp.StatusInternalServerError
	rec.Outcome = meter.OutcomeUpstreamError
	rec.ErrorMessage = errInternal.Error()
	rec.E2E = time.Since(rec.Start)
	p.settle(rec, adm)
}

// identify sets rec's tenant (and key id) from the request headers: with
// gateway keys, from the key, and ok is false when there is no valid one
// (missing says it was absent); without, from TenantHeader, else "default".
func (p *Proxy) identify(ctx *fasthttp.RequestCtx, rec *meter.Record) (key ratelimit.KeyInfo, ok, missing bool) {
	if p.cfg.Keys == nil {
		if t := ctx.Request.Header.Peek(p.cfg.TenantHeader); len(t) > 0 {
			rec.Tenant = string(t)
		} else {
			rec.Tenant = DefaultTenant
		}
		return key, true, false
	}
	k := ratelimit.ExtractKey(ctx.Request.Header.Peek("Authorization"), ctx.Request.Header.Peek("X-Api-Key"))
	if key, ok = p.cfg.Keys.Lookup(k); !ok {
		return key, false, len(k) == 0
	}
	rec.Tenant, rec.KeyID = key.Tenant.Name, key.ID
	return key, true, false
}

// readBody returns the request body, enforcing MaxBodyBytes. fasthttp has
// already refused bodies over the limit (see errorHandler); this guards a
// handler installed on a server configured otherwise.
func (p *Proxy) readBody(ctx *fasthttp.RequestCtx) ([]byte, error) {
	if ctx.Request.Header.ContentLength() > p.cfg.MaxBodyBytes {
		return nil, errBodyTooLarge
	}
	b := ctx.Request.Body()
	if len(b) > p.cfg.MaxBodyBytes {
		return nil, errBodyTooLarge
	}
	return b, nil
}

var errBodyTooLarge = errors.New("request body too large")

type errBadBody struct{ err error }

func (e errBadBody) Error() string { return "bad request: " + e.err.Error() }

func (p *Proxy) getBodyBuf() *[]byte {
	if b, ok := p.bodies.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 4096)
	return &b
}

// appendForwardedFor appends the client's address to X-Forwarded-For.
func appendForwardedFor(h *fasthttp.RequestHeader, ip net.IP) {
	if ip == nil {
		return
	}
	prior := h.Peek("X-Forwarded-For")
	if len(prior) == 0 {
		h.Set("X-Forwarded-For", ip.String())
		return
	}
	v := make([]byte, 0, len(prior)+2+16)
	v = append(append(v, prior...), ", "...)
	v = append(v, ip.String()...)
	h.SetBytesV("X-Forwarded-For", v)
}

// reject answers a request the gateway refuses before contacting the
// upstream.
func (p *Proxy) reject(ctx *fasthttp.RequestCtx, rec *meter.Record, err error) {
	p.begin(rec)
	ctx.SetConnectionClose() // an unread body may still be on the connection
	if errors.Is(err, errBodyTooLarge) {
		msg := "request body exceeds the gateway's limit of " + strconv.Itoa(p.cfg.MaxBodyBytes) + " bytes"
		writeError(ctx, fasthttp.StatusRequestEntityTooLarge, msg, "invalid_request_error", "request_too_large")
		rec.ErrorMessage = msg
	} else {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error(), "invalid_request_error", "bad_request")
		rec.ErrorMessage = err.Error()
	}
	rec.Status = ctx.Response.StatusCode()
	rec.Outcome = meter.OutcomeRejected
	rec.E2E = time.Since(rec.Start)
	p.emit(rec)
}

// admission is what the limiter charged a request; it is reconciled with
// the real usage when the request ends.
type admission struct {
	admitted  bool
	ticket    ratelimit.Ticket
	promptEst int64 // charged for the prompt when the engine reports no count
}

// admit applies the tenant's limits. It answers and records a refused
// request itself and returns false.
func (p *Proxy) admit(ctx *fasthttp.RequestCtx, rec *meter.Record, adm *admission, d *ratelimit.Decision, bodyLen int, ri reqInfo) bool {
	req := ratelimit.Request{Tenant: rec.Tenant, KeyID: rec.KeyID, Model: rec.Model}
	req.EstTokens, req.DefaultOutput = ratelimit.EstimateRequest(bodyLen, int64(ri.maxTokens), p.cfg.DefaultMaxTokens)
	// fasthttp tells nothing of a client that leaves while its request
	// waits: with queueing on, a watcher peeks at the connection and ends
	// the wait when the client has gone.
	admitCtx := p.cutCtx // ends at Cut: nobody stays queued through a shutdown
	if p.cfg.Limits.MaxWait() > 0 {
		var stop func()
		admitCtx, stop = watchClient(p.cutCtx, ctx.Conn(), clientPoll)
		defer stop()
	}
	ticket, queued, err := p.cfg.Limits.Admit(admitCtx, &req, d)
	if p.cfg.Limits.MaxWait() > 0 {
		rec.QueueWait = queued
	}
	if err != nil && admitCtx.Err() != nil {
		if p.cutCtx.Err() != nil {
			p.upstreamFailed(ctx, rec, errShutdown, adm) // never reached it, and never will
			return false
		}
		p.clientLeft(ctx, rec, adm, "client went away while queued")
		return false
	}
	if errors.Is(err, ratelimit.ErrUnknownTenant) {
		// The tenant vanished in a reload between lookup and admission.
		p.unauthorized(ctx, rec, false)
		return false
	}
	// Any other error is the backend failing: d holds what the
	// on_backend_error policy decided (allow, or 503), and the gate counted
	// the error.
	if !d.Allowed {
		d.WriteHeaders(&ctx.Response.Header)
		status, msg, typ, code := d.ErrorInfo(rec.Tenant)
		writeError(ctx, status, msg, typ, code)
		rec.Status = status
		rec.Outcome = meter.OutcomeRateLimited
		rec.ErrorMessage = msg
		rec.E2E = time.Since(rec.Start)
		p.emit(rec)
		return false
	}
	adm.admitted = true
	adm.ticket = ticket
	adm.promptEst = ratelimit.EstimateTokens(bodyLen, 0, 0)
	return true
}

// clientLeft records a request whose client went away before any response
// byte. There is nobody to answer; the status recorded is 499, as nginx and
// Caddy log it.
func (p *Proxy) clientLeft(ctx *fasthttp.RequestCtx, rec *meter.Record, adm *admission, msg string) {
	ctx.SetConnectionClose()
	rec.Status = meter.StatusClientClosed
	rec.Outcome = meter.OutcomeClientAbort
	rec.ErrorMessage = msg
	rec.E2E = time.Since(rec.Start)
	p.settle(rec, adm)
}

// clientPoll is how often a queued request checks that its client is still
// there.
const clientPoll = 20 * time.Millisecond

// watchClient returns a context, child of parent, that is also cancelled
// once the client of conn has gone (checked every poll), and the function
// that stops the watch.
// Where the connection cannot be peeked at, the context is never cancelled.
func watchClient(parent context.Context, conn net.Conn, poll time.Duration) (context.Context, func()) {
	c, cancel := context.WithCancel(parent)
	gone := peek.Poller(conn)
	if gone == nil {
		return c, cancel
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(poll)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if gone() {
					cancel()
					return
				}
			}
		}
	}()
	return c, func() { close(done); cancel() }
}

// reconcile charges an admitted request what it really used: the engine's
// counts, or the prompt estimate where it gave none.
func (p *Proxy) reconcile(rec *meter.Record, adm *admission) {
	if !adm.admitted {
		return
	}
	used := adm.promptEst
	if rec.ISL >= 0 {
		used = int64(rec.ISL)
	}
	if rec.OSL > 0 {
		used += int64(rec.OSL)
	}
	// Errors are counted by the gate; a failed reconcile leaves the
	// estimate charged and the concurrency lease to expire.
	_ = p.cfg.Limits.Reconcile(context.Background(), adm.ticket, used)
	adm.admitted = false
}

// settle reconciles an admitted request and emits its record, the last
// thing done for every request that reached the upstream. With a remote
// limiter (Redis) the reconcile is a round trip, and up to the Redis timeout
// while Redis is out; fasthttp sends the end of the response only after the
// handler and the body stream's Close return. So the reconcile and then the
// record run in a goroutine of their own: a dead Redis adds its timeout to a
// request once (at admission), not twice. The record still follows the
// reconcile, and Proxy.Wait waits for both.
func (p *Proxy) settle(rec *meter.Record, adm *admission) {
	if adm.admitted && p.remoteLimits {
		a := *adm
		go func() {
			p.reconcile(rec, &a)
			p.emit(rec)
		}()
		return
	}
	p.reconcile(rec, adm)
	p.emit(rec)
}

// unauthorized answers a request without a valid gateway key. It has no
// tenant (only requests with a valid key are judged: docs/MEASURES.md, SLOs).
func (p *Proxy) unauthorized(ctx *fasthttp.RequestCtx, rec *meter.Record, missing bool) {
	rec.Tenant, rec.KeyID = "", ""
	msg := "invalid gateway key"
	if missing {
		msg = "missing gateway key: send Authorization: Bearer <key> or x-api-key"
	}
	p.begin(rec)
	writeError(ctx, fasthttp.StatusUnauthorized, msg, "invalid_request_error", "invalid_api_key")
	rec.Status = fasthttp.StatusUnauthorized
	rec.Outcome = meter.OutcomeUnauthorized
	rec.ErrorMessage = msg
	rec.E2E = time.Since(rec.Start)
	p.emit(rec)
}

// upstreamFailed answers when no response came from the upstream.
func (p *Proxy) upstreamFailed(ctx *fasthttp.RequestCtx, rec *meter.Record, err error, adm *admission) {
	var ce errConnect
	switch {
	case errors.Is(err, errShutdown) || p.up.cut.Load():
		// Cut by the shutdown (fasthttp may wrap the expired deadline in an
		// error that does not say timeout).
		err = errShutdown
		writeError(ctx, fasthttp.StatusServiceUnavailable, "gateway shutting down", "server_error", "shutting_down")
		rec.Outcome = meter.OutcomeTimeout
	case errors.As(err, &ce) && !isTimeout(err):
		writeError(ctx, fasthttp.StatusBadGateway, "upstream unreachable", "upstream_error", "upstream_unreachable")
		rec.Outcome = meter.OutcomeUpstreamError
	case isTimeout(err):
		writeError(ctx, fasthttp.StatusGatewayTimeout, "upstream did not answer in time", "timeout", "upstream_timeout")
		rec.Outcome = meter.OutcomeTimeout
	default:
		writeError(ctx, fasthttp.StatusBadGateway, "upstream failed before responding", "upstream_error", "bad_gateway")
		rec.Outcome = meter.OutcomeUpstreamError
	}
	rec.ErrorMessage = err.Error()
	rec.Status = ctx.Response.StatusCode()
	rec.E2E = time.Since(rec.Start)
	p.settle(rec, adm)
}

// errorHandler is fasthttp's hook for requests it could not read or parse;
// they reached the gateway, so they get a record too. fasthttp's error text
// quotes the raw request (headers and all, a gateway key included), so it
// is never used: each kind of failure gets a fixed message.
func (p *Proxy) errorHandler(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		p.inFlight.Add(1)
		p.wg.Add(1)
		// The headers were read: the request is identified as the handler
		// would, key first, so an oversized body is counted against the
		// tenant whose key sent it, and a request without a valid key gets
		// 401.
		rec := p.newRecord(requestStart(&ctx.Request.Header), ctx.Request.Header.PeekBytes(hdrRequestID))
		ctx.Response.Header.SetBytesKV(hdrRequestID, []byte(rec.RequestID))
		rec.Route = routeOf(ctx).String()
		if _, ok, missing := p.identify(ctx, rec); !ok {
			ctx.SetConnectionClose() // the unread body is still on the connection
			p.unauthorized(ctx, rec, missing)
			return
		}
		p.reject(ctx, rec, errBodyTooLarge)
		return
	}
	status, msg, code := readErrorInfo(err)
	if status == 0 && clientSent(ctx.Conn()) {
		// Bytes of a request were read, so its body is what did not come
		// in time (read_body): fasthttp passes that read error unwrapped
		// too (and has reset the request by now). Nothing-read reaches
		// here only on a connection's first request, which read no byte.
		status, msg, code = fasthttp.StatusRequestTimeout, "request not received in time", "request_timeout"
	}
	if status == 0 {
		// A connection that sent nothing before its read deadline: no
		// request reached the gateway (a TCP probe, an idle client).
		ctx.SetConnectionClose()
		ctx.Response.ResetBody()
		ctx.SetStatusCode(fasthttp.StatusRequestTimeout)
		return
	}
	p.inFlight.Add(1)
	p.wg.Add(1)
	// Nothing in the request can be trusted, so it names no tenant when
	// keys are required.
	rec := p.newRecord(time.Now(), nil)
	ctx.Response.Header.SetBytesKV(hdrRequestID, []byte(rec.RequestID))
	rec.Route = meter.APIOther.String()
	if p.cfg.Keys == nil {
		rec.Tenant = DefaultTenant
	}
	p.begin(rec)
	ctx.SetConnectionClose()
	writeError(ctx, status, msg, "invalid_request_error", code)
	rec.Status = status
	rec.Outcome = meter.OutcomeRejected
	rec.ErrorMessage = msg
	rec.E2E = time.Since(rec.Start)
	p.emit(rec)
}

// readErrorInfo maps an error from reading a request to the answer: a
// status, a fixed message and an error code. Status 0 means no byte of a
// request was read.
func readErrorInfo(err error) (status int, msg, code string) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.As(err, &small):
		return fasthttp.StatusRequestHeaderFieldsTooLarge, "request headers too large", "headers_too_large"
	case errors.As(err, &ne) && ne.Timeout():
		if _, direct := err.(net.Error); direct {
			// fasthttp passes the read error itself, unwrapped, only when
			// nothing of a request was read.
			return 0, "", ""
		}
		return fasthttp.StatusRequestTimeout, "request not received in time", "request_timeout"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return fasthttp.StatusBadRequest, "request ended before it was complete", "bad_request"
	}
	return fasthttp.StatusBadRequest, "malformed HTTP request", "bad_request"
}

// writeError writes an OpenAI-style error body.
func writeError(ctx *fasthttp.RequestCtx, status int, msg, typ, code string) {
	ctx.Response.ResetBody()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	b := make([]byte, 0, 96+len(msg))
	b = append(b, `{"error":{"message":`...)
	b = strconv.AppendQuote(b, msg)
	b = append(b, `,"type":`...)
	b = strconv.AppendQuote(b, typ)
	b = append(b, `,"code":`...)
	b = strconv.AppendQuote(b, code)
	b = append(b, "}}\n"...)
	ctx.SetBody(b)
}

// finishStream settles a stream's outcome, emits its record and recycles
// the stream and the upstream connection.
func (p *Proxy) finishStream(s *stream) {
	rec := s.rec
	s.guard.stop()
	s.meter.Finish(rec)
	end := s.end.Load()
	if end == endAbort && !s.tokenWritten {
		// The client left before its first token reached it: whatever the
		// engine had sent by then, the client saw no first token.
		rec.TTFT, rec.TTFTContent, rec.TPOT = meter.Unknown, meter.Unknown, meter.Unknown
	}
	msg := ""
	if m := s.endErr.Load(); m != nil {
		msg = *m
	}
	switch end {
	case endAbort:
		rec.Outcome = meter.OutcomeClientAbort
	case endTimeout:
		rec.Outcome = meter.OutcomeTimeout
	case endLimit:
		rec.Outcome = meter.OutcomeRateLimited
	case endUpstream:
		rec.Outcome = meter.OutcomeUpstreamError
	default:
		switch {
		case rec.Status >= 500:
			rec.Outcome = meter.OutcomeUpstreamError
			msg = "upstream status " + strconv.Itoa(rec.Status)
		case rec.Status >= 400:
			rec.Outcome = meter.OutcomeClientError
			msg = "upstream status " + strconv.Itoa(rec.Status)
		case s.contentErr != "" && s.metering:
			rec.Outcome = meter.OutcomeUpstreamError
			msg = s.contentErr
		case s.contentErr != "":
			// not metered (encoded, or an event over the size limit)
			if s.contentErr == errEventTooLarge {
				rec.Outcome = meter.OutcomeUpstreamError
			} else {
				rec.Outcome = meter.OutcomeOK
			}
			msg = s.contentErr
		default:
			rec.Outcome = meter.OutcomeOK
		}
	}
	rec.ErrorMessage = msg
	if s.writeDelay > 0 {
		rec.WriteDelay = s.writeDelay
	}
	if rec.E2E < 0 {
		// No token event, or not a stream: E2E is the end of the response.
		rec.E2E = time.Since(rec.Start)
	}

	if g, ok := s.body.(*gunzipBody); ok {
		g.release()
	}
	// Recycle the upstream connection only after a clean, complete body.
	if s.resp != nil {
		_ = s.resp.CloseBodyStream()
		if end == endEOF && !s.resp.ConnectionClose() {
			p.up.put(s.conn, time.Now())
		} else {
			p.up.discard(s.conn)
		}
		fasthttp.ReleaseResponse(s.resp)
	}
	p.settle(rec, &s.adm)
	releaseStream(s)
}
