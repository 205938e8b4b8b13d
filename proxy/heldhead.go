package proxy

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
	"weak"

	"github.com/goodput/goodput/identity"
	"github.com/goodput/goodput/meter"
	"github.com/valyala/fasthttp"
)

// A request whose body fails while fasthttp reads it (timeouts.read_body
// runs out, a chunked body passes max_body_bytes, a chunk is malformed,
// the client leaves mid-upload) reaches errorHandler with the request
// reset, its headers with it. headerReceived, which sees the headers
// before the body is read, keeps what the record needs of them (heldHead)
// for every request that has a body, so that such a request is recorded
// under the tenant, key, route and request id the handler would have
// given it.
//
// The hook is given the header alone, so what it keeps is found again by
// the header's address: fasthttp reads a request into the header of the
// RequestCtx it then hands errorHandler. There is one heldHead per header
// seen, reused from request to request (nothing is allocated once a
// context has one), and it is dropped when that context is collected
// (runtime.AddCleanup: the table holds the address, and the heldHead a
// weak pointer to the header, which keep nothing alive; the weak pointer
// also tells a heldHead of a collected context from one of a context
// allocated at its address since). A heldHead is the current request's only when it was kept after
// the request began on its connection (listenerConn.reqSeq, set when the
// request's first byte came): a request whose head failed to parse finds
// an earlier request's heldHead, older than its own start, and is recorded
// as a request nothing is known of.

// heldHead is what headerReceived keeps of a request's head.
type heldHead struct {
	owner weak.Pointer[fasthttp.RequestHeader] // the header it is kept for
	seq   uint64                               // headSeq when kept
	t0    int64                                // the request's t0 stamp (stampT0)
	post  bool
	uri   []byte // the request target, for the route (route)
	// id is the client's X-Request-Id when it may be kept as far as the
	// headers tell (1–128 visible ASCII, without the key the request
	// presents); the checks of the value alone are newRecord's.
	id []byte
	// Without gateway keys: the tenant header's value, if one was sent.
	tenant    []byte
	hasTenant bool
	// With gateway keys: the key's owner, if the key is valid.
	key   identity.KeyInfo
	keyOK bool
}

// heldHeads finds the heldHead of a header by its address, in one of
// heldShards tables chosen by the address, each with its own lock: every
// request with a body looks its header up, and under load one table for
// all made them wait on one another (a mutex profile of
// BenchmarkRequestCostCold, 256 connections interleaved: 1.1 s of waiting
// over 8,000 requests in one run, 26 s in one with more load on the
// machine, as much as on any other lock of the gateway's). A lock is
// held only for the lookup; the heldHead it finds is read and written by
// its header's connection alone (hold and heldFor run on the goroutine
// serving it), as is any other state of the request.
type heldHeads struct {
	shards [heldShards]heldShard
}

// heldShards is how many tables heldHeads has.
const heldShards = headShards

// headShards is how many tables a table keyed by a request header's address
// is split in (heldHeads, bodyBudget), each with its own lock.
const headShards = 64

// headShard returns the table of the header at addr, of headShards (headers
// are fields of fasthttp's contexts, several KiB apart: the address is
// hashed).
func headShard(addr uintptr) int {
	return int((uint64(addr)*0x9e3779b97f4a7c15)>>58) % headShards
}

// heldShard is one of heldHeads's tables, on a cache line of its own.
type heldShard struct {
	mu sync.Mutex
	m  map[uintptr]*heldHead
	_  [64 - 16]byte
}

// init makes the tables.
func (t *heldHeads) init() {
	for i := range t.shards {
		t.shards[i].m = make(map[uintptr]*heldHead)
	}
}

// shard returns the table of the header at addr.
func (t *heldHeads) shard(addr uintptr) *heldShard {
	return &t.shards[headShard(addr)]
}

// of returns h's heldHead, made if h has none yet (or only one of a
// context collected since, whose address h's took before the cleanup ran,
// which then leaves h's alone).
func (t *heldHeads) of(h *fasthttp.RequestHeader) *heldHead {
	addr := uintptr(unsafe.Pointer(h))
	s := t.shard(addr)
	s.mu.Lock()
	hh := s.m[addr]
	if hh == nil || hh.owner.Value() != h {
		hh = &heldHead{owner: weak.Make(h)}
		s.m[addr] = hh
		runtime.AddCleanup(h, t.drop, heldRef{addr, hh})
	}
	s.mu.Unlock()
	return hh
}

// headSeq orders the start of each request on a connection (connState)
// and the keeping of each head (hold).
var headSeq atomic.Uint64

// hold keeps what a record needs of h, a request head whose body is about
// to be read; t0 is its stamp, key the owner of the key it presents (with
// gateway keys).
func (p *Proxy) hold(h *fasthttp.RequestHeader, t0 int64, key identity.KeyInfo, keyOK bool) {
	hh := p.heads.of(h)
	hh.seq = headSeq.Add(1)
	hh.t0 = t0
	hh.post = h.IsPost()
	hh.uri = append(hh.uri[:0], h.RequestURI()...)
	hh.id = hh.id[:0]
	if id := h.PeekBytes(hdrRequestID); validRequestID(id) && (p.cfg.Keys == nil || !holdsPresentedKey(id, h)) {
		hh.id = append(hh.id, id...)
	}
	hh.key, hh.keyOK = key, keyOK
	hh.tenant, hh.hasTenant = hh.tenant[:0], false
	if p.cfg.Keys == nil {
		if t := h.Peek(p.cfg.TenantHeader); len(t) > 0 {
			hh.tenant, hh.hasTenant = append(hh.tenant, t...), true
		}
	}
}

// heldRef is what a heldHead's cleanup is given: where it is in the table.
type heldRef struct {
	addr uintptr
	hh   *heldHead
}

// drop removes a collected header's heldHead (unless the address already
// holds another's: a new context allocated there before the cleanup ran).
func (t *heldHeads) drop(r heldRef) {
	s := t.shard(r.addr)
	s.mu.Lock()
	if s.m[r.addr] == r.hh {
		delete(s.m, r.addr)
	}
	s.mu.Unlock()
}

// heldFor returns the heldHead of the request ctx holds, when its head was
// read whole (its body is what failed); nil otherwise, and for a
// connection that is not a Listener's (which tells when a request began).
func (p *Proxy) heldFor(ctx *fasthttp.RequestCtx) *heldHead {
	lc, ok := ctx.Conn().(*listenerConn)
	if !ok {
		return nil
	}
	began := lc.reqSeq.Load()
	if began == 0 {
		return nil // a server that does not report connection states
	}
	addr := uintptr(unsafe.Pointer(&ctx.Request.Header))
	s := p.heads.shard(addr)
	s.mu.Lock()
	hh := s.m[addr]
	s.mu.Unlock()
	// The owner first: it is set when hh is made, under the lock, and a
	// heldHead of another header (a collected context's) is not read.
	if hh != nil && hh.owner.Value() == &ctx.Request.Header && hh.seq > began {
		return hh
	}
	return nil
}

// start returns the request's t0.
func (hh *heldHead) start() time.Time { return stampTime(hh.t0) }

// route returns the request's metered API, as routeOf would have found it.
func (hh *heldHead) route() meter.API {
	if !hh.post {
		return meter.APIOther
	}
	u := fasthttp.AcquireURI()
	defer fasthttp.ReleaseURI(u)
	if u.Parse(nil, hh.uri) != nil {
		return meter.APIOther
	}
	return apiOfPath(u.Path())
}
