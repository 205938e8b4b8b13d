//go:build poolcheck

package proxy

import (
	"bufio"
	"bytes"
	"strings"
	"testing"

	"github.com/goodput/goodput/meter"
)

// A -tags poolcheck build poisons what goes back to the pools, so that
// the stress tests (TestNoCrossStreamBytes, TestPooledStreamsKeepNoState)
// run under it see a use after the put as poisonByte in a client's bytes,
// an engine's request or a record. This checks that the poisoning is on:
// a slice kept past the put reads poisoned.
func TestPoolCheckPoisons(t *testing.T) {
	poisoned := func(b []byte) bool { return len(b) > 0 && len(bytes.Trim(b, string(rune(poisonByte)))) == 0 }

	var l lentBuf
	b := append(l.borrow(), "a stream's events"...)
	l.giveBack(b)
	if !poisoned(b) {
		t.Errorf("lent buffer after giveBack: %q", b)
	}

	br := bufio.NewReaderSize(strings.NewReader("HTTP/1.1 200 OK\r\n\r\ndata: x\n\n"), upstreamBufSize)
	kept, _ := br.Peek(10)
	br.Reset(nil)
	poisonReader(br)
	if !poisoned(kept) {
		t.Errorf("reader's buffer after the put: %q", kept)
	}

	rec := &meter.Record{RequestID: "r1", Tenant: "acme", Model: "m", ErrorMessage: "e"}
	poisonRecord(rec)
	if rec.RequestID != poisonedText || rec.Tenant != poisonedText || rec.Model != poisonedText || rec.ErrorMessage != poisonedText {
		t.Errorf("record after the put: %+v", rec)
	}
}
