package proxy

import (
	"strconv"
	"strings"
	"testing"

	"github.com/goodput/goodput/meter"
)

// withBigContext returns an Ollama /api/generate stream whose last line's
// context (the conversation's token ids) is made n ids long, as a long
// conversation makes it.
func withBigContext(t *testing.T, stream string, n int) string {
	t.Helper()
	i := strings.Index(stream, `"context":[`)
	if i < 0 {
		t.Fatal("the fixture's last line has no context")
	}
	i += len(`"context":[`)
	var b strings.Builder
	b.WriteString(stream[:i])
	for k := 0; k < n; k++ {
		if k > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(100000 + k%28000))
	}
	b.WriteString(stream[i+strings.IndexByte(stream[i:], ']'):])
	return b.String()
}

// Ollama's last line of /api/generate carries context, the conversation's
// token ids, which a long conversation makes larger than max_event_bytes.
// The line reaches the client untouched and the record keeps what it says
// (prompt_eval_count, eval_count, that the stream is done): the line is
// read lean as it passes, without its context. Reads cut it anywhere.
func TestOllamaContextOverTheLimit(t *testing.T) {
	base := fixtureText(t, "ollama/oll-api-generate-stream-llama3-2024.ndjson")
	for _, c := range []struct {
		max, ids, read int
	}{
		{0, 200_000, 4093},   // the default limit, 1 MiB: a context of 1.2 MB
		{4096, 2_000, 1},     // byte by byte
		{4096, 2_000, 333},   // reads that cut the line anywhere
		{4096, 20_000, 8191}, // reads larger than the limit
	} {
		stream := withBigContext(t, base, c.ids)
		up := startRawUpstream(t, func(sc *scriptConn) {
			sc.BW.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n")
			sc.BW.Flush()
			for b := stream; len(b) > 0; {
				n := min(len(b), c.read)
				writeChunk(sc, b[:n])
				b = b[n:]
			}
			endChunks(sc)
		})
		g := startGateway(t, Config{Upstream: up.URL(), MaxEventBytes: c.max})
		status, _, body, err := post(t, g.URL()+"/api/generate", `{"model":"llama3","prompt":"a joke"}`, nil)
		if err != nil || status != 200 || body != stream {
			t.Fatalf("%+v: status %d err %v: the client got %d bytes of the engine's %d", c, status, err, len(body), len(stream))
		}
		rec := g.record(t)
		if rec.Outcome != meter.OutcomeOK || rec.ErrorMessage != "" || rec.ISL != 17 || rec.OSL != 71 || rec.UsageSource != meter.UsageUpstream ||
			rec.Events != 70 || len(rec.ITL) != 69 {
			t.Errorf("%+v: outcome %s %q isl %d osl %d (%v) events %d gaps %d; want ok, 17 71 (usage), 70 events",
				c, rec.Outcome, rec.ErrorMessage, rec.ISL, rec.OSL, rec.UsageSource, rec.Events, len(rec.ITL))
		}
	}
}
