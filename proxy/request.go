package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goodput/goodput/identity"
	"github.com/goodput/goodput/internal/keyshape"
	"github.com/goodput/goodput/internal/phases"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// request is one client request on its way through the gateway: what the
// handler's steps share, and the one place where a request the handler
// ends is ended (finish). A request handed to a stream is ended by the
// stream (finishStream); either way its record goes out through settle,
// exactly once.
type request struct {
	p   *Proxy
	ctx *fasthttp.RequestCtx
	rec *meter.Record
	api meter.API
	key identity.KeyInfo

	tBody   time.Time // the body is read: the gateway's own time starts
	tUp     time.Time // the request went upstream
	body    []byte    // what goes upstream (the client's, or rewritten)
	bodyBuf *[]byte   // pooled buffer of a rewritten body
	held    int64     // bytes of the body budget this request holds (bodybudget.go)
	ri      reqInfo
	trace   []traceField // the fields the Tracer writes into the engine's request (upTrace)
	replay  bool         // the engine's request may be sent again, received or not (replayable)
	adm     admission
	d       ratelimit.Decision
	guard   *clientGuard // watches the client until a stream takes it over

	ph phases.Clock // times the steps (a build with -tags phases; empty otherwise)

	begun bool // the sinks' Begin ran
	done  bool // the record is emitted, or handed on to a stream
	sent  bool // the request was written upstream in full (the engine may act on it)
	timed bool // the engine's head was written once, its time counted in the overhead (appendUpHead)

	names headNames // the names of the client's head rewrite treats apart (headerNames)
}

var requestPool = sync.Pool{New: func() any { return new(request) }}

// answer is how the gateway answers a request it ends itself: a status and
// an error body, in OpenAI's shape (typ and code are OpenAI's), or in
// Anthropic's on the Messages API route (writeError). Status 499 (the
// client left) writes nothing.
type answer struct {
	status         int
	msg, typ, code string
}

// testHookRequest, when set by a test, runs in the handler of every request
// once it is identified.
var testHookRequest func()

// Handler serves one client request as a pipeline of named steps:
// identify → method → header names → read the body → rewrite → admit →
// exchange → stream. A step that ends the request calls finish and
// returns false; a panic in any step ends the request with one record
// (500), never the process.
func (p *Proxy) Handler(ctx *fasthttp.RequestCtx) {
	in := phases.Now()
	trailer := hasTrailer(&ctx.Request.Header)
	bareLF := hasBareLF(ctx.Request.Header.RawHeaders())
	if trailer || bareLF {
		// Nothing the header holds can be told from what came after the
		// body, or from another request's lines: the request id is a
		// generated one.
		ctx.Request.Header.Del(string(hdrRequestID))
	}
	r := p.startRequest(ctx, requestStart(ctx))
	defer r.release()
	r.ph.Begin(r.rec.Start)
	r.ph.MarkAt(phases.HeadToHandler, in)
	r.ph.Mark(phases.Start)
	switch {
	case trailer:
		r.refuseUntrusted(errTrailer)
		return
	case bareLF:
		r.refuseUntrusted(errBareLFRequest)
		return
	}
	if !r.identify() || !r.method() || !r.headerNames() || !r.readBody() {
		return
	}
	r.ph.Mark(phases.Identify)
	if !r.rewrite() {
		return
	}
	r.ph.Mark(phases.RewriteBody)
	if !r.admit() {
		return
	}
	r.ph.Mark(phases.Admit)
	conn, resp, ok := r.exchange()
	if !ok {
		return
	}
	r.stream(conn, resp)
}

// startRequest counts a request in flight and starts its record at t0.
func (p *Proxy) startRequest(ctx *fasthttp.RequestCtx, t0 time.Time) *request {
	id := ctx.Request.Header.PeekBytes(hdrRequestID)
	if len(id) > 0 && p.idCarriesKey(id, &ctx.Request.Header) {
		id = nil // a generated one instead
	}
	return p.beginRequest(ctx, t0, id, routeOf(ctx))
}

// startHeld is startRequest for a request whose body failed while it was
// read (errorHandler): fasthttp has reset its headers, and what the record
// needs of them is what headerReceived kept (heldhead.go). It is
// identified as identify would have: the key's tenant (none without a
// valid key), else the tenant header's, else the default.
func (p *Proxy) startHeld(ctx *fasthttp.RequestCtx, hh *heldHead) *request {
	id := hh.id()
	if len(id) > 0 && (p.cfg.Keys != nil && identity.HoldsKeyShape(id) || keyshape.HoldsWhole(id)) {
		id = nil // the rest of idCarriesKey was checked as the head was kept
	}
	if tp := hh.traceparent(); len(tp) > 0 {
		// For the span, which beginRequest starts from the headers.
		ctx.Request.Header.SetBytesV("traceparent", tp)
	}
	r := p.beginRequest(ctx, hh.start(), id, hh.route())
	switch {
	case p.cfg.Keys == nil && hh.hasTenant:
		r.rec.Tenant = string(hh.tenant())
	case p.cfg.Keys == nil:
		r.rec.Tenant = DefaultTenant
	case hh.keyOK:
		r.key = hh.key
		r.rec.Tenant, r.rec.KeyID = hh.key.Tenant.Name, hh.key.ID
	}
	return r
}

// beginRequest counts a request in flight and starts its record at t0,
// under the client's request id (when newRecord keeps it) and api's route.
func (p *Proxy) beginRequest(ctx *fasthttp.RequestCtx, t0 time.Time, id []byte, api meter.API) *request {
	r := requestPool.Get().(*request)
	*r = request{p: p, ctx: ctx, tBody: time.Now(), held: p.budget.take(&ctx.Request.Header)}
	p.inFlight.Add(1)
	p.wg.Add(1)
	r.rec = p.newRecord(t0, id)
	ctx.Response.Header.SetBytesKV(hdrRequestID, []byte(r.rec.RequestID))
	r.route(api)
	p.traceStart(r.rec, &ctx.Request.Header)
	return r
}

// route sets the request's API and its record's route. A request on a
// metered route has its model unread (meter.Record.ModelUnread) until its
// body is read for it; one on another route names none.
func (r *request) route(api meter.API) {
	r.api = api
	r.rec.Route = api.String()
	r.rec.ModelUnread = api != meter.APIOther
}

// release ends a request whose step panicked (while the handler still held
// its record), then returns what the request borrowed.
func (r *request) release() {
	if v := recover(); v != nil {
		id := "?"
		if !r.done {
			id = r.rec.RequestID
		}
		r.p.cfg.Logf("proxy: panic while handling request %s: %v\n%s", id, v, debug.Stack())
		if !r.done {
			r.guard.stop()
			r.ctx.SetConnectionClose()
			r.ctx.Response.SetBodyStream(nil, 0)
			// The engine may have the request: the SDKs retry a 500.
			r.noRetryOnceSent()
			r.finish(meter.OutcomeUpstreamError, answer{fasthttp.StatusInternalServerError, errInternal.Error(), "server_error", "internal_error"})
		}
	}
	if r.bodyBuf != nil {
		if poolCheck {
			poison(*r.bodyBuf)
		}
		r.p.bodies.Put(r.bodyBuf)
	}
	if r.ctx != nil {
		// The client's body went upstream (or never will): nothing reads it
		// again, and fasthttp would hold it until the response ends, for
		// a stream as long as the stream (a long prompt, per stream). It
		// goes back to fasthttp's pool now, and leaves the body budget.
		r.ctx.Request.ResetBody()
	}
	r.p.budget.release(r.held)
	*r = request{}
	requestPool.Put(r)
}

