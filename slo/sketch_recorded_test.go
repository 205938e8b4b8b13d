package slo

import (
	"bufio"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The sketch against exact percentiles on a recorded sample: 6,060
// inter-token gaps the gateway measured in front of the simulator (see the
// header of testdata/itl_recorded.txt), including scheduling jitter of a
// shared machine, so the distribution has the multi-modal shape and long
// tail of real gaps.
func TestSketchOnRecordedITL(t *testing.T) {
	f, err := os.Open("testdata/itl_recorded.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var vals []float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		v, err := strconv.ParseFloat(line, 64)
		if err != nil {
			t.Fatalf("bad line %q", line)
		}
		vals = append(vals, v)
	}
	if len(vals) < 5000 {
		t.Fatalf("recorded sample has %d values", len(vals))
	}
	var s sketch
	for _, v := range vals {
		s.add(v)
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.95, 0.99} {
		exact := numpyPercentile(vals, q)
		got := s.quantile(q)
		if rel := relErr(got, exact); rel > 0.01 {
			t.Errorf("p%g: sketch %.6f, exact %.6f: relative error %.4f > 1%%", q*100, got, exact, rel)
		}
	}
	if s.count() != uint64(len(vals)) || s.Max() != vals[len(vals)-1] {
		t.Fatalf("count %d max %v", s.count(), s.Max())
	}
}
