package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// hopHeaders are the hop-by-hop headers of RFC 9110 §7.6.1, plus the
// obsolete ones proxies still meet. They describe one connection, not the
// message, so a proxy must not forward them.
var hopHeaders = []string{
	"Connection",
	"Proxy-Connection", // non-standard, sent by old clients
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer",
	"Transfer-Encoding",
	"Upgrade",
}

// connectionTokens calls fn for each header name listed in a Connection
// header value ("Connection: keep-alive, X-Foo" makes X-Foo hop-by-hop).
func connectionTokens(v []byte, fn func(name []byte)) {
	for len(v) > 0 {
		var tok []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			tok, v = v[:i], v[i+1:]
		} else {
			tok, v = v, nil
		}
		tok = bytes.TrimSpace(tok)
		if len(tok) > 0 {
			fn(tok)
		}
	}
}

// removeHopRequest strips hop-by-hop headers from an outgoing request,
// including the ones its Connection header names.
func removeHopRequest(h *fasthttp.RequestHeader) {
	if c := h.Peek("Connection"); len(c) > 0 {
		connectionTokens(c, func(name []byte) { h.DelBytes(name) })
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// removeHopResponse strips hop-by-hop headers from a response to the client.
func removeHopResponse(h *fasthttp.ResponseHeader) {
	if c := h.Peek("Connection"); len(c) > 0 {
		connectionTokens(c, func(name []byte) { h.DelBytes(name) })
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}
