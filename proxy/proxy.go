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
	"encoding/base64"
	"encoding/hex"
	"errors"
	"math/bits"
	"math/rand/v2"
	"net"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goodput/goodput/identity"
	"github.com/goodput/goodput/internal/clip"
	"github.com/goodput/goodput/internal/keyshape"
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
	emitted  atomic.Uint64  // records handed to the sinks (Emitted)
	closing  atomic.Int64   // HTTP/1.0 answers recorded, their connection's close step still running (http10.go)
	wg       sync.WaitGroup // one per request until its record is emitted

	remoteLimits bool    // Limits decides over the network: settle off the client's path
	gapSink      GapSink // the Sink, when it takes summarised gaps

	cutCtx context.Context // ends at Cut
	cut    context.CancelFunc
	// settleCtx ends settleAfterCut after Cut: a record stops waiting for
	// the release of its limits then (settle).
	settleCtx context.Context
	// settling lists the settles begun before Cut whose release is still
	// in flight (settleJob): settleAfterCut after Cut, the sweep emits
	// their records.
	settleMu sync.Mutex
	settling *settleJob

	budget  *bodyBudget  // the request bodies held in memory (bodybudget.go)
	fds     shortage     // connects refused for want of the gateway's own descriptors (upstreamFailed)
	lagHeld atomic.Int64 // bytes queued for clients that lag (stream.lagRoom)
	parsers fastjson.ParserPool
	records sync.Pool // *meter.Record
	bodies  sync.Pool // *[]byte for rewritten request bodies

	// liveIDs holds the request id of each record not yet emitted
	// (newRecord, releaseID): a client's X-Request-Id that is one of them
	// is replaced by a generated id. vLLM takes the X-Request-Id it is
	// sent as its own request id, which it assumes unique: a second
	// request under the id of one running is refused, or disturbs the
	// engine (vLLM issues 10583, 27711), and a tenant could so reach it
	// under its own id reused, or another tenant's.
	idMu    sync.Mutex
	liveIDs map[string]*meter.Record

	// headHold is how long a stream's response head waits for bytes to go
	// with (headflush.go): headHold, or what a test sets before serving.
	headHold time.Duration

	// ioLoop: direct streams hand their reads to the I/O loops
	// (ioloop_linux.go) once their head is out: Config.IOLoop where the
	// loops exist, or what a test sets before serving.
	ioLoop bool
}

// testIOLoop, set by the tests' TestMain (GOODPUT_TEST_IO_LOOP=1), turns
// the I/O loops on in every Proxy: the whole suite then runs with them.
var testIOLoop bool

// New validates cfg and returns a Proxy.
func New(cfg Config) (*Proxy, error) {
	c, addr, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		cfg:      c,
		up:       newUpstream(addr, c.ConnectTimeout, c.MaxIdleConns, c.IdleConnTTL),
		upHost:   addr,
		headHold: headHold,
		ioLoop:   (c.IOLoop || testIOLoop) && ioLoopSupported,
	}
	p.budget = newBodyBudget(c.MaxBodyMemory, c.ReadBodyTimeout, c.Logf)
	p.remoteLimits = c.Limits != nil && c.Limits.Remote()
	p.gapSink, _ = c.Sink.(GapSink)
	p.cutCtx, p.cut = context.WithCancel(context.Background())
	var endSettle context.CancelFunc
	p.settleCtx, endSettle = context.WithCancel(context.Background())
	context.AfterFunc(p.cutCtx, func() {
		time.AfterFunc(settleAfterCut, func() {
			endSettle()
			p.sweepSettles()
		})
	})
	p.records.New = func() any { return new(meter.Record) }
	return p, nil
}

// Settings returns the configuration the proxy runs with: New's, with
// every zero value replaced by its default.
func (p *Proxy) Settings() Config { return p.cfg }

// Cut ends every request still in flight, for a shutdown whose drain period
// is over, and fails every later one at its start:
//   - a stream is cut at once, and its client sees an abnormal end (never a
//     clean end of stream); one whose client lags too, what is queued for
//     it dropped;
//   - a request queued for capacity, connecting to the engine, or waiting
//     for the engine's first byte, gets 503.
//
// Each ends as one record with outcome timeout and the reason "gateway
// shutting down". A record that waits for the release of its limits in a
// Redis that does not answer waits settleAfterCut at most after Cut.
func (p *Proxy) Cut() {
	p.up.cutAll()
	p.cut()
}

// BodyMemory returns the bytes of request bodies held in memory, as
// MaxBodyMemory counts them.
func (p *Proxy) BodyMemory() int64 { return p.budget.used.Load() }

// BodiesRefused returns the number of requests refused (503) because the
// request bodies held left no room for theirs (MaxBodyMemory).
func (p *Proxy) BodiesRefused() int64 { return p.budget.refuse.n.Load() }

// Emitted returns how many records have been handed to the sinks (the
// judge's verdict and the Sink's counts taken) since the proxy began.
func (p *Proxy) Emitted() uint64 { return p.emitted.Load() }

// LagMemory returns the bytes queued for clients that read more slowly
// than their streams come, as MaxLagMemory counts them.
func (p *Proxy) LagMemory() int64 { return p.lagHeld.Load() }

// InFlight returns the number of requests whose record is not yet emitted.
func (p *Proxy) InFlight() int64 { return p.inFlight.Load() }

// Closing returns the number of connections whose request is recorded but
// whose close Wait still waits for: an HTTP/1.0 client's close-delimited
// answer that broke, reset only once the client has acknowledged what it
// was sent (up to the idle timeout; Cut ends the wait).
func (p *Proxy) Closing() int64 { return p.closing.Load() }

// Wait blocks until every request's record has been emitted, and the
// connection of every close-delimited HTTP/1.0 answer is closed as its end
// requires (http10.go: a reset must not become an orderly close at exit).
func (p *Proxy) Wait() { p.wg.Wait() }

// CheckUpstream connects to the upstream as a request would (its name
// looked up, its addresses tried in turn, within the connect timeout) and
// closes the connection: nil when an address answers.
func (p *Proxy) CheckUpstream(ctx context.Context) error {
	c, _, err := p.up.connect(ctx)
	if err == nil {
		_ = c.Close()
	}
	return err
}

// CloseIdle closes idle upstream connections.
func (p *Proxy) CloseIdle() { p.up.closeIdle() }

