//go:build !phases

package proxy

import (
	"testing"
	"unsafe"
)

// A stream in flight holds the pooled stream struct. Its fields are packed
// (flags together) so that it fits the allocator's 1,536-byte size class;
// one field more than fits costs 256 bytes per stream in flight (the next
// class is 1,792), so a change that adds one must make room elsewhere.
// (A build with -tags phases adds a clock that times the first event.)
func TestStreamFitsItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(stream{}); n > 1536 {
		t.Fatalf("stream is %d bytes: past the 1,536-byte size class", n)
	}
}
