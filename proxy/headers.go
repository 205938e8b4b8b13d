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

// nextOption returns the first header name listed in a Connection header
// value ("Connection: keep-alive, X-Foo" makes X-Foo hop-by-hop), trimmed
// (empty for an empty item), and the rest of the list. (A loop, not a
// callback: what it returns may be a buffer on the caller's stack.)
func nextOption(v []byte) (name, rest []byte) {
	if i := bytes.IndexByte(v, ','); i >= 0 {
		name, rest = v[:i], v[i+1:]
	} else {
		name = v
	}
	return bytes.TrimSpace(name), rest
}

// connectionOptions appends to dst the options of every Connection line
// (a header's Peek has only the first line's), as one list: a copy, for
// DelBytes moves the fields they are in.
func connectionOptions(dst []byte, lines [][]byte) []byte {
	for _, c := range lines {
		dst = append(append(dst, c...), ',')
	}
	return dst
}

// removeHopResponse strips hop-by-hop headers from a response to the client.
func removeHopResponse(h *fasthttp.ResponseHeader) {
	var buf [256]byte
	for v := connectionOptions(buf[:0], h.PeekAll("Connection")); len(v) > 0; {
		var name []byte
		if name, v = nextOption(v); len(name) > 0 {
			h.DelBytes(name)
		}
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

// headNames is a set of the header names the upstream head treats apart:
// the hop-by-hop ones (a bit each, in hopHeaders' order), Expect, the
// credentials a client presents to the gateway, the tenant header, and
// X-Forwarded-For.
type headNames uint16

const (
	// hopHeaders', in its order
	nameConnection headNames = 1 << iota
	nameProxyConnection
	nameKeepAlive
	nameProxyAuthenticate
	nameProxyAuthorization
	nameTE
	nameTrailer
	nameTransferEncoding
	nameUpgrade

	nameExpect
	nameAuthorization
	nameAPIKey
	nameAzureKey // Api-Key: passed on unless it holds a key (writeUpHead)
	nameTenant
	nameForwardedFor

	// allNames: every name, for a head whose names are not known.
	allNames headNames = 1<<iota - 1
)

// scanHeadNames reads the names of a raw header block (the lines after
// the request line, as they came: fasthttp keeps them), and returns which
// of headNames it has (tenant: the tenant header's name), and whether a
// name has a byte a header name may not hold (bad). A folded line
// (obs-fold: it starts with a space or a tab) continues the value before
// it. fasthttp refuses a space before the colon and control bytes, but
// takes "X Bad: 1" and would forward it: an engine that reads names more
// loosely than the gateway is where requests get smuggled.
//
// What fasthttp makes of the block has no name the block lacks (save
// Connection: see removeHopRequest), so a name not found here need not be
// looked for in the parsed header (each look is a walk of its fields). An
// empty block (a header not read from the wire) is taken to have them all.
func scanHeadNames(raw []byte, tenant string) (names headNames, bad bool) {
	if len(raw) == 0 {
		return allNames, false
	}
	for len(raw) > 0 {
		var line []byte
		line, raw = nextRawLine(raw)
		if len(line) == 0 || line[0] == ' ' || line[0] == '\t' {
			continue
		}
		c := bytes.IndexByte(line, ':')
		if c <= 0 {
			return names, true
		}
		name := line[:c]
		for _, b := range name {
			if !tokenChar[b] {
				return names, true
			}
		}
		names |= nameOf(name, tenant)
	}
	return names, false
}

// nextRawLine returns the first line of a raw header block, without its
// line end (LF, or CR LF), and the rest of the block.
func nextRawLine(raw []byte) (line, rest []byte) {
	line = raw
	if i := bytes.IndexByte(raw, '\n'); i >= 0 {
		line, rest = raw[:i], raw[i+1:]
	}
	return bytes.TrimSuffix(line, []byte("\r")), rest
}

// headNameList is headNames' names, lower case, and their bits.
var headNameList = [...]struct {
	lower string
	n     headNames
}{
	{"connection", nameConnection},
	{"proxy-connection", nameProxyConnection},
	{"keep-alive", nameKeepAlive},
	{"proxy-authenticate", nameProxyAuthenticate},
	{"proxy-authorization", nameProxyAuthorization},
	{"te", nameTE},
	{"trailer", nameTrailer},
	{"transfer-encoding", nameTransferEncoding},
	{"upgrade", nameUpgrade},
	{"expect", nameExpect},
	{"authorization", nameAuthorization},
	{"x-api-key", nameAPIKey},
	// Azure's: the gateway reads no key from it, but a client may send
	// its key there too (found by a new user's probe: it reached the
	// engine).
	{"api-key", nameAzureKey},
	{"x-forwarded-for", nameForwardedFor},
}

// headNamesByLen is headNameList by the names' lengths: a name is compared
// with the one or two of its length, not with all.
var headNamesByLen = func() (t [20][]struct {
	lower string
	n     headNames
}) {
	for _, e := range headNameList {
		t[len(e.lower)] = append(t[len(e.lower)], e)
	}
	return t
}()

// nameOf returns name's bit of headNames (0 for another name).
func nameOf(name []byte, tenant string) headNames {
	return nameIn(name, tenant, allNames)
}

// nameIn is nameOf among the names of in: a name not in it is not looked
// for (the names a client's head holds, when it has a bit of each).
func nameIn(name []byte, tenant string, in headNames) headNames {
	var n headNames
	if len(name) < len(headNamesByLen) {
		for _, e := range headNamesByLen[len(name)] {
			if in&e.n != 0 && foldEqual(name, e.lower) {
				n |= e.n
			}
		}
	}
	if in&nameTenant != 0 && foldEqual(name, tenant) {
		n |= nameTenant
	}
	return n
}

// foldEqual reports whether b and s are the same ASCII text, letters in
// any case.
func foldEqual(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