// clientReadBuf is the size of the buffer fasthttp reads a request into
// (Server's ReadBufferSize), and of a connection's read-ahead buffer
// (listenerConn.readAhead), which must not be larger.
const clientReadBuf = 16 << 10

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
		// A multipart/form-data body (an audio transcription's upload) is
		// the engine's to read, byte for byte: fasthttp would parse it into
		// a form (files over 16 MiB into temporary files) and rebuild it
		// for the engine in an order of its own.
		DisablePreParseMultipartForm: true,
		// Release a connection's read buffer while its response streams.
		ReduceMemoryUsage: true,
		// The request line and headers must fit in the read buffer (431
		// above it). fasthttp's 4 KiB refuses real clients with a large
		// bearer token or cookies; 16 KiB is nginx's order of magnitude, and
		// the buffer is pooled and released while a response streams.
		ReadBufferSize: clientReadBuf,
		// fasthttp's parse errors quote the raw request (a gateway key
		// with it) unless told not to; errorHandler never uses their text
		// either.
		SecureErrorLogMessage: true,
		// A stream writes one event (a few hundred bytes) per flush, and
		// bufio passes larger writes straight through: a small buffer
		// keeps the memory of many streams in flight low (and a stream
		// lends it while it goes on: headbuf.go).
		WriteBufferSize: clientWriteBuf,
		// Slow clients (slowloris) cannot hold a connection: its first
		// byte and headers must come within ReadHeaderTimeout, its body
		// within ReadBodyTimeout after them. The read deadline left set
		// from the body is harmless: nothing reads the client while the
		// response streams, and the client-gone peek ignores deadlines.
		ReadTimeout:           p.cfg.ReadHeaderTimeout,
		HeaderReceived:        p.headerReceived, // also stamps t0, see t0.go
		ConnState:             connState,        // idle connections, for the Listener's cap
		IdleTimeout:           90 * time.Second,
		MaxIdleWorkerDuration: idleWorkerTTL,
		CloseOnShutdown:       true,
		// fasthttp logs every connection that ends with an error; for a
		// proxy those are clients leaving and broken upstreams, which the
		// records already tell. Keep its log quiet.
		Logger: quietLogger{},
	}
}

// headerReceived runs once a request's headers are read: it stamps t0
// (t0.go) and gives the body its own read deadline.
//
// A request that will be refused whatever its body holds, its announced
// length over the limit or, with gateway keys, without a valid key, is
// refused before its body is read: fasthttp allocates a body of the
// announced length before reading it, so a client with no key could make
// the gateway hold max_body_bytes per connection with headers alone
// (found by an HTTP-level probe: 16 MiB per connection, for read_body),
// or, chunked, by sending that much. Such a request's body limit is set
// below its length (a chunked one is given a length, so that no chunk is
// read), which fasthttp refuses before it reads or allocates anything, and
// errorHandler answers it as the handler would (401 or 413) and records
// it; one without a valid key is marked (hdrNoKey), so that it gets 401
// even if a reload made its key valid meanwhile. Its Expect: 100-continue
// is dropped, so the client gets that answer instead of an invitation to
// send the body. Any other body takes its room in the memory the bodies
// held may use (bodybudget.go): one that finds none is refused the same
// way, marked (hdrNoRoom) for errorHandler to answer 503.
func (p *Proxy) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	lc := connOfHead(h)
	seq, t0 := stampT0(lc, h)
	rc := fasthttp.RequestConfig{ReadTimeout: p.cfg.ReadBodyTimeout}
	n := h.ContentLength()
	keyOK := false
	if n > 0 || n == -1 {
		// A body is read next, and if it fails fasthttp resets the
		// request, headers and all: what the record needs of them is kept
		// for errorHandler (heldhead.go), on a Listener's connection (on
		// another, errorHandler could not tell whose it is).
		var key identity.KeyInfo
		if p.cfg.Keys != nil {
			key, keyOK = p.cfg.Keys.Lookup(presentedKey(h))
		}
		if lc != nil {
			p.hold(&lc.held, h, seq, t0, key, keyOK)
		}
	}
	if p.refuseBody(h, n, keyOK) {
		rc.MaxRequestBodySize = 1
		h.Del(fasthttp.HeaderExpect)
	}
	if testHookHeaders != nil {
		testHookHeaders()
	}
	return rc
}

// refuseBody reports whether the body h announces (n: its Content-Length,
// -1 chunked) is refused before it is read (headerReceived), and marks why
// when the length does not say it. keyOK: h presents a valid gateway key.
func (p *Proxy) refuseBody(h *fasthttp.RequestHeader, n int, keyOK bool) bool {
	switch {
	case (n > 1 || n == -1) && p.cfg.Keys != nil && !keyOK:
		h.SetBytesKV(hdrNoKey, strTrue)
	case n > p.cfg.MaxBodyBytes:
		return true
	default:
		size := bodySize(h, p.cfg.MaxBodyBytes)
		if size == 0 || p.budget.reserve(h, size) {
			return false
		}
		h.SetBytesKV(hdrNoRoom, strTrue)
	}
	if n == -1 {
		h.SetContentLength(2) // no chunk is read
	}
	return true
}

// hdrNoKey marks, in a request's headers, one that headerReceived refused
// for its key: a name no request on the wire can carry (see hdrT0).
var (
	hdrNoKey = []byte("(goodput-no-key)")
	strTrue  = []byte("true")
)

// hdrNoRoom marks a request headerReceived refused because the bodies held
// in memory left no room for its body (bodybudget.go).
var hdrNoRoom = []byte("(goodput-no-room)")

// presentedKey returns the gateway key h presents, if any.
func presentedKey(h *fasthttp.RequestHeader) []byte {
	return identity.ExtractKey(h.Peek("Authorization"), h.Peek("X-Api-Key"))
}

// testHookHeaders, when set by a test, runs once a request's headers are
// read, its t0 stamped and what a failed body needs of them kept.
var testHookHeaders func()

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

var (
	pathChat        = []byte("/v1/chat/completions")
	pathCompletions = []byte("/v1/completions")
	pathResponses   = []byte("/v1/responses")
	pathMessages    = []byte("/v1/messages")
	// The engines' native APIs: Ollama's (NDJSON) and llama.cpp server's
	// completion (its /completions, the same API, is the completions
	// route, whose parser reads both shapes).
	pathOllamaChat     = []byte("/api/chat")
	pathOllamaGenerate = []byte("/api/generate")
	pathLlamaCpp       = []byte("/completion")
	// llama.cpp server's fill-in-the-middle: generation, answered as
	// /completion is.
	pathLlamaCppInfill = []byte("/infill")
	// vLLM's SageMaker route: a chat or a completions request, by its body
	// (invocationAPI).
	pathInvocations = []byte("/invocations")
	// vLLM's batch of chat conversations: one request, one chat.completion
	// answer (a choice a conversation), never a stream.
	pathChatBatch = []byte("/v1/chat/completions/batch")
	// TGI's native routes (/generate_stream, / and /generate) and SGLang's
	// (/generate): which engine's, by the body (generateAPI).
	pathGenerate       = []byte("/generate")
	pathGenerateStream = []byte("/generate_stream")
	pathRoot           = []byte("/")
	hdrRequestID       = []byte("X-Request-Id")
	// TGI's counts in the head of a non-streamed answer (request.stream).
	hdrPromptTokens    = []byte("X-Prompt-Tokens")
	hdrGeneratedTokens = []byte("X-Generated-Tokens")
	// hdrShouldRetry tells a client whether to retry a failed request; the
	// openai SDKs (Python and Node, generated alike) obey it over their own
	// rule, which retries 408, 409, 429 and every 5xx.
	hdrShouldRetry = []byte("X-Should-Retry")
	strFalse       = []byte("false")
	// hdrAccelBuffering asks nginx not to buffer a response (request.stream).
	hdrAccelBuffering = []byte("X-Accel-Buffering")
	strNo             = []byte("no")
)

