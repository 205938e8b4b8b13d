package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goodput/goodput/internal/peek"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// Server is an OpenAI-compatible engine simulator that writes the bytes
// vLLM's OpenAI server writes, on a schedule, and records what it sent.
type Server struct {
	cfg       Config
	model     string
	maxTokens int
	modelLen  int
	maxStall  time.Duration
	sched     Scheduler
	traces    *traceStore
	parsers   fastjson.ParserPool
	fs        *fasthttp.Server
	handler   fasthttp.RequestHandler
	idSeq     atomic.Uint64
	quit      chan struct{}
	serving   sync.WaitGroup // running Serve calls

	mu      sync.Mutex
	closed  bool
	lns     []net.Listener // of Serve's calls: Shutdown closes them
	active  map[*stream]struct{}
	drained chan struct{} // closed when active empties after Shutdown

	metricsReg *prometheus.Registry // GET /metrics (metrics.go)
	stats      *engineStats
}

// New returns a simulator for cfg.
func New(cfg Config) *Server {
	s := &Server{
		cfg:       cfg,
		model:     cfg.Model,
		maxTokens: cfg.DefaultMaxTokens,
		maxStall:  cfg.MaxStall,
		sched:     cfg.Scheduler,
		quit:      make(chan struct{}),
		active:    make(map[*stream]struct{}),
	}
	if s.model == "" {
		s.model = defaultModel
	}
	if s.maxTokens <= 0 {
		s.maxTokens = defaultMaxTokens
	}
	if s.modelLen = cfg.MaxModelLen; s.modelLen <= 0 {
		s.modelLen = defaultModelLen
	}
	if s.maxStall <= 0 {
		s.maxStall = defaultMaxStall
	}
	if s.sched == nil {
		s.sched = Linear{}
	}
	switch {
	case cfg.MaxTraces == 0:
		s.traces = newTraceStore(defaultMaxTraces)
	case cfg.MaxTraces > 0:
		s.traces = newTraceStore(cfg.MaxTraces)
	}
	s.metricsReg, s.stats = s.engineMetrics()
	s.handler = s.handle
	s.fs = &fasthttp.Server{
		Handler:               s.handler,
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		CloseOnShutdown:       true,
		MaxRequestBodySize:    64 << 20,
		Logger:                quietLogger{},
		// fasthttp's idle-worker cleaner sleeps this long between rounds and
		// only then notices that the server stopped; keep it short so that
		// no goroutine outlives Shutdown for long.
		MaxIdleWorkerDuration: 50 * time.Millisecond,
	}
	return s
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// Model returns the served model name.
func (s *Server) Model() string { return s.model }

// Handler returns the simulator's request handler, for serving it from
// another fasthttp.Server. Its streaming responses need that server to call
// fasthttp.BodyWriterTo (fasthttp does for chunked bodies); reset faults and
// client-gone polling need the handler's connection to be a *net.TCPConn.
func (s *Server) Handler() fasthttp.RequestHandler { return s.handler }

// Serve serves HTTP on ln until Shutdown. TCP_NODELAY is set on every
// accepted TCP connection (Go sets it already; this makes it explicit).
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("sim: Serve called after Shutdown")
	}
	s.serving.Add(1)
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	defer s.serving.Done()
	if testHookServe != nil {
		testHookServe()
	}
	return s.fs.Serve(noDelayListener{ln})
}

// testHookServe, if not nil, is called by Serve just before fasthttp's
// Serve (tests hold it there while Shutdown runs).
var testHookServe func()

// ListenAndServe listens on the TCP address addr and serves until Shutdown.
func (s *Server) ListenAndServe(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("sim: listen on %s: %w", addr, err)
	}
	return s.Serve(ln)
}

