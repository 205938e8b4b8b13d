package meter

import (
	"testing"
	"time"
)

func TestArrayClasses(t *testing.T) {
	for _, c := range []struct{ n, class int }{{0, 0}, {1, 0}, {64, 0}, {65, 1}, {128, 1}, {4096, 6}, {4097, 7}, {8192, 7}, {8193, -1}} {
		if got := classFor(c.n); got != c.class {
			t.Errorf("classFor(%d) = %d, want %d", c.n, got, c.class)
		}
	}
	for _, c := range []struct{ cap, class int }{{0, -1}, {64, 0}, {100, -1}, {256, 2}, {8192, 7}, {16384, -1}} {
		if got := exactClass(c.cap); got != c.class {
			t.Errorf("exactClass(%d) = %d, want %d", c.cap, got, c.class)
		}
	}
}

// Appending through the classes keeps every value, in order.
func TestAppendArrayKeepsValues(t *testing.T) {
	var p arrayPool[uint32]
	var s []uint32
	for i := 0; i < 10000; i++ {
		s = appendArray(&p, s, uint32(i))
	}
	if len(s) != 10000 {
		t.Fatalf("len %d", len(s))
	}
	for i, v := range s {
		if v != uint32(i) {
			t.Fatalf("s[%d] = %d", i, v)
		}
	}
}

// A Meter that metered a long stream holds none of its arrays once reset,
// and a record recycled holds none either; metering again gives the same
// record.
func TestResetAndRecycleLetGoOfArrays(t *testing.T) {
	var (
		m   Meter
		rec Record
	)
	gap := func(k int) time.Duration { return time.Duration(500+k%300) * time.Microsecond }
	longStream(&m, &rec, 3000, gap)
	if cap(m.itl) < 2999 || len(rec.ITL) != 2999 {
		t.Fatalf("after a long stream: meter gaps cap %d, record gaps %d", cap(m.itl), len(rec.ITL))
	}
	first := append([]time.Duration(nil), rec.ITL...)
	m.Reset()
	if m.itl != nil || m.tpe != nil {
		t.Fatalf("a reset meter keeps arrays: gaps cap %d, tokens cap %d", cap(m.itl), cap(m.tpe))
	}
	rec.Recycle()
	if rec.ITL != nil || rec.TokensPerEvent != nil {
		t.Fatal("a recycled record keeps its arrays")
	}
	longStream(&m, &rec, 3000, gap)
	if len(rec.ITL) != len(first) {
		t.Fatalf("second stream: %d gaps, want %d", len(rec.ITL), len(first))
	}
	for i := range first {
		if rec.ITL[i] != first[i] {
			t.Fatalf("gap %d: %v, want %v", i, rec.ITL[i], first[i])
		}
	}
}
