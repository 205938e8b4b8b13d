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
// returns at once with the figures so far and the context's error.
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
	if res.Completed != 0 || res.Failed != len(reqs) {
		t.Fatalf("completed %d failed %d", res.Completed, res.Failed)
	}
	for i, e := range res.Errors {
		want := "stopped with the run"
		if i >= 6 {
			want = "not sent"
		}
		if !strings.Contains(e, want) {
			t.Errorf("request %d: error %q, want %q", i, e, want)
		}
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
	c := &client{chat: true}
	st := new(streamState)
	for _, n := range []int{10, 1000} {
		data := stream(n)
		r := bytes.NewReader(data)
		var failure string
		allocs := testing.AllocsPerRun(20, func() {
			r.Reset(data)
			st.framer.Reset()
			st.chat.Reset()
			st.m.Start(time.Now())
			failure, _ = c.meterStream(st, &st.chat, r)
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