// Shutdown stops the server: running responses stop at once (their trace
// ends with EndShutdown), listeners close, and Shutdown returns when every
// connection and response goroutine is gone (or after 5 s, with an error).
// Later requests through Handler get a 503.
func (s *Server) Shutdown() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.quit)
	lns := s.lns
	var drained chan struct{}
	if len(s.active) > 0 {
		drained = make(chan struct{})
		s.drained = drained
		now := time.Now()
		for st := range s.active {
			// Unblock a write to a client that does not read.
			connDo(st.conn, func(c net.Conn) { _ = c.SetWriteDeadline(now) })
		}
	}
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), shutdownWait)
	defer cancel()
	err := s.fs.ShutdownWithContext(ctx)
	if err != nil {
		err = fmt.Errorf("sim: shutdown: %w", err)
	}
	// fasthttp closes the listeners its Serve has taken; a Serve called
	// just before, which has not reached fasthttp's yet, would otherwise
	// serve on, and Shutdown wait for it until its timeout (a gateway
	// that failed to start right after starting the simulator did).
	for _, ln := range lns {
		_ = ln.Close()
	}
	served := make(chan struct{})
	go func() {
		s.serving.Wait()
		close(served)
	}()
	select {
	case <-served:
	case <-ctx.Done():
		if err == nil {
			err = errors.New("sim: shutdown: Serve did not return")
		}
	}
	if drained != nil {
		select {
		case <-drained:
		case <-ctx.Done():
			if err == nil {
				s.mu.Lock()
				n := len(s.active)
				s.mu.Unlock()
				err = fmt.Errorf("sim: shutdown: %d responses still running after %v", n, shutdownWait)
			}
		}
	}
	return err
}

// Trace returns what the simulator recorded for the request with the given
// X-Request-Id, complete or still running. It reports false when no such
// request was seen, its trace was evicted, or tracing is off.
func (s *Server) Trace(requestID string) (Trace, bool) {
	r := s.traces.get(requestID)
	if r == nil {
		return Trace{}, false
	}
	return r.snapshot(), true
}

// WaitTrace waits until the request with the given X-Request-Id has ended
// (it may not have arrived yet) and returns its trace, or ctx's error.
func (s *Server) WaitTrace(ctx context.Context, requestID string) (Trace, error) {
	return s.traces.wait(ctx, requestID)
}

// TraceCount returns the number of traces currently kept.
func (s *Server) TraceCount() int { return s.traces.len() }

func (s *Server) closing() bool {
	select {
	case <-s.quit:
		return true
	default:
		return false
	}
}

func (s *Server) register(st *stream) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.active[st] = struct{}{}
	return true
}

func (s *Server) unregister(st *stream) {
	s.mu.Lock()
	delete(s.active, st)
	if s.drained != nil && len(s.active) == 0 {
		close(s.drained)
		s.drained = nil
	}
	s.mu.Unlock()
}

// newID returns a 32-hex-digit request id derived from the seed and a
// counter, like vLLM's random_uuid().hex.
func (s *Server) newID() string {
	n := s.idSeq.Add(1)
	a := mix64(uint64(s.cfg.Seed) ^ mix64(n))
	b := mix64(a ^ n)
	var buf [32]byte
	for i := 0; i < 16; i++ {
		buf[i] = hexDigits[(a>>(60-4*i))&0xf]
		buf[16+i] = hexDigits[(b>>(60-4*i))&0xf]
	}
	return string(buf[:])
}

func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	switch string(ctx.Path()) {
	case "/v1/chat/completions":
		s.generate(ctx, apiChat)
	case "/v1/completions":
		s.generate(ctx, apiCompletions)
	case "/v1/responses":
		s.generate(ctx, apiResponses)
	case "/v1/messages":
		s.generate(ctx, apiMessages)
	case "/v1/models":
		if !ctx.IsGet() {
			methodNotAllowed(ctx, "GET")
			return
		}
		s.models(ctx)
	case "/health":
		if !ctx.IsGet() {
			methodNotAllowed(ctx, "GET")
			return
		}
		ctx.SetStatusCode(fasthttp.StatusOK)
	case "/metrics":
		if !ctx.IsGet() {
			methodNotAllowed(ctx, "GET")
			return
		}
		s.metrics(ctx)
	default:
		sendError(ctx, fasthttp.StatusNotFound, fmt.Sprintf("sim: no route %s %s", ctx.Method(), ctx.Path()))
	}
}

func methodNotAllowed(ctx *fasthttp.RequestCtx, allow string) {
	ctx.Response.Header.Set("Allow", allow)
	sendError(ctx, fasthttp.StatusMethodNotAllowed, fmt.Sprintf("sim: method %s not allowed on %s", ctx.Method(), ctx.Path()))
}

func sendError(ctx *fasthttp.RequestCtx, status int, msg string) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(appendErrorJSON(nil, status, msg))
}

