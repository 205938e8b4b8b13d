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

// tokenChar marks the bytes an HTTP header name may hold (RFC 9110, 5.1:
// a token).
var tokenChar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// hasBareLF reports whether a raw header block (the lines after the
// request line, as they came: fasthttp keeps them, its unfolding undone)
// has a line that ends with a bare LF. The connection's scan
// (reqHeadScan) refuses such a head as it arrives, but not one that came
// with an earlier request's bytes (pipelined): fasthttp reads a bare LF as
// a line end inside a head and ends the head only at a CRLF CRLF, so a
// pipelined head of bare-LF lines took the lines of the requests behind
// it up to the next CRLF CRLF as its own, where a proxy in front that
// ends a head at a bare-LF blank line sees separate requests (request
// smuggling). The request line is not in the block: a bare LF there, in
// a pipelined head, is read as fasthttp reads it.
func hasBareLF(raw []byte) bool {
	for i := 0; ; {
		j := bytes.IndexByte(raw[i:], '\n')
		if j < 0 {
			return false
		}
		i += j
		if i == 0 || raw[i-1] != '\r' {
			return true
		}
		i++
	}
}

// badHeaderName reports whether a raw header block (the lines after the
// request line) names a header with a byte a header name may not hold. A
// folded line (obs-fold: it starts with a space or a tab) continues the
// value before it. fasthttp refuses a space before the colon and control
// bytes, but takes "X Bad: 1" and would forward it: an engine that reads
// names more loosely than the gateway is where requests get smuggled.
func badHeaderName(raw []byte) bool {
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 || line[0] == ' ' || line[0] == '\t' {
			continue
		}
		c := bytes.IndexByte(line, ':')
		if c <= 0 {
			return true
		}
		for _, b := range line[:c] {
			if !tokenChar[b] {
				return true
			}
		}
	}
	return false
}
