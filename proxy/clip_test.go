package proxy

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/goodput/goodput/meter"
)

func TestClipMessage(t *testing.T) {
	if got := clipMessage("short"); got != "short" {
		t.Errorf("%q", got)
	}
	long := strings.Repeat("é", 400) // 800 bytes
	got := clipMessage(long)
	if !utf8.ValidString(got) || len(got) > maxMessage+len("…") || !strings.HasSuffix(got, "…") {
		t.Errorf("clipped to %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
}

// A malformed event whose parser error runs for kilobytes (deep nesting)
// leaves a bounded message in the record.
func TestMalformedEventMessageIsBounded(t *testing.T) {
	deep := strings.Repeat("[", 5000)
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")
		writeChunk(c, "data: {\"x\":"+deep+"\n\n")
		writeChunk(c, "data: [DONE]\n\n")
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil); err != nil || status != 200 {
		t.Fatalf("status %d err %v", status, err)
	}
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeUpstreamError || !strings.HasPrefix(rec.ErrorMessage, "malformed stream event") {
		t.Fatalf("outcome %s message %.80q", rec.Outcome, rec.ErrorMessage)
	}
	if len(rec.ErrorMessage) > maxMessage+len("…") {
		t.Fatalf("a message of %d bytes", len(rec.ErrorMessage))
	}
}

// Bytes that are not UTF-8 are cut near the bound, not emptied.
func TestClipMessageInvalidUTF8(t *testing.T) {
	got := clipMessage(strings.Repeat("\x80", 1000))
	if len(got) < maxMessage-3 {
		t.Errorf("clipped to %d bytes", len(got))
	}
}
