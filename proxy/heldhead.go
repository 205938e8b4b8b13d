package proxy

import (
	"slices"
	"time"
	"unsafe"

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
// It is kept in the connection the request is read from (a Listener's:
// listenerConn.held), which the hook, given the header alone, finds
// through the context the header is part of (connOfHead). One heldHead
// per connection, reused from request to request: no lock is taken, it
// goes with the connection, and nothing is allocated once its buffer has
// grown (a connection's first request with a body allocates the one buffer
// its target, request id and tenant are copied into: a client that opens a
// connection per request pays that small allocation each time, where a
// context fasthttp pooled kept three before). A heldHead is the current request's only when it was kept
// after the request began on its connection (listenerConn.reqSeq, set
// when the request's first byte came): a request whose head failed to
// parse finds an earlier request's heldHead, older than its own start,
// and is recorded as a request nothing is known of.
//
// (Until 2026-12 the heldHeads were kept in tables keyed by the header's
// address, each with a lock, a weak pointer to the header and a cleanup
// to drop it: the lookup was 3 µs of the 12 µs from a head's read to its
// handler at 32 streams, measured with -tags phases.)

// heldHead is what headerReceived keeps of a request's head.
type heldHead struct {
	seq  uint64 // its connection's seq when kept
	t0   int64  // the request's t0 stamp (stampT0)
	post bool
	// Without gateway keys: a tenant header was sent (tenant).
	hasTenant bool
	// With gateway keys: the key is valid (key).
	keyOK bool
	// buf holds, one after the other, the request target (uri, for the
	// route), the client's X-Request-Id when it may be kept as far as the
	// headers tell (id: 1–128 visible ASCII, without the key the request
	// presents; the checks of the value alone are newRecord's), without
	// gateway keys the tenant header's value (tenant), and, when tracing,
	// the client's traceparent (at most maxTraceparent bytes), which the
	// span continues as any request's (not its tracestate, which is looked
	// through for the key the request presents, gone with the headers);
	// uriEnd, idEnd and tenantEnd are where the first three end.
	buf                      []byte
	uriEnd, idEnd, tenantEnd int32
	// With gateway keys: the key's owner, if the key is valid.
	key identity.KeyInfo
}

func (hh *heldHead) uri() []byte    { return hh.buf[:hh.uriEnd] }
func (hh *heldHead) id() []byte     { return hh.buf[hh.uriEnd:hh.idEnd] }
func (hh *heldHead) tenant() []byte { return hh.buf[hh.idEnd:hh.tenantEnd] }

func (hh *heldHead) traceparent() []byte { return hh.buf[hh.tenantEnd:] }

// maxTraceparent bounds the traceparent a heldHead keeps: W3C's version
// 00 has 55 characters; a later version may add fields after them.
const maxTraceparent = 256

// headInCtx is where a RequestCtx holds its request's header.
const headInCtx = unsafe.Offsetof(fasthttp.RequestCtx{}.Request) + unsafe.Offsetof(fasthttp.Request{}.Header)

// connOfHead returns the Listener's connection that the request whose
// header is h is read from; nil when the server reads it from another
// connection. h must be the header fasthttp's server hands its
// HeaderReceived hook, which is &ctx.Request.Header of the context
// serving the request (fasthttp's serveConn; its one call of the hook):
// the context is found by that field's offset, so any other header would
// give a pointer to memory that is not a context, read without an error
// (a race-detector build's checkptr catches only a header alone in an
// allocation of its own). Proxy.headerReceived is that hook, and nothing
// else calls it; TestConnOfHeadEveryRequest pins fasthttp's side.
func connOfHead(h *fasthttp.RequestHeader) *listenerConn {
	ctx := (*fasthttp.RequestCtx)(unsafe.Add(unsafe.Pointer(h), -int(headInCtx)))
	lc, _ := ctx.Conn().(*listenerConn)
	return lc
}

// hold keeps in hh what a record needs of h, a request head whose body is
// about to be read; seq is its connection's seq as the head was read, t0
// its stamp, key the owner of the key it presents (with gateway keys).
func (p *Proxy) hold(hh *heldHead, h *fasthttp.RequestHeader, seq uint64, t0 int64, key identity.KeyInfo, keyOK bool) {
	hh.seq = seq
	hh.t0 = t0
	hh.post = h.IsPost()
	hh.key, hh.keyOK = key, keyOK
	uri := h.RequestURI()
	var id, tenant []byte
	if v := h.PeekBytes(hdrRequestID); validRequestID(v) && !p.presentedIn(v, h) {
		id = v
	}
	hh.hasTenant = false
	if p.cfg.Keys == nil {
		if t := h.Peek(p.cfg.TenantHeader); len(t) > 0 && !carriesWholeKey(t, h) {
			tenant, hh.hasTenant = t, true // one that holds a credential is not kept (identify refuses it)
		}
	}
	var tp []byte
	if p.cfg.Trace != nil {
		if v := h.Peek("traceparent"); len(v) <= maxTraceparent {
			tp = v
		}
	}
	// Grown at once to what the four need (and the allocator's size
	// class): one allocation, not one for each.
	b := slices.Grow(hh.buf[:0], len(uri)+len(id)+len(tenant)+len(tp))
	b = append(b, uri...)
	hh.uriEnd = int32(len(b))
	b = append(b, id...)
	hh.idEnd = int32(len(b))
	b = append(b, tenant...)
	hh.tenantEnd = int32(len(b))
	hh.buf = append(b, tp...)
}

// heldFor returns the heldHead of the request ctx holds, when its head was
// read whole (its body is what failed); nil otherwise, and for a
// connection that is not a Listener's (which tells when a request began).
func (p *Proxy) heldFor(ctx *fasthttp.RequestCtx) *heldHead {
	lc, ok := ctx.Conn().(*listenerConn)
	if !ok {
		return nil
	}
	began := lc.reqSeq
	if began == 0 {
		return nil // a server that does not report connection states
	}
	if lc.held.seq > began {
		return &lc.held
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
	if u.Parse(nil, hh.uri()) != nil {
		return meter.APIOther
	}
	return apiOfPath(u.Path())
}