// routeOf returns the metered API of a request: POST to the OpenAI routes
// (chat, completions, the Responses API) or to Anthropic's Messages API,
// with or without the /v1 prefix (llama.cpp, and other engines, serve
// both), or to an engine's native API: Ollama's /api/chat and
// /api/generate, llama.cpp server's /completion (and /infill, answered
// alike), TGI's /generate, /generate_stream and /, SGLang's /generate
// (POST or PUT; which engine's, and whether / is a generation, by the
// body: generateAPI), or to vLLM's /invocations (chat or completions, by
// the body: invocationAPI), or to vLLM's /v1/chat/completions/batch
// (chat_batch: a chat request of several conversations; vLLM serves it
// with /v1 only). Their other paths (a
// stored response's /v1/responses/{id}, the Messages API's
// /v1/messages/count_tokens, Ollama's /api/embed) are not generation:
// other.
func routeOf(ctx *fasthttp.RequestCtx) meter.API {
	if !ctx.IsPost() {
		if ctx.IsPut() && bytes.Equal(ctx.Path(), pathGenerate) {
			return meter.APITGI // SGLang serves PUT /generate too (generateAPI)
		}
		return meter.APIOther
	}
	return apiOfPath(ctx.Path())
}

// apiOfPath returns the metered API of a POST to path (routeOf).
func apiOfPath(path []byte) meter.API {
	switch {
	case bytes.Equal(path, pathChat), bytes.Equal(path, pathChat[3:]):
		return meter.APIChat
	case bytes.Equal(path, pathCompletions), bytes.Equal(path, pathCompletions[3:]):
		return meter.APICompletions
	case bytes.Equal(path, pathResponses), bytes.Equal(path, pathResponses[3:]):
		return meter.APIResponses
	case bytes.Equal(path, pathMessages), bytes.Equal(path, pathMessages[3:]):
		return meter.APIMessages
	case bytes.Equal(path, pathOllamaChat):
		return meter.APIOllamaChat
	case bytes.Equal(path, pathOllamaGenerate):
		return meter.APIOllamaGenerate
	case bytes.Equal(path, pathLlamaCpp), bytes.Equal(path, pathLlamaCppInfill):
		return meter.APILlamaCpp
	case bytes.Equal(path, pathGenerate), bytes.Equal(path, pathGenerateStream), bytes.Equal(path, pathRoot):
		// TGI's until the body says otherwise (generateAPI).
		return meter.APITGI
	case bytes.Equal(path, pathInvocations):
		// Chat until the body says otherwise (invocationAPI): vLLM tries
		// it first.
		return meter.APIChat
	case bytes.Equal(path, pathChatBatch):
		return meter.APIChatBatch
	}
	return meter.APIOther
}

// newRecord starts a record at t0.
func (p *Proxy) newRecord(t0 time.Time, reqID []byte) *meter.Record {
	rec := p.records.Get().(*meter.Record)
	rec.Reset()
	rec.Start = t0
	rec.RequestID = ""
	if validRequestID(reqID) && !p.holdsAnyKey(reqID) {
		if rec.RequestID = p.claimID(reqID, rec); rec.RequestID == "" {
			// A request in flight has it: the record keeps it beside the
			// id generated, for the client's own correlation (one id for
			// a job's concurrent requests).
			rec.ClientRequestID = string(reqID)
		}
	}
	if rec.RequestID == "" {
		rec.RequestID = newRequestID()
		p.claimGenerated(rec)
	}
	rec.Upstream = p.cfg.Upstream
	return rec
}

// claimID returns id as a string, held by rec until releaseID, or "" when
// a record not yet emitted holds it (liveIDs).
func (p *Proxy) claimID(id []byte, rec *meter.Record) string {
	p.idMu.Lock()
	defer p.idMu.Unlock()
	if _, live := p.liveIDs[string(id)]; live {
		return ""
	}
	if p.liveIDs == nil {
		p.liveIDs = make(map[string]*meter.Record)
	}
	s := string(id)
	p.liveIDs[s] = rec
	return s
}

// claimGenerated holds rec's generated id until releaseID: the answer
// gives it to the client, which could send it back while it runs.
func (p *Proxy) claimGenerated(rec *meter.Record) {
	p.idMu.Lock()
	if p.liveIDs == nil {
		p.liveIDs = make(map[string]*meter.Record)
	}
	p.liveIDs[rec.RequestID] = rec
	p.idMu.Unlock()
}

// releaseID frees rec's request id (claimID, claimGenerated), when rec
// holds it.
func (p *Proxy) releaseID(rec *meter.Record) {
	p.idMu.Lock()
	if p.liveIDs[rec.RequestID] == rec {
		delete(p.liveIDs, rec.RequestID)
	}
	p.idMu.Unlock()
}

// idKept reports whether a request id the gateway was sent may be written
// out (the record, the answer, the engine's request): 1–128 visible ASCII
// characters and, with gateway keys, holding none (carriesKey, with h the
// request's headers, and holdsAnyKey). The client's own id is checked so
// by startRequest and newRecord; this checks the engine's.
func (p *Proxy) idKept(id []byte, h *fasthttp.RequestHeader) bool {
	if !validRequestID(id) {
		return false
	}
	return !p.idCarriesKey(id, h) && !p.holdsAnyKey(id)
}

// holdsAnyKey reports whether a value a client (or the engine) sent for
// the gateway to log, label or pass on (an X-Request-Id, the model, a
// member name it quotes) holds a whole gateway key the gateway knows, of
// any tenant and of any form: the value itself or one of its tokens
// (identity.Store.HoldsKey: behind "Bearer ", in quotes, after a colon),
// or a key NewKey made anywhere in it. Such a value is never written
// anywhere (a client that put a key in the wrong field would otherwise
// find it in the request log, the metrics and the engine's logs). It costs
// one lookup (a SHA-256) for a value without white space or punctuation.
func (p *Proxy) holdsAnyKey(v []byte) bool {
	return p.cfg.Keys != nil && p.cfg.Keys.HoldsKey(v)
}

// modelKeyMessage returns why a request whose body names model m is
// refused for a gateway key in it (with gateway keys), or "": m holds the
// key the request presents, or a whole key of the store, or has more words
// (or places where a key could begin) than the store looks through, so
// that a key may be among the rest.
func (p *Proxy) modelKeyMessage(m []byte, h *fasthttp.RequestHeader) string {
	if len(m) == 0 {
		return ""
	}
	if p.cfg.Keys == nil {
		// No store to look up: the request's own credential, and what is
		// shaped like a whole key (a model named gp-finetuned-… is a name).
		if carriesWholeKey(m, h) {
			return msgModelKey
		}
		return ""
	}
	return keyMessage(p.keyIn(m, h), msgModelKey, msgModelTooLong)
}

