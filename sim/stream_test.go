package sim

import (
	"bufio"
	"io"
	"testing"
	"testing/iotest"
	"time"

	"github.com/valyala/fasthttp"
)

// TestReadFallback reads a streamed body through io.Reader, one byte at a
// time, as a server that does not use fasthttp.BodyWriterTo would.
func TestReadFallback(t *testing.T) {
	s := New(Config{Seed: 9, ITL: time.Millisecond})
	defer func() {
		if err := s.Shutdown(); err != nil {
			t.Error(err)
		}
	}()
	var req fasthttp.Request
	req.Header.SetMethod("POST")
	req.SetRequestURI("/v1/chat/completions")
	req.Header.Set("X-Request-Id", "rd")
	req.SetBodyString(`{` + chatMsgs + `,"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`)
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, nil, nil)
	s.Handler()(&ctx)
	body, err := io.ReadAll(iotest.OneByteReader(ctx.Response.BodyStream()))
	if err != nil {
		t.Fatal(err)
	}
	ctx.Response.Reset() // closes the stream
	want := chatWant("rd", created(t, string(body)), 9, 3, chatISL, "length", "null")
	if string(body) != want {
		t.Fatalf("body\n got %q\nwant %q", body, want)
	}
	tr, ok := s.Trace("rd")
	if !ok || tr.Ending != EndComplete || len(tr.Events) != 7 {
		t.Fatalf("trace ok=%v %+v", ok, tr)
	}
	if len(contentTimes(tr)) != 3 || contentTimes(tr)[2].Before(tr.Start.Add(2*time.Millisecond)) {
		t.Errorf("token times %v not on schedule", contentTimes(tr))
	}
}

// TestFaultWithoutRealConn runs connection faults through a RequestCtx made
// by Init, whose fake connection panics when used: the simulator must fall
// back to failing the body write.
func TestFaultWithoutRealConn(t *testing.T) {
	s := New(Config{MaxStall: time.Millisecond})
	defer func() {
		if err := s.Shutdown(); err != nil {
			t.Error(err)
		}
	}()
	for _, f := range []string{"reset-after=1", "close-after=1", "stall-after=1"} {
		var req fasthttp.Request
		req.Header.SetMethod("POST")
		req.SetRequestURI("/v1/chat/completions")
		req.Header.Set("X-Request-Id", f)
		req.Header.Set("X-Sim-Fault", f)
		req.SetBodyString(`{` + chatMsgs + `,"max_tokens":3,"stream":true}`)
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, nil, nil)
		s.Handler()(&ctx)
		if err := ctx.Response.Write(bufio.NewWriter(io.Discard)); err == nil {
			t.Errorf("%s: response written without error", f)
		}
		ctx.Response.Reset()
		if tr, _ := s.Trace(f); !tr.Done || len(tr.Events) != 2 {
			t.Errorf("%s: trace %+v", f, tr)
		}
	}
}

// TestShutdownWithPendingFakeConnStream shuts down while a response made
// through RequestCtx.Init is still pending: Shutdown must neither panic on
// the fake connection nor return before that response is finished.
func TestShutdownWithPendingFakeConnStream(t *testing.T) {
	s := New(Config{})
	var req fasthttp.Request
	req.Header.SetMethod("POST")
	req.SetRequestURI("/v1/chat/completions")
	req.Header.Set("X-Request-Id", "pending")
	req.SetBodyString(`{` + chatMsgs + `,"stream":true}`)
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, nil, nil)
	s.Handler()(&ctx)
	done := make(chan error, 1)
	go func() { done <- s.Shutdown() }()
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) while a response was pending", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := ctx.Response.Write(bufio.NewWriter(io.Discard)); err == nil {
		t.Error("response written in full after Shutdown")
	}
	ctx.Response.Reset()
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if tr, _ := s.Trace("pending"); tr.Ending != EndShutdown {
		t.Errorf("ending %v", tr.Ending)
	}
}
