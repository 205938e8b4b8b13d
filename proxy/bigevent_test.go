package proxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goodput/goodput/meter"
)

// An event over MaxEventBytes stops the metering: the rest of the body
// passes through whole, the outcome is upstream_error, and the record says
// nothing of events and gaps (all null), not the part seen before.
func TestEventOverTheLimitStopsMetering(t *testing.T) {
	big := "data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("x", 4096) + "\"}}]}\n\n"
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		for _, e := range vllmEvents {
			writeChunk(c, e)
		}
		writeChunk(c, big)
		writeChunk(c, done)
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL(), MaxEventBytes: 1024})
	_, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	if want := strings.Join(vllmEvents, "") + big + done; err != nil || body != want {
		t.Fatalf("the client did not get the engine's bytes: err %v, %d bytes of %d", err, len(body), len(want))
	}
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeUpstreamError || !strings.Contains(rec.ErrorMessage, "maximum event size") {
		t.Fatalf("outcome %s %q", rec.Outcome, rec.ErrorMessage)
	}
	if rec.Events != meter.Unknown || len(rec.ITL) != 0 || rec.MaxITL != meter.Unknown || rec.ITLRest.Count != 0 || len(rec.TokensPerEvent) != 0 {
		t.Fatalf("events %d, itl %v, max itl %v, itl rest %d, tokens per event %v: want all unknown", rec.Events, rec.ITL, rec.MaxITL, rec.ITLRest.Count, rec.TokensPerEvent)
	}
	if rec.TTFT == meter.Unknown {
		t.Fatal("the first token, seen before the metering stopped, is unknown")
	}
}

// A Responses API stream's last events repeat the whole response, so a
// long answer can make one larger than max_event_bytes: the engine is not
// at fault. The record is ok and keeps the figures of the events before it
// (its usage, in that event, is not known: OSL is estimated).
func TestResponsesFinalEventOverTheLimit(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(fixturesDir, "openai", "pai-responses-stream-output-text.txt"))
	if err != nil {
		t.Fatal(err)
	}
	stream := string(b)
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, stream)
		endChunks(c)
	})
	// The recorded response.completed is 1,154 bytes; every event before
	// it at most 806.
	g := startGateway(t, Config{Upstream: up.URL(), MaxEventBytes: 1000})
	_, _, body, err := post(t, g.URL()+"/v1/responses", `{"model":"gpt-4o","stream":true,"input":"hi"}`, nil)
	if err != nil || body != stream {
		t.Fatalf("the client did not get the engine's bytes: err %v, %d bytes of %d", err, len(body), len(stream))
	}
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeOK || !strings.Contains(rec.ErrorMessage, "max_event_bytes") {
		t.Fatalf("outcome %s %q", rec.Outcome, rec.ErrorMessage)
	}
	if rec.Events != 7 || len(rec.ITL) != 6 || rec.TTFT == meter.Unknown || rec.OSL != 7 || rec.UsageSource != meter.UsageEstimate {
		t.Fatalf("events %d itl %v ttft %v osl %d (%v): want the 7 deltas' figures, OSL estimated", rec.Events, rec.ITL, rec.TTFT, rec.OSL, rec.UsageSource)
	}
}