// keyMessage returns found when f is KeyFound, tooMany when it is
// TooManyToLook, else "".
func keyMessage(f identity.KeyFind, found, tooMany string) string {
	switch f {
	case identity.KeyFound:
		return found
	case identity.TooManyToLook:
		return tooMany
	case identity.NoKey:
	}
	return ""
}

// keyIn tells, with gateway keys, whether v holds the key the request
// presents (holdsPresentedKey) or a whole key of the store (Store.FindKey,
// which may not look through all of v: TooManyToLook).
func (p *Proxy) keyIn(v []byte, h *fasthttp.RequestHeader) identity.KeyFind {
	if holdsPresentedKey(v, h) {
		return identity.KeyFound
	}
	return p.cfg.Keys.FindKey(v)
}

var (
	msgModelKey     = "the model field holds a gateway key: send the key in the Authorization header, never in the body"
	msgModelTooLong = "the model field has more than " + strconv.Itoa(identity.MaxKeyLookups) + " words, or places where a gateway key (or its 43 characters after gp-) could begin, for the gateway to check that it holds no key: send the model's name alone"
)

// carriesKey reports whether a request id holds a gateway key, or part of
// one, inside it: the key the request presents (holdsPresentedKey), or
// anything shaped like a key NewKey makes (identity.HoldsKeyShape), a
// fragment included. holdsAnyKey finds the whole keys of the store, which
// keeps hashes: a part of one only by the gp- shape.
func carriesKey(v []byte, h *fasthttp.RequestHeader) bool {
	return holdsPresentedKey(v, h) || identity.HoldsKeyShape(v)
}

// targetKeyMessage returns why a request whose target (its path and
// query) holds a gateway key is refused (with gateway keys), or "": the
// target holds the key the request presents (holdsPresentedKey), or a whole
// key of the store of any form (Store.FindKey), as written or
// percent-decoded (twice at most: gp%252D… is gp%2D… to an engine that
// decodes once), or has more words than the store looks through. As the
// model's check (modelKeyMessage): a name that only begins with gp- is a
// name. The common target (/v1/chat/completions) is one token: one lookup.
func (p *Proxy) targetKeyMessage(uri []byte, h *fasthttp.RequestHeader) string {
	var bufs [2][256]byte
	for i := 0; ; i++ {
		if msg := keyMessage(p.keyIn(uri, h), msgTargetKey, msgTargetTooLong); msg != "" {
			return msg
		}
		if i == 2 || bytes.IndexByte(uri, '%') < 0 {
			return ""
		}
		uri = fasthttp.AppendUnquotedArg(bufs[i][:0], uri)
	}
}

var (
	msgTargetKey     = "the request's target (its path or query) holds a gateway key: send the key in the Authorization header alone; the target goes to the engine"
	msgTargetTooLong = "the request's target (its path or query) has more than " + strconv.Itoa(identity.MaxKeyLookups) + " words, or places where a gateway key could begin, for the gateway to check that it holds no key"
)

// carriesWholeKey reports, without gateway keys, whether v holds a
// credential the request carries for the engine (heldCredential) or what
// is shaped like a whole gateway key (keyshape.HoldsWhole: a tenant, a
// model or an id may begin with gp- in its own right).
func carriesWholeKey(v []byte, h *fasthttp.RequestHeader) bool {
	return heldCredential(v, h) || keyshape.HoldsWhole(v)
}

// minCredential is how long a credential the request carries must be for
// a value that holds it to count as holding a credential: API keys are
// longer; placeholders ("EMPTY", a team's name) a client sends to an
// engine without authentication are not, and may well be in its names.
const minCredential = 16

// heldCredential reports whether v holds a credential the request carries
// (without gateway keys, for the engine): Authorization's, after its
// scheme or whole, and Basic's password, X-Api-Key's or Api-Key's
// (Azure's), of at least minCredential bytes.
func heldCredential(v []byte, h *fasthttp.RequestHeader) bool {
	if len(v) < minCredential {
		return false
	}
	auth := bytes.TrimSpace(h.Peek("Authorization"))
	if i := bytes.IndexByte(auth, ' '); i >= 0 {
		scheme := auth[:i]
		auth = bytes.TrimSpace(auth[i+1:])
		// Basic carries user:password in base64: a tenant or an id that
		// is the password (a client's engine behind an authenticating
		// proxy) was written as it came.
		if bytes.EqualFold(scheme, []byte("Basic")) && basicPasswordIn(v, auth) {
			return true
		}
	}
	for _, c := range [...][]byte{auth, bytes.TrimSpace(h.Peek("X-Api-Key")), bytes.TrimSpace(h.Peek("Api-Key"))} {
		if len(c) >= minCredential && bytes.Contains(v, c) {
			return true
		}
	}
	return false
}

// basicPasswordIn reports whether v holds the password of Basic
// credentials creds (base64 of user:password), of at least minCredential
// bytes. Credentials of up to 256 bytes are decoded on the stack.
func basicPasswordIn(v, creds []byte) bool {
	var buf [192]byte
	dec := buf[:]
	if n := base64.StdEncoding.DecodedLen(len(creds)); n > len(buf) {
		dec = make([]byte, n)
	}
	n, err := base64.StdEncoding.Decode(dec, creds)
	if err != nil {
		// Without its padding: a client may leave it out, and a server
		// in front of the engine (nginx's auth_basic) takes it so.
		if n, err = base64.RawStdEncoding.Decode(dec, bytes.TrimRight(creds, "=")); err != nil {
			return false
		}
	}
	_, password, ok := bytes.Cut(dec[:n], []byte(":"))
	return ok && len(password) >= minCredential && bytes.Contains(v, password)
}

// presentedIn reports whether v holds a credential the request presents:
// its gateway key (holdsPresentedKey), or without gateway keys a
// credential it carries for the engine (heldCredential).
func (p *Proxy) presentedIn(v []byte, h *fasthttp.RequestHeader) bool {
	if p.cfg.Keys == nil {
		return heldCredential(v, h)
	}
	return holdsPresentedKey(v, h)
}

// idCarriesKey reports whether a request id the client sent holds a key
// (carriesKey), or without gateway keys a credential or a whole key's
// shape (carriesWholeKey: an id gp-batch-2026-12-06 is an id).
func (p *Proxy) idCarriesKey(id []byte, h *fasthttp.RequestHeader) bool {
	if p.cfg.Keys == nil {
		return carriesWholeKey(id, h)
	}
	return carriesKey(id, h)
}

