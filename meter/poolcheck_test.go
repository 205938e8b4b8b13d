//go:build poolcheck

package meter

import (
	"testing"
	"time"
)

// A -tags poolcheck build fills an array given back to its pool with all
// bits set: a record or meter that still reads it shows -1 gaps.
func TestPoolCheckPoisonsArrays(t *testing.T) {
	a := append(durArrays.get(3), time.Millisecond, 2*time.Millisecond)
	durArrays.put(a)
	for _, g := range a {
		if g != -1 {
			t.Fatalf("gaps after the put: %v", a)
		}
	}
	u := append(u32Arrays.get(1), 7)
	u32Arrays.put(u)
	if u[0] != ^uint32(0) {
		t.Fatalf("meter gaps after the put: %v", u)
	}
}
