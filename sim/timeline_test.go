package sim

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// slack bounds how late an event may be against its schedule. It is
// generous so that a loaded machine does not make the test flaky; what the
// tests guard is that events are never early and that lateness does not add
// up (lastSlack, much tighter, on the last of many tokens). Timing checks
// run up to three times; ordering checks fail at once.
const (
	slack     = 20 * time.Millisecond
	lastSlack = 5 * time.Millisecond
	attempts  = 3
)

// contentTimes returns the flush times of the token chunks (EventToken).
func contentTimes(tr Trace) []time.Time {
	var out []time.Time
	for _, e := range tr.Events {
		if e.Kind == EventToken {
			out = append(out, e.At)
		}
	}
	return out
}

// retryTiming runs attempt until it reports no timing problem, at most
// `attempts` times, and fails with the last attempt's problems.
func retryTiming(t *testing.T, attempt func(try int) []string) {
	t.Helper()
	var problems []string
	for try := 0; try < attempts; try++ {
		if problems = attempt(try); len(problems) == 0 {
			return
		}
		t.Logf("attempt %d: %d timing problems, first: %s", try+1, len(problems), problems[0])
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// checkSchedule checks tr against the linear schedule: it fails the test at
// once on ordering errors (an event before its due time, times going
// backwards, wrong counts) and returns lateness problems.
func checkSchedule(t *testing.T, tr Trace, n int, ttft, itl time.Duration) []string {
	t.Helper()
	if tr.TTFT != ttft || tr.ITL != itl {
		t.Fatalf("trace TTFT %v ITL %v, want %v %v", tr.TTFT, tr.ITL, ttft, itl)
	}
	for i := 1; i < len(tr.Events); i++ {
		if tr.Events[i].At.Before(tr.Events[i-1].At) {
			t.Fatalf("event %d at %v is before event %d", i, tr.Events[i].At.Sub(tr.Start), i-1)
		}
	}
	if tr.Events[0].Kind != EventRole || tr.Events[0].At.Before(tr.Start.Add(ttft)) {
		t.Fatalf("role chunk %v at %v, want at or after TTFT %v", tr.Events[0].Kind, tr.Events[0].At.Sub(tr.Start), ttft)
	}
	toks := contentTimes(tr)
	if len(toks) != n {
		t.Fatalf("%d token events, want %d", len(toks), n)
	}
	var problems []string
	for i, at := range toks {
		due := tr.Start.Add(ttft + time.Duration(i)*itl)
		late := at.Sub(due)
		if late < 0 {
			t.Fatalf("token %d flushed %v before its due time", i+1, -late)
		}
		if late > slack {
			problems = append(problems, fmt.Sprintf("token %d flushed %v after its due time (want ≤ %v)", i+1, late, slack))
		}
	}
	return problems
}

// lastOnTime checks that the last of n tokens is at most lastSlack after
// start+TTFT+(n−1)·ITL: sleep errors must not accumulate.
func lastOnTime(tr Trace, n int, ttft, itl time.Duration) []string {
	toks := contentTimes(tr)
	due := tr.Start.Add(ttft + time.Duration(n-1)*itl)
	if late := toks[len(toks)-1].Sub(due); late > lastSlack {
		return []string{fmt.Sprintf("last token %v after start+TTFT+(n−1)·ITL (want ≤ %v): lateness adds up", late, lastSlack)}
	}
	return nil
}

func TestTimelineNoDrift(t *testing.T) {
	const n, ttft, itl = 200, 30 * time.Millisecond, time.Millisecond
	h := start(t, Config{TTFT: ttft, ITL: itl})
	retryTiming(t, func(try int) []string {
		id := fmt.Sprintf("tl-%d", try)
		status, body, _ := h.post("/v1/chat/completions", `{`+chatMsgs+`,"max_tokens":200,"stream":true}`, "X-Request-Id", id)
		if status != 200 {
			t.Fatal(status, body)
		}
		tr := h.waitTrace(id)
		problems := checkSchedule(t, tr, n, ttft, itl)
		if tr.HeadersAt.IsZero() || tr.HeadersAt.After(tr.Events[0].At) {
			t.Errorf("HeadersAt %v, first event %v", tr.HeadersAt, tr.Events[0].At)
		}
		// The finish chunk and [DONE] follow the last token at once.
		if k := len(tr.Events); tr.Events[k-1].Kind != EventDone || tr.Events[k-2].Kind != EventFinish {
			t.Fatalf("tail events %v", tr.Events[k-3:])
		} else if d := tr.Events[k-1].At.Sub(tr.Events[k-3].At); d > slack {
			problems = append(problems, fmt.Sprintf("[DONE] %v after the last token", d))
		}
		return append(problems, lastOnTime(tr, n, ttft, itl)...)
	})
}

func TestTimelineHeaderOverridesAndPromptCost(t *testing.T) {
	h := start(t, Config{TTFT: 5 * time.Millisecond, TTFTPerPromptToken: time.Millisecond, ITL: time.Hour})
	retryTiming(t, func(try int) []string {
		sfx := fmt.Sprintf("-%d", try)
		// TTFT grows with the prompt; ITL overridden per request.
		h.post("/v1/completions", `{"prompt":"a b c d e f g h i","max_tokens":5,"stream":true}`, "X-Request-Id", "pp"+sfx, "X-Sim-ITL", "2ms")
		isl := CompletionPromptTokens("a b c d e f g h i")
		problems := checkSchedule(t, withRole(h.waitTrace("pp"+sfx)), 5, 5*time.Millisecond+time.Duration(isl)*time.Millisecond, 2*time.Millisecond)

		// X-Sim-TTFT replaces the whole TTFT, prompt part included.
		h.post("/v1/chat/completions", `{`+chatMsgs+`,"max_tokens":10,"stream":true}`, "X-Request-Id", "ov"+sfx, "X-Sim-TTFT", "40ms", "X-Sim-ITL", "3ms")
		problems = append(problems, checkSchedule(t, h.waitTrace("ov"+sfx), 10, 40*time.Millisecond, 3*time.Millisecond)...)

		// Non-streaming: the body goes out when the last token is due.
		h.post("/v1/chat/completions", `{`+chatMsgs+`,"max_tokens":4}`, "X-Request-Id", "nst"+sfx, "X-Sim-TTFT", "10ms", "X-Sim-ITL", "5ms")
		tr := h.waitTrace("nst" + sfx)
		late := tr.Events[0].At.Sub(tr.Start.Add(25 * time.Millisecond))
		if late < 0 {
			t.Fatalf("non-streaming body %v early", -late)
		}
		if late > slack {
			problems = append(problems, fmt.Sprintf("non-streaming body %v after the last token's due time", late))
		}
		return problems
	})
}

// withRole lets checkSchedule check a completions trace, which has no role
// chunk, by treating its first token as the role chunk's time too.
func withRole(tr Trace) Trace {
	tr.Events = append([]Event{{At: tr.Events[0].At, Kind: EventRole}}, tr.Events...)
	return tr
}

func TestHeadersBeforeFirstToken(t *testing.T) {
	h := start(t, Config{TTFT: 300 * time.Millisecond})
	resp := h.do("POST", "/v1/chat/completions", `{`+chatMsgs+`,"max_tokens":1,"stream":true}`, "X-Request-Id", "hdr")
	gotHeaders := time.Now()
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	tr := h.waitTrace("hdr")
	if !gotHeaders.Before(tr.Events[0].At) {
		t.Errorf("client got the headers %v after the first token was flushed; want them before", gotHeaders.Sub(tr.Events[0].At))
	}
}

func TestClientGoneMidStream(t *testing.T) {
	h := start(t, Config{ITL: 2 * time.Millisecond})
	resp := h.do("POST", "/v1/chat/completions", `{`+chatMsgs+`,"max_tokens":5000,"stream":true}`, "X-Request-Id", "gone")
	readEvents(t, bufio.NewReader(resp.Body), 5)
	resp.Body.Close() // net/http closes the connection of an unread body
	tr := h.waitTrace("gone")
	if tr.Ending != EndClientGone || tr.DisconnectedAt.IsZero() || tr.Count(EventDone) != 0 {
		t.Fatalf("ending %v, disconnected %v, %d events", tr.Ending, tr.DisconnectedAt, len(tr.Events))
	}
	if last := tr.Events[len(tr.Events)-1].At; tr.DisconnectedAt.Before(last) {
		t.Errorf("disconnect recorded before the last flushed event")
	}
	if len(tr.Events) >= 5001 {
		t.Errorf("the whole stream was written")
	}
}

func TestClientGoneDuringLongTTFT(t *testing.T) {
	h := start(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	resp := h.doCtx(ctx, "POST", "/v1/chat/completions", `{`+chatMsgs+`,"stream":true}`, "X-Request-Id", "ttft-gone", "X-Sim-TTFT", "1h")
	left := time.Now()
	cancel()
	resp.Body.Close()
	tr := h.waitTrace("ttft-gone")
	if tr.Ending != EndClientGone || len(tr.Events) != 0 {
		t.Fatalf("ending %v with %d events", tr.Ending, len(tr.Events))
	}
	if d := tr.DisconnectedAt.Sub(left); d < 0 || d > time.Second {
		t.Errorf("noticed %v after the client left", d)
	}
}

func TestShutdownStopsStreams(t *testing.T) {
	h := start(t, Config{ITL: 10 * time.Second})
	resp := h.do("POST", "/v1/chat/completions", `{`+chatMsgs+`,"stream":true}`, "X-Request-Id", "sd1")
	defer resp.Body.Close()
	readEvents(t, bufio.NewReader(resp.Body), 2)
	resp2 := h.do("POST", "/v1/chat/completions", streamReq, "X-Request-Id", "sd2", "X-Sim-Fault", "stall-after=0")
	defer resp2.Body.Close()
	waitFor(t, "sd2 to stall", func() bool { tr, ok := h.s.Trace("sd2"); return ok && !tr.HeadersAt.IsZero() })
	begin := time.Now()
	if err := h.s.Shutdown(); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if d := time.Since(begin); d > 3*time.Second {
		t.Errorf("Shutdown took %v", d)
	}
	for _, id := range []string{"sd1", "sd2"} {
		tr, ok := h.s.Trace(id)
		if !ok || !tr.Done || tr.Ending != EndShutdown {
			t.Errorf("%s: ok=%v done=%v ending=%v", id, ok, tr.Done, tr.Ending)
		}
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("client body ended cleanly after Shutdown")
	}
	if err := h.s.Shutdown(); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if err := h.s.Serve(nil); err == nil {
		t.Error("Serve after Shutdown succeeded")
	}
}

// waitFor polls cond until it holds, failing after 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// recordingScheduler checks the Scheduler contract: tokens due every 4 ms
// from 10 ms after start, whatever the config says.
type recordingScheduler struct {
	mu       sync.Mutex
	jobs     []Job
	released atomic.Int32
}

func (r *recordingScheduler) Admit(j Job) Schedule {
	r.mu.Lock()
	r.jobs = append(r.jobs, j)
	r.mu.Unlock()
	return &recSchedule{r: r, start: j.Start}
}

type recSchedule struct {
	r     *recordingScheduler
	start time.Time
	done  bool
}

func (s *recSchedule) TokenTime(i int) time.Time {
	return s.start.Add(10*time.Millisecond + time.Duration(i-1)*4*time.Millisecond)
}

func (s *recSchedule) Release() {
	if s.done {
		panic("Release called twice")
	}
	s.done = true
	s.r.released.Add(1)
}

func TestCustomScheduler(t *testing.T) {
	rs := &recordingScheduler{}
	h := start(t, Config{Scheduler: rs, TTFT: time.Hour, ITL: time.Hour})
	h.post("/v1/chat/completions", `{`+chatMsgs+`,"max_tokens":6,"stream":true}`, "X-Request-Id", "cs")
	tr := h.waitTrace("cs")
	for i, at := range contentTimes(tr) {
		due := tr.Start.Add(10*time.Millisecond + time.Duration(i)*4*time.Millisecond)
		if at.Before(due) {
			t.Errorf("token %d flushed %v before the scheduler's time", i+1, due.Sub(at))
		}
	}
	if toks := contentTimes(tr); len(toks) != 6 || toks[5].Sub(tr.Start) > time.Minute {
		t.Errorf("tokens %v: the config's 1h schedule was used, not the scheduler's", toks)
	}
	waitFor(t, "Release", func() bool { return rs.released.Load() == 1 })
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if len(rs.jobs) != 1 {
		t.Fatalf("%d jobs admitted", len(rs.jobs))
	}
	j := rs.jobs[0]
	if j.ID != "cs" || j.PromptTokens != chatISL || j.CompletionTokens != 6 || j.TTFT != time.Hour || j.ITL != time.Hour || !j.Start.Equal(tr.Start) {
		t.Errorf("job %+v", j)
	}
}

// TestForeignServer serves Handler() from a fasthttp.Server the simulator
// does not own.
func TestForeignServer(t *testing.T) {
	s := New(Config{ITL: time.Millisecond})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fs := &fasthttp.Server{Handler: s.Handler(), MaxIdleWorkerDuration: 50 * time.Millisecond}
	served := make(chan error, 1)
	go func() { served <- fs.Serve(ln) }()
	defer func() {
		if err := fs.Shutdown(); err != nil {
			t.Error(err)
		}
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()
	// net/http rather than fasthttp.Client: the latter leaves cleaner
	// goroutines behind that goleak would report.
	h := &harness{t: t, s: s, base: "http://" + ln.Addr().String(), client: &http.Client{Transport: &http.Transport{}}}
	defer h.client.CloseIdleConnections()
	status, body, _ := h.post("/v1/chat/completions", `{`+chatMsgs+`,"max_tokens":4,"stream":true}`, "X-Request-Id", "foreign")
	if n := len(events(t, body)); status != 200 || n != 7 {
		t.Fatalf("status %d, %d events: %s", status, n, body)
	}
	tr, ok := s.Trace("foreign")
	if !ok || tr.Ending != EndComplete || len(tr.TokenEvents()) != 6 {
		t.Fatalf("trace ok=%v %+v", ok, tr)
	}
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if status, body, _ := h.post("/v1/chat/completions", streamReq); status != 503 {
		t.Errorf("after Shutdown: %d %s", status, body)
	}
}

// A Shutdown right after Serve was called stops it: a Serve that had not
// reached fasthttp's own when Shutdown closed fasthttp's listeners served
// on, and Shutdown waited for it until its timeout (a gateway that failed
// to start just after starting the simulator took 5 s to exit, and left
// the Serve goroutine running). The hook holds Serve at that point until
// its listener is closed (or 10 s, longer than Shutdown waits).
func TestShutdownJustAfterServe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &closeSignal{Listener: ln, closed: make(chan struct{})}
	t.Cleanup(func() { _ = cl.Close() })
	entered := make(chan struct{})
	testHookServe = func() {
		close(entered)
		select {
		case <-cl.closed:
		case <-time.After(10 * time.Second):
		}
	}
	t.Cleanup(func() { testHookServe = nil })
	s := New(Config{})
	served := make(chan error, 1)
	go func() { served <- s.Serve(cl) }()
	<-entered
	if err := s.Shutdown(); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	<-served
}

// closeSignal is a listener that closes closed at its first Close.
type closeSignal struct {
	net.Listener
	once   sync.Once
	closed chan struct{}
}

func (c *closeSignal) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Listener.Close()
}