// finish ends a request the gateway answers itself: it writes the answer
// (none for a client that left), completes the record and settles it.
func (r *request) finish(o meter.Outcome, a answer) { r.finishWith(o, a, a.msg) }

// finishWith is finish with a record message other than the client's.
func (r *request) finishWith(o meter.Outcome, a answer, recMsg string) {
	if r.done {
		return
	}
	r.done = true
	if !r.begun {
		r.begun = true
		r.p.begin(r.rec)
	}
	same := recMsg == a.msg
	a.msg = r.p.clipMessage(a.msg)
	if same {
		recMsg = a.msg
	} else {
		recMsg = r.p.clipMessage(recMsg)
	}
	if a.status != meter.StatusClientClosed {
		writeError(r.ctx, r.api, a.status, a.msg, a.typ, a.code)
	} else {
		// Nobody to answer (499 is never sent): close the connection, or
		// fasthttp would answer a client that is still there (one that
		// half-closed its side, which looks gone) with an empty 200.
		r.ctx.SetConnectionClose()
		_ = r.ctx.Conn().Close()
	}
	rec := r.rec
	rec.Status, rec.Outcome, rec.ErrorMessage = a.status, o, recMsg
	rec.Stream = false // the gateway's own answer is one JSON body, whatever the request asked for
	rec.E2E = time.Since(rec.Start)
	r.p.settle(rec, &r.adm)
}

// method refuses (405) any method but those of allowedMethods: CONNECT
// and TRACE, as nginx does (a CONNECT forwarded on a pooled engine
// connection asks the engine for a tunnel, and TRACE has the engine echo
// the request back), and methods no OpenAI-compatible API serves. It refuses a request
// line of another HTTP version than 1.0 and 1.1 too (505): fasthttp would
// serve "HTTP/2.0" or "HTTP/1.2" as HTTP/1.0.
func (r *request) method() bool {
	if v := r.ctx.Request.Header.Protocol(); !bytes.Equal(v, http11) && !bytes.Equal(v, http10) {
		r.ctx.SetConnectionClose()
		r.finish(meter.OutcomeRejected, answer{fasthttp.StatusHTTPVersionNotSupported, "HTTP version not supported: the gateway speaks HTTP/1.1 and HTTP/1.0", "invalid_request_error", "http_version_not_supported"})
		return false
	}
	m := r.ctx.Method()
	if uri := r.ctx.Request.Header.RequestURI(); len(uri) == 1 && uri[0] == '*' {
		return r.asterisk(m)
	}
	if servedMethod(m) {
		return true
	}
	r.ctx.SetConnectionClose()
	r.ctx.Response.Header.SetBytesKV(hdrAllow, allowedMethods)
	r.finish(meter.OutcomeRejected, answer{fasthttp.StatusMethodNotAllowed, "method " + strconv.Quote(string(m)) + " is not served by the gateway", "invalid_request_error", "method_not_allowed"})
	return false
}

// asterisk answers a request for "*", the server rather than a resource
// (RFC 9112, 3.2.4): "OPTIONS *" gets 200 with the methods the gateway
// serves, as Go's net/http server answers it, and is not passed on (the
// engine would get it as a path, "/%2A"); any other method is refused.
// It always ends the request: false.
func (r *request) asterisk(m []byte) bool {
	if string(m) != fasthttp.MethodOptions {
		r.ctx.SetConnectionClose()
		r.finish(meter.OutcomeRejected, answer{fasthttp.StatusBadRequest, "the request target \"*\" is for OPTIONS only", "invalid_request_error", "bad_request"})
		return false
	}
	r.done = true
	if !r.begun {
		r.begun = true
		r.p.begin(r.rec)
	}
	r.ctx.Response.Header.SetBytesKV(hdrAllow, allowedMethods)
	rec := r.rec
	rec.Status, rec.Outcome = fasthttp.StatusOK, meter.OutcomeOK
	rec.E2E = time.Since(rec.Start)
	r.p.settle(rec, &r.adm)
	return false
}

// servedMethod reports whether m is one of allowedMethods. Methods are
// case-sensitive: "post" is not POST, and a request sent with it would
// pass on unmetered (as another route) to an engine that may read it as
// POST.
func servedMethod(m []byte) bool {
	switch string(m) {
	case fasthttp.MethodGet, fasthttp.MethodHead, fasthttp.MethodPost, fasthttp.MethodPut,
		fasthttp.MethodPatch, fasthttp.MethodDelete, fasthttp.MethodOptions:
		return true
	}
	return false
}

// hasTrailer reports whether a chunked request carried trailer fields, or
// a Trailer header that announced some. fasthttp keeps trailer fields
// beside the headers, and moves a head field that the Trailer header names
// among them: Peek finds them, and CopyTo and Write pass them on as
// headers; so a gateway key, a tenant or a request id sent after the body
// would count as sent before it, and reach the engine as a header that a
// proxy in front of the gateway never saw (RFC 9110, 6.5.1: trailer fields
// are not merged into the header section). The LLM APIs use none: such a
// request is refused (refuseUntrusted). A Trailer header on a body of known
// length announces nothing that can come, and is passed on as before.
func hasTrailer(h *fasthttp.RequestHeader) bool {
	return h.ContentLength() == -1 && len(h.Peek(fasthttp.HeaderTrailer)) > 0
}

// errTrailer: a request with trailer fields (hasTrailer).
var errTrailer = errors.New("trailer fields are not accepted")

// refuseUntrusted refuses (400) a request none of whose headers can be
// trusted (trailer fields, a bare LF), as one the HTTP server could not
// parse: a generated id (Handler), no tenant under gateway keys, else the
// default one; the connection is closed.
func (r *request) refuseUntrusted(err error) {
	if r.p.cfg.Keys == nil {
		r.rec.Tenant = DefaultTenant
	}
	r.reject(errBadBody{err})
}

// headerNames refuses (400) a request with a header name that is not an
// HTTP token: it is never forwarded (see scanHeadNames). It notes which
// of the names the upstream head treats apart the request has (r.names).
func (r *request) headerNames() bool {
	names, bad := scanHeadNames(r.ctx.Request.Header.RawHeaders(), r.p.cfg.TenantHeader)
	if !bad {
		r.names = names
		return true
	}
	r.reject(errBadBody{errors.New("invalid header name")})
	return false
}

var (
	hdrAllow       = []byte("Allow")
	allowedMethods = []byte("GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")
)

// identify sets the record's tenant (and key id) from the request headers:
// with gateway keys, from the key, and a request without a valid one ends
// as unauthorized (401); without keys, from TenantHeader, else "default".
func (r *request) identify() bool {
	p, rec := r.p, r.rec
	if p.cfg.Keys == nil {
		t := r.ctx.Request.Header.Peek(p.cfg.TenantHeader)
		if len(t) == 0 {
			rec.Tenant = DefaultTenant
			return true
		}
		if carriesWholeKey(t, &r.ctx.Request.Header) {
			// The tenant is written into every record, metric and log:
			// a credential there would be too (a new user's probe).
			r.reject(errBadBody{errors.New("the " + p.cfg.TenantHeader + " header holds a credential (a gateway key, or the request's own Authorization or X-Api-Key): it names the tenant, which every record, metric and log shows")})
			return false
		}
		rec.Tenant = string(t)
		return true
	}
	k := presentedKey(&r.ctx.Request.Header)
	key, ok := p.cfg.Keys.Lookup(k)
	if !ok {
		r.unauthorized(len(k) == 0)
		return false
	}
	r.key = key
	rec.Tenant, rec.KeyID = key.Tenant.Name, key.ID
	if msg := p.targetKeyMessage(r.ctx.Request.Header.RequestURI(), &r.ctx.Request.Header); msg != "" {
		// The target goes to the engine as it came, whose server may log
		// it (uvicorn's access log, vLLM's): a key in it (?api_key=,
		// found by a new user's probe) would be kept there.
		r.reject(errBadBody{errors.New(msg)})
		return false
	}
	return true
}

