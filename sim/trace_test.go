package sim

import (
	"bufio"
	"context"
	"errors"
	"strconv"
	"testing"
	"time"
)

func TestTraceEviction(t *testing.T) {
	h := start(t, Config{MaxTraces: 3})
	for i := 1; i <= 5; i++ {
		h.post("/v1/chat/completions", `{`+chatMsgs+`,"max_tokens":1}`, "X-Request-Id", "e"+strconv.Itoa(i))
	}
	for i := 1; i <= 5; i++ {
		_, ok := h.s.Trace("e" + strconv.Itoa(i))
		if want := i > 2; ok != want {
			t.Errorf("e%d kept=%v, want %v", i, ok, want)
		}
	}
	if n := h.s.TraceCount(); n != 3 {
		t.Errorf("TraceCount = %d, want 3", n)
	}

	// A repeated id replaces the earlier trace; evicting the earlier slot
	// later must not drop the newer trace.
	h.post("/v1/chat/completions", `{`+chatMsgs+`,"max_tokens":1}`, "X-Request-Id", "dup")
	h.post("/v1/chat/completions", `{`+chatMsgs+`,"max_tokens":2}`, "X-Request-Id", "dup")
	if tr, ok := h.s.Trace("dup"); !ok || tr.CompletionTokens != 2 {
		t.Fatalf("dup: ok=%v tokens=%d, want the second request", ok, tr.CompletionTokens)
	}
	h.post("/v1/chat/completions", `{`+chatMsgs+`,"max_tokens":1}`, "X-Request-Id", "x1") // evicts the first "dup" slot
	if tr, ok := h.s.Trace("dup"); !ok || tr.CompletionTokens != 2 {
		t.Errorf("dup after its older slot was evicted: ok=%v tokens=%d", ok, tr.CompletionTokens)
	}
	if _, ok := h.s.Trace("e5"); ok {
		t.Error("e5 should have been evicted")
	}
}

func TestTracingOff(t *testing.T) {
	h := start(t, Config{MaxTraces: -1})
	status, _, _ := h.post("/v1/chat/completions", `{`+chatMsgs+`,"max_tokens":3,"stream":true}`, "X-Request-Id", "off")
	if status != 200 {
		t.Fatal(status)
	}
	if _, ok := h.s.Trace("off"); ok {
		t.Error("trace kept with tracing off")
	}
	if _, err := h.s.WaitTrace(context.Background(), "off"); err == nil {
		t.Error("WaitTrace with tracing off did not fail")
	}
	if h.s.TraceCount() != 0 {
		t.Error("TraceCount != 0")
	}
}

func TestWaitTrace(t *testing.T) {
	h := start(t, Config{ITL: time.Millisecond})
	// Waiting may begin before the request arrives.
	got := make(chan Trace, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tr, err := h.s.WaitTrace(ctx, "later")
		if err != nil {
			t.Error(err)
		}
		got <- tr
	}()
	time.Sleep(20 * time.Millisecond)
	h.post("/v1/chat/completions", `{`+chatMsgs+`,"max_tokens":20,"stream":true}`, "X-Request-Id", "later")
	tr := <-got
	if !tr.Done || tr.Ending != EndComplete || len(contentTimes(tr)) != 20 || tr.End.Before(tr.Events[len(tr.Events)-1].At) {
		t.Errorf("trace %+v", tr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := h.s.WaitTrace(ctx, "never"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitTrace for an unknown id: %v", err)
	}
}

func TestTraceWhileRunning(t *testing.T) {
	h := start(t, Config{ITL: time.Hour})
	resp := h.do("POST", "/v1/chat/completions", `{`+chatMsgs+`,"stream":true}`, "X-Request-Id", "run")
	defer resp.Body.Close()
	readEvents(t, bufio.NewReader(resp.Body), 2)
	// The trace stamps an event once its write returned, which can be just
	// after the client has read it: wait for the second stamp.
	var tr Trace
	var ok bool
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		tr, ok = h.s.Trace("run")
		if ok && len(tr.Events) >= 2 || time.Now().After(deadline) {
			break
		}
	}
	if !ok || tr.Done || tr.Ending != EndPending || len(tr.Events) != 2 || !tr.End.IsZero() {
		t.Fatalf("running trace: ok=%v %+v", ok, tr)
	}
	if tr.Events[0].Kind.String() != "role" || tr.Events[1].Kind.String() != "token" || EndPending.String() != "pending" {
		t.Errorf("names: %v %v %v", tr.Events[0].Kind, tr.Events[1].Kind, EndPending)
	}
}
