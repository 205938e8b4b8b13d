//go:build (linux || darwin || freebsd || netbsd || openbsd || dragonfly) && !race

package peek

import (
	"testing"

	"github.com/goodput/goodput/internal/testenv"
)

// A peek allocates nothing: the client guard peeks at a waiting client
// every 50 ms, and every request that takes a pooled upstream connection
// peeks at it first.
func TestPeekAllocatesNothing(t *testing.T) {
	server, client := pair(t)
	gone, usable := Poller(server), Idle(client)
	if gone == nil || usable == nil {
		t.Fatal("no peek for a TCP connection")
	}
	if n := testenv.AllocsPerRun(100, func() {
		if gone() {
			t.Fatal("a live peer looks gone")
		}
	}); n != 0 {
		t.Errorf("Poller's peek: %v allocations, want 0", n)
	}
	if n := testenv.AllocsPerRun(100, func() {
		if !usable() {
			t.Fatal("an idle connection looks unusable")
		}
	}); n != 0 {
		t.Errorf("Idle's peek: %v allocations, want 0", n)
	}
}

// BenchmarkPeek is one peek at a live, quiet connection.
//
//	go test -run '^$' -bench Peek -count 6 ./internal/peek
func BenchmarkPeek(b *testing.B) {
	server, _ := pair(b)
	gone := Poller(server)
	b.ReportAllocs()
	for b.Loop() {
		if gone() {
			b.Fatal("a live peer looks gone")
		}
	}
}