// unauthorized ends a request without a valid gateway key. It has no
// tenant (only requests with a valid key are judged: docs/MEASURES.md).
func (r *request) unauthorized(missing bool) {
	r.rec.Tenant, r.rec.KeyID = "", ""
	msg := "invalid gateway key"
	if missing {
		msg = "missing gateway key: send Authorization: Bearer <key> or x-api-key"
	}
	r.refuseKey(msg)
}

// refuseKey answers 401 with msg. The connection closes after the answer:
// a client that cannot authenticate holds no idle connection, which would
// keep one of the listener's max_connections slots for the idle timeout
// (90 s), so that a few hundred of them left every client waiting for a
// slot.
func (r *request) refuseKey(msg string) {
	r.ctx.SetConnectionClose()
	r.finish(meter.OutcomeUnauthorized, answer{fasthttp.StatusUnauthorized, msg, "invalid_request_error", "invalid_api_key"})
}

// reject ends a request the gateway refuses before contacting the upstream:
// a body over the limit (413) or a bad one (400).
func (r *request) reject(err error) {
	r.ctx.SetConnectionClose() // an unread body may still be on the connection
	if errors.Is(err, errBodyTooLarge) {
		msg := "request body exceeds the gateway's limit of " + strconv.Itoa(r.p.cfg.MaxBodyBytes) + " bytes"
		r.finish(meter.OutcomeRejected, answer{fasthttp.StatusRequestEntityTooLarge, msg, "invalid_request_error", "request_too_large"})
		return
	}
	r.finish(meter.OutcomeRejected, answer{fasthttp.StatusBadRequest, err.Error(), "invalid_request_error", "bad_request"})
}

// noRoom refuses a request whose body the memory left for request bodies
// could not hold (bodybudget.go): 503 with Retry-After, before its body was
// read. The gateway's doing, not the client's mistake: it is judged.
func (r *request) noRoom() {
	r.ctx.SetConnectionClose() // the unread body is still on the connection
	r.ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, bodyRetryAfter)
	r.finishWith(meter.OutcomeRejected, answer{fasthttp.StatusServiceUnavailable, "the gateway holds as many request bodies in memory as it may (max_body_memory): retry shortly", "server_error", "body_memory_full"},
		"refused before its body was read: the request bodies held in memory left no room for it (max_body_memory)")
}

// readBody takes the request body, enforcing MaxBodyBytes. fasthttp has
// already refused bodies over the limit (see errorHandler); this guards a
// handler installed on a server configured otherwise.
func (r *request) readBody() bool {
	if testHookRequest != nil {
		testHookRequest()
	}
	if r.ctx.Request.Header.ContentLength() > r.p.cfg.MaxBodyBytes {
		r.reject(errBodyTooLarge)
		return false
	}
	r.body = r.ctx.Request.Body()
	if len(r.body) > r.p.cfg.MaxBodyBytes {
		r.reject(errBodyTooLarge)
		return false
	}
	return true
}

// The versions the gateway reads; it speaks HTTP/1.1 to the engine
// (appendUpHead).
var (
	http11 = []byte("HTTP/1.1")
	http10 = []byte("HTTP/1.0")
)

// rewrite makes the upstream request's body: on metered routes the body
// read (model, stream, max tokens) and, for a stream whose client did not
// ask for usage, asked for it. A body with a duplicate key is refused. The
// sinks' Begin runs here: tenant, route and model are known; so does the
// Tracer's Upstream. The head is written as the request goes (exchange,
// appendUpHead): hop-by-hop headers dropped, the gateway key replaced by
// the tenant's upstream credential.
func (r *request) rewrite() bool {
	p, ctx, rec := r.p, r.ctx, r.rec
	if r.api == meter.APIChat && bytes.Equal(ctx.Path(), pathInvocations) {
		jp := p.parsers.Get()
		r.route(invocationAPI(jp, r.body))
		p.parsers.Put(jp)
	}
	if r.api == meter.APITGI && !bytes.Equal(ctx.Path(), pathGenerateStream) {
		jp := p.parsers.Get()
		r.route(generateAPI(jp, r.body, bytes.Equal(ctx.Path(), pathRoot)))
		p.parsers.Put(jp)
	}
	if r.api != meter.APIOther {
		jp := p.parsers.Get()
		var v *fastjson.Value
		r.ri, v = parseRequest(jp, r.body)
		r.ph.Mark(phases.RewriteParse)
		if r.ri.tooDeep {
			// The engine (Python's json) reads what the gateway cannot: a
			// key in its model, a duplicate key, its max_tokens would all
			// pass unchecked.
			p.parsers.Put(jp)
			r.reject(errBadBody{errors.New(tooDeepMessage)})
			return false
		}
		if !r.ri.valid && p.cfg.Keys != nil {
			// With gateway keys the body's model, output limit and
			// duplicate keys are checked for the tenant's limits and for
			// keys in the wrong place; a body the gateway cannot read
			// (NaN's cousin Infinity, a byte-order mark, UTF-16: Python's
			// json reads them) would pass every check. Without keys there
			// is nothing to bypass: the engine answers it.
			p.parsers.Put(jp)
			r.reject(errBadBody{errors.New(unreadableBodyMessage)})
			return false
		}
		if r.ri.valid {
			if dup := duplicateKey(v); dup != "" {
				// The engine (Python's json: the last value wins) and the
				// gateway (the first) would read different requests: a
				// cheap model charged, an expensive one run.
				p.parsers.Put(jp)
				r.reject(errBadBody{errors.New(p.duplicateMessage(dup, &r.ctx.Request.Header))})
				return false
			}
			if r.api == meter.APITGI || r.api == meter.APISGLang {
				// So too within TGI's parameters and SGLang's
				// sampling_params, whose max_new_tokens, best_of and n the
				// gateway reads (nativeRequest).
				if dup := paramsDuplicateKey(v, r.ri.paramsDupAt); dup != "" {
					p.parsers.Put(jp)
					r.reject(errBadBody{errors.New(p.duplicateMessage(dup, &r.ctx.Request.Header))})
					return false
				}
			}
			if foldedRoute(r.api) {
				// The routes Ollama serves: Go's encoding/json reads member
				// names without regard to case, the gateway as written.
				if dup := foldedKey(v); dup != "" {
					p.parsers.Put(jp)
					r.reject(errBadBody{errors.New(p.foldedMessage(dup, &r.ctx.Request.Header))})
					return false
				}
			}
			if msg := p.modelKeyMessage([]byte(r.ri.model), &r.ctx.Request.Header); msg != "" {
				// Refused whole: the body would carry the key to the
				// engine, and the model is written to the request log,
				// the metrics' labels and the admin API.
				p.parsers.Put(jp)
				r.reject(errBadBody{errors.New(msg)})
				return false
			}
			nativeRequest(r.api, v, &r.ri)
			onGenerate := bytes.Equal(ctx.Path(), pathGenerate)
			r.ri.modelUnread = readsNoModel(r.api, v, onGenerate)
			if r.ri.modelUnread {
				r.ri.adapter = adapterOf(v)
			} else {
				r.ri.adapter, r.ri.adapterUnsure, r.ri.adapters = sglangAdapter(r.api, v, r.ri.model, onGenerate && sglangInput(v))
			}
			if r.ri.adapters && p.cfg.Keys != nil && p.cfg.Limits != nil {
				// One request is held by one model's limits (sglangAdapter).
				split, first := r.adaptersSplit(v)
				if split {
					p.parsers.Put(jp)
					r.reject(errBadBody{errors.New(severalAdaptersMessage)})
					return false
				}
				// Its adapters all name one model (or none): held by it.
				r.ri.adapter = first
			}
			if r.api == meter.APITGI && !r.ri.modelUnread && p.cfg.Keys != nil && p.cfg.Limits != nil && r.enginesSplit(v) {
				// Both engines' inputs (readsNoModel): either engine may
				// run it, each its own adapter.
				p.parsers.Put(jp)
				r.reject(errBadBody{errors.New(bothAdaptersMessage)})
				return false
			}
			r.ri.outputs = outputsOf(r.api, v, r.body)
			r.ri.streamChoices = streamChoices(r.api, v, r.body)
			if r.api == meter.APITGI {
				// TGI streams on /generate_stream, and on / when the body
				// says so; never on /generate (it reads no "stream").
				r.ri.stream = bytes.Equal(ctx.Path(), pathGenerateStream) ||
					bytes.Equal(ctx.Path(), pathRoot) && r.ri.stream
			}
			if ollamaLoad(r.api, v) {
				rec.ModelOp = meter.ModelOpLoad
			}
			rec.Model, rec.ModelUnread = r.ri.model, false
			rec.Stream = r.ri.stream
			r.ri.echo, r.ri.echoText = echoOf(r.api, v, r.body)
			rec.Background = r.ri.background && r.api == meter.APIResponses
			if r.injectsUsage() {
				r.bodyBuf = p.getBodyBuf()
				*r.bodyBuf = injectUsage((*r.bodyBuf)[:0], r.body, v)
				r.body = *r.bodyBuf
				if n := int64(cap(r.body)); n > bodyUncounted {
					// The copy is held with the body, and let go with it.
					p.budget.charge(n)
					r.held += n
				}
			}
		}
		p.parsers.Put(jp)
	}
	if r.mayQueue() {
		// A queued request is in flight (the sinks' Begin) while it waits.
		r.begun = true
		p.begin(rec)
	} // else upstreamSent begins it, off the request's way to the engine
	p.traceUpstream(r)
	r.replay = replayable(ctx.Request.Header.Method(), r.body)
	return true
}

