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
func benchStream(b *testing.B, chat, includeUsage, continuous bool, maxTraces int) {
	s := New(Config{MaxTraces: maxTraces})
	defer s.Shutdown()
	object := "text_completion"
	if chat {
		object = "chat.completion.chunk"
	}
	st := &stream{
		s: s, chat: chat, n: b.N, finish: "length", prompt: 100,
		includeUsage: includeUsage, continuous: continuous, fault: noFault, seed: 1,
		timer: time.NewTimer(time.Hour),
		head:  appendHead(nil, "chatcmpl-0123456789abcdef0123456789abcdef", object, time.Now().Unix(), "meta-llama/Llama-3.1-8B-Instruct"),
		buf:   make([]byte, 0, 512),
	}
	st.timer.Stop()
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

func BenchmarkStreamPerToken(b *testing.B) {
	b.Run("chat", func(b *testing.B) { benchStream(b, true, false, false, 0) })
	b.Run("chat_include_usage", func(b *testing.B) { benchStream(b, true, true, false, 0) })
	b.Run("chat_continuous_usage", func(b *testing.B) { benchStream(b, true, true, true, 0) })
	b.Run("completions", func(b *testing.B) { benchStream(b, false, false, false, 0) })
	b.Run("chat_tracing_off", func(b *testing.B) { benchStream(b, true, false, false, -1) })
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
