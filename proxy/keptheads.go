package proxy

import (
	"sync"

	"github.com/valyala/fasthttp"
)

// When a request's body fails while fasthttp reads it (too slow for
// read_body, or chunked and over max_body_bytes), fasthttp resets the
// request, headers and all, before it calls errorHandler: the record could
// then not say whose request it was, and a 408 or 413 would count under no
// tenant and go unjudged. So between its headers and its body, the gateway
// keeps a copy of what identifies a request (method, URI, the key headers,
// the tenant header, X-Request-Id) and its t0, taken in the HeaderReceived
// hook; the handler drops it once the body is in, and errorHandler puts it
// back into the reset headers.
//
// Only a request with a body to read keeps one (Content-Length over zero
// and within the limit, or chunked): fasthttp refuses an announced length
// over the limit before it resets anything.

// keptHead is one request's kept head: its fields (the t0 stamp's value
// among them, t0.go), one after another in buf.
type keptHead struct {
	buf  []byte
	ends [keptFields]int // ends[i]: where field i ends in buf
}

const (
	khMethod = iota
	khURI
	khAuthorization
	khAPIKey
	khTenant
	khRequestID
	khT0
	keptFields
)

// keptHeads maps a request header (one per connection's RequestCtx, reused
// from request to request) to its request's kept head.
type keptHeads struct {
	mu   sync.Mutex
	m    map[*fasthttp.RequestHeader]*keptHead
	pool sync.Pool // *keptHead
}

// keep copies the identifying fields of h, whose t0 is stamped (t0 is the
// stamp's value), for its request's body read.
func (k *keptHeads) keep(h *fasthttp.RequestHeader, tenantHeader string, t0 []byte) {
	kh, _ := k.pool.Get().(*keptHead)
	if kh == nil {
		kh = new(keptHead)
	}
	b := kh.buf[:0]
	for i, v := range [keptFields][]byte{
		h.Method(), h.RequestURI(), h.Peek("Authorization"), h.Peek("X-Api-Key"),
		h.Peek(tenantHeader), h.PeekBytes(hdrRequestID), t0,
	} {
		b = append(b, v...)
		kh.ends[i] = len(b)
	}
	kh.buf = b
	k.mu.Lock()
	if k.m == nil {
		k.m = make(map[*fasthttp.RequestHeader]*keptHead)
	}
	old, had := k.m[h]
	if had || len(k.m) < maxKeptHeads {
		k.m[h] = kh
		kh = nil
	}
	k.mu.Unlock()
	if old != nil {
		k.put(old)
	}
	if kh != nil {
		k.put(kh) // the map is full: this request goes unidentified if its body fails
	}
}

// maxKeptHeads bounds the kept heads: one per connection reading a body,
// far more than max_connections allows. A request whose head the HTTP
// layer never hands back (a path that calls neither the handler nor
// errorHandler) would otherwise pin its connection's context for good.
const maxKeptHeads = 1 << 16

// take removes and returns h's kept head; nil when there is none. The
// caller gives it back with put.
func (k *keptHeads) take(h *fasthttp.RequestHeader) *keptHead {
	k.mu.Lock()
	kh := k.m[h]
	if kh != nil {
		delete(k.m, h)
	}
	k.mu.Unlock()
	return kh
}

// drop forgets h's kept head, if any: its body was read.
func (k *keptHeads) drop(h *fasthttp.RequestHeader) {
	if kh := k.take(h); kh != nil {
		k.put(kh)
	}
}

func (k *keptHeads) put(kh *keptHead) {
	if cap(kh.buf) > 4<<10 {
		kh.buf = nil // a long header (a big cookie, say): not kept for the next
	}
	k.pool.Put(kh)
}

// field returns field i of kh.
func (kh *keptHead) field(i int) []byte {
	start := 0
	if i > 0 {
		start = kh.ends[i-1]
	}
	return kh.buf[start:kh.ends[i]]
}

// restore writes kh's fields back into h, which fasthttp has reset, with
// the t0 stamp.
func (kh *keptHead) restore(h *fasthttp.RequestHeader, tenantHeader string) {
	h.SetMethodBytes(kh.field(khMethod))
	h.SetRequestURIBytes(kh.field(khURI))
	for _, f := range []struct {
		name string
		i    int
	}{{"Authorization", khAuthorization}, {"X-Api-Key", khAPIKey}, {tenantHeader, khTenant}, {string(hdrRequestID), khRequestID}} {
		if v := kh.field(f.i); len(v) > 0 {
			h.SetBytesV(f.name, v)
		}
	}
	if v := kh.field(khT0); len(v) > 0 {
		h.SetBytesKV(hdrT0, v) // as stampT0 sets it
	}
}