// upBody is the body of the engine's request (upRequest).
func (r *request) upBody() []byte { return r.body }

// upReplay reports whether the engine's request may be sent again even
// when it may have reached the engine (upRequest).
func (r *request) upReplay() bool { return r.replay }

// adaptersSplit reports whether the LoRA adapters a batch's lora_path
// names (several, sglangAdapter) would hold its prompts by the limits of
// different models of its tenant, or are more than maxBatchAdapters. An
// adapter the tenant does not list leaves its prompts matched as without
// it, so a batch of adapters none of which the tenant lists (or, where the
// adapter is unsure, whose model the tenant lists) is held as one naming
// none. When they do not, first is the first of them, which holds the
// batch as each would (an alias, an Ollama spelling, of the same model). It
// allocates the names, in a batch naming several adapters only.
func (r *request) adaptersSplit(v *fastjson.Value) (split bool, first string) {
	names := loraNames(v, nil)
	if len(names) > maxBatchAdapters {
		return true, ""
	}
	req := ratelimit.Request{Tenant: r.rec.Tenant, KeyID: r.rec.KeyID, Model: r.ri.model, NoModel: r.ri.model == "", AdapterUnsure: r.ri.adapterUnsure}
	var model string
	for i, name := range names {
		req.Adapter = string(name)
		m, known := r.p.cfg.Limits.MatchModel(&req)
		if !known {
			return false, "" // refused by Admit
		}
		if i == 0 {
			model, first = m, req.Adapter
		} else if m != model {
			return true, ""
		}
	}
	return false, first
}

// enginesSplit reports whether a body on /generate naming both TGI's
// input and SGLang's (readsNoModel), which either engine may run, names
// LoRA adapters that would hold it by different models' limits on each:
// TGI runs its parameters.adapter_id (adapterOf) and ignores lora_path,
// SGLang runs its lora_path (sglangAdapter) and ignores adapter_id. Held
// by lora_path's adapter, TGI ran the base model under the adapter's
// limits; held by its model's, TGI ran adapter_id's adapter under the base
// model's. It allocates adapter_id's name, when the body has one.
func (r *request) enginesSplit(v *fastjson.Value) bool {
	req := ratelimit.Request{Tenant: r.rec.Tenant, KeyID: r.rec.KeyID, Model: r.ri.model, NoModel: r.ri.model == "", Adapter: r.ri.adapter}
	sglang, known := r.p.cfg.Limits.MatchModel(&req)
	if !known {
		return false // refused by Admit
	}
	req.Adapter = adapterOf(v)
	tgi, _ := r.p.cfg.Limits.MatchModel(&req)
	return tgi != sglang
}

// bothAdaptersMessage answers a body enginesSplit refuses.
const bothAdaptersMessage = "the body names both TGI's and SGLang's inputs (inputs, and text, input_ids or input_embeds), and LoRA adapters held by different models' limits on each engine (TGI reads parameters.adapter_id, SGLang lora_path): name the same adapter in both, or send one engine's input"

// severalAdaptersMessage answers a batch whose lora_path names several
// different LoRA adapters (or an adapter and the base model), when limits
// apply.
const severalAdaptersMessage = "lora_path names LoRA adapters (or an adapter and the base model) held by the limits of different models, or more than 16 different adapters: the gateway holds a request by one model's limits; send the prompts of each adapter in a request of their own"

// unreadableBodyMessage answers a metered body that is not a JSON object
// the gateway reads, when gateway keys are configured.
const unreadableBodyMessage = "the request body is not a JSON object the gateway can read (strict JSON, UTF-8)"

// tooDeepMessage answers a metered body that nests deeper than the
// gateway's JSON parser reads.
var tooDeepMessage = "the request body nests arrays and objects more than " + strconv.Itoa(fastjson.MaxDepth) + " levels deep, the most the gateway reads"

// injectsUsage reports whether the gateway asks the engine for the usage
// of this request's stream on its client's behalf (and so removes it before
// the client sees it): a chat or completions stream whose client did not
// ask for it. The Responses and Messages APIs send their usage whatever
// the client asks.
func (r *request) injectsUsage() bool {
	return (r.api == meter.APIChat || r.api == meter.APICompletions) && r.ri.stream && r.ri.usage == usageNotAsked
}

// mayQueue reports whether admit may make the request wait in a queue.
func (r *request) mayQueue() bool {
	l := r.p.cfg.Limits
	return r.p.cfg.Keys != nil && l != nil && l.MaxWait() > 0
}

// upstreamSent is told by the exchange that the request is written to the
// engine's connection, before the answer is awaited: the client guard is
// armed, and the sinks' Begin runs here when it did not before admission.
// Both are work that need not delay the request on its way to the engine,
// where it costs time to first token: measured in `goodput serve` at 32
// streams (perf, 5 kHz), the two Begins took about a quarter of the
// gateway's time between reading the request and writing it upstream.
func (r *request) upstreamSent() {
	if !r.sent { // once: a retry writes it again
		phases.Since(phases.Written, r.rec.Start)
	}
	r.sent = true
	r.guard.arm()
	if !r.begun {
		r.begun = true
		r.p.begin(r.rec)
	}
}

// writesAtOnce bounds a request the guard need not watch while it is
// written upstream: a socket takes that much at once (Linux's smallest
// default send buffer is 16 KiB, empty on an idle or new connection), so
// its write never waits. A larger one may wait, for as long as an engine
// that does not read it fills both sockets' buffers, and its client may
// leave meanwhile: its guard is armed before the write.
const writesAtOnce = 8 << 10

