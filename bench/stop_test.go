package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/sim"
)

// cancelOnWrite cancels a context at its first write: the progress line,
// which the run writes a quarter of a second after it starts.
type cancelOnWrite struct {
	once   sync.Once
	cancel context.CancelFunc
}

func (c *cancelOnWrite) Write(p []byte) (int, error) {
	c.once.Do(c.cancel)
	return len(p), nil
}

// A run whose context ends stops sending, cuts the streams in flight and
// returns at once with the figures so far and the context's error. The
// requests cut in flight count as failed; those never sent are not failed
// requests and are in no per-request array, only counted (found by a
// new-user probe: they were failed, with a start time of 0).
func TestRunStops(t *testing.T) {
	simSrv, url := startSim(t, sim.Config{ITL: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reqs := make([]Request, 12)
	for i := range reqs {
		reqs[i] = Request{Prompt: "hi", MaxTokens: 200} // 10 s each
	}
	offsets := make([]time.Duration, len(reqs))
	for i := 6; i < len(offsets); i++ {
		offsets[i] = time.Hour // never reached
	}
	began := time.Now()
	res, err := Run(ctx, Options{
		BaseURL: url, Model: "sim-llama", Requests: reqs, RequestIDPrefix: "stop-",
		Arrival: Arrival{Offsets: offsets}, Progress: &cancelOnWrite{cancel: cancel},
	})
	took := time.Since(began)
	if !errors.Is(err, context.Canceled) || res == nil {
		t.Fatalf("err %v, result %v", err, res)
	}
	if took > 5*time.Second {
		t.Fatalf("Run took %v after its context ended (requests of 10 s)", took)
	}
	if res.Completed != 0 || res.Failed != 6 || res.NumPrompts != len(reqs) || res.Goodput.NotSent != 6 || res.Goodput.CutInFlight != 6 {
		t.Fatalf("completed %d failed %d of %d, not sent %d, cut in flight %d; want 0, 6 of 12, 6 and 6",
			res.Completed, res.Failed, res.NumPrompts, res.Goodput.NotSent, res.Goodput.CutInFlight)
	}
	ex := res.Goodput
	for name, n := range map[string]int{
		"input_lens": len(res.InputLens), "output_lens": len(res.OutputLens), "ttfts": len(res.TTFTs), "itls": len(res.ITLs),
		"latencies": len(res.Latencies), "start_times": len(res.StartTimes), "queue_times": len(res.QueueTimes), "errors": len(res.Errors),
		"good": len(ex.Good), "arrival_lateness": len(ex.ArrivalLateness), "connect_times": len(ex.ConnectTimes), "request_ids": len(ex.RequestIDs),
	} {
		if n != 6 {
			t.Errorf("%s holds %d requests, want the 6 sent", name, n)
		}
	}
	for i, e := range res.Errors {
		if !strings.HasPrefix(e, "stopped with the run") || ex.RequestIDs[i] != fmt.Sprintf("stop-%d", i) {
			t.Errorf("request %d (%s): error %q, want it stopped with the run", i, ex.RequestIDs[i], e)
		}
	}
	var out bytes.Buffer
	WriteSummary(&out, res, nil, nil)
	if !strings.Contains(out.String(), "Failed requests:                         6 ") ||
		!strings.Contains(out.String(), "Stopped early: 6 of the failed requests were cut in flight; 6 never sent (not in the figures)") {
		t.Errorf("summary:\n%s", out.String())
	}
	// The simulator saw the six streams end early.
	for i := 0; i < 6; i++ {
		tr, err := simSrv.WaitTrace(context.Background(), fmt.Sprintf("stop-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if tr.Ending != sim.EndClientGone {
			t.Errorf("stop-%d ended %v", i, tr.Ending)
		}
	}
}

// Metering a stream allocates nothing per event: a stream of 1,000 token
// events costs what one of 10 does (nothing, once the buffers have grown).
func TestMeterStreamAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	stream := func(n int) []byte {
		var b bytes.Buffer
		b.WriteString(`data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n")
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, `data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok%d "},"finish_reason":null}]}`+"\n\n", i)
		}
		b.WriteString(`data: {"id":"x","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":` + fmt.Sprint(n) + `,"total_tokens":9}}` + "\n\ndata: [DONE]\n\n")
		return b.Bytes()
	}
	c := &client{api: meter.APIChat}
	st := new(streamState)
	for _, n := range []int{10, 1000} {
		data := stream(n)
		r := bytes.NewReader(data)
		var failure string
		allocs := testenv.AllocsPerRun(20, func() {
			r.Reset(data)
			st.framer.Reset()
			st.parser.Reset()
			st.m.Start(time.Now())
			failure, _ = c.meterStream(st, r)
		})
		if failure != "" {
			t.Fatal(failure)
		}
		var rec meter.Record
		st.m.Finish(&rec)
		if rec.Events != n+1 || rec.OSL != n {
			t.Fatalf("events %d osl %d", rec.Events, rec.OSL)
		}
		if allocs != 0 {
			t.Errorf("%d events: %.1f allocations per stream, want 0", n, allocs)
		}
	}
}

// Every way a response can fail ends the request as failed, with an error
// that says which.
func TestRunFailures(t *testing.T) {
	_, url := startSim(t, sim.Config{ITL: time.Millisecond, MaxStall: time.Minute})
	for _, c := range []struct {
		fault, want string
	}{
		{"status=503", "HTTP 503: "},
		{"reset-after=3", "stream broken"},
		{"close-after=3", "stream broken"},
		{"error-at=3", "error event in the stream: "},
		{"malformed-at=3", "malformed event"},
		{"stall-after=2", "timeout"},
	} {
		res, err := Run(context.Background(), Options{
			BaseURL: url, Endpoint: EndpointChat, Model: "sim-llama", Timeout: 300 * time.Millisecond,
			Requests: []Request{{Prompt: "a", MaxTokens: 8}, {Prompt: "b", MaxTokens: 8}},
			Headers:  []Header{{"X-Sim-Fault", c.fault}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Completed != 0 || res.Failed != 2 {
			t.Errorf("%s: completed %d failed %d", c.fault, res.Completed, res.Failed)
			continue
		}
		for _, e := range res.Errors {
			if !strings.Contains(e, c.want) {
				t.Errorf("%s: error %q, want %q", c.fault, e, c.want)
			}
		}
	}
	// A model the server does not serve: vLLM's 404, said as such.
	res, err := Run(context.Background(), Options{BaseURL: url, Model: "nope", Requests: []Request{{Prompt: "a", MaxTokens: 2}}})
	if err != nil || res.Failed != 1 || !strings.Contains(res.Errors[0], "HTTP 404") || !strings.Contains(res.Errors[0], "nope") {
		t.Fatalf("unknown model: %v %+v", err, res.Errors)
	}
}

// A stream longer than the meter keeps gap by gap still gives bench every
// gap (vLLM's itls are complete).
func TestMeterStreamKeepsEveryGap(t *testing.T) {
	var b bytes.Buffer
	const n = meter.MaxKeptGaps + 500
	for i := 0; i < n; i++ {
		b.WriteString(`data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}` + "\n\n")
	}
	b.WriteString("data: [DONE]\n\n")
	st := new(streamState)
	st.m.Start(time.Now())
	if failure, clean := (&client{api: meter.APIChat}).meterStream(st, bytes.NewReader(b.Bytes())); failure != "" || !clean {
		t.Fatal(failure, clean)
	}
	var rec meter.Record
	st.m.Finish(&rec)
	if got := len(rec.ITL) + len(st.extra); rec.Events != n || got != n-1 {
		t.Fatalf("%d events, %d gaps", rec.Events, got)
	}
}

// bench judges a stream's end as the gateway does: a Responses or Messages
// API stream without its final event failed, so did a chat stream without
// a finish_reason or [DONE], and a chat stream past the
// kept gaps has no gap added for its usage chunk and [DONE] (found by
// review: both were counted again).
func TestMeterStreamEndsAsTheGateway(t *testing.T) {
	delta := "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\n"
	final := "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":2}}}\n\n"
	for _, c := range []struct {
		stream, want string
	}{
		{delta + delta + final, ""},
		{delta + delta, "the stream ended without its final event"},
	} {
		st := new(streamState)
		st.m.Start(time.Now())
		if failure, clean := (&client{api: meter.APIResponses}).meterStream(st, strings.NewReader(c.stream)); failure != c.want || !clean {
			t.Errorf("%q: failure %q, want %q", c.stream, failure, c.want)
		}
	}
	// A chat stream that stops with neither a finish_reason nor [DONE]
	// (Ollama's, when its engine failed mid-answer) failed.
	chunk := `data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}` + "\n\n"
	for _, c := range []struct {
		stream, want string
	}{
		{chunk + chunk, "the stream ended without a finish_reason or [DONE]"},
		{chunk + `data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n", ""},
		{chunk + "data: [DONE]\n\n", ""},
	} {
		st := new(streamState)
		st.m.Start(time.Now())
		if failure, _ := (&client{api: meter.APIChat}).meterStream(st, strings.NewReader(c.stream)); failure != c.want {
			t.Errorf("%q: failure %q, want %q", c.stream, failure, c.want)
		}
	}
	var b bytes.Buffer
	const n = meter.MaxKeptGaps + 10
	for i := 0; i < n; i++ {
		b.WriteString(`data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}` + "\n\n")
	}
	b.WriteString(`data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}` + "\n\ndata: [DONE]\n\n")
	st := new(streamState)
	st.m.Start(time.Now())
	if failure, _ := (&client{api: meter.APIChat}).meterStream(st, bytes.NewReader(b.Bytes())); failure != "" {
		t.Fatal(failure)
	}
	var rec meter.Record
	st.m.Finish(&rec)
	if got := len(rec.ITL) + len(st.extra); got != n-1 {
		t.Fatalf("%d token events, %d gaps; want %d", n, got, n-1)
	}
}

// Given offsets are followed in time order, whatever their order in the
// list, and a negative one is refused.
func TestRunUnsortedOffsets(t *testing.T) {
	_, url := startSim(t, sim.Config{})
	reqs := []Request{{Prompt: "a", MaxTokens: 1}, {Prompt: "b", MaxTokens: 1}, {Prompt: "c", MaxTokens: 1}}
	res, err := Run(context.Background(), Options{
		BaseURL: url, Model: "sim-llama", Requests: reqs,
		Arrival: Arrival{Offsets: []time.Duration{40 * time.Millisecond, 0, 20 * time.Millisecond}},
	})
	if err != nil || res.Completed != 3 {
		t.Fatalf("%v %+v", err, res)
	}
	st := res.StartTimes
	if !(st[1] < st[2] && st[2] < st[0]) || st[0] < 0.040 || st[2] < 0.020 {
		t.Fatalf("start times %v: want request 1, then 2, then 0, each not before its plan", st)
	}
	if _, err := Run(context.Background(), Options{BaseURL: url, Model: "sim-llama", Requests: reqs[:1],
		Arrival: Arrival{Offsets: []time.Duration{-time.Second}}}); err == nil {
		t.Fatal("a negative offset accepted")
	}
}
