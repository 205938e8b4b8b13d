package proxy

import (
	"bytes"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/valyala/fasthttp"
)

// The engine's request head, written in one pass over the client's parsed
// header (appendUpHead), as each attempt writes the request. It was the
// client's header copied into a request of fasthttp's, edited field by
// field (each Del and Set a walk of the fields) and then serialised, and
// the request held until the stream ended: a copy of every field and
// several walks, where one walk that writes what it keeps is enough.
//
// What the engine gets, against what the client sent:
//   - the request line: the client's method and target, in HTTP/1.1
//     whatever the client spoke: an HTTP/1.0 request passed on as such
//     closed its upstream connection after the answer (and one the gateway
//     had pooled meanwhile failed the next request with EOF), and got its
//     body close-delimited; the target's path in the normal form the
//     gateway routed and metered it by (fasthttp's: dot segments resolved,
//     repeated slashes joined, percent-escapes decoded and only the needed
//     ones written again, an absolute target's scheme and host dropped),
//     its query as written (TestEngineGetsTheMeteredPath);
//   - Host: the engine's address;
//   - Content-Length: the body's length, for a body or a method that may
//     have one (as fasthttp writes it); a GET or HEAD without a body keeps
//     the client's Content-Length (a zero) if it had one, and gets none if
//     not; Transfer-Encoding never passes (the gateway has the whole body);
//   - every other field, in the order fasthttp's parsed header holds them
//     (the ones it keeps apart first: Content-Type, User-Agent, then the
//     Cookie lines, each as the client wrote it), its name as fasthttp
//     normalised it; no
//     Content-Type where the client sent none (fasthttp would add
//     application/octet-stream, which FastAPI, vLLM's server, does not read
//     as JSON, though it reads a body without one as JSON); except:
//   - the hop-by-hop fields and those the client's Connection names;
//   - Expect: the gateway has the whole body before it asks the engine
//     (fasthttp answered the client's 100-continue), and passed on it would
//     only ask the engine for an interim 100 (nginx drops it too);
//   - with gateway keys, the key's fields (Authorization, X-Api-Key), Azure's
//     Api-Key when it holds a key (a client may send its key there beside
//     them; an engine's own credential there passes), and the tenant
//     header: the key stays here, and the tenant comes from the key,
//     so the client's tenant header is not passed on for the engine to
//     trust; the tenant's upstream credential, when it has one, goes as
//     Authorization: Bearer, after the client's fields;
//   - X-Forwarded-For: the client's lines joined, the client's address
//     added, in place of its first line (else after the client's fields);
//   - X-Request-Id: the record's, in place of the client's (else after);
//   - on a metered route, Accept-Encoding: identity, in place of the
//     client's (else after);
//   - the fields the Tracer set (traceparent, tracestate), last; the
//     client's of the same names are dropped, and its tracestate whenever
//     the Tracer set a traceparent (see traced).

// traceField is a field the Tracer writes into the engine's request.
type traceField struct{ key, value string }

// upTrace is the HeaderCarrier the Tracer writes the engine's trace
// context into: its fields go into the head appendUpHead writes. Its Get
// and Keys see only the fields the Tracer set.
type upTrace struct{ r *request }

func (c upTrace) Get(key string) string {
	for _, f := range c.r.trace {
		if foldEqual([]byte(f.key), key) {
			return f.value
		}
	}
	return ""
}

// Set keeps a field whose name is a token and whose value has no control
// byte (tab aside): a Tracer's own propagator writes nothing else, and a
// line break would end the field. Nor does it keep a field the gateway
// writes itself or drops (Host, Content-Length, the hop-by-hop ones, the
// credentials, the tenant header, X-Forwarded-For, X-Request-Id,
// Accept-Encoding, Cookie): the engine would get two, a framing of the
// Tracer's, or a field the gateway keeps from it.
func (c upTrace) Set(key, value string) {
	k := []byte(key)
	if !fieldOK(key, value) || nameOf(k, c.r.p.cfg.TenantHeader)&(hopNames|nameAuthorization|nameAPIKey|nameAzureKey|nameTenant|nameForwardedFor) != 0 ||
		foldEqual(k, "Host") || foldEqual(k, "Content-Length") || foldEqual(k, "X-Request-Id") || foldEqual(k, "Accept-Encoding") ||
		foldEqual(k, "Cookie") {
		return
	}
	for i, f := range c.r.trace {
		if foldEqual([]byte(f.key), key) {
			c.r.trace[i].value = value
			return
		}
	}
	c.r.trace = append(c.r.trace, traceField{key, value})
}

func (c upTrace) Keys() []string {
	keys := make([]string, len(c.r.trace))
	for i, f := range c.r.trace {
		keys[i] = f.key
	}
	return keys
}

// fieldOK reports whether a header field may be written as it is: a
// token for its name, and no control byte but tab in its value.
func fieldOK(key, value string) bool {
	if key == "" {
		return false
	}
	for i := range len(key) {
		if !tokenChar[key[i]] {
			return false
		}
	}
	for i := range len(value) {
		if b := value[i]; b < ' ' && b != '\t' || b == 0x7f {
			return false
		}
	}
	return true
}

