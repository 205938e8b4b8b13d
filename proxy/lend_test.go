package proxy

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/goodput/goodput/meter"
)

// A stream waiting for its next event holds no lent buffer (lend.go): each
// time it parks, its framer's buffer, its queue and its framed chunk are
// back in the pool, and once the head is out so is the client connection's
// write buffer (headbuf.go). Events large enough to grow the first three
// past maxLentBuf keep theirs. Either way the client gets every event,
// whole and in order, and the body's end.
func TestWaitingStreamHoldsNoBuffers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		size  int  // bytes of content per event
		lends bool // the stream gives its buffers back when it parks
	}{
		// Large first: the small events' stream may be the pooled stream
		// they ran on, which must not hand the grown buffers on.
		{"events over maxLentBuf", 2 * maxLentBuf, false},
		{"small events", 40, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 6
			ev := func(i int) string {
				return fmt.Sprintf("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%02d%s\"}}]}\n\n", i, strings.Repeat("x", tc.size))
			}
			var mu sync.Mutex
			var held []int
			parked := make(chan struct{}, 1)
			testHookPark = func(h int) {
				mu.Lock()
				held = append(held, h)
				mu.Unlock()
				select {
				case parked <- struct{}{}:
				default:
				}
			}
			defer func() { testHookPark = nil }()
			parks := func() int {
				mu.Lock()
				defer mu.Unlock()
				return len(held)
			}
			next := make(chan struct{})
			up := startRawUpstream(t, func(c *scriptConn) {
				writeSSEHead(c)
				for i := 0; i < n; i++ {
					before := parks()
					if writeChunk(c, ev(i)) != nil {
						return
					}
					<-next // the client read it
					for parks() <= before {
						<-parked // and the stream waits for more
					}
				}
				writeChunk(c, done)
				endChunks(c)
			})
			g := startGateway(t, Config{Upstream: up.URL()})
			body := rawStreamBody(t, g)
			for i := 0; i < n; i++ {
				got, err := readEvent(body)
				if err != nil || got != ev(i) {
					t.Fatalf("event %d: %.60q %v", i, got, err)
				}
				next <- struct{}{}
			}
			if got, err := readEvent(body); err != nil || got != done {
				t.Fatalf("last event: %q %v", got, err)
			}
			if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.Events != n {
				t.Fatalf("record: %s, %d events", rec.Outcome, rec.Events)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(held) < n {
				t.Fatalf("%d parks for %d events apart", len(held), n)
			}
			kept := 0
			for _, h := range held {
				if h > 0 {
					kept++
				}
			}
			switch {
			case tc.lends && kept > 0:
				t.Fatalf("parked holding buffers at %d of %d parks: %v", kept, len(held), held)
			case !tc.lends && kept < n-1:
				t.Fatalf("large events' buffers kept at only %d of %d parks: %v", kept, len(held), held)
			}
		})
	}
}
