package proxy

import (
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// A stream does not hold the client's request body: once the request went
// upstream, its bytes go back to fasthttp's pool, so a long prompt is not
// kept for as long as its response streams.
func TestStreamDoesNotHoldRequestBody(t *testing.T) {
	release := make(chan struct{})
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")
		<-release
		writeChunk(c, "data: [DONE]\n\n")
		endChunks(c)
	})
	type held struct {
		streaming bool
		body      int
	}
	seen := make(chan held, 1)
	g := startGatewayWith(t, Config{Upstream: up.URL()}, func(srv *fasthttp.Server) {
		h := srv.Handler
		srv.Handler = func(ctx *fasthttp.RequestCtx) {
			h(ctx)
			seen <- held{ctx.Response.IsBodyStream(), len(ctx.Request.Body())}
		}
	})
	prompt := strings.Repeat("long prompt ", 64<<10/12)
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"` + prompt + `"}]}`
	s := startStream(t, g.URL()+"/v1/chat/completions", body, nil)
	h := <-seen
	close(release)
	if !h.streaming {
		t.Fatal("the response is not a stream")
	}
	if h.body != 0 {
		t.Errorf("the stream holds the client's request body: %d bytes, want 0", h.body)
	}
	if e := s.end(t); e.err != nil || !strings.Contains(e.body, "[DONE]") {
		t.Fatalf("stream ended with %v, body %q", e.err, e.body)
	}
	if got := len(up.lastBody()); got < len(prompt) {
		t.Fatalf("upstream got %d bytes of body, want the whole prompt", got)
	}
	g.record(t)
}
