package proxy

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/sim"
)

// capSink notes the capacity of a record's gap array when its request
// begins, and its length when the record is handed over.
type capSink struct {
	mu    sync.Mutex
	begin []int
	gaps  []int
}

func (c *capSink) Begin(rec *meter.Record) {
	c.mu.Lock()
	c.begin = append(c.begin, cap(rec.ITL))
	c.mu.Unlock()
}

func (c *capSink) Record(rec *meter.Record) {
	c.mu.Lock()
	c.gaps = append(c.gaps, len(rec.ITL))
	c.mu.Unlock()
}

// A record in flight holds no gap array: the array of a stream that ended
// goes back to the meter's pools when its record is recycled, and the next
// stream's record gets one only when its own stream ends. Every record
// still lists its gaps.
func TestRecordInFlightHoldsNoGapArray(t *testing.T) {
	_, simURL := startSim(t, sim.Config{ITL: time.Millisecond})
	cs := &capSink{}
	g := startGateway(t, Config{Upstream: simURL, Sink: cs})
	body := `{"model":"sim-llama","stream":true,"max_tokens":20,"ignore_eos":true,"messages":[{"role":"user","content":"hi"}]}`
	const n = 6
	for i := 0; i < n; i++ {
		resp, err := http.Post(g.URL()+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		rec := g.record(t)
		if rec.Outcome != meter.OutcomeOK || rec.Events < 20 {
			t.Fatalf("request %d: outcome %s, %d events; want ok and at least 20", i, rec.Outcome, rec.Events)
		}
		if len(rec.ITL) != rec.Events-1 {
			t.Errorf("request %d: %d gaps listed for %d token events", i, len(rec.ITL), rec.Events)
		}
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for i, c := range cs.begin {
		if c != 0 {
			t.Errorf("request %d began with a gap array of capacity %d; want none", i, c)
		}
	}
	if len(cs.gaps) != n {
		t.Fatalf("%d records, want %d", len(cs.gaps), n)
	}
}
