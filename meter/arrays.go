package meter

import (
	"sync"
	"time"
)

// A Meter's gap and token-count arrays, and a Record's copies of them
// (Record.ITL, Record.TokensPerEvent), come from pools by size class and go
// back when the request ends (Meter.Reset, Record.Recycle), so that:
//   - what a stream in flight holds is sized by its own length: a pooled
//     Meter or Record that once served a stream of thousands of tokens does
//     not carry those arrays (up to 16 KiB of gaps, 32 KiB of record gaps, 64 KiB of token counts)
//     through every later request;
//   - growing an array to a longer stream's needs takes an array from the
//     pool and gives the smaller one back, so a gateway in steady use
//     allocates nothing for them, whatever the lengths of its streams.
//
// The classes hold 64 to 8,192 entries, doubling. A pool keeps its arrays
// in holders, and the empty holders in a pool of their own, so neither
// taking nor giving back an array allocates once the pools are warm.
const (
	minArray     = 64
	arrayClasses = 8
)

type arrayPool[T any] struct {
	classes [arrayClasses]sync.Pool // *holder[T] with an array of the class's capacity
	empty   sync.Pool               // *holder[T] without one
}

type holder[T any] struct{ b []T }

var (
	u32Arrays arrayPool[uint32]        // Meter gaps, in microseconds
	intArrays arrayPool[int]           // token counts, of a Meter and of a Record
	durArrays arrayPool[time.Duration] // Record gaps
)

// classFor returns the smallest class whose arrays hold n entries; -1 past
// the largest.
func classFor(n int) int {
	for c := 0; c < arrayClasses; c++ {
		if n <= minArray<<c {
			return c
		}
	}
	return -1
}

// exactClass returns the class of an array of capacity c; -1 when c is not
// a class's capacity (an array the pools did not make).
func exactClass(c int) int {
	if k := classFor(c); k >= 0 && minArray<<k == c {
		return k
	}
	return -1
}

// get returns an empty array of capacity n or more.
func (p *arrayPool[T]) get(n int) []T {
	c := classFor(n)
	if c < 0 {
		return make([]T, 0, n)
	}
	if v := p.classes[c].Get(); v != nil {
		h := v.(*holder[T])
		b := h.b[:0]
		h.b = nil
		p.empty.Put(h)
		return b
	}
	return make([]T, 0, minArray<<c)
}

// put gives b's array back. Nothing may use it afterwards. An array of
// another capacity than a class's is left to the collector.
func (p *arrayPool[T]) put(b []T) {
	c := exactClass(cap(b))
	if c < 0 {
		return
	}
	if poolCheck {
		poisonArray(b)
	}
	h, _ := p.empty.Get().(*holder[T])
	if h == nil {
		h = new(holder[T])
	}
	h.b = b[:0]
	p.classes[c].Put(h)
}

// appendArray appends v to s; a full s moves to a pooled array of the
// next class, and its own goes back to the pool. Past the largest class
// (never, for a Meter's arrays: MaxKeptGaps+1 entries at most), append's
// own growth.
func appendArray[T any](p *arrayPool[T], s []T, v T) []T {
	if len(s) == cap(s) && classFor(len(s)+1) >= 0 {
		b := append(p.get(len(s)+1), s...)
		p.put(s)
		s = b
	}
	return append(s, v)
}