// dialing is told by the exchange that it dials a connection: the client
// guard watches the client from now on, so that a client that leaves
// during a slow connect is noticed before the request goes upstream.
func (r *request) dialing() { r.guard.arm() }

// admit applies the tenant's limits (with gateway keys and limits), waiting
// in the queue when max_queue_wait allows. A refused request ends as
// rate_limited (429, or 503 when the backend is down and fails closed).
func (r *request) admit() bool {
	p, ctx, rec := r.p, r.ctx, r.rec
	if p.cfg.Keys == nil || p.cfg.Limits == nil {
		return true
	}
	bodyLen := len(r.body)
	// A metered body that names no model runs the engine's default model
	// (vLLM's first served one): it counts against the limits of the
	// tenant's default model. Another route's request reads no model.
	// A LoRA adapter the body names (adapterOf, sglangAdapter) holds it
	// by the adapter's limits when the tenant lists it; one it does not
	// list leaves it matched as without it: the engine runs that adapter,
	// a model the tenant does not list (SGLang), or the base model for
	// one it has not loaded (TGI); SGLang refuses one it has not loaded.
	req := ratelimit.Request{Tenant: rec.Tenant, KeyID: rec.KeyID, Model: rec.Model, NoModel: r.ri.valid && r.ri.model == "",
		Adapter: r.ri.adapter, AdapterUnsure: r.ri.adapterUnsure}
	if r.ri.modelUnread {
		// Whatever the body names, the engine runs its one model (or the
		// adapter): matched by the name given, a request naming a model
		// the tenant does not list passed the default model's limits.
		// The record keeps the name given, as on other routes.
		req.Model, req.NoModel = "", true
	}
	req.EstTokens, req.DefaultOutput = ratelimit.EstimateRequest(bodyLen, chargedLimit(&r.ri, p.cfg.DefaultMaxTokens), p.cfg.DefaultMaxTokens, r.ri.outputs)
	// fasthttp tells nothing of a client that leaves while its request
	// waits: with queueing on, a watcher peeks at the connection and ends
	// the wait when the client has gone.
	admitCtx := p.cutCtx // ends at Cut: nobody stays queued through a shutdown
	if p.cfg.Limits.MaxWait() > 0 {
		var stop func()
		admitCtx, stop = watchClient(p.cutCtx, ctx.Conn(), clientPoll)
		defer stop()
	}
	ticket, queued, err := p.cfg.Limits.Admit(admitCtx, &req, &r.d)
	// The judge finds the class of the model the limits matched (an
	// alias's model, the default model of a request that names none).
	rec.MatchedModel, rec.MatchedByAdapter = r.d.Model, r.d.ByAdapter
	if p.cfg.Limits.MaxWait() > 0 {
		rec.QueueWait = queued
	}
	if err != nil && admitCtx.Err() != nil {
		if p.cutCtx.Err() != nil {
			r.upstreamFailed(errShutdown) // never reached it, and never will
			return false
		}
		r.clientLeft("client went away while queued")
		return false
	}
	if errors.Is(err, ratelimit.ErrUnknownTenant) {
		// The tenant vanished in a reload between lookup and admission
		// (while the request waited in its queue): its key is valid no
		// more, but the request was its tenant's, and its record keeps the
		// tenant and key it began with, as any request a reload outlives
		// (an operator's probe found it recorded without them, under
		// other, its client told its key was invalid).
		r.refuseKey("gateway key no longer valid: its tenant was removed while the request waited")
		return false
	}
	// Any other error is the backend failing: d holds what the
	// on_backend_error policy decided (allow, or 503), and the gate counted
	// the error.
	if !r.d.Allowed {
		r.d.WriteHeaders(&ctx.Response.Header)
		status, msg, typ, code := r.d.ErrorInfo(rec.Tenant)
		r.finish(meter.OutcomeRateLimited, answer{status, msg, typ, code})
		return false
	}
	if queued > 0 && !r.keyStillValid() {
		// The key was revoked (or moved to another tenant) by a reload
		// while the request waited: refused as the request of a removed
		// tenant is, rather than sent to the engine after the operator
		// withdrew its key, for as long as max_queue_wait let it wait. The
		// slot and tokens granted go back (charged nothing: the engine
		// never saw it), and the record keeps the key it began with. A
		// request that did not wait was admitted under the keys it
		// authenticated with, as any request a reload outlives.
		r.adm = admission{admitted: true, ticket: ticket, unsent: true}
		r.refuseKey("gateway key no longer valid: it was removed while the request waited")
		return false
	}
	r.adm = admission{admitted: true, ticket: ticket, promptEst: ratelimit.EstimateTokens(bodyLen, 0, 0)}
	return true
}

// keyStillValid reports whether the request's gateway key still names its
// tenant and key id in the current keys (identify looked it up in those of
// its start).
func (r *request) keyStillValid() bool {
	key, ok := r.p.cfg.Keys.Lookup(presentedKey(&r.ctx.Request.Header))
	return ok && key.ID == r.rec.KeyID && key.Tenant.Name == r.rec.Tenant
}

// clientLeft ends a request whose client went away before any response
// byte. There is nobody to answer; the status recorded is 499, as nginx
// and Caddy log it.
func (r *request) clientLeft(msg string) {
	r.finish(meter.OutcomeClientAbort, answer{status: meter.StatusClientClosed, msg: msg})
}

// upstreamFailed ends a request that got no response from the upstream.
func (r *request) upstreamFailed(err error) {
	var ce errConnect
	var o meter.Outcome
	var a answer
	switch {
	case errors.Is(err, errShutdown) || r.p.up.cut.Load():
		// Cut by the shutdown (fasthttp may wrap the expired deadline in an
		// error that does not say timeout).
		err = errShutdown
		o, a = meter.OutcomeTimeout, answer{fasthttp.StatusServiceUnavailable, "gateway shutting down", "server_error", "shutting_down"}
	case errors.As(err, &ce) && OutOfDescriptors(err):
		// The gateway's own shortage, not the engine's fault: the connect
		// never left this process. Refused as max_body_memory refuses a
		// body it has no room for: 503 with Retry-After, judged (a miss
		// for error), the engine not blamed.
		r.ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, bodyRetryAfter)
		o, a = meter.OutcomeRejected, answer{fasthttp.StatusServiceUnavailable, "the gateway is out of file descriptors: retry shortly", "server_error", "gateway_out_of_descriptors"}
		err = fmt.Errorf("the gateway is out of file descriptors (raise its nofile limit): %w", err)
		if n, say := r.p.fds.add(); say {
			r.p.cfg.Logf("WARNING: the gateway is out of file descriptors: requests that need a new connection to the engine are refused (503, Retry-After: %s) until some close (%d refused so far); raise its nofile limit (ulimit -n)", bodyRetryAfter, n)
		}
	case errors.As(err, &ce) && !isTimeout(err):
		o, a = meter.OutcomeUpstreamError, answer{fasthttp.StatusBadGateway, "upstream unreachable", "upstream_error", "upstream_unreachable"}
	case isTimeout(err):
		o, a = meter.OutcomeTimeout, answer{fasthttp.StatusGatewayTimeout, "upstream did not answer in time", "timeout", "upstream_timeout"}
		if !errors.As(err, &ce) {
			// The engine has the request (only a connect timeout means it
			// has not): the gateway gave up on an answer the engine may
			// still be generating, and would give up again at the same
			// point. The openai SDKs retry a 504 twice unless told not to,
			// which would run the prompt three times.
			r.ctx.Response.Header.SetBytesKV(hdrShouldRetry, strFalse)
		}
	case errors.Is(err, errUpstreamHead):
		o, a = meter.OutcomeUpstreamError, answer{fasthttp.StatusBadGateway, "upstream sent an invalid response head", "upstream_error", "bad_upstream_response"}
	default:
		o, a = meter.OutcomeUpstreamError, answer{fasthttp.StatusBadGateway, "upstream failed before responding", "upstream_error", "bad_gateway"}
	}
	// A 502 or a shutdown's 503 after the engine had the whole request (it
	// closed, reset or answered garbage after it; or the cut came while it
	// generated): it may be generating, so the gateway does not send it
	// again, and neither should the client's SDK, which retries either
	// twice unless told not to (a 503 behind a load balancer, on another
	// replica that was not shutting down).
	r.noRetryOnceSent()
	// The client gets the fixed message; the record says what failed,
	// without the bytes of the engine's answer that fasthttp's error
	// quotes (up to a few hundred: a head and the start of a generated
	// answer have no place in the request log).
	msg := err.Error()
	cut := strings.IndexByte(msg, '"') // a quoted line or value
	if i := strings.Index(msg, ", contents: "); i >= 0 && (cut < 0 || i < cut) {
		cut = i // what was read
	}
	if cut >= 0 {
		msg = strings.TrimRight(msg[:cut], " :,") + " (the engine's bytes withheld)"
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		// A bare "EOF" tells an operator nothing.
		msg = "upstream closed the connection before a complete response head (" + msg + ")"
	}
	r.finishWith(o, a, msg)
}

