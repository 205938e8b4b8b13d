package proxy

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"
)

// bodyBudget bounds the request bodies the gateway holds in memory at once
// (Config.MaxBodyMemory).
//
// The gateway reads a request's whole body before it asks the engine, and
// fasthttp allocates a body of the announced length before it reads a byte
// of it, then zeroes it (the allocator clears memory it reuses): a client
// that sends only heads announcing max_body_bytes made the gateway hold, and
// touch, max_body_bytes per connection. Measured with `goodput serve` and
// 1,000 such connections (16 MiB each, a byte a second after the head): 4 GB
// resident within 10 s, both CPUs busy clearing memory, the upstream check
// timing out; max_connections (up to 16,384) times 16 MiB is far past any
// machine's memory. So a body is admitted only while the bodies held leave
// room for it: what a head announces (rounded up as fasthttp allocates it;
// a chunked body counts as max_body_bytes, its length unknown) is reserved
// when the head is read (Proxy.headerReceived), before fasthttp allocates
// anything, and a head that finds no room is answered at once, 503 with
// Retry-After, without its body being read (errorHandler: outcome
// rejected). The reservation ends when the body is let go: by the handler
// once the request went upstream or ended (request.release), or by the
// error handler when the body's read failed.
//
// Bodies up to bodyUncounted bytes are not counted: what they hold is of
// the order of a connection's own buffers (its 16 KiB read buffer), which
// max_connections bounds, and counting them would cost every request a
// lock.
//
// A reservation is found again by the request's header, which fasthttp
// hands to the header hook, the handler and the error handler alike (one
// per connection, reused for its requests). A request whose headers were
// read reaches the handler or the error handler, save a connection closed
// under it (fasthttp stops without either when its interim "100 Continue"
// cannot be written, or at a shutdown's close): its reservation would stay.
// A body's read ends within read_body of its head, and its handler starts
// at once, so a reservation no handler has taken within read_body and
// staleMargin is let go when room is short.
//
// The reservations not yet taken are kept in headShards tables chosen by
// the header's address, each with its own lock and a count read without
// it: a handler whose header's table holds none (every handler while no
// counted body is being read) takes no lock, and under load the requests
// with counted bodies wait on one another only within a table (a mutex
// profile of BenchmarkRequestCostCold found them waiting on the one lock
// there was). Room is taken by compare-and-swap on used, so a head that
// fits takes it whatever the other tables do.
type bodyBudget struct {
	limit  int64         // 0: no limit
	stale  time.Duration // read_body + staleMargin
	used   atomic.Int64  // bytes reserved (and the copies charged by charge)
	refuse shortage      // heads refused for want of room, and when that was logged
	logf   func(format string, args ...any)

	pending [headShards]holdShard // reserved, not yet taken by a handler
}

// headShards is how many tables the reservations are split in, chosen by
// the request header's address (headShard).
const headShards = 64

// headShard returns the table of the header at addr, of headShards (headers
// are fields of fasthttp's contexts, several KiB apart: the address is
// hashed).
func headShard(addr uintptr) int {
	return int((uint64(addr)*0x9e3779b97f4a7c15)>>58) % headShards
}

// holdShard is one of the tables of reservations not yet taken, on a cache
// line of its own.
type holdShard struct {
	mu sync.Mutex
	m  map[*fasthttp.RequestHeader]bodyHold
	n  atomic.Int32 // len(m), read without the lock
	_  [64 - 20]byte
}

// bodyHold is a reservation no handler has taken yet.
type bodyHold struct {
	n  int64
	at int64 // when it was made (nanoseconds since monoBase)
}

// bodyUncounted is the largest body the budget does not count.
const bodyUncounted = 16 << 10

// staleMargin is how long, past read_body, a reservation waits for its
// handler before it is taken for one that never comes.
const staleMargin = 5 * time.Second

// bodyRetryAfter is the Retry-After of a head refused for want of room, in
// seconds: bodies are let go as soon as their requests go upstream.
const bodyRetryAfter = "1"

