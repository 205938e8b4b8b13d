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
// the time into the header itself, under a name that no request on the
// wire can carry (parentheses are not allowed in a header name, so fasthttp
// refuses such a request, and a client cannot forge or pre-set it), and
// the handler takes it out before anything else reads the headers. The
// header's storage is reused from request to request: no allocation.
//
// Other ways were weighed: ContinueHandler runs only for requests that send
// "Expect: 100-continue"; StreamRequestBody calls the handler after the
// headers but keeps the connection's 16 KiB read buffer for as long as the
// response streams (ReduceMemoryUsage cannot release it), and would move
// the body limit into the handler; a map from header to time costs a lock
// and leaks entries for requests that never reach the handler.
var hdrT0 = []byte("(goodput-t0)")

// monoBase anchors the stamped times: the header carries the monotonic
// nanoseconds since it, so t0 keeps Go's monotonic clock reading.
var monoBase = time.Now()

// stampT0 records in h that its headers were read now, and returns the
// stamp (nanoseconds since monoBase); the server's HeaderReceived hook
// (Proxy.headerReceived) calls it.
func stampT0(h *fasthttp.RequestHeader) int64 {
	var b [20]byte
	d := int64(time.Since(monoBase))
	h.SetBytesKV(hdrT0, strconv.AppendInt(b[:0], d, 10))
	return d
}

// requestStart returns the request's t0 and removes the stamp from its
// headers (it is never forwarded). Without a stamp (a handler run by a
// server that is not Proxy.Server), t0 is now.
func requestStart(h *fasthttp.RequestHeader) time.Time {
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
