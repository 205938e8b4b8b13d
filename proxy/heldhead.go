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

// heldHeads finds the heldHead of a header by its address.
type heldHeads struct {
	mu sync.Mutex
	m  map[uintptr]*heldHead
}

// headSeq orders the start of each request on a connection (connState)
// and the keeping of each head (hold).
var headSeq atomic.Uint64

// hold keeps what a record needs of h, a request head whose body is about
// to be read; t0 is its stamp, key the owner of the key it presents (with
// gateway keys).
func (p *Proxy) hold(h *fasthttp.RequestHeader, t0 int64, key identity.KeyInfo, keyOK bool) {
	addr := uintptr(unsafe.Pointer(h))
	p.heads.mu.Lock()
	defer p.heads.mu.Unlock()
	hh := p.heads.m[addr]
	if hh == nil || hh.owner.Value() != h {
		// None yet, or one of a context collected since, whose address
		// this one took before the cleanup ran (which then leaves this
		// one's alone).
		hh = &heldHead{owner: weak.Make(h)}
		p.heads.m[addr] = hh
		runtime.AddCleanup(h, p.heads.drop, heldRef{addr, hh})
	}
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
	t.mu.Lock()
	if t.m[r.addr] == r.hh {
		delete(t.m, r.addr)
	}
	t.mu.Unlock()
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
	p.heads.mu.Lock()
	defer p.heads.mu.Unlock()
	if hh := p.heads.m[addr]; hh != nil && hh.seq > began && hh.owner.Value() == &ctx.Request.Header {
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
