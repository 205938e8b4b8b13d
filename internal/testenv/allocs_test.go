package testenv

import "testing"

var sink []byte

// An allocation in some runs only is counted, not rounded down to none
// (testing.AllocsPerRun's integer division read one in three calls as 0).
func TestAllocsPerRunCountsRareAllocations(t *testing.T) {
	calls := 0
	every := func(k int) func() {
		return func() {
			calls++
			if calls%k == 0 {
				sink = make([]byte, 64)
			}
		}
	}
	if n := AllocsPerRun(999, every(3)); n != 1.0/3 {
		t.Errorf("one allocation in 3 calls: %v per run, want 1/3", n)
	}
	if n := AllocsPerRun(1000, every(1000)); n != 0.001 {
		t.Errorf("one allocation in 1,000 calls: %v per run, want 0.001", n)
	}
	if n := AllocsPerRun(100, func() { calls++ }); n != 0 {
		t.Errorf("no allocation: %v per run", n)
	}
}