// noRetryOnceSent tells the client not to retry the gateway's own error
// answer when the engine had the whole request and it may not be sent
// again (a POST): "Never sent twice" holds for the client's retries too.
func (r *request) noRetryOnceSent() {
	if r.sent && !r.replay {
		r.ctx.Response.Header.SetBytesKV(hdrShouldRetry, strFalse)
	}
}

// exchange sends the request upstream and reads the response head, under
// the first-byte (and, for a stream, first-token) and total deadlines,
// while the guard watches the client. A request that gets no response, or
// whose client left meanwhile, ends here.
func (r *request) exchange() (*upConn, *fasthttp.Response, bool) {
	p, rec := r.p, r.rec
	resp := fasthttp.AcquireResponse()
	r.tUp = time.Now()
	// The gateway's own time, from the end of the body's upload (which is
	// the client's, and part of TTFT) to the upstream write.
	rec.Overhead = r.tUp.Sub(r.tBody)
	first := r.deadlines(r.tUp)
	if r.api != meter.APIOther {
		// Watches the client until its first token is written (the stream
		// stops it then), or until the exchange ends here; armed by the
		// exchange (upstreamSent, dialing), or now when the request's
		// write may wait.
		r.guard = startGuard(r.ctx.Conn())
		if len(r.body)+len(r.ctx.Request.Header.RawHeaders()) > writesAtOnce {
			r.guard.arm()
		}
	}
	conn, err := p.up.exchange(r, resp, first, r.ctx.IsHead(), r.guard, r, &r.ph)
	if err == nil {
		if err = checkUpstreamHead(&resp.Header); err != nil {
			// Nothing of it reaches the client, and the connection's
			// framing cannot be trusted for another request.
			_ = resp.CloseBodyStream()
			p.up.discard(conn)
			conn = nil
		}
	}
	if !r.guard.clientLeft() && err == nil {
		return conn, resp, true
	}
	if r.guard.stop() {
		// The client left before the first byte: the exchange was cut
		// short (or its connection's deadline spoiled); nobody to answer.
		if err == nil {
			_ = resp.CloseBodyStream()
			p.up.discard(conn)
		}
		fasthttp.ReleaseResponse(resp)
		r.clientLeft("client went away before the first byte")
		return nil, nil, false
	}
	fasthttp.ReleaseResponse(resp)
	r.upstreamFailed(err)
	return nil, nil, false
}

// errUpstreamHead: the engine's response head parsed, but is not one the
// gateway can pass on (checkUpstreamHead).
var errUpstreamHead = errors.New("upstream sent an invalid response head")

// checkUpstreamHead refuses a final response head that fasthttp reads but
// that no client should get: a status outside 200–599 (RFC 9110 allows
// 100–599, fasthttp's reader passes any three digits on, and takes the
// interim 1xx answers but 101 off before this; a 101 answers an upgrade the
// gateway never asks for, since it drops Upgrade from every request), a
// version other than HTTP/1.0 and HTTP/1.1 on an HTTP/1.1 connection, or a
// field name with a space inside it (no token, which fasthttp reads).
// Forwarded, "HTTP/8.2 001" reached a client as a status line it could not
// parse (FuzzGateway). The error names what was wrong; a version is
// "HTTP/" and two digits by fasthttp's parse, so it is safe to quote.
func checkUpstreamHead(h *fasthttp.ResponseHeader) error {
	if v := h.Protocol(); string(v) != "HTTP/1.1" && string(v) != "HTTP/1.0" {
		return fmt.Errorf("%w: version %s", errUpstreamHead, v)
	}
	if s := h.StatusCode(); s < 200 || s > 599 {
		return fmt.Errorf("%w: status %d", errUpstreamHead, s)
	}
	if h.ConnectionClose() {
		// fasthttp reads a field name with a space inside it ("X Foo:"),
		// no token, and marks the connection to be closed; passed on, it
		// made Node's http module refuse the answer and Python's
		// http.client end the head there, a chunked answer's framing
		// below it lost. Looked for only where that mark is, so the
		// common answer pays nothing; the name is not quoted (it is the
		// engine's bytes).
		for k := range h.All() {
			if bytes.IndexByte(k, ' ') >= 0 {
				return fmt.Errorf("%w: a field name with a space", errUpstreamHead)
			}
		}
	}
	return nil
}

// deadlines returns the deadline of the response head, for an upstream
// request sent at tUp: first_byte, or first_token for a stream when it is
// sooner (a token cannot come before the headers), and never past total.
func (r *request) deadlines(tUp time.Time) time.Time {
	first := tUp.Add(r.p.cfg.FirstByteTimeout)
	if ft := r.firstToken(tUp); r.ri.stream && ft.Before(first) {
		first = ft
	}
	if d := r.totalDeadline(); !d.IsZero() && d.Before(first) {
		first = d
	}
	return first
}

// firstToken bounds the wait for a stream's first token from the upstream
// request on, response headers or not.
func (r *request) firstToken(tUp time.Time) time.Time { return tUp.Add(r.p.cfg.FirstTokenTimeout) }

// totalDeadline bounds the whole exchange from t0; zero for none.
func (r *request) totalDeadline() time.Time {
	if r.p.cfg.TotalTimeout <= 0 {
		return time.Time{}
	}
	return r.rec.Start.Add(r.p.cfg.TotalTimeout)
}

// quotesUpstreamKey reports whether v, something the engine sent for the
// record (its X-Request-Id), holds the tenant's upstream credential, which
// the engine was sent in place of the client's key: an engine that names
// its answer by the Authorization field it got would otherwise put it in
// the record, where no gateway key is let in either (idKept).
func (r *request) quotesUpstreamKey(v []byte) bool {
	t := r.key.Tenant
	return t != nil && t.UpstreamKey != "" && strings.Contains(b2s(v), t.UpstreamKey)
}

