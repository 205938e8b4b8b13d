package meter

import (
	"math"
	"testing"
	"time"
)

func TestGapMicros(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want uint32
	}{
		{0, 0},
		{499 * time.Nanosecond, 0},
		{500 * time.Nanosecond, 1},
		{1500 * time.Nanosecond, 2},
		{20*time.Millisecond + 300*time.Nanosecond, 20000},
		{-time.Second, 0},
		{100 * time.Hour, math.MaxUint32},
	} {
		if got := gapMicros(c.d); got != c.want {
			t.Errorf("gapMicros(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

// Gaps are kept to the microsecond, and MaxITL is the largest kept gap.
func TestMeterITLMicroseconds(t *testing.T) {
	var m Meter
	t0 := time.Now()
	m.Start(t0)
	info := EventInfo{Token: true, Content: true, PromptTokens: Unknown, CompletionTokens: Unknown}
	at := []time.Duration{10 * time.Millisecond, 10*time.Millisecond + 1234567*time.Nanosecond, 15*time.Millisecond + 400}
	for _, d := range at {
		m.Observe(&info, t0.Add(d))
	}
	var rec Record
	rec.Reset()
	m.Finish(&rec)
	want := []time.Duration{1235 * time.Microsecond, 3766 * time.Microsecond} // 3.765833 ms rounds up
	if len(rec.ITL) != 2 || rec.ITL[0] != want[0] || rec.ITL[1] != want[1] || rec.MaxITL != want[1] {
		t.Fatalf("itl %v max %v, want %v", rec.ITL, rec.MaxITL, want)
	}
}
