//go:build !race

package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/export"
	"github.com/goodput/goodput/export/otlp"
	"github.com/goodput/goodput/identity"
	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

// The reader's per-event path (frame, parse, meter, strip, queue) and the
// writer's hand-off allocate nothing once buffers have grown.
func TestEventPathAllocatesNothing(t *testing.T) {
	s := testSSEStream(t)
	s.stripUsage = true
	s.meter.Start(time.Now())
	withNull := strings.Replace(vllmEvents[1], `}]}`, `}],"usage":null}`, 1)
	batch := []byte(vllmEvents[1] + withNull + vllmEvents[2])
	step := eventStep(t, s, batch, discardWriter{})
	step()
	if got, want := string(s.spare), vllmEvents[1]+vllmEvents[1]+vllmEvents[2]; got != want {
		t.Fatalf("queued %q, want %q (usage:null stripped)", got, want)
	}
	for i := 0; i < 100; i++ {
		step()
		s.meter.Start(time.Now()) // keep the ITL buffer from growing forever
	}
	if n := testenv.AllocsPerRun(500, func() {
		step()
		s.meter.Start(time.Now())
	}); n != 0 {
		t.Fatalf("%v allocations per batch of 3 events", n)
	}
	if s.contentErr != "" {
		t.Fatalf("content error: %s", s.contentErr)
	}
}

// The native APIs' event path allocates nothing either: Ollama's lines
// (the framer's NDJSON mode) and llama.cpp's events.
func TestNativeEventPathAllocatesNothing(t *testing.T) {
	// llama.cpp's last event with a long prompt, over the limit: read lean.
	lean := `data: {"content":" Paris","id_slot":0,"index":0,"stop":false,"tokens":[12366],"tokens_evaluated":12,"tokens_predicted":1}` + "\n\n" +
		`data: {"index":0,"content":"","tokens":[],"id_slot":0,"stop":true,"model":"m","tokens_predicted":1,"tokens_evaluated":12,"generation_settings":{"seed":1,"stop":[]},"prompt":"` +
		strings.Repeat("a long prompt ", 1000) + `","stop_type":"eos","timings":{"prompt_n":12,"predicted_n":1}}` + "\n\n"
	for _, c := range []struct {
		api   meter.API
		batch string
		lean  bool
	}{
		{meter.APILlamaCpp, lean, true},
		{meter.APICompletions, lean, true},
		{meter.APIOllamaChat, `{"model":"m","created_at":"2025-08-20T13:48:24.316155Z","message":{"role":"assistant","content":"Okay"},"done":false}` + "\n" +
			`{"model":"m","created_at":"2025-08-20T13:48:24.321129Z","message":{"role":"assistant","content":","},"done":false}` + "\n", false},
		{meter.APIOllamaGenerate, `{"model":"m","created_at":"2025-08-20T13:48:22.164615Z","response":"Okay","done":false}` + "\n", false},
		{meter.APILlamaCpp, `data: {"content":" Paris","id_slot":0,"index":0,"stop":false,"tokens":[12366],"tokens_evaluated":12,"tokens_predicted":1}` + "\n\n" +
			`data: {"content":",","id_slot":0,"index":0,"stop":false,"tokens":[11],"tokens_evaluated":12,"tokens_predicted":2}` + "\n\n", false},
	} {
		s := testSSEStream(t)
		s.api = c.api
		s.framer.NDJSON = c.api.NDJSON()
		if c.lean {
			s.framer.SkipLarge, s.framer.Lean, s.framer.MaxEventSize = true, true, 4096
		}
		s.meter.Start(time.Now())
		step := eventStep(t, s, []byte(c.batch), discardWriter{})
		step()
		if s.meter.TokenEvents() == 0 || string(s.spare) != c.batch {
			t.Fatalf("%v: %d token events, queued %q", c.api, s.meter.TokenEvents(), s.spare)
		}
		for i := 0; i < 100; i++ {
			step()
			s.meter.Start(time.Now())
		}
		if n := testenv.AllocsPerRun(500, func() {
			step()
			s.meter.Start(time.Now())
		}); n != 0 {
			t.Errorf("%v: %v allocations per batch", c.api, n)
		}
		if s.contentErr != "" {
			t.Fatalf("%v: content error: %s", c.api, s.contentErr)
		}
		if step(); c.lean && (!s.meter.Finished() || s.meter.TokenEvents() != 1) {
			t.Fatalf("%v: the lean event was not metered: finished %v, %d token events", c.api, s.meter.Finished(), s.meter.TokenEvents())
		}
	}
}