func (s *Server) models(ctx *fasthttp.RequestCtx) {
	b := make([]byte, 0, 256)
	b = append(b, `{"object":"list","data":[{"id":`...)
	b = appendJSONString(b, s.model)
	b = append(b, `,"object":"model","created":`...)
	b = strconv.AppendInt(b, time.Now().Unix(), 10)
	b = append(b, `,"owned_by":"vllm","root":`...)
	b = appendJSONString(b, s.model)
	b = append(b, `,"parent":null,"max_model_len":`...)
	b = strconv.AppendInt(b, int64(s.modelLen), 10)
	b = append(b, `,"permission":[]}]}`...)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// generate serves a generation request of the given API.
func (s *Server) generate(ctx *fasthttp.RequestCtx, api apiKind) {
	start := time.Now()
	tr := s.newTrace(ctx, api, start)
	p, he := s.readGen(ctx, &tr, api)
	if he != nil {
		s.reject(ctx, api, &tr, he)
		return
	}
	st := s.newStream(ctx, api, &p)
	if !s.register(st) {
		s.reject(ctx, api, &tr, &httpError{status: fasthttp.StatusServiceUnavailable, msg: "sim: server is shutting down"})
		return
	}
	st.start = start
	st.sched = s.sched.Admit(Job{ID: tr.RequestID, Start: start, PromptTokens: p.gen.prompt, CompletionTokens: p.n, TTFT: p.ttft, ITL: p.itl})
	st.pend, _ = st.sched.(pendingSchedule)
	if p.gen.stream {
		s.startStream(ctx, st, tr, &p)
	} else {
		s.startBody(ctx, st, tr, &p)
	}
}

// genPlan is a generation request, read and checked, and what the answer
// will be.
type genPlan struct {
	gen       genRequest
	fault     fault
	n         int    // tokens to generate
	finish    string // finish_reason
	ttft, itl time.Duration
}

// newTrace starts the trace of a generation request and gives it its id
// (X-Request-Id, or a new one), which the response carries.
func (s *Server) newTrace(ctx *fasthttp.RequestCtx, api apiKind, start time.Time) Trace {
	id := string(ctx.Request.Header.Peek("X-Request-Id"))
	if id == "" {
		id = s.newID()
	}
	ctx.Response.Header.Set("X-Request-Id", id)
	return Trace{RequestID: id, Path: api.path(), Start: start, Fault: string(ctx.Request.Header.Peek("X-Sim-Fault"))}
}

// readGen checks the request (method, fault, timing headers, body) and
// plans its answer: how many tokens, why it finishes, when they come. The
// plan goes in tr too.
func (s *Server) readGen(ctx *fasthttp.RequestCtx, tr *Trace, api apiKind) (genPlan, *httpError) {
	var p genPlan
	if !ctx.IsPost() {
		ctx.Response.Header.Set("Allow", "POST")
		return p, &httpError{status: fasthttp.StatusMethodNotAllowed, msg: fmt.Sprintf("sim: method %s not allowed on %s", ctx.Method(), tr.Path)}
	}
	if s.closing() {
		return p, &httpError{status: fasthttp.StatusServiceUnavailable, msg: "sim: server is shutting down"}
	}
	var err error
	if p.fault, err = parseFault(tr.Fault); err != nil {
		return p, badRequest("sim: %v", err)
	}
	if p.fault.status != 0 {
		return p, &httpError{status: p.fault.status, msg: fmt.Sprintf("sim: injected status %d (X-Sim-Fault)", p.fault.status)}
	}
	ttft, ttftSet, he := durationHeader(ctx, "X-Sim-TTFT")
	if he != nil {
		return p, he
	}
	itl, itlSet, he := durationHeader(ctx, "X-Sim-ITL")
	if he != nil {
		return p, he
	}
	p.gen, he = s.parseGen(ctx.PostBody(), api)
	tr.Stream = p.gen.stream
	if he != nil {
		return p, he
	}

	limit := p.gen.maxTokens
	if limit == 0 {
		// Unset: the default, within what the context leaves (vLLM's
		// default is all of that).
		limit = max(min(s.maxTokens, s.modelLen-p.gen.prompt), 1)
	}
	if limit > s.modelLen-p.gen.prompt {
		// vLLM's refusal; it also bounds the answer the simulator builds
		// (a non-streamed one whole, at the start).
		return p, badRequest("This model's maximum context length is %d tokens. However, you requested %d output tokens and your prompt contains %d input tokens. Please reduce the length of the input prompt or the number of requested output tokens.", s.modelLen, limit, p.gen.prompt)
	}
	p.n, p.finish = limit, "length"
	if !p.gen.ignoreEOS && s.cfg.NaturalLength > 0 && s.cfg.NaturalLength <= limit {
		p.n, p.finish = s.cfg.NaturalLength, "stop"
	}
	if !ttftSet {
		ttft = s.cfg.TTFT + time.Duration(p.gen.prompt)*s.cfg.TTFTPerPromptToken
	}
	if !itlSet {
		itl = s.cfg.ITL
	}
	p.ttft, p.itl = ttft, itl
	tr.Status = fasthttp.StatusOK
	tr.PromptTokens = p.gen.prompt
	tr.CompletionTokens = p.n
	tr.FinishReason = p.finish
	tr.TTFT = ttft
	tr.ITL = itl
	return p, nil
}

// newStream makes the stream that writes the answer of plan p.
func (s *Server) newStream(ctx *fasthttp.RequestCtx, api apiKind, p *genPlan) *stream {
	st := &stream{
		s:            s,
		conn:         ctx.Conn(),
		api:          api,
		n:            p.n,
		finish:       p.finish,
		prompt:       p.gen.prompt,
		includeUsage: p.gen.includeUsage,
		continuous:   p.gen.continuous,
		fault:        p.fault,
		seed:         s.cfg.Seed,
		timer:        time.NewTimer(time.Hour),
	}
	st.timer.Stop()
	st.poll = peek.Poller(st.conn)
	return st
}

// idObject returns the response id's prefix and the object name of a
// response (vLLM's: a Messages API message has its chat completion's id).
func idObject(api apiKind, streamed bool) (prefix, object string) {
	switch {
	case api == apiCompletions:
		return "cmpl-", "text_completion"
	case api == apiResponses:
		return "resp_", "response"
	case streamed && api == apiChat:
		return "chatcmpl-", "chat.completion.chunk"
	}
	return "chatcmpl-", "chat.completion"
}

// startStream answers with an event stream, written by st.
func (s *Server) startStream(ctx *fasthttp.RequestCtx, st *stream, tr Trace, p *genPlan) {
	prefix, object := idObject(st.api, true)
	id := tr.RequestID
	switch st.api {
	case apiResponses:
		st.resp = s.respInfo(tr, p)
		// A token event is head, the token, mid, its sequence number, tail.
		st.head = append(appendEventLine(make([]byte, 0, 64), "response.output_text.delta"), `{"content_index":0,"delta":"`...)
		st.mid = append(appendJSONString(append(make([]byte, 0, 96+len(id)), `","item_id":`...), st.resp.itemID), `,"logprobs":[],"output_index":0`...)
	case apiMessages:
		st.msgID = prefix + id
		st.head = append(appendEventLine(make([]byte, 0, 128), "content_block_delta"), `{"type":"content_block_delta","delta":{"type":"text_delta","text":"`...)
	default:
		st.head = appendHead(make([]byte, 0, 160+len(id)+len(s.model)), prefix+id, object, tr.Start.Unix(), s.model)
	}
	st.buf = make([]byte, 0, 2*len(st.head)+len(st.mid)+256)
	st.rec = s.traces.start(tr, p.n+9)
	ctx.SetContentType("text/event-stream; charset=utf-8")
	ctx.Response.ImmediateHeaderFlush = true
	ctx.Response.SetBodyStream(st, -1)
}

// startBody answers with one JSON body (or an injected error), written by
// st when its time comes.
func (s *Server) startBody(ctx *fasthttp.RequestCtx, st *stream, tr Trace, p *genPlan) {
	prefix, _ := idObject(st.api, false)
	id, created := prefix+tr.RequestID, tr.Start.Unix()
	st.ph = phBody
	switch {
	case p.fault.errorAt >= 0:
		tr.Status = fasthttp.StatusInternalServerError
		ctx.SetStatusCode(tr.Status)
		st.body = appendAPIError(nil, st.api, tr.Status, "sim: injected error (X-Sim-Fault error-at)")
	case st.api == apiChat:
		st.body = s.chatBody(id, created, p.n, p.finish, p.gen.prompt)
	case st.api == apiResponses:
		r := s.respInfo(tr, p)
		st.body = s.responsesBody(&r, p.n, p.finish, p.gen.prompt)
	case st.api == apiMessages:
		st.body = s.messagesBody(id, p.n, p.finish, p.gen.prompt)
	default:
		st.body = s.completionBody(id, created, p.n, p.finish, p.gen.prompt)
	}
	if p.fault.malformedAt >= 0 {
		st.body = st.body[:len(st.body)/2]
	}
	st.rec = s.traces.start(tr, 1)
	ctx.SetContentType("application/json")
	ctx.Response.SetBodyStream(st, len(st.body))
}

// respInfo describes the Responses API response to request tr, plan p.
func (s *Server) respInfo(tr Trace, p *genPlan) respInfo {
	limit := p.gen.maxTokens
	if limit == 0 {
		limit = s.maxTokens
	}
	return respInfo{id: "resp_" + tr.RequestID, itemID: "msg_" + tr.RequestID, created: tr.Start.Unix(), model: s.model, maxOut: limit, seed: s.cfg.Seed}
}

// appendAPIError appends the error body of an HTTP error answer in the
// API's shape: Anthropic's for the Messages API, vLLM's OpenAI body for the
// others.
func appendAPIError(dst []byte, api apiKind, status int, msg string) []byte {
	if api == apiMessages {
		return appendAnthropicError(dst, anthropicErrorType(status), msg)
	}
	return appendErrorJSON(dst, status, msg)
}

// reject answers a generation request with an error body in its API's
// shape and traces it.
func (s *Server) reject(ctx *fasthttp.RequestCtx, api apiKind, tr *Trace, he *httpError) {
	ctx.SetStatusCode(he.status)
	ctx.SetContentType("application/json")
	ctx.SetBody(appendAPIError(nil, api, he.status, he.msg))
	tr.Status = he.status
	r := s.traces.start(*tr, 1)
	now := time.Now()
	r.event(now, EventBody)
	r.end(now, EndComplete, false)
}

func durationHeader(ctx *fasthttp.RequestCtx, name string) (time.Duration, bool, *httpError) {
	v := ctx.Request.Header.Peek(name)
	if len(v) == 0 {
		return 0, false, nil
	}
	d, err := time.ParseDuration(string(v))
	if err != nil || d < 0 {
		return 0, false, badRequest("sim: header %s: %q is not a non-negative Go duration", name, v)
	}
	return d, true, nil
}

// chatBody builds vLLM's non-streaming chat.completion response.
func (s *Server) chatBody(id string, created int64, n int, finish string, prompt int) []byte {
	b := make([]byte, 0, 512+8*n)
	b = append(b, `{"id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"object":"chat.completion","created":`...)
	b = strconv.AppendInt(b, created, 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, s.model)
	b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":"`...)
	for i := 1; i <= n; i++ {
		b = append(b, TokenText(s.cfg.Seed, i)...)
	}
	b = append(b, `","refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[],"reasoning_content":null},"logprobs":null,"finish_reason":"`...)
	b = append(b, finish...)
	b = append(b, `","stop_reason":null}],"service_tier":null,"system_fingerprint":null,"usage":`...)
	b = appendUsage(b, prompt, n)
	b = append(b[:len(b)-1], `,"prompt_tokens_details":null},"prompt_logprobs":null,"kv_transfer_params":null}`...)
	return b
}

// completionBody builds vLLM's non-streaming text_completion response.
func (s *Server) completionBody(id string, created int64, n int, finish string, prompt int) []byte {
	b := make([]byte, 0, 512+8*n)
	b = append(b, `{"id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"object":"text_completion","created":`...)
	b = strconv.AppendInt(b, created, 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, s.model)
	b = append(b, `,"choices":[{"index":0,"text":"`...)
	for i := 1; i <= n; i++ {
		b = append(b, TokenText(s.cfg.Seed, i)...)
	}
	b = append(b, `","logprobs":null,"finish_reason":"`...)
	b = append(b, finish...)
	b = append(b, `","stop_reason":null,"prompt_logprobs":null}],"service_tier":null,"system_fingerprint":null,"usage":`...)
	b = appendUsage(b, prompt, n)
	b = append(b[:len(b)-1], `,"prompt_tokens_details":null},"kv_transfer_params":null}`...)
	return b
}

// noDelayListener sets TCP_NODELAY on accepted TCP connections.
type noDelayListener struct{ net.Listener }

func (l noDelayListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok && err == nil {
		_ = tc.SetNoDelay(true)
	}
	return c, err
}

// b2s views b as a string without copying; b must not change while the
// string is in use.
func b2s(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
