//go:build !race

package slo

import (
	"testing"
	"time"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/meter"
)

// Judging a record and feeding the counters, the live view and the profile
// allocates nothing per request once the series exist, for configured
// tenants and for tenants judged by the default class alike.
func TestJudgerRecordAllocatesNothing(t *testing.T) {
	j, err := NewJudger(JudgerOptions{
		Config:       Config{SLOs: map[string]*Class{"fast": {TTFT: cfgtypes.Duration(100 * time.Millisecond), Objective: 0.99}}},
		DefaultClass: "fast",
		Tenants:      []TenantClasses{{Name: "acme", Class: "fast"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"acme", "header-named"} {
		rec := judgedRecord(tenant, 50*time.Millisecond, meter.OutcomeOK)
		rec.MissReasons = make([]string, 0, 8)
		// Warm up: series, sketches, slots, and the sketches' stores,
		// which place a bucket page once enough values came for it (2
		// allocations in each of 4 of the 9 hundreds after the first).
		for i := 0; i < 1000; i++ {
			j.Begin(rec)
			j.Judge(rec)
		}
		if n := testenv.AllocsPerRun(200, func() { j.Begin(rec); j.Judge(rec) }); n != 0 {
			t.Errorf("%s: %v allocations per request", tenant, n)
		}
	}
}