// With tracing and the OTLP metrics on, a stream's events still allocate
// nothing: the span is started before the stream and completed from the
// finished record, the metrics are recorded from it.
func TestTracedEventPathAllocatesNothing(t *testing.T) {
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer col.Close()
	tel, err := otlp.New(context.Background(), otlp.Config{Traces: true, Metrics: true, Endpoint: col.URL}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	p, err := New(Config{Upstream: "http://127.0.0.1:1", Trace: tel.Tracer, Sink: tel.Metrics})
	if err != nil {
		t.Fatal(err)
	}
	rec := new(meter.Record)
	rec.Reset()
	rec.Start, rec.Route, rec.Model = time.Now(), "chat", "m"
	var client fasthttp.RequestHeader
	client.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	p.traceStart(rec, &client)
	r := &request{p: p, rec: rec}
	r.ri.maxTokens = 64
	p.traceUpstream(r)
	if up := (upTrace{r}).Get("traceparent"); !strings.HasPrefix(up, "00-4bf92f3577b34da6a3ce929d0e0e4736-") || rec.Live.Span == nil {
		t.Fatalf("no span started: traceparent %q", up)
	}
	s := acquireStream()
	s.p, s.rec, s.api, s.mode, s.metering = p, rec, meter.APIChat, modeSSE, true
	withChannels(s)
	s.meter.Start(rec.Start)
	batch := []byte(vllmEvents[1] + vllmEvents[1] + vllmEvents[2])
	step := eventStep(t, s, batch, nil)
	for s.meter.TokenEvents() <= meter.MaxKeptGaps+100 {
		step()
	}
	if n := testenv.AllocsPerRun(500, step); n != 0 {
		t.Fatalf("%v allocations per batch of 3 events", n)
	}
	p.traceEnd(rec)
	if rec.Live.Span != nil {
		t.Fatal("span not ended")
	}
}

type discardWriter struct{}

func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }

// Stamping t0 when the headers are read, and taking it in the handler,
// allocates nothing: on a Listener's connection (the stamp is kept in the
// connection), and on another (it goes into the headers, and is taken out
// of them, once their storage has grown).
func TestT0StampAllocatesNothing(t *testing.T) {
	p, err := New(Config{Upstream: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		conn net.Conn
	}{{"listener", &listenerConn{}}, {"other", &net.TCPConn{}}} {
		t.Run(c.name, func(t *testing.T) {
			var ctx fasthttp.RequestCtx
			ctx.Init2(c.conn, nil, true)
			h := &ctx.Request.Header
			h.SetMethod("POST")
			h.Set("Content-Type", "application/json")
			h.SetContentLength(10)
			step := func() {
				if lc, ok := c.conn.(*listenerConn); ok {
					connState(lc, fasthttp.StateActive) // the request's first byte
				}
				p.headerReceived(h)
				before := time.Now()
				if t0 := requestStart(&ctx); t0.After(before) || before.Sub(t0) > time.Second {
					t.Fatalf("t0 %v, now %v", t0, before)
				}
				if len(h.PeekBytes(hdrT0)) != 0 {
					t.Fatal("stamp left in the headers")
				}
			}
			step()
			if n := testenv.AllocsPerRun(200, step); n != 0 {
				t.Fatalf("%v allocations per request", n)
			}
		})
	}
}

// Past the gaps a record keeps, each event's gap goes to the summary and to
// the metrics' histogram (GapSink): still nothing allocated per event.
func TestLongStreamEventPathAllocatesNothing(t *testing.T) {
	metrics := export.NewMetrics(prometheus.NewRegistry(), export.NewLabeler(export.NewLabelSet(nil, 32), export.NewLabelSet(nil, 32)))
	p, err := New(Config{Upstream: "http://127.0.0.1:1", Sink: Sinks{metrics, RecordFunc(func(*meter.Record) {})}})
	if err != nil {
		t.Fatal(err)
	}
	if p.gapSink == nil {
		t.Fatal("the sinks take no gaps")
	}
	rec := new(meter.Record)
	rec.Reset()
	rec.Tenant, rec.Model, rec.Route, rec.Status = "acme", "m", "chat", 200
	s := acquireStream()
	s.p, s.rec, s.api, s.mode, s.metering = p, rec, meter.APIChat, modeSSE, true
	withChannels(s)
	s.meter.Start(time.Now())
	batch := []byte(vllmEvents[1] + vllmEvents[1] + vllmEvents[2])
	step := eventStep(t, s, batch, nil)
	for s.meter.TokenEvents() <= meter.MaxKeptGaps+100 {
		step()
	}
	if _, ok := s.meter.SummarisedGap(); !ok {
		t.Fatal("gaps are not summarised yet")
	}
	if n := testenv.AllocsPerRun(500, step); n != 0 {
		t.Fatalf("%v allocations per batch of 3 events", n)
	}
}

// A stream admitted under a token limit and past its charge tells the
// limiter how far it has got at every event, and is charged a chunk now and
// then (local backend): still nothing allocated per event.
func TestAdmittedStreamEventPathAllocatesNothing(t *testing.T) {
	tc, _ := tenantWithKey(t, "acme", ratelimit.Limits{TPM: 1_000_000_000})
	store, gate := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	p, err := New(Config{Upstream: "http://127.0.0.1:1", Keys: store, Limits: gate})
	if err != nil {
		t.Fatal(err)
	}
	var d ratelimit.Decision
	tk, _, err := gate.Admit(context.Background(), &ratelimit.Request{Tenant: "acme", EstTokens: 10}, &d)
	if err != nil || !d.Allowed {
		t.Fatal(err, d)
	}
	rec := new(meter.Record)
	rec.Reset()
	s := acquireStream()
	s.p, s.rec, s.api, s.mode, s.metering = p, rec, meter.APIChat, modeSSE, true
	s.adm = admission{admitted: true, ticket: tk, promptEst: 5}
	withChannels(s)
	s.meter.Start(time.Now())
	batch := []byte(vllmEvents[1] + vllmEvents[1] + vllmEvents[2])
	step := eventStep(t, s, batch, nil)
	for s.meter.TokenEvents() <= meter.MaxKeptGaps+100 {
		step()
	}
	charged := s.adm.ticket.EstTokens()
	if n := testenv.AllocsPerRun(500, step); n != 0 {
		t.Fatalf("%v allocations per batch of 3 events", n)
	}
	if s.adm.ticket.EstTokens() <= charged {
		t.Fatalf("no chunk charged while measuring: %d, then %d", charged, s.adm.ticket.EstTokens())
	}
}

// testSSEStream returns a pooled stream of a proxy with the default
// configuration, set to meter a chat event stream, with its channels and
// without its goroutines.
func testSSEStream(t *testing.T) *stream {
	t.Helper()
	p, err := New(Config{Upstream: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	s := acquireStream()
	s.p, s.rec, s.api, s.mode, s.metering = p, new(meter.Record), meter.APIChat, modeSSE, true
	withChannels(s)
	return s
}

// withChannels gives a stream under test the channel start() makes (wake
// and drained come with a second goroutine).
func withChannels(s *stream) {
	s.quit = make(chan struct{})
}

// eventStep returns one step of a stream's event path, without its
// goroutines: the reader frames, parses, meters and queues batch, then the
// writer takes the queued bytes as WriteTo does (and writes them to w, when
// not nil).
func eventStep(t *testing.T, s *stream, batch []byte, w io.Writer) func() {
	return func() {
		s.framer.Feed(batch)
		if !s.drainEvents(time.Now(), time.Time{}) {
			t.Fatal("drainEvents stopped")
		}
		s.mu.Lock()
		s.pending, s.spare = s.spare[:0], s.pending
		s.mu.Unlock()
		if w != nil {
			w.Write(s.spare)
		}
		select {
		case <-s.wake:
		default:
		}
	}
}

// The direct write of the one-goroutine path (frame the queued bytes as a
// chunk, one non-blocking write to the client's socket) allocates nothing
// once its buffer has grown.
func TestDirectWriteAllocatesNothing(t *testing.T) {
	ln, err := listenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.Copy(io.Discard, c) // a client that keeps up
			c.Close()
		}
		close(accepted)
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { client.Close(); <-accepted }()
	s := testSSEStream(t)
	s.client, s.raw = client, rawConnOf(client)
	if s.raw == nil {
		t.Skip("no raw socket on this platform")
	}
	s.writeFDFn = s.writeFD
	s.headSent = true // the head went with the first chunk
	s.state.Store(stateInline)
	s.meter.Start(time.Now())
	batch := []byte(vllmEvents[1] + vllmEvents[2])
	step := func() {
		s.framer.Feed(batch)
		if !s.drainEvents(time.Now(), time.Time{}) || !s.push() {
			t.Fatal("the stream stopped")
		}
		if s.lagging {
			t.Fatal("the client lagged: the writer goroutine took over")
		}
		s.meter.Start(time.Now())
	}
	assertNoAllocs(t, step, "batch of 2 events written")
}

// assertNoAllocs runs step 100 times (buffers reach their size), then
// fails unless it allocates nothing per run.
func assertNoAllocs(t *testing.T, step func(), per string) {
	t.Helper()
	for i := 0; i < 100; i++ {
		step()
	}
	if n := testenv.AllocsPerRun(500, step); n != 0 {
		t.Fatalf("%v allocations per %s", n, per)
	}
}

// A pooled stream's next request, a chat stream like the one before,
// meters its events without allocating: the parser's buffer (the shape
// memo's copy of a chunk) is kept across requests with the stream, as
// the framer's and the queue's are.
func TestPooledStreamNextRequestAllocatesNothing(t *testing.T) {
	s := testSSEStream(t)
	p, rec := s.p, s.rec
	batch := []byte(vllmEvents[1] + vllmEvents[1] + vllmEvents[2])
	request := func() {
		s.reset()
		s.p, s.rec, s.api, s.mode, s.metering = p, rec, meter.APIChat, modeSSE, true
		s.meter.Start(time.Now())
		eventStep(t, s, batch, nil)()
		if s.meter.ContentEvents() != 3 {
			t.Fatalf("%d events with content, want 3", s.meter.ContentEvents())
		}
	}
	for range 10 {
		request()
	}
	if n := testenv.AllocsPerRun(200, request); n != 0 {
		t.Fatalf("%v allocations per request", n)
	}
}

// Dropping a response's hop-by-hop headers, those a Connection line names
// included, allocates nothing once the headers' storage has grown (the
// options are copied to a buffer on the stack: a callback taking them moved
// it to the heap, one allocation per response).
func TestRemoveHopAllocatesNothing(t *testing.T) {
	var resp fasthttp.ResponseHeader
	step := func() {
		resp.Set("Connection", "X-Hop")
		resp.Set("X-Hop", "1")
		removeHopResponse(&resp)
		if len(resp.Peek("X-Hop")) != 0 {
			t.Fatal("a header a Connection line names was kept")
		}
	}
	step()
	if n := testenv.AllocsPerRun(100, step); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// What a request head with a body keeps for a failed body's record (its
// target, request id and tenant) is copied into one buffer of its
// connection: one allocation for a connection's first such head (a client
// that opens a connection per request pays it each time), none after.
func TestHeldHeadAllocatesOnce(t *testing.T) {
	p, err := New(Config{Upstream: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	var h fasthttp.RequestHeader
	h.SetMethod("POST")
	h.SetRequestURI("/v1/chat/completions?x=1")
	h.Set("X-Request-Id", "req-1")
	h.Set(p.cfg.TenantHeader, "acme")
	h.SetContentLength(10)
	check := func(hh *heldHead, uri, id, tenant string) {
		t.Helper()
		if string(hh.uri()) != uri || string(hh.id()) != id || string(hh.tenant()) != tenant || hh.hasTenant != (tenant != "") {
			t.Fatalf("held %q %q %q (tenant sent %v), want %q %q %q", hh.uri(), hh.id(), hh.tenant(), hh.hasTenant, uri, id, tenant)
		}
	}
	var hh heldHead
	p.hold(&hh, &h, 1, 0, identity.KeyInfo{}, false)
	check(&hh, "/v1/chat/completions?x=1", "req-1", "acme")
	if n := testenv.AllocsPerRun(100, func() {
		var fresh heldHead
		p.hold(&fresh, &h, 1, 0, identity.KeyInfo{}, false)
	}); n != 1 {
		t.Fatalf("a connection's first head: %v allocations, want 1", n)
	}
	if n := testenv.AllocsPerRun(100, func() { p.hold(&hh, &h, 2, 0, identity.KeyInfo{}, false) }); n != 0 {
		t.Fatalf("a connection's later head: %v allocations, want 0", n)
	}
	// A later head without the id and the tenant keeps neither of the
	// earlier one's.
	h.Del("X-Request-Id")
	h.Del(p.cfg.TenantHeader)
	p.hold(&hh, &h, 3, 0, identity.KeyInfo{}, false)
	check(&hh, "/v1/chat/completions?x=1", "", "")
}