// stream hands the response to a stream: the engine's status and headers go
// to the client, and the body is read, metered and written by the stream,
// which ends the request (finishStream).
func (r *request) stream(conn *upConn, resp *fasthttp.Response) {
	p, ctx, rec := r.p, r.ctx, r.rec
	status := resp.StatusCode()
	rec.Status, rec.UpstreamStatus = status, status
	if id := resp.Header.PeekBytes(hdrRequestID); len(id) > 0 && string(id) != rec.RequestID && p.idKept(id, &ctx.Request.Header) && !r.quotesUpstreamKey(id) {
		// The engine named the request its own way: the record keeps its
		// name too, to join the engine's log with the gateway's. The
		// client gets the gateway's id (below), as always.
		rec.UpstreamRequestID = string(id)
	}
	ctx.Response.SetStatusCode(status)
	resp.Header.CopyTo(&ctx.Response.Header)
	// CopyTo copies the engine's header's own setting too: an answer
	// without a Content-Type would go out with fasthttp's default
	// (text/plain) that the engine never sent.
	ctx.Response.Header.SetNoDefaultContentType(true)
	// The version is the connection's, not the engine's: the client is
	// answered in the gateway's HTTP/1.1 (the default an empty one means),
	// even by an engine that spoke HTTP/1.0.
	ctx.Response.Header.SetProtocol(nil)
	removeHopResponse(&ctx.Response.Header)
	ctx.Response.Header.SetBytesKV(hdrRequestID, []byte(rec.RequestID))
	if r.adm.admitted {
		r.d.WriteHeaders(&ctx.Response.Header)
	}

	s := acquireStream()
	defer func() {
		if !r.done {
			// A panic (a bug) before the stream took the request over:
			// release answers 500, and the engine's connection goes, not
			// left open with the engine generating into it.
			_ = resp.CloseBodyStream()
			p.up.discard(conn)
			fasthttp.ReleaseResponse(resp)
			releaseStream(s)
		}
	}()
	s.p, s.rec, s.api, s.conn, s.resp = p, rec, r.api, conn, resp
	s.body = resp.BodyStream()
	s.deadline = r.totalDeadline()
	s.firstToken = r.firstToken(r.tUp)
	s.guard = r.guard
	s.client = ctx.Conn()
	s.adm = r.adm
	if p.cfg.Keys != nil {
		s.presented = keptPresentedKey(&ctx.Request.Header)
	}
	s.metering = r.api != meter.APIOther
	s.stripUsage = r.ri.valid && r.injectsUsage()
	s.parser.SetEcho(r.ri.echo, r.ri.echoText) // what comes back of the request is no output
	if testHookResponseHead != nil {
		testHookResponseHead()
	}
	gunzip := r.bodyMode(s, resp)
	if (s.mode == modeSSE || !s.metering && rec.Stream) && len(ctx.Response.Header.PeekBytes(hdrAccelBuffering)) == 0 {
		// nginx holds a response in its buffers by default (proxy_buffering
		// on) unless the response says not to: a stream would reach the
		// client in batches, its first token long after the record's TTFT.
		// A stream is what the gateway frames as one (an event stream, one
		// under another type, Ollama's NDJSON) or, unmetered, an event
		// stream; not an error body to a request that asked for a stream
		// (rec.Stream is still the request's then, see bodyMode). An
		// engine's own answer to nginx stands. nginx takes the field for
		// itself; a client behind no nginx gets it, as from sse-starlette's
		// streams.
		ctx.Response.Header.SetBytesKV(hdrAccelBuffering, strNo)
	}
	// A metered stream waits for its first token under first_token, then
	// each read under idle; the guard watches the client until the first
	// token (any body byte, for a body without token events) is written.
	s.awaitToken = s.mode == modeSSE && s.metering
	s.markNext = !s.awaitToken
	s.meter.Start(rec.Start)
	s.meter.SetChoicesPerPrompt(r.ri.perPrompt)
	s.meter.SetStreamChoices(int(min(r.ri.streamChoices, 1<<20)))
	if s.api == meter.APITGI && s.mode == modeJSON && status < 300 {
		// TGI's non-streamed answer has no prompt count in its body, nor
		// an output count without details; its head has both
		// (generate_internal; the streamed handler sends neither). With
		// best_of, the output count is the best sequence's alone.
		osl := meter.HeaderCount(resp.Header.PeekBytes(hdrGeneratedTokens))
		if r.ri.bestOf > 1 {
			osl = meter.Unknown
		}
		s.meter.ObserveHead(meter.HeaderCount(resp.Header.PeekBytes(hdrPromptTokens)), osl)
	}
	s.framer.MaxEventSize = p.cfg.MaxEventBytes
	// The Responses API's last events repeat the whole response, so a long
	// answer makes them large: skipped, the stream metered around them.
	s.framer.SkipLarge = r.api == meter.APIResponses || r.api == meter.APIMessages
	s.framer.Lean = false
	// Ollama's native API streams one JSON object a line. Its last line of
	// /api/generate carries context, the conversation's token ids: a line
	// over the limit passes in pieces, read lean (without context).
	s.framer.NDJSON = s.api.NDJSON()
	if s.framer.NDJSON {
		s.framer.SkipLarge = true
	}
	// llama.cpp's last event of its native API repeats the prompt, and a
	// verbose llama.cpp server adds it to its OpenAI-compatible chunks
	// (__verbose): an event over the limit passes in pieces, read lean
	// (without the prompt, the settings, the token ids). One that is
	// large for what the meter reads stops the metering as before.
	if s.api == meter.APIChat || s.api == meter.APICompletions || s.api == meter.APILlamaCpp {
		s.framer.SkipLarge, s.framer.Lean = true, true
	}
	r.done = true // the stream ends the request from here on
	if s.body == nil {
		// No body at all (HEAD, 204, 304): the exchange is complete.
		now := time.Now()
		s.finishBody(now, now)
		s.setEnd(endEOF, "")
		p.finishStream(s)
		return
	}
	cl := resp.Header.ContentLength()
	if s.mode == modeSSE || cl < 0 || gunzip {
		cl = -1
		// The head goes out with the first body bytes (see headflush.go).
		ctx.Response.ImmediateHeaderFlush = !headProbe.ok
	}
	s.start()
	if cl < 0 && !ctx.Request.Header.IsHTTP11() {
		r.streamUntilClose(s) // see http10.go
	} else {
		ctx.Response.SetBodyStream(s, cl)
	}
	if testHookStreamStart != nil {
		testHookStreamStart()
	}
}

// testHookResponseHead, when set by a test, runs once the engine's
// response head is read, before a stream takes the response over.
var testHookResponseHead func()

// testHookStreamStart, when set by a test, runs once a stream has taken a
// response over (its head is not yet written: it goes with the first
// body bytes).
var testHookStreamStart func()