// holdsPresentedKey reports whether v holds the key the request presents,
// with or without its "gp-" (a client that builds its ids from it, "req-" +
// key; a key pasted into the model field with a space or "Bearer " around
// it), or 16 or more characters of it in a row (a fragment long enough to
// matter, as keyshape counts one).
func holdsPresentedKey(v []byte, h *fasthttp.RequestHeader) bool {
	k := identity.ExtractKey(h.Peek("Authorization"), h.Peek("X-Api-Key"))
	if len(k) < minPresented {
		return false
	}
	if bytes.Contains(v, k) {
		return true
	}
	secret, ok := bytes.CutPrefix(k, []byte(keyshape.Prefix))
	if !ok || len(secret) < minPresented {
		return false
	}
	if len(secret) < fragment {
		return bytes.Contains(v, secret)
	}
	// A key goodput keys makes has 43 characters after its gp-; a longer
	// one presented is no such key, and its windows would cost its length
	// times v's (a review sent 5 KB of one with 5 KB trace headers: 38 ms
	// a request). Its first maxSecret characters are looked for.
	secret = secret[:min(len(secret), maxSecret)]
	if !runOf(v, secret, fragment) {
		return false // no 16 of the key's characters in a row: no fragment (the common case)
	}
	for i := 0; i+fragment <= len(secret); i++ {
		if bytes.Contains(v, secret[i:i+fragment]) {
			return true
		}
	}
	return false
}

// keptPresentedKey returns a copy of the key the request presents, when
// it is long enough to count (minPresented, as holdsPresentedKey has it);
// "" otherwise. A stream keeps it to the end (redactPresentedKey): the
// request's head is gone by then.
func keptPresentedKey(h *fasthttp.RequestHeader) string {
	k := presentedKey(h)
	if len(k) < minPresented {
		return ""
	}
	return string(k)
}

// minPresented is how long the key a request presents, or its part after
// "gp-", must be for a value that holds it to hold the key
// (holdsPresentedKey, redactPresentedKey).
const minPresented = 8

// redactPresentedKey returns msg with the key the request presented
// (key: keptPresentedKey's, "" for none) replaced by "[redacted]" wherever
// msg holds it, as holdsPresentedKey finds it in a value: a key of the operator's
// own form whole, even glued to other characters (req-<key>, <key>.v2,
// which the store's lookup of whole tokens does not find); a gp- key's
// part after its gp-, and of one long enough every run of fragment or
// more of its characters (redactPresented). It returns msg itself,
// allocating nothing, when it holds none.
func redactPresentedKey(msg, key string) string {
	if len(key) < minPresented {
		return msg
	}
	secret, gp := strings.CutPrefix(key, keyshape.Prefix)
	if gp && len(secret) >= minPresented {
		key = secret // with or without its gp-
	}
	if strings.Contains(msg, key) {
		// Whole first: a gp- key of the operator's own making may hold
		// characters no fragment does (a '.'), or be longer than the
		// windows redactPresented looks through.
		msg = strings.ReplaceAll(msg, key, "[redacted]")
	}
	if gp && len(secret) >= fragment {
		return redactPresented(msg, secret)
	}
	return msg
}

// redactPresented returns msg with every run of fragment or more
// characters of secret (a gp- key's part after it: redactPresentedKey)
// replaced by "[redacted]": an engine's error event may quote the
// prompt, and a part of the key the request presents that long is the key
// (holdsPresentedKey). Whole keys of the store, and anything shaped like a
// key, are the store's and keyshape's (Proxy.clipMessage). It returns msg
// itself, allocating nothing, when it holds none.
//
// It goes through msg once (a rolling hash of each fragment characters,
// compared with the secret's windows only when the hash is one of
// theirs), and allocates the result once: a search of msg for each window
// of the secret, a flag for each byte of msg and a result grown as it was
// written made an error event of 1 MiB that quotes the key throughout cost
// 22 ms and 33 allocations (an event may be 64 MiB: max_event_bytes); it
// costs 2 to 5 ms.
func redactPresented(msg, secret string) string {
	secret = secret[:min(len(secret), maxSecret)]
	if len(secret) < fragment || !runOf(msg, secret, fragment) {
		return msg
	}
	// wh[j]: the hash of secret[j:j+fragment]; slots[h>>58 of the hash
	// widened]: the windows j whose hash falls there, as bits.
	var wh [maxSecret - fragment + 1]uint32
	var slots [64]uint64
	for j := 0; j+fragment <= len(secret); j++ {
		wh[j] = windowHash(secret[j:])
		slots[wh[j]>>26] |= 1 << j
	}
	var b strings.Builder
	done := 0            // msg[:done] is in b
	start, end := -1, -1 // the run being found: msg[start:end]
	h := windowHash(msg)
	for i := 0; ; i++ {
		for m := slots[h>>26]; m != 0; m &= m - 1 {
			j := bits.TrailingZeros64(m)
			if wh[j] != h || msg[i:i+fragment] != secret[j:j+fragment] {
				continue
			}
			if i > end { // not overlapping or touching the run found: a new one
				if start >= 0 {
					done = redactRun(&b, msg, done, start, end)
				}
				start = i
			}
			end = i + fragment
			break
		}
		if i+fragment >= len(msg) {
			break
		}
		h = (h-uint32(msg[i])*hashHigh)*hashBase + uint32(msg[i+fragment])
	}
	if start < 0 {
		return msg
	}
	done = redactRun(&b, msg, done, start, end)
	b.WriteString(msg[done:])
	return b.String()
}

// redactRun writes to b what msg holds from done to start, then
// "[redacted]" for msg[start:end]; it returns end. b is grown to
// len(msg) at its first write: a run of fragment characters or more
// becomes 10, so the result is never longer.
func redactRun(b *strings.Builder, msg string, done, start, end int) int {
	if b.Cap() == 0 {
		b.Grow(len(msg))
	}
	b.WriteString(msg[done:start])
	b.WriteString("[redacted]")
	return end
}

// hashBase is the base of windowHash's polynomial.
const hashBase = 16777619

// hashHigh is the weight of a window's first byte in windowHash:
// hashBase^(fragment-1).
var hashHigh = func() uint32 {
	h := uint32(1)
	for k := 1; k < fragment; k++ {
		h *= hashBase
	}
	return h
}()

// windowHash returns the hash of w's first fragment bytes (redactPresented
// rolls it along a message).
func windowHash(w string) uint32 {
	var h uint32
	for k := 0; k < fragment; k++ {
		h = h*hashBase + uint32(w[k])
	}
	return h
}

// fragment is how many characters of a key in a row count as the key.
const fragment = 16

// maxSecret bounds the characters of a presented gp- key whose fragments
// are looked for (holdsPresentedKey).
const maxSecret = 64

// runOf reports whether v has n characters in a row that are each one of
// secret's: a window of n characters of secret in v is such a run. (Of
// the secret's characters, not base64url's: a gp- key of the operator's
// own making may hold others, a '.', and a part of it quoted was kept or
// redacted as the rest of the text happened to hold 16 base64url
// characters in a row or not.)
func runOf[T, S string | []byte](v T, secret S, n int) bool {
	var in [4]uint64 // the bytes secret holds
	for i := 0; i < len(secret); i++ {
		in[secret[i]>>6] |= 1 << (secret[i] & 63)
	}
	run := 0
	for i := 0; i < len(v); i++ {
		if in[v[i]>>6]&(1<<(v[i]&63)) == 0 {
			run = 0
			continue
		}
		if run++; run >= n {
			return true
		}
	}
	return false
}