// Fields appendUpHead writes itself, once each (wrote).
const (
	wroteForwardedFor = 1 << iota
	wroteRequestID
	wroteAcceptEncoding
)

// appendUpHead appends the head of the engine's request to dst, its blank
// line included (see the top of this file). The client's header is read,
// not changed (save that fasthttp collects its cookies). The first head's
// time is the gateway's own, before the upstream write, and goes into the
// record's overhead: it is written after the exchange took t_up (a retry's
// is a connection's cost, which the overhead leaves out).
func (r *request) appendUpHead(dst []byte) []byte {
	if r.timed {
		return r.writeUpHead(dst)
	}
	t := time.Now()
	dst = r.writeUpHead(dst)
	if testHookUpHead != nil {
		testHookUpHead()
	}
	r.rec.Overhead += time.Since(t)
	r.timed = true
	return dst
}

// testHookUpHead, when set by a test, runs as a request's first head is
// written, within its timing.
var testHookUpHead func()

// writeUpHead is appendUpHead's writing.
func (r *request) writeUpHead(dst []byte) []byte {
	p, h := r.p, &r.ctx.Request.Header
	keys := p.cfg.Keys != nil
	metered := r.api != meter.APIOther
	dst = append(dst, h.Method()...)
	dst = append(dst, ' ')
	dst = append(dst, r.ctx.Request.RequestURI()...)
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	dst = append(dst, p.upHost...)
	dst = append(dst, "\r\n"...)
	hasBody := len(r.body) > 0 || !(h.IsGet() || h.IsHead())
	if hasBody {
		dst = append(dst, "Content-Length: "...)
		dst = strconv.AppendInt(dst, int64(len(r.body)), 10)
		dst = append(dst, "\r\n"...)
	}
	// The fields every Connection line names, as one list.
	var buf [256]byte
	var opts []byte
	if r.names&nameConnection != 0 {
		opts = connectionFields(buf[:0], h.PeekAll("Connection"))
	}
	// The earlier hops' X-Forwarded-For, unless the client's Connection
	// names it, or it is the tenant header and the gateway's keys name
	// the tenant.
	priors := r.names&nameForwardedFor != 0 && !listed(opts, []byte("X-Forwarded-For")) &&
		!(keys && foldEqual([]byte("X-Forwarded-For"), p.cfg.TenantHeader))
	var wrote uint8
	for k, v := range h.All() {
		cookies := false
		switch string(k) {
		case "Host", "Trailer":
			continue // the engine's; a refused request's (hasTrailer)
		case "Content-Length":
			if hasBody {
				continue // written above
			}
		case "Cookie":
			cookies = true
		}
		// Connection is looked for whether or not the head named it:
		// fasthttp reads an HTTP/1.0 request without one as having
		// Connection: close, and yields it so.
		n := nameIn(k, p.cfg.TenantHeader, r.names|nameConnection)
		switch {
		case n&hopNames != 0, n&nameExpect != 0:
			continue
		case keys && n&(nameAuthorization|nameAPIKey|nameTenant) != 0:
			continue
		case keys && n&nameAzureKey != 0 && (carriesKey(v, h) || p.holdsAnyKey(v)):
			continue
		case listed(opts, k):
			continue
		case n&nameForwardedFor != 0:
			if wrote&wroteForwardedFor == 0 {
				wrote |= wroteForwardedFor
				dst = appendForwardedFor(dst, h, r.ctx.RemoteIP(), priors)
			}
			continue
		}
		switch {
		case foldEqual(k, "X-Request-Id"):
			if wrote&wroteRequestID == 0 {
				wrote |= wroteRequestID
				dst = appendField(dst, "X-Request-Id", r.rec.RequestID)
			}
			continue
		case metered && foldEqual(k, "Accept-Encoding"):
			if wrote&wroteAcceptEncoding == 0 {
				wrote |= wroteAcceptEncoding
				dst = append(dst, "Accept-Encoding: identity\r\n"...)
			}
			continue
		case r.traced(k):
			continue
		case cookies:
			// As the client wrote them: All yields the cookies as
			// fasthttp parsed them, its Cookie lines joined, unquoted,
			// a value with a quote or a backslash dropped.
			if raw := h.RawHeaders(); len(raw) > 0 {
				dst = appendCookieLines(dst, raw)
				continue
			}
		}
		dst = append(dst, k...)
		dst = append(dst, ": "...)
		dst = append(dst, v...)
		dst = append(dst, "\r\n"...)
	}
	if wrote&wroteForwardedFor == 0 {
		dst = appendForwardedFor(dst, h, r.ctx.RemoteIP(), priors)
	}
	if wrote&wroteRequestID == 0 {
		dst = appendField(dst, "X-Request-Id", r.rec.RequestID)
	}
	if keys {
		if uk := r.key.Tenant.UpstreamKey; uk != "" && fieldOK("Authorization", uk) {
			// (Checked as it was loaded: a control byte would end the
			// field, and the head, early.)
			// Bearer on every route, the Messages API's too: vLLM and
			// SGLang check their --api-key only there (an Anthropic
			// client's x-api-key would be refused), llama.cpp reads either.
			dst = append(dst, "Authorization: Bearer "...)
			dst = append(dst, uk...)
			dst = append(dst, "\r\n"...)
		}
	}
	if metered && wrote&wroteAcceptEncoding == 0 {
		// Compressed responses cannot be parsed as they pass (and break
		// streaming in some clients): ask the engine for identity.
		dst = append(dst, "Accept-Encoding: identity\r\n"...)
	}
	for _, f := range r.trace {
		dst = appendField(dst, f.key, f.value)
	}
	return append(dst, "\r\n"...)
}