func newBodyBudget(limit int64, readBody time.Duration, logf func(string, ...any)) *bodyBudget {
	b := &bodyBudget{limit: limit, stale: readBody + staleMargin, logf: logf}
	for i := range b.pending {
		b.pending[i].m = make(map[*fasthttp.RequestHeader]bodyHold)
	}
	return b
}

// shard returns the table of h's reservation.
func (b *bodyBudget) shard(h *fasthttp.RequestHeader) *holdShard {
	return &b.pending[headShard(uintptr(unsafe.Pointer(h)))]
}

// bodySize is what a body announced by h takes in memory once fasthttp has
// allocated it: its length rounded up to a power of two (fasthttp's
// roundUpForSliceCap, up to 100 MiB), maxBody for a chunked one; 0 for a
// body not counted.
func bodySize(h *fasthttp.RequestHeader, maxBody int) int64 {
	n := h.ContentLength()
	if n == -1 {
		n = maxBody
	}
	if n <= bodyUncounted {
		return 0
	}
	if n > 100<<20 {
		return int64(n)
	}
	c := int64(1)
	for c < int64(n) {
		c <<= 1
	}
	return c
}

// reserve reserves n bytes for the body of the request whose header is h;
// false when the bodies held leave no room for it (it is counted, and said
// in the log at most once a minute).
func (b *bodyBudget) reserve(h *fasthttp.RequestHeader, n int64) bool {
	now := int64(time.Since(monoBase))
	s := b.shard(h)
	s.mu.Lock()
	if old, ok := s.m[h]; ok {
		// The header's last request never reached a handler (see above).
		delete(s.m, h)
		s.n.Add(-1)
		b.used.Add(-old.n)
	}
	ok := b.add(n)
	if ok {
		s.put(h, bodyHold{n: n, at: now})
	}
	s.mu.Unlock()
	if !ok {
		b.sweep(now)
		s.mu.Lock()
		if ok = b.add(n); ok {
			s.put(h, bodyHold{n: n, at: now})
		}
		s.mu.Unlock()
	}
	if !ok {
		b.refused()
	}
	return ok
}

// put keeps h's reservation. s.mu is held, and h has none.
func (s *holdShard) put(h *fasthttp.RequestHeader, r bodyHold) {
	s.m[h] = r
	s.n.Add(1)
}

// add takes n bytes if they fit. A body always fits when nothing is held,
// so that a limit below one body refuses nothing forever.
func (b *bodyBudget) add(n int64) bool {
	for {
		u := b.used.Load()
		if b.limit > 0 && u != 0 && u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// sweep lets go the reservations no handler took in time.
func (b *bodyBudget) sweep(now int64) {
	for i := range b.pending {
		s := &b.pending[i]
		if s.n.Load() == 0 {
			continue
		}
		s.mu.Lock()
		for h, r := range s.m {
			if time.Duration(now-r.at) > b.stale {
				delete(s.m, h)
				s.n.Add(-1)
				b.used.Add(-r.n)
			}
		}
		s.mu.Unlock()
	}
}

// take hands the reservation of h's body to its handler, which lets it go
// with release; 0 when there is none.
func (b *bodyBudget) take(h *fasthttp.RequestHeader) int64 {
	s := b.shard(h)
	if s.n.Load() == 0 {
		return 0 // the common case: no counted body is being read in h's table
	}
	s.mu.Lock()
	r, ok := s.m[h]
	if ok {
		delete(s.m, h)
		s.n.Add(-1)
	}
	s.mu.Unlock()
	return r.n
}

// charge counts n more bytes a request holds beyond its body (a rewritten
// copy of it), without a check: they are let go with the body.
func (b *bodyBudget) charge(n int64) { b.used.Add(n) }

// release lets go n bytes a handler took (take) or charged.
func (b *bodyBudget) release(n int64) {
	if n != 0 {
		b.used.Add(-n)
	}
}

// refused counts a refused head and logs, at most once a minute, that the
// limit is reached.
func (b *bodyBudget) refused() {
	if n, say := b.refuse.add(); say {
		b.logf("WARNING: max_body_memory (%d bytes) reached: request bodies held in memory leave no room, and requests are refused (503, Retry-After: %s) until they do (%d refused so far)", b.limit, bodyRetryAfter, n)
	}
}
