//go:build !race

package proxy

import (
	"testing"

	"github.com/goodput/goodput/internal/testenv"
)

// Reading the echo's text from a request body costs no copy of the body,
// whatever its shape: each string is unescaped into the digest a piece at
// a time, through a buffer on the stack. It cost a copy of the prompt (a
// 16 MiB copy for a 16 MiB body, not counted in max_body_memory), and 32
// bytes allocated per byte of a body of empty parts ({},{},...: an error
// made for each); echoBenchBodies are the shapes measured.
func TestEchoTextAllocatesNothing(t *testing.T) {
	// 64 KiB bodies, 50 runs each: AllocsPerRun counts the whole
	// process's allocations, and with 3 runs the 3 a goroutine left by an
	// earlier test made meanwhile read as one per run.
	for _, c := range echoBenchBodies(64 << 10) {
		body := []byte(c.body)
		if n := testenv.AllocsPerRun(50, func() { echoText(c.api, body) }); n != 0 {
			t.Errorf("%s: %v allocations reading the echo's text of a %d-byte body, want none", c.name, n, len(body))
		}
	}
}
