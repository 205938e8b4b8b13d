package sim

import (
	"bufio"
	"io"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// benchStream writes one response of b.N tokens to io.Discard with no
// delays, so that an op is one token: the cost of building a chunk, writing
// it and tracing it.
func benchStream(b *testing.B, api apiKind, includeUsage, continuous bool, maxTraces int) {
	s := New(Config{MaxTraces: maxTraces})
	defer s.Shutdown()
	st := newBenchStream(s, api, b.N, includeUsage, continuous)
	now := time.Now()
	st.sched = Linear{}.Admit(Job{Start: now})
	st.rec = s.traces.start(Trace{RequestID: "bench", Start: now}, b.N+6)
	if !s.register(st) {
		b.Fatal("register failed")
	}
	b.ReportAllocs()
	b.ResetTimer()
	n, err := st.WriteTo(io.Discard)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(n / int64(b.N))
	st.Close()
}

// newBenchStream makes the stream of a request of api with n tokens as the
// handler would, without a connection or a schedule.
func newBenchStream(s *Server, api apiKind, n int, includeUsage, continuous bool) *stream {
	const id = "0123456789abcdef0123456789abcdef"
	var ctx fasthttp.RequestCtx
	var req fasthttp.Request
	req.Header.Set("X-Request-Id", id)
	ctx.Init(&req, nil, nil)
	p := genPlan{gen: genRequest{includeUsage: includeUsage || api.events(), continuous: continuous, prompt: 100}, fault: noFault, n: n, finish: "length"}
	st := s.newStream(&ctx, api, &p)
	st.seed = 1
	s.startStream(&ctx, st, Trace{RequestID: id, Start: time.Now()}, &p)
	return st
}

func BenchmarkStreamPerToken(b *testing.B) {
	b.Run("chat", func(b *testing.B) { benchStream(b, apiChat, false, false, 0) })
	b.Run("chat_include_usage", func(b *testing.B) { benchStream(b, apiChat, true, false, 0) })
	b.Run("chat_continuous_usage", func(b *testing.B) { benchStream(b, apiChat, true, true, 0) })
	b.Run("completions", func(b *testing.B) { benchStream(b, apiCompletions, false, false, 0) })
	b.Run("responses", func(b *testing.B) { benchStream(b, apiResponses, true, false, 0) })
	b.Run("messages", func(b *testing.B) { benchStream(b, apiMessages, true, false, 0) })
	b.Run("chat_tracing_off", func(b *testing.B) { benchStream(b, apiChat, false, false, -1) })
}

// BenchmarkHandlerChatStream measures one whole streamed request of 16
// tokens through the handler and fasthttp's response writer (no network):
// parsing, trace record, headers and every chunk.
func BenchmarkHandlerChatStream(b *testing.B) {
	s := New(Config{MaxTraces: 1000})
	defer s.Shutdown()
	h := s.Handler()
	body := []byte(`{"model":"sim-llama","messages":[{"role":"user","content":"Tell me a short story about a gateway"}],"max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}`)
	var req fasthttp.Request
	req.Header.SetMethod("POST")
	req.SetRequestURI("/v1/chat/completions")
	req.Header.Set("X-Request-Id", "bench")
	req.SetBody(body)
	var ctx fasthttp.RequestCtx
	bw := bufio.NewWriter(io.Discard)
	b.ReportAllocs()
	for b.Loop() {
		ctx.Init(&req, nil, nil)
		h(&ctx)
		if err := ctx.Response.Write(bw); err != nil {
			b.Fatal(err)
		}
		ctx.Response.Reset()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*16), "ns/token")
}