// hopNames are headNames' hop-by-hop bits.
const hopNames = nameConnection | nameProxyConnection | nameKeepAlive | nameProxyAuthenticate |
	nameProxyAuthorization | nameTE | nameTrailer | nameTransferEncoding | nameUpgrade

// connectionFields appends to dst, as one list, the options of every
// Connection line but keep-alive, the one a client sends most (Keep-Alive
// is dropped anyway): so the list is most often empty, and no field is
// looked for in it.
func connectionFields(dst []byte, lines [][]byte) []byte {
	for _, v := range lines {
		for len(v) > 0 {
			var o []byte
			if o, v = nextOption(v); len(o) > 0 && !foldEqual(o, "keep-alive") {
				dst = append(append(dst, o...), ',')
			}
		}
	}
	return dst
}

// listed reports whether a Connection option list (connectionFields) names
// the field name.
func listed(opts, name []byte) bool {
	for len(opts) > 0 {
		var o []byte
		if o, opts = nextOption(opts); len(o) == len(name) && foldEqual(name, string(o)) {
			return true
		}
	}
	return false
}

// traced reports whether the Tracer set a field named name, or name is
// tracestate and the Tracer set a traceparent: a tracestate belongs to
// the traceparent it came with, and the Tracer's replaces the client's.
// The client's went on as it came whenever the Tracer wrote none (the
// span kept none of it: every member holding a key, over 512 bytes, or
// beside a traceparent it could not read, in a new trace), key and all,
// for the engine's own spans to export.
func (r *request) traced(name []byte) bool {
	for _, f := range r.trace {
		if foldEqual(name, f.key) || foldEqual(name, "tracestate") && strings.EqualFold(f.key, "traceparent") {
			return true
		}
	}
	return false
}

// appendCookieLines appends the Cookie lines of a raw header block (the
// lines after the request line, as they came), each as it came, a folded
// line's continuation joined to it by a space, as fasthttp unfolds it.
func appendCookieLines(dst, raw []byte) []byte {
	in := false // in a Cookie line: a folded line continues it
	value := 0  // where its value starts in dst
	for len(raw) > 0 {
		var line []byte
		line, raw = nextRawLine(raw)
		if len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
			if v := bytes.TrimSpace(line); in && len(v) > 0 {
				if len(dst) > value {
					dst = append(dst, ' ')
				}
				dst = append(dst, v...)
			}
			continue
		}
		if in {
			dst = append(dst, "\r\n"...)
			in = false
		}
		if len(line) >= len("Cookie:") && line[len("Cookie")] == ':' && foldEqual(line[:len("Cookie")], "Cookie") {
			dst = append(dst, "Cookie: "...)
			value = len(dst)
			dst = append(dst, bytes.TrimSpace(line[len("Cookie:"):])...)
			in = true
		}
	}
	if in {
		dst = append(dst, "\r\n"...)
	}
	return dst
}

func appendField(dst []byte, key, value string) []byte {
	dst = append(dst, key...)
	dst = append(dst, ": "...)
	dst = append(dst, value...)
	return append(dst, "\r\n"...)
}

// appendForwardedFor appends X-Forwarded-For: with priors, every earlier
// hop's value, in order (a client behind two proxies may send the field
// twice, and a list is the same as its lines joined, RFC 9110, 5.3), then
// the client's
// address, written as net.IP.String writes it (an IPv4 address mapped into
// IPv6 as IPv4). A connection without an IP address (a test's) adds none,
// and passes the earlier hops' on.
func appendForwardedFor(dst []byte, h *fasthttp.RequestHeader, ip net.IP, priors bool) []byte {
	a, ok := netip.AddrFromSlice(ip)
	start, n := len(dst), 0
	dst = append(dst, "X-Forwarded-For: "...)
	if priors {
		for _, prior := range h.PeekAll("X-Forwarded-For") {
			if len(prior) > 0 {
				if n > 0 {
					dst = append(dst, ", "...)
				}
				dst = append(dst, prior...)
				n++
			}
		}
	}
	if ok {
		if n > 0 {
			dst = append(dst, ", "...)
		}
		dst = a.Unmap().AppendTo(dst)
		n++
	}
	if n == 0 {
		return dst[:start]
	}
	return append(dst, "\r\n"...)
}