// errNoFinalEvent is the record's error for a stream of an API that ends a
// response with an event of its own (meter.API.EndsWithEvent) that ended
// without it.
const errNoFinalEvent = "the stream ended without its final event (response.completed, response.incomplete, response.failed, message_stop, Ollama's line with done true, or TGI's event with generated_text)"

// errNoEvent is the record's error for a chat, completions, llama.cpp or
// SGLang stream under a success that had no token event, no finish and no
// [DONE]: an empty body, comments, pings or chunks of nothing alone, or a
// body that is no event stream at all (an error text, a web page). Every
// engine's answer has at least one of them; with none, the success is not
// the API's. (Streams of the APIs that end with an event of their own are
// held to it: errNoFinalEvent.)
const errNoEvent = "the stream ended with no output: no token event, finish_reason or [DONE] (an empty body, comments alone, or a body that is no event stream)"

// errNoFinish is the record's error for a chat or completions stream of
// OpenAI's shape (it had token events) that ended, however cleanly,
// without saying why its output stopped: no choice had a finish_reason and
// no [DONE] came. (llama.cpp's own /completions stream, which has neither
// and no choices either, is not one.) Every engine ends a whole answer
// with one or the other (most with both); Ollama's OpenAI-compatible
// routes end a stream its engine failed this way, with the error dropped.
const errNoFinish = "the stream ended without a finish_reason or [DONE]"

// errOutputsUnfinished is the record's error for such a stream of several
// outputs (several choices or prompts; SGLang's several prompts or
// samples) that ended without [DONE] after some output's finish, but
// before every one's that it waits for (meter.Meter.Finished): the engine
// stopped between them, and the outputs still running were cut.
const errOutputsUnfinished = "the stream ended without [DONE] while one of its several outputs had no finish_reason yet"

// maxMessage bounds an error message in a record and in an answer: a
// parser's error about a deeply nested body repeats itself for kilobytes,
// and one line of the request log should stay readable.
const maxMessage = clip.Max

// clipMessage returns msg cut to maxMessage bytes at a UTF-8 boundary, with
// "…" after a cut, and anything shaped like a gateway key in it redacted:
// every message in a record or an answer goes through it, and some quote
// the engine (an error event's text, a parser's error about the body), whose
// text may quote the prompt, which may hold a key.
func clipMessage(msg string) string {
	return clip.Text(keyshape.Redact(msg), maxMessage)
}

// clipMessage is clipMessage with, under gateway keys, every tenant's
// upstream credential in msg redacted first (identity.Store.RedactUpstream:
// an engine may quote the Authorization field it was sent), and every
// token of msg that is a whole key of the store, of any tenant and form,
// redacted too (identity.Store.RedactKeys), before the clip.
func (p *Proxy) clipMessage(msg string) string {
	return p.clipStreamMessage(msg, "")
}

