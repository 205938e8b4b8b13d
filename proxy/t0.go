package proxy

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// t0 is when the gateway has read a request's headers (docs/MEASURES.md),
// not when the handler runs: fasthttp calls the handler only once the whole
// body is read, so a slow upload would be missing from TTFT and E2E.
//
// fasthttp's HeaderReceived hook runs right after the headers are read, on
// the connection's goroutine, but sees only the request header. It stamps
// the time into the connection the header was read from (a Listener's:
// listenerConn.t0, found by connOfHead), and the handler, which has the
// connection, takes it from there: no lock, no allocation, nothing
// written into the headers.
//
// On a connection that is not a Listener's, the stamp goes into the header
// itself, under a name that no request on the wire can carry (parentheses
// are not allowed in a header name, so fasthttp refuses such a request,
// and a client cannot forge or pre-set it), and the handler takes it out
// before anything else reads the headers. (Until 2026-12 every request was
// stamped so: writing the stamp and taking it out again were about 3 µs of
// a request's way in at 32 streams, measured with -tags phases.)
//
// Other ways were weighed: ContinueHandler runs only for requests that send
// "Expect: 100-continue"; StreamRequestBody calls the handler after the
// headers but keeps the connection's 16 KiB read buffer for as long as the
// response streams (ReduceMemoryUsage cannot release it), and would move
// the body limit into the handler; a map from header to time costs a lock
// and leaks entries for requests that never reach the handler.
var hdrT0 = []byte("(goodput-t0)")

// monoBase anchors the stamped times: the stamp holds the monotonic
// nanoseconds since it, so t0 keeps Go's monotonic clock reading.
var monoBase = time.Now()

// stampT0 records that h's headers were read now: in lc, the Listener's
// connection they were read from, or in h when lc is nil. It returns lc's
// seq then (the head's place among its requests' starts, connState; 0
// without lc) and the stamp (nanoseconds since monoBase). The server's HeaderReceived
// hook (Proxy.headerReceived) calls it.
func stampT0(lc *listenerConn, h *fasthttp.RequestHeader) (seq uint64, t0 int64) {
	t0 = int64(time.Since(monoBase))
	if lc != nil {
		lc.seq++
		lc.t0, lc.t0Seq = t0, lc.seq
		return lc.seq, t0
	}
	var b [20]byte
	h.SetBytesKV(hdrT0, strconv.AppendInt(b[:0], t0, 10))
	return 0, t0
}

// requestStart returns the t0 of the request ctx holds: its connection's
// stamp when that is a Listener's stamped since the request began, else
// the stamp in its headers, which it removes (it is never forwarded).
// Without a stamp (a handler run by a server that is not Proxy.Server),
// t0 is now.
func requestStart(ctx *fasthttp.RequestCtx) time.Time {
	if lc, ok := ctx.Conn().(*listenerConn); ok && lc.t0Seq > lc.reqSeq {
		return stampTime(lc.t0)
	}
	h := &ctx.Request.Header
	v := h.PeekBytes(hdrT0)
	if len(v) == 0 {
		return time.Now()
	}
	var d int64
	for _, c := range v {
		if c < '0' || c > '9' || d > (1<<62)/10 {
			d = -1
			break
		}
		d = d*10 + int64(c-'0')
	}
	h.DelBytes(hdrT0)
	return stampTime(d)
}

// stampTime returns the time of a stamp (nanoseconds since monoBase); now
// for a stamp that is not one (negative, or ahead of now).
func stampTime(d int64) time.Time {
	now := time.Now()
	if d < 0 {
		return now
	}
	// Counted back from now, not forward from monoBase: the same instant
	// on the monotonic clock, but with the wall clock as it reads now, so a
	// step of the wall clock since the process started (NTP, a VM's clock
	// set) does not shift every logged time by the step.
	if ago := now.Sub(monoBase) - time.Duration(d); ago >= 0 {
		return now.Add(-ago)
	}
	return now
}