// bodyMode decides how the stream reads the response body: decoded (gzip),
// framed as SSE, kept as JSON, or passed through unparsed. It reports
// whether the body is decoded.
func (r *request) bodyMode(s *stream, resp *fasthttp.Response) (gunzip bool) {
	s.mode = modeRaw
	ce := resp.Header.ContentEncoding()
	switch {
	case !s.metering || len(ce) == 0 || bytes.EqualFold(ce, []byte("identity")):
	case isGzip(ce) && s.body != nil:
		// Decoded as it streams, metered, and sent identity-encoded (see
		// gunzip.go): the client gets what the gateway asked the engine for.
		gunzip = true
		s.body = &gunzipBody{src: s.body}
		r.ctx.Response.Header.Del(fasthttp.HeaderContentEncoding)
	default:
		s.metering = false
		s.contentErr = "response is " + string(ce) + "-encoded; not metered"
		if s.stripUsage {
			// It cannot be decoded, so the usage chunk the gateway asked
			// for on the client's behalf reaches the client.
			s.contentErr += "; the usage chunk the gateway requested passes to the client"
		}
	}
	ct := resp.Header.ContentType()
	if !s.metering {
		// Unmetered (a pass-through route, an encoding the gateway cannot
		// read): the record still says whether the answer was a stream.
		r.rec.Stream = hasMediaType(ct, "text/event-stream")
		return gunzip
	}
	switch {
	case hasMediaType(ct, "text/event-stream"):
		s.mode = modeSSE
		r.rec.Stream = true
		// An event stream on Ollama's path is not Ollama's: llama.cpp's
		// server answers /api/chat as its /v1/chat/completions. Framed as
		// SSE and read by OpenAI's rules (its end, a cut's last event).
		s.api = r.api.OpenAIShape()
	case r.api.NDJSON() && hasMediaType(ct, "application/x-ndjson"):
		// Ollama's stream: framed a line at a time (the framer's NDJSON
		// mode), as an event stream is an event at a time.
		s.mode = modeSSE
		r.rec.Stream = true
	case hasMediaType(ct, "application/json"):
		s.mode = modeJSON
		r.rec.Stream = false
	case resp.StatusCode() == fasthttp.StatusOK && r.api.OpenAIShape().WellKnownAnswer() &&
		(!r.ri.stream || hasMediaType(ct, "text/html")):
		// A success under another type (text/plain, none) where chat,
		// completions, Responses or Messages answer with JSON, to a
		// request that asked for no stream, or a web page (a login page, a
		// web UI at the upstream's URL) to any: read as the JSON body these
		// APIs answer with. One that is not JSON passes through all the
		// same, and is the engine's fault, not an answer.
		s.mode = modeJSON
		r.rec.Stream = false
	case r.ri.stream && resp.StatusCode() < 300:
		// A stream under another type (text/plain, none): engines that
		// mislabel their SSE. It is framed as SSE, so it is metered and a
		// usage chunk the client did not ask for is removed; bytes that
		// are not SSE pass through as they are. It is a stream once an
		// event shows it (handleEvent): an engine that ignored "stream"
		// and answered one JSON body under that type is no engine fault.
		s.mode = modeSSE
		r.rec.Stream = false
	}
	return gunzip
}

// hasMediaType reports whether Content-Type ct is of media type mt (given
// in lower case), with or without parameters. Media types are
// case-insensitive: an engine's "Text/Event-Stream" is an event stream.
func hasMediaType(ct []byte, mt string) bool {
	if len(ct) < len(mt) {
		return false
	}
	for i := 0; i < len(mt); i++ {
		c := ct[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != mt[i] {
			return false
		}
	}
	rest := ct[len(mt):]
	return len(rest) == 0 || rest[0] == ';' || rest[0] == ' ' || rest[0] == '\t'
}

// errorHandler is fasthttp's hook for requests it could not read or parse;
// they reached the gateway, so they get a record too. fasthttp's error text
// quotes the raw request (headers and all, a gateway key included), so it
// is never used: each kind of failure gets a fixed message.
func (p *Proxy) errorHandler(ctx *fasthttp.RequestCtx, err error) {
	// The body's read failed (or was refused before it began): fasthttp
	// has let the body go, and so does the budget.
	p.budget.release(p.budget.take(&ctx.Request.Header))
	tooLarge := errors.Is(err, fasthttp.ErrBodyTooLarge)
	if tooLarge && len(ctx.Request.Header.RawHeaders()) > 0 {
		// The headers were read: the request is identified as the handler
		// would, key first, so an oversized body is counted against the
		// tenant whose key sent it, and a request without a valid key gets
		// 401. Its route is known too, and its answer takes the route's
		// shape (writeError).
		r := p.startRequest(ctx, requestStart(ctx))
		defer r.release()
		ctx.SetConnectionClose()  // the unread body is still on the connection
		lingerOnClose(ctx.Conn()) // and is drained before it closes
		h := &ctx.Request.Header
		if len(h.PeekBytes(hdrNoKey)) > 0 {
			// Refused for its key once its headers were read
			// (headerReceived), whatever its size.
			h.DelBytes(hdrNoKey)
			r.unauthorized(len(presentedKey(h)) == 0)
			return
		}
		noRoom := len(h.PeekBytes(hdrNoRoom)) > 0
		h.DelBytes(hdrNoRoom)
		if !r.identify() {
			return
		}
		if noRoom {
			r.noRoom()
			return
		}
		r.reject(errBodyTooLarge)
		return
	}
	if bareLFRead(ctx.Conn()) {
		err = errBareLFRequest // whatever fasthttp made of the refused read
	} else if stalledChunk(ctx.Conn(), err) {
		err = fasthttp.ErrTimeout
	}
	status, msg, code := readErrorInfo(err)
	if tooLarge {
		// A chunked body over the limit: fasthttp found it while reading
		// the chunks, and has reset the request (headers and all) by now;
		// it is identified from what headerReceived kept (below). (One
		// without a valid key never gets here: headerReceived refuses it
		// before any chunk is read.)
		status, msg, code = fasthttp.StatusRequestEntityTooLarge, "request body exceeds the gateway's limit of "+strconv.Itoa(p.cfg.MaxBodyBytes)+" bytes", "request_too_large"
	}
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
	// The request was not read to its end (a chunked body over the limit,
	// a head that could not be parsed): its client may still be sending
	// when the answer goes out, and the connection drains it before it
	// closes (listener.go), so the client can read the answer. Not after a
	// timeout (408): a client too slow to send its request in time gets no
	// more time to hold the connection.
	gone := clientGone(err)
	if gone && !clientSent(ctx.Conn()) {
		// Closed before any byte: no request reached the gateway, and
		// nothing is answered (fasthttp would write an empty 200).
		ctx.SetConnectionClose()
		_ = ctx.Conn().Close()
		return
	}
	if status != fasthttp.StatusRequestTimeout && !gone {
		lingerOnClose(ctx.Conn())
	}
	var r *request
	if hh := p.heldFor(ctx); hh != nil {
		// Its head was read whole, and its body is what failed (too slow,
		// chunked over the limit, malformed, the client gone): fasthttp
		// has reset the request by now, but headerReceived kept what the
		// record needs, so it counts under its tenant, key and route, with
		// the client's request id, and its answer takes the route's shape.
		r = p.startHeld(ctx, hh)
	} else {
		// Nothing in the request can be trusted: it gets a fresh id, the
		// route other (so its answer is in OpenAI's shape, even for a
		// request line that named /v1/messages: fasthttp has reset or
		// never parsed the head), and no tenant when keys are required.
		ctx.Request.Header.Del(string(hdrRequestID))
		r = p.startRequest(ctx, time.Now())
		r.route(meter.APIOther)
		if p.cfg.Keys == nil {
			r.rec.Tenant = DefaultTenant
		}
	}
	defer r.release()
	if gone {
		// The client closed or reset its connection before its request
		// was whole (an upload cancelled): it went away, and nobody is
		// left to answer. (A client that only half-closed mid-request gets
		// no answer either; nginx, too, answers nothing there.)
		r.clientLeft("client went away before its request was complete")
		return
	}
	ctx.SetConnectionClose()
	r.finish(meter.OutcomeRejected, answer{status, msg, "invalid_request_error", code})
}

// foldedMessage answers an Ollama request body with a member Ollama would
// read otherwise than the gateway (foldedKey), by name as duplicateMessage
// does.
func (p *Proxy) foldedMessage(name string, h *fasthttp.RequestHeader) string {
	return p.duplicateMessage(name, h) + " (Ollama reads member names without regard to case)"
}

// clientGone reports whether a request's read failed because its client
// closed (errClientClosed, io.ErrUnexpectedEOF) or reset its connection.
func clientGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// duplicateMessage says which member a body names twice, by name unless
// the name is long or holds a key (the message goes to the client and the
// request log).
func (p *Proxy) duplicateMessage(name string, h *fasthttp.RequestHeader) string {
	if len(name) > 64 || carriesKey([]byte(name), h) || p.holdsAnyKey([]byte(name)) {
		return "duplicate key in the request body"
	}
	return "duplicate key " + strconv.Quote(name) + " in the request body"
}
