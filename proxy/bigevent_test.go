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

// A Responses API stream's done events repeat what came before (the
// output_item.done of a reasoning item, before the answer's deltas; the
// final response.completed, all of it), so a long answer can make them
// larger than max_event_bytes: the engine is not at fault. They pass
// unmetered, the events around them are metered, and the record is ok
// (the usage, in response.completed, is not known: OSL is estimated).
func TestResponsesLargeEventsSkipped(t *testing.T) {
	for _, c := range []struct {
		file   string
		max    int // under the large events, over every delta
		events int
	}{
		// response.completed is 1,154 bytes; every event before it at most 806.
		{"pai-responses-stream-output-text.txt", 1000, 7},
		// a reasoning item's output_item.done (2,842 bytes) comes before
		// the answer's 271 deltas; two more done events and
		// response.completed (5,104) are over 1,500 bytes too.
		{"pai-responses-stream-reasoning-summary.txt", 1500, 654},
	} {
		b, err := os.ReadFile(filepath.Join(fixturesDir, "openai", c.file))
		if err != nil {
			t.Fatal(err)
		}
		stream := string(b)
		up := startRawUpstream(t, func(sc *scriptConn) {
			writeSSEHead(sc)
			for len(b) > 0 { // in reads that cut events
				n := min(len(b), 701)
				writeChunk(sc, string(b[:n]))
				b = b[n:]
			}
			endChunks(sc)
		})
		g := startGateway(t, Config{Upstream: up.URL(), MaxEventBytes: c.max})
		_, _, body, err := post(t, g.URL()+"/v1/responses", `{"model":"o3","stream":true,"input":"hi"}`, nil)
		if err != nil || body != stream {
			t.Fatalf("%s: the client did not get the engine's bytes: err %v, %d bytes of %d", c.file, err, len(body), len(stream))
		}
		rec := g.record(t)
		if rec.Outcome != meter.OutcomeOK || !strings.Contains(rec.ErrorMessage, "max_event_bytes") {
			t.Fatalf("%s: outcome %s %q", c.file, rec.Outcome, rec.ErrorMessage)
		}
		if rec.Events != c.events || len(rec.ITL) != c.events-1 || rec.TTFT == meter.Unknown || rec.OSL != c.events || rec.UsageSource != meter.UsageEstimate {
			t.Fatalf("%s: events %d gaps %d ttft %v osl %d (%v): want %d events metered, OSL estimated", c.file, rec.Events, len(rec.ITL), rec.TTFT, rec.OSL, rec.UsageSource, c.events)
		}
	}
}

// A failure over max_event_bytes (an error event with a long message, a
// response.failed repeating a long response) is skipped like any large
// event, but the record says the engine failed: it was ok and judged good
// (found by a hostile-engine probe). Whether it names itself in its event:
// line or only in its data's type, on both APIs, cut anywhere.
func TestLargeFailureEventIsAnError(t *testing.T) {
	long := strings.Repeat("x", 4000)
	delta := "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\n"
	for _, c := range []struct {
		name, path, failure string
		failed              bool
	}{
		{"error event", "/v1/responses", "event: error\ndata: {\"type\":\"error\",\"message\":\"" + long + "\"}\n\n", true},
		{"response.failed", "/v1/responses", "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"error\":{\"message\":\"" + long + "\"}}}\n\n", true},
		{"data type only", "/v1/responses", "data: {\"type\": \"response.failed\",\"response\":{\"output\":\"" + long + "\"}}\n\n", true},
		{"anthropic error", "/v1/messages", "event: error\r\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"" + long + "\"}}\r\n\r\n", true},
		{"a large done event", "/v1/responses", "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"item\":{\"text\":\"\\\"type\\\":\\\"error\\\"" + long + "\"}}\n\n", false},
	} {
		stream := delta + c.failure
		up := startRawUpstream(t, func(sc *scriptConn) {
			writeSSEHead(sc)
			b := stream
			for len(b) > 0 { // in reads that cut the events
				n := min(len(b), 333)
				writeChunk(sc, b[:n])
				b = b[n:]
			}
			endChunks(sc)
		})
		g := startGateway(t, Config{Upstream: up.URL(), MaxEventBytes: 1000})
		_, _, body, err := post(t, g.URL()+c.path, `{"model":"m","stream":true,"max_tokens":5,"input":"hi"}`, nil)
		if err != nil || body != stream {
			t.Fatalf("%s: the client did not get the engine's bytes: err %v", c.name, err)
		}
		rec := g.record(t)
		want := meter.OutcomeOK
		if c.failed {
			want = meter.OutcomeUpstreamError
		}
		if rec.Outcome != want || !strings.Contains(rec.ErrorMessage, "max_event_bytes") {
			t.Errorf("%s: outcome %s %q, want %s", c.name, rec.Outcome, rec.ErrorMessage, want)
		}
	}
}
