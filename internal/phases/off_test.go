//go:build !phases

package phases

import (
	"testing"
	"time"
	"unsafe"

	"github.com/goodput/goodput/internal/testenv"
)

// The gateway's build keeps a Clock in its per-request and per-stream
// structs: it must add nothing to them, and Now must not read the clock.
func TestOffBuildCostsNothing(t *testing.T) {
	if n := unsafe.Sizeof(Clock{}); n != 0 {
		t.Errorf("Clock is %d bytes", n)
	}
	if !Now().IsZero() {
		t.Error("Now read the clock")
	}
	var c Clock
	c.Begin(time.Now())
	c.Mark(Start)
	Since(Write, time.Now())
	if got := testenv.AllocsPerRun(100, func() { c.Mark(Start); Since(Write, Now()) }); got != 0 {
		t.Errorf("%v allocations", got)
	}
}