// clipStreamMessage is clipMessage for a stream's message, which also has
// the key its request presented, and the fragments of a gp- one, replaced
// (presented: keptPresentedKey's, "" for none; redactPresentedKey).
func (p *Proxy) clipStreamMessage(msg, presented string) string {
	if p.cfg.Keys == nil || msg == "" {
		return clipMessage(msg)
	}
	return clip.Text(p.cfg.Keys.RedactKeys(keyshape.Redact(redactPresentedKey(p.cfg.Keys.RedactUpstream(msg), presented))), maxMessage)
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
	// The exchange is over: the id may be used again, before the sinks
	// run (a client told of the record by them may send it at once).
	p.releaseID(rec)
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
	p.emitted.Add(1)
	p.traceEnd(rec)
	rec.Recycle() // a pooled record holds no gap array (meter/arrays.go)
	if poolCheck {
		poisonRecord(rec)
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

// admission is what the limiter charged a request; it is reconciled with
// the real usage when the request ends.
type admission struct {
	admitted bool
	// unsent: refused after admission, before it was sent (its key was
	// revoked while it waited): the engine never saw it, and it is charged
	// nothing, whatever it asked for (a background request included). Next
	// to admitted, in its padding: a stream holds an admission, and stays
	// within its 1,536-byte size class (TestStreamFitsItsSizeClass).
	unsent    bool
	ticket    ratelimit.Ticket
	promptEst int64 // charged for the prompt when the engine reports no count
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

// usedTokens is what an admitted request is charged in the end: the engine's
// counts, or the prompt estimate where it gave none; nothing for one the
// engine never saw.
func usedTokens(rec *meter.Record, adm *admission) int64 {
	if adm.unsent {
		return 0
	}
	used := adm.promptEst
	if rec.ISL >= 0 {
		used = int64(rec.ISL)
	}
	if rec.OSL > 0 {
		used += int64(rec.OSL)
	}
	if rec.OSL == meter.Unknown && rec.Outcome == meter.OutcomeOK && rec.Inference() {
		// A generation whose output the engine counted nowhere the gateway
		// can read (a body without usage; llama.cpp's answer of several
		// choices, whose usage is its first choice's only): it keeps what
		// it was charged at admission, its max_tokens or the default
		// allowance; charged its prompt only, asking for such answers
		// would pass the token limits. Other routes (a model listing) and
		// model loads generate nothing and are charged their prompt.
		used = max(used, adm.ticket.EstTokens())
	}
	if rec.Deferred || (rec.Background && rec.Outcome != meter.OutcomeOK) {
		// A background request: the engine generates its output after this
		// acknowledgement, out of the gateway's sight, or, streamed, goes
		// on generating after the stream ends early (vLLM runs it as a task
		// of its own: a client that hangs up does not stop it). It keeps
		// what it was charged at admission (its prompt and
		// max_output_tokens, or the default allowance); refunding the
		// output would let background requests pass the token limits with
		// their prompts only.
		used = max(used, adm.ticket.EstTokens())
	}
	return used
}

// release charges an admitted request used tokens and releases its
// concurrency slot. ctx is not the client's: the accounting happens after
// the client has gone. It reads no record (a record the sweep emitted may
// be recycled already); id names the request in a log.
func (p *Proxy) release(ctx context.Context, id string, adm *admission, used int64) {
	defer func() {
		// The record goes out after this whatever the limiter did.
		if v := recover(); v != nil {
			p.cfg.Logf("proxy: panic while reconciling request %s with the limits: %v\n%s", id, v, debug.Stack())
		}
	}()
	// Errors are counted by the gate; a failed reconcile leaves the
	// estimate charged and the concurrency lease to expire (or to the
	// heartbeat to release once Redis answers).
	_ = p.cfg.Limits.Reconcile(ctx, adm.ticket, used)
	adm.admitted = false
}

// settleAfterCut is how long, after Cut, a record may still wait for the
// release of its request's limits (up to the Redis timeout before): a
// Redis that answers releases them in milliseconds, and one that stopped
// answering would otherwise hold the record for its timeout, past the
// shutdown's wait for the cut requests' records (4 s before the client
// connections are closed), and the record would be lost.
const settleAfterCut = time.Second

// settle reconciles an admitted request and emits its record, the last
// thing done for every request that reached the upstream. With a remote
// limiter (Redis) the reconcile is a round trip, and up to the Redis timeout
// while Redis is out; fasthttp sends the end of the response only after the
// handler and the body stream's Close return. So the reconcile and then the
// record run in a goroutine of their own: a dead Redis adds its timeout to a
// request once (at admission), not twice. The record still follows the
// reconcile, and Proxy.Wait waits for both: a record read from the request
// log means its limits are released (a test, or a client of the log, may
// send the next request then), and the limiter is closed only after the
// releases. Only a shutdown breaks the order: settleAfterCut after Cut the
// record stops waiting for a Redis that does not answer (see
// ratelimit.Redis.Reconcile for what becomes of the release).
//
// A settle begun before Cut waits for Redis in its own goroutine, with a
// context that never ends (no second goroutine per request: go-redis does
// not stop a call when its context is cancelled, so a call that must be
// abandoned needs one), and is listed in p.settling; settleAfterCut after
// Cut, sweepSettles emits the records of those still waiting. One begun
// after Cut passes settleCtx, which ends then, to the limiter.
func (p *Proxy) settle(rec *meter.Record, adm *admission) {
	if !adm.admitted {
		p.emit(rec)
		return
	}
	n := usedTokens(rec, adm)
	if !p.remoteLimits {
		p.release(context.Background(), rec.RequestID, adm, n)
		p.emit(rec)
		return
	}
	j := &settleJob{rec: rec, id: rec.RequestID, adm: *adm, used: n}
	p.settleMu.Lock()
	// Under settleMu: a settle that sees no Cut is listed before the
	// sweep, which runs after Cut, takes the lock.
	j.listed = p.cutCtx.Err() == nil
	if j.listed {
		j.next = p.settling
		if j.next != nil {
			j.next.prev = j
		}
		p.settling = j
	}
	p.settleMu.Unlock()
	go p.runSettle(j)
}

// settleJob is a settle with a remote limiter.
type settleJob struct {
	rec  *meter.Record
	id   string // rec.RequestID: runSettle reads nothing of rec but to emit it
	adm  admission
	used int64
	// Under Proxy.settleMu: listed in Proxy.settling, and swept (its
	// record emitted by the sweep, not by runSettle).
	listed, swept bool
	prev, next    *settleJob
}

func (p *Proxy) runSettle(j *settleJob) {
	ctx := p.settleCtx
	if j.listed {
		ctx = context.Background()
	}
	p.release(ctx, j.id, &j.adm, j.used)
	if j.listed {
		p.settleMu.Lock()
		swept := j.swept
		if !swept {
			p.unlist(j)
		}
		p.settleMu.Unlock()
		if swept {
			return // the record is out, and maybe recycled
		}
	}
	p.emit(j.rec)
}

// unlist removes j from p.settling; settleMu held.
func (p *Proxy) unlist(j *settleJob) {
	if j.prev != nil {
		j.prev.next = j.next
	} else {
		p.settling = j.next
	}
	if j.next != nil {
		j.next.prev = j.prev
	}
	j.prev, j.next = nil, nil
}

// sweepSettles emits the records of the settles begun before Cut that
// still wait for Redis, settleAfterCut after Cut: their release goes on
// without them (see ratelimit.Redis.Reconcile for what becomes of it).
func (p *Proxy) sweepSettles() {
	p.settleMu.Lock()
	var swept []*meter.Record
	for j := p.settling; j != nil; j = p.settling {
		j.swept = true
		p.unlist(j)
		swept = append(swept, j.rec)
	}
	p.settleMu.Unlock()
	for _, rec := range swept {
		p.emit(rec)
	}
}

// readErrorInfo maps an error from reading a request to the answer: a
// status, a fixed message and an error code. Status 0 means no byte of a
// request was read. A client that closed or reset its connection mid-way
// is not answered (errorHandler, clientGone).
func readErrorInfo(err error) (status int, msg, code string) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.Is(err, errBareLFRequest):
		return fasthttp.StatusBadRequest, "malformed HTTP request: the lines of a request head, and of a chunked body's framing, must end with CRLF, not a bare LF", "bad_request"
	case errors.As(err, &small):
		return fasthttp.StatusRequestHeaderFieldsTooLarge, "request headers too large", "headers_too_large"
	case errors.Is(err, fasthttp.ErrTimeout):
		// A chunked body's trailer read (after its last chunk) that ran
		// out of time: fasthttp says ErrTimeout, which is no net.Error.
		return fasthttp.StatusRequestTimeout, "request not received in time", "request_timeout"
	case errors.As(err, &ne) && ne.Timeout():
		if _, direct := err.(net.Error); direct {
			// fasthttp passes the read error itself, unwrapped, only when
			// nothing of a request was read.
			return 0, "", ""
		}
		return fasthttp.StatusRequestTimeout, "request not received in time", "request_timeout"
	}
	return fasthttp.StatusBadRequest, "malformed HTTP request", "bad_request"
}

// writeError writes the gateway's own error answer. On the Messages API
// route it takes Anthropic's shape, {"type":"error","error":{"type",
// "message"}}, with the type Anthropic gives the status (anthropicErrorType):
// Anthropic's SDKs read nothing else, and showed a bad key or a timeout
// as a bare status, or with the wrong type. Elsewhere it takes OpenAI's,
// {"error":{"message","type","code"}}. Only the body differs: the status
// and the headers are the same on every route.
func writeError(ctx *fasthttp.RequestCtx, api meter.API, status int, msg, typ, code string) {
	ctx.Response.ResetBody()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	b := make([]byte, 0, 96+len(msg))
	if api == meter.APIMessages {
		b = append(b, `{"type":"error","error":{"type":`...)
		b = strconv.AppendQuote(b, anthropicErrorType(status))
		b = append(b, `,"message":`...)
		b = strconv.AppendQuote(b, msg)
		b = append(b, "}}\n"...)
		ctx.SetBody(b)
		return
	}
	b = append(b, `{"error":{"message":`...)
	b = strconv.AppendQuote(b, msg)
	b = append(b, `,"type":`...)
	b = strconv.AppendQuote(b, typ)
	b = append(b, `,"code":`...)
	b = strconv.AppendQuote(b, code)
	b = append(b, "}}\n"...)
	ctx.SetBody(b)
}

// anthropicErrorType is the error type Anthropic's API documents for an
// HTTP status. A 4xx it does not list is invalid_request_error, as
// Anthropic's own; a 5xx it does not list (502, 505) is api_error, its
// unexpected internal error. 503 (the gateway shutting down, the limits'
// backend down under fail_closed) is overloaded_error, the type of
// Anthropic's 529: try again later.
func anthropicErrorType(status int) string {
	switch status {
	case fasthttp.StatusUnauthorized:
		return "authentication_error"
	case fasthttp.StatusForbidden:
		return "permission_error"
	case fasthttp.StatusNotFound:
		return "not_found_error"
	case fasthttp.StatusRequestEntityTooLarge:
		return "request_too_large"
	case fasthttp.StatusTooManyRequests:
		return "rate_limit_error"
	case fasthttp.StatusServiceUnavailable, 529:
		return "overloaded_error"
	case fasthttp.StatusGatewayTimeout:
		return "timeout_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// finishStream settles a stream's outcome, emits its record and recycles
// the stream and the upstream connection.
func (p *Proxy) finishStream(s *stream) {
	rec := s.rec
	// The request's id, for the log of a panic: once settled, the record
	// is emitted and back in its pool (or about to be, by the settle's
	// goroutine), maybe another request's already.
	id := rec.RequestID
	settled, connDone := false, false // connDone: the upstream connection is pooled or closed
	defer func() {
		// fasthttp recovers a panic in a body stream's Close quietly: a
		// panic here must still end the request with its record, or
		// Proxy.Wait (and a shutdown) would wait for it forever.
		if v := recover(); v != nil {
			p.cfg.Logf("proxy: panic while ending the stream of request %s: %v\n%s", id, v, debug.Stack())
			if !settled {
				rec.Outcome, rec.ErrorMessage = meter.OutcomeUpstreamError, errInternal.Error()
				if s.conn != nil && !connDone {
					p.up.discard(s.conn)
				}
				p.settle(rec, &s.adm)
			}
		}
	}()
	s.guard.stop()
	if testHookFinishStream != nil {
		testHookFinishStream()
	}
	s.meter.Finish(rec)
	if s.mode != modeSSE || !s.metering || s.meter.BodyObserved() {
		// Not a metered event stream (a pass-through route, an encoding
		// the gateway cannot read, a body of another type): its events and
		// gaps are unknown (null in the log), not zero; so for a stream
		// whose metering stopped mid-way (an event over MaxEventBytes):
		// the gaps seen before are not all of them.
		rec.Events = meter.Unknown
		rec.ITL = rec.ITL[:0]
		rec.ITLRest = meter.GapSummary{Buckets: rec.ITLRest.Buckets[:0]}
		rec.MaxITL = meter.Unknown
		rec.TokensPerEvent = rec.TokensPerEvent[:0]
	}
	end := s.end.Load()
	if end == endAbort && s.headDue != 0 {
		// The client left while the gateway still held the engine's
		// response head: it was sent no status.
		rec.Status = meter.StatusClientClosed
	}
	msg := ""
	if m := s.endErr.Load(); m != nil {
		msg = *m
	}
	if end == endAbort && !s.tokenWritten {
		// The client left before its first token reached it: whatever the
		// engine had sent by then, the client saw no first token. Found by
		// a failed write (of the held head, or of events before the first
		// token), it is said so, as the guard's peek says it.
		rec.TTFT, rec.TTFTContent, rec.TPOT = meter.Unknown, meter.Unknown, meter.Unknown
		if msg == msgGoneMidResponse {
			msg = msgGoneBeforeFirstToken
		}
	}
	switch end {
	case endAbort:
		rec.Outcome = meter.OutcomeClientAbort
		if s.contentErr != "" && s.metering && s.contentErr != errEventSkipped {
			// The engine sent a malformed or an error event, and the
			// client left after it: the engine's fault came first, and
			// the client's leaving is its answer to it (the openai SDK
			// throws on such an event and closes; a new user's probe
			// found these recorded as the client's abort, their miss
			// blamed on the client).
			rec.Outcome = meter.OutcomeUpstreamError
			msg = s.contentErr + "; then the client went away"
		}
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
		case rec.Inference() && (rec.Status >= 300 || rec.Status == fasthttp.StatusNoContent):
			// A redirect (a load balancer's to https, a trailing slash),
			// or no content, on an inference route: nothing was
			// generated, and the client got no answer of the API.
			rec.Outcome = meter.OutcomeUpstreamError
			msg = "upstream status " + strconv.Itoa(rec.Status) + ": no answer of the API (an inference route's answer is a success with a body)"
		case s.contentErr != "" && s.metering && s.contentErr != errEventSkipped:
			rec.Outcome = meter.OutcomeUpstreamError
			msg = s.contentErr
		case s.mode == modeSSE && s.metering && !s.meter.BodyObserved() && s.api.EndsWithFinish() && s.meter.TokenEvents() == 0 &&
			!s.meter.Done() && !s.meter.Finished() && !s.meter.PartlyFinished() && !s.meter.HasUsage():
			rec.Outcome = meter.OutcomeUpstreamError
			msg = errNoEvent
		case s.contentErr != "":
			// not metered (encoded, an event over the size limit, or a
			// body over MaxJSONBytes, whose head may have given its counts)
			if s.contentErr == errEventTooLarge {
				rec.Outcome = meter.OutcomeUpstreamError
			} else {
				rec.Outcome = meter.OutcomeOK
			}
			msg = s.contentErr
		case s.mode == modeSSE && s.metering && s.api.EndsWithEvent() && !s.meter.Done():
			rec.Outcome = meter.OutcomeUpstreamError
			msg = errNoFinalEvent
		case s.mode == modeSSE && s.metering && s.api.EndsWithFinish() &&
			s.meter.TokenEvents() > 0 && !s.meter.Done() && !s.meter.Finished():
			rec.Outcome = meter.OutcomeUpstreamError
			msg = errNoFinish
			if s.meter.PartlyFinished() {
				msg = errOutputsUnfinished
			}
		default:
			rec.Outcome = meter.OutcomeOK
		}
	}
	rec.ErrorMessage = p.clipStreamMessage(msg, s.presented)
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
	if s.resp != nil || s.direct {
		connClose := s.connClose
		if s.resp != nil {
			_ = s.resp.CloseBodyStream()
			connClose = s.resp.ConnectionClose()
			fasthttp.ReleaseResponse(s.resp)
		}
		connDone = true
		// A direct stream's body that ended at the connection's close, or
		// had bytes after its end, leaves nothing reusable.
		reusable := !s.direct || !(s.dr.dec.extra || s.dr.dec.kind == bodyUntilClose)
		if end == endEOF && !connClose && reusable {
			p.up.put(s.conn, time.Now())
		} else {
			p.up.discard(s.conn)
		}
	}
	s.dropLag() // before the record: Proxy.Wait then finds nothing counted
	settled = true
	p.settle(rec, &s.adm)
	if testHookStreamSettled != nil {
		testHookStreamSettled()
	}
	releaseStream(s)
}

// testHookFinishStream, when set by a test, runs as a stream ends;
// testHookStreamSettled once its record is settled (emitted, and maybe
// back in its pool), before the stream goes back to its own.
var testHookFinishStream, testHookStreamSettled func()

// idleWorkerTTL is how long fasthttp keeps a goroutine whose connection
// closed, for the next connection (its default: 10 s). Such a goroutine
// keeps the stack its last stream grew to (8 KiB); when many streams end
// together the next collection shrinks each one into a new, smaller
// stack, memory the process did not hold while they ran (2–3 KiB per
// ended stream at 1,024 streams, docs/OVERHEAD.md). Gone after 0.1–0.2 s,
// it frees its stack instead; a new connection then starts a goroutine
// (about a microsecond). fasthttp's cleaner wakes this often.
const idleWorkerTTL = 100 * time.Millisecond
