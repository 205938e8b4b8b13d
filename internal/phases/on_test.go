//go:build phases

package phases

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestMarksAreTakenOnce(t *testing.T) {
	Take() // what other tests left
	var c Clock
	c.Mark(Start) // not begun: nothing to record
	c.Mark(Admit) // nor here: a mark does not begin it
	t0 := time.Now().Add(-5 * time.Millisecond)
	c.Begin(t0)
	c.Mark(HeadToHandler)
	c.Mark(Start)
	Since(Written, t0)
	Since(Write, time.Time{}) // a zero start records nothing
	d := Take()
	got := map[string]Figure{}
	for _, f := range d.Phases {
		got[f.Name] = f
	}
	if len(got) != 3 || got["head→handler"].N != 1 || got["start"].N != 1 || got["t0→written"].N != 1 {
		t.Fatalf("figures %+v, want one each of head→handler, start, t0→written", d.Phases)
	}
	if f := got["head→handler"]; f.P50 < 5000 || f.P10 != f.P50 || f.P90 != f.P50 || f.P99 != f.P50 {
		t.Errorf("head→handler %+v: want one duration of at least 5,000 µs", f)
	}
	if f := got["t0→written"]; f.P50 < got["head→handler"].P50 {
		t.Errorf("t0→written %v µs, shorter than its first phase (%v)", f.P50, got["head→handler"].P50)
	}
	if d2 := Take(); len(d2.Phases) != 0 || d2.Seq != d.Seq+1 {
		t.Errorf("a second take: %+v, want nothing and seq %d", d2, d.Seq+1)
	}
}

func TestSignalWritesTheFile(t *testing.T) {
	Take()
	path := filepath.Join(t.TempDir(), "phases.json")
	if err := serve(path); err != nil {
		t.Fatal(err)
	}
	read := func() Dump {
		var d Dump
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		return d
	}
	if d := read(); d.Seq != 0 || d.Phases == nil || len(d.Phases) != 0 {
		t.Fatalf("at start: %+v, want seq 0 and no phases", d)
	}
	before := seqNow()
	Since(Admit, time.Now().Add(-time.Millisecond))
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		d := read()
		if d.Seq > before {
			if len(d.Phases) != 1 || d.Phases[0].Name != "admit" || d.Phases[0].N != 1 {
				t.Fatalf("after the signal: %+v, want one admit", d)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the signal wrote nothing in 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func seqNow() int {
	mu.Lock()
	defer mu.Unlock()
	return seq
}

func TestNames(t *testing.T) {
	seen := map[string]bool{}
	for p := range count {
		n := p.String()
		if n == "" || n == "?" || seen[n] {
			t.Errorf("phase %d: name %q", p, n)
		}
		seen[n] = true
	}
	if count.String() != "?" {
		t.Errorf("count's name %q", count.String())
	}
}
