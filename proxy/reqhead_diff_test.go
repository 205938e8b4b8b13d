package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// The request-head scan (reqhead.go) follows each request's body as
// fasthttp frames it, and the next pipelined request from its first byte.
// Where it placed a body's end otherwise than fasthttp does, it would read
// body bytes (a pretty-printed JSON body's bare LFs) as head lines and
// refuse a valid request, or miss the bare LF of a request behind it. These
// tests build streams of valid pipelined requests in many shapes, check
// that fasthttp's own server-side reading takes each stream as built (every
// request, its body, nothing left), and that the scan passes every byte of
// it, split into reads anywhere, is at each request's end where fasthttp
// is, and, with one CRLF of a head line, a chunk-size line or a trailer
// line turned into a bare LF, refuses the stream at that LF.

// diffEntropy draws the choices of a stream from b (a fuzz input, or
// bytes of a seeded generator), then zeros once b is used up.
type diffEntropy struct{ b []byte }

func (e *diffEntropy) byte() byte {
	if len(e.b) == 0 {
		return 0
	}
	c := e.b[0]
	e.b = e.b[1:]
	return c
}

// n returns a choice in [0, k).
func (e *diffEntropy) n(k int) int {
	if k <= 1 {
		return 0
	}
	v := int(e.byte())<<8 | int(e.byte())
	return v % k
}

func (e *diffEntropy) pick(s ...string) string { return s[e.n(len(s))] }

// diffStream is a built stream of pipelined requests.
type diffStream struct {
	b      []byte
	ends   []int    // each request's end (after its body or trailer section)
	bodies [][]byte // each request's body, as fasthttp gives it
	// lineEnds: the offsets of the CRLFs (their CR) ending the head lines,
	// chunk-size lines and trailer lines that the scan follows: one of
	// them made a bare LF must be refused there.
	lineEnds []int
	// mayLose: a request has a shape whose framing the scan says it cannot
	// tell (a folded line, a framing field line longer than it keeps):
	// from it on, the scan may stop following.
	mayLose  bool
	chunked  int // requests with a chunked body
	withLen  int // requests with a Content-Length body
	requests int
}

func (s *diffStream) line(text string, follow bool) {
	s.b = append(s.b, text...)
	if follow && !s.mayLose {
		s.lineEnds = append(s.lineEnds, len(s.b))
	}
	s.b = append(s.b, "\r\n"...)
}

func randCase(e *diffEntropy, s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' && e.n(3) == 0 {
			b[i] = c - 'a' + 'A'
		} else if 'A' <= c && c <= 'Z' && e.n(3) == 0 {
			b[i] = c - 'A' + 'a'
		}
	}
	return string(b)
}

func ows(e *diffEntropy) string { return e.pick("", "", " ", "  ", "\t", " \t") }

// diffBody returns n bytes of a body meant to be misread as lines: bare
// LFs and CRs, blank lines, a last chunk, a request line.
func diffBody(e *diffEntropy, n int) []byte {
	b := make([]byte, 0, n+32)
	for len(b) < n {
		switch e.n(12) {
		case 0:
			b = append(b, "\r\n\r\n"...)
		case 1:
			b = append(b, "0\r\n\n"...)
		case 2:
			b = append(b, "GET / HTTP/1.1\nHost: x\n\n"...)
		case 3:
			b = append(b, "\n  \"k\": \"v\",\n"...)
		case 4:
			b = append(b, '\r')
		default:
			b = append(b, "{\n}\r :a0"[e.n(8)])
		}
	}
	return b[:n]
}

// buildDiffStream builds one to five valid pipelined requests from e;
// forGateway, only of shapes the gateway serves (no HEAD, HTTP/1.0, field
// names with spaces, methods it refuses, trailer fields).
func buildDiffStream(e *diffEntropy, forGateway bool) *diffStream {
	s := &diffStream{}
	n := 1 + e.n(5)
	for i := 0; i < n; i++ {
		for k := e.n(4) - 1; k > 0; k-- { // empty lines before it, either kind
			s.b = append(s.b, e.pick("\r\n", "\n")...)
		}
		closes := diffRequest(e, s, forGateway)
		s.ends = append(s.ends, len(s.b))
		s.requests++
		if closes {
			break // fasthttp closes the connection after it
		}
	}
	return s
}

// diffRequest appends one request to s; it reports whether fasthttp
// closes the connection after it.
func diffRequest(e *diffEntropy, s *diffStream, forGateway bool) (closes bool) {
	method := e.pick("GET", "POST", "POST", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "PROPFIND")
	http10 := e.n(8) == 0
	if forGateway {
		method, http10 = e.pick("GET", "POST", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"), false
	}
	proto := "HTTP/1.1"
	if http10 {
		proto = "HTTP/1.0"
	}
	s.line(method+" "+e.pick("/v1/chat/completions", "/", "/v1/models?a=b", "/"+strings.Repeat("p", 60))+" "+proto, true)

	// The framing: none, a length, chunked, or both kinds.
	framing := e.n(10)
	if http10 && framing >= 5 {
		framing = 2 // fasthttp refuses a Transfer-Encoding in HTTP/1.0
	}
	var body []byte
	var chunks []int
	switch {
	case framing == 0 || framing == 1:
	case framing < 5:
		body = diffBody(e, e.n(4)*e.n(700)+e.n(3))
	default:
		for k := e.n(5); k > 0; k-- {
			c := 1 + e.n(300)
			if e.n(4) == 0 {
				c = 1 + e.n(5)
			}
			chunks = append(chunks, c)
		}
		size := 0
		for _, c := range chunks {
			size += c
		}
		body = diffBody(e, size)
	}

	var fields []func()
	field := func(f func()) { fields = append(fields, f) }
	if !http10 || e.n(2) == 0 {
		field(func() { s.line(randCase(e, "Host")+":"+ows(e)+"x", true) })
	}
	if http10 {
		field(func() { s.line(randCase(e, "Connection")+": "+randCase(e, "keep-alive"), true) })
	}
	clLine := func(long bool) string {
		v := fmt.Sprint(len(body))
		v = strings.Repeat("0", e.n(4)) + v // leading zeros
		pad := ows(e)
		if long {
			pad = strings.Repeat(e.pick(" ", "\t"), 40)
			v = strings.Repeat("0", e.n(60)) + v
		}
		return randCase(e, "Content-Length") + ":" + pad + v + ows(e)
	}
	// folded writes a framing field whose value comes on folded lines
	// (obs-fold), after empty ones, as fasthttp serves it.
	folded := func(name, value string) {
		s.line(randCase(e, name)+":"+ows(e), true)
		for k := e.n(3); k > 0; k-- {
			s.line(e.pick(" ", "\t", "  "), true)
		}
		s.line(e.pick(" ", "\t", " \t")+value, true)
	}
	teLine := func(value string) string {
		return randCase(e, "Transfer-Encoding") + ":" + ows(e) + randCase(e, value) + ows(e)
	}
	switch {
	case framing == 1:
		field(func() { s.line(randCase(e, "Content-Length")+": 0", true) })
	case framing >= 2 && framing < 5:
		long := e.n(8) == 0
		if e.n(8) == 0 {
			field(func() { folded("Content-Length", strings.Repeat("0", e.n(3))+fmt.Sprint(len(body))) })
		} else {
			field(func() { s.line(clLine(long), true) })
		}
		if framing == 4 && !http10 {
			// fasthttp closes the connection after a request with both.
			field(func() { s.line(teLine("identity"), true) })
			closes = true
		}
		s.withLen++
	case framing >= 5:
		if e.n(8) == 0 {
			field(func() { folded("Transfer-Encoding", randCase(e, "chunked")) })
		} else {
			field(func() { s.line(teLine("chunked"), true) })
		}
		if framing == 9 {
			// A length beside chunked: chunked frames the body, and
			// fasthttp closes the connection after it.
			field(func() { s.line(randCase(e, "Content-Length")+": "+fmt.Sprint(e.n(50)), true) })
			closes = true
		}
		s.chunked++
	}
	if e.n(6) == 0 && method != "GET" && method != "HEAD" {
		field(func() { s.line(randCase(e, "Expect")+": 100-continue", true) })
	}
	// Fields that look like framing fields, or start as they do, or are
	// long; mixed case.
	for k := e.n(6); k > 0; k-- {
		name := e.pick("Cache-Control", "Content-Lengths", "Content-Lengt", "Transfer-Encodings",
			"Transfer-Encodin", "TE", "Trailer", "Content Length", "Transfer Encoding", "Content-Encoding",
			"X-Stainless-Lang", "Accept", "Authorization", "Tcontent-Length", "Ctransfer-Encoding", "C", "T")
		if forGateway && (strings.Contains(name, " ") || name == "Trailer") {
			name = "X-" + strings.ReplaceAll(name, " ", "-")
		}
		value := e.pick("chunked", "5", "application/json", "trailers", "identity", strings.Repeat("v", 70), "a: b", "")
		if name == "Content-Encoding" {
			value = "identity"
		}
		if name == "Trailer" {
			value = "X-T-1"
		}
		field(func() { s.line(randCase(e, name)+":"+ows(e)+value, true) })
	}
	if e.n(2) == 0 {
		field(func() { s.line(randCase(e, "Content-Type")+":"+ows(e)+"application/json", true) })
	}
	if e.n(12) == 0 {
		// A folded field (obs-fold), which frames nothing.
		field(func() {
			s.line(randCase(e, e.pick("X-Folded", "Cache-Control", "Transfer-Encodings", "Te"))+": a", true)
			s.line(e.pick(" ", "\t")+"b", true)
		})
	}
	e.shuffle(fields)
	for _, f := range fields {
		f()
	}
	s.line("", true) // the head's end

	if chunks == nil && framing < 5 {
		s.b = append(s.b, body...)
		s.bodies = append(s.bodies, body)
		return closes
	}
	rest := body
	for _, c := range chunks {
		s.line(diffChunkSize(e, c), true)
		s.b = append(s.b, rest[:c]...)
		rest = rest[c:]
		s.b = append(s.b, "\r\n"...)
	}
	s.line(diffChunkSize(e, 0), true)
	for k := e.n(3); k > 0 && !forGateway; k-- { // the gateway refuses trailer fields
		s.line(randCase(e, e.pick("X-T-1", "X-Checksum", "Transfer-Encodinx"))+":"+ows(e)+e.pick("v", "chunked", "0"), true)
	}
	s.line("", true) // the trailer section's end
	s.bodies = append(s.bodies, body)
	return closes
}

// diffChunkSize returns a chunk-size line for size n: hex digits of either
// case, leading zeros, an extension (quoted strings too) or spaces.
func diffChunkSize(e *diffEntropy, n int) string {
	hex := fmt.Sprintf("%x", n)
	if e.n(2) == 0 {
		hex = fmt.Sprintf("%X", n)
	}
	hex = strings.Repeat("0", e.n(3)) + hex
	switch e.n(6) {
	case 0:
		return hex + ";" + e.pick("a=b", "name", `q="x y;z\"w"`, "a=b;c", "ext="+strings.Repeat("e", 60))
	case 1:
		return hex + e.pick(" ", "\t", "  ")
	}
	return hex
}

func (e *diffEntropy) shuffle(f []func()) {
	for i := len(f) - 1; i > 0; i-- {
		j := e.n(i + 1)
		f[i], f[j] = f[j], f[i]
	}
}

// fasthttpReads reads s as fasthttp's server does (Header.Read, then the
// body, after a 100 Continue when asked) and reports how it differs from
// what s was built to be.
func fasthttpReads(s *diffStream) error {
	br := bufio.NewReaderSize(bytes.NewReader(s.b), clientReadBuf)
	var req fasthttp.Request
	for i := range s.ends {
		req.Reset()
		if err := req.Header.Read(br); err != nil {
			return fmt.Errorf("request %d: head: %v", i, err)
		}
		if err := req.ContinueReadBody(br, 0, false); err != nil {
			return fmt.Errorf("request %d: body: %v", i, err)
		}
		if at := len(s.b) - br.Buffered(); at != s.ends[i] && br.Buffered() > 0 {
			return fmt.Errorf("request %d: ends at %d, built to end at %d", i, at, s.ends[i])
		}
		if !bytes.Equal(req.Body(), s.bodies[i]) {
			return fmt.Errorf("request %d: body %q, built %q", i, req.Body(), s.bodies[i])
		}
	}
	if br.Buffered() > 0 {
		return fmt.Errorf("%d bytes left", br.Buffered())
	}
	return nil
}

// scanReads runs a reqHeadScan over b split into reads at cuts (sorted
// offsets); at each of ends (sorted) that falls on a cut it checks that the
// scan, if still following, is where a request begins. It returns how many
// bytes it passed, whether it found a bare LF, and whether it was
// following at the end.
func scanReads(t testing.TB, b []byte, cuts, ends []int) (passed int, bad, following bool) {
	var h reqHeadScan
	h.arm()
	at := 0
	for _, cut := range append(cuts, len(b)) {
		if cut <= at {
			continue
		}
		n := h.scan(b[at:cut])
		passed += n
		if h.bad {
			return passed, true, false
		}
		if n != cut-at {
			t.Fatalf("the scan passed %d of %d bytes, no bare LF found", n, cut-at)
		}
		at = cut
		for _, end := range ends {
			if end == at && h.on && (!h.next || h.begun || h.body || h.line != 0) {
				t.Fatalf("at a request's end (%d), the scan is not at a request's start: %+v", end, h)
			}
		}
	}
	return passed, false, h.on
}

// diffCuts returns sorted offsets in [1, n) that split a stream into
// reads: every byte, none, at random, at each request's end.
func diffCuts(e *diffEntropy, n int, ends []int) []int {
	var cuts []int
	switch e.n(5) {
	case 0:
		for i := 1; i < n; i++ {
			cuts = append(cuts, i)
		}
	case 1:
	case 2:
		cuts = append(cuts, ends...)
	default:
		for at := 0; ; {
			at += 1 + e.n(64)
			if e.n(4) == 0 {
				at += e.n(2000)
			}
			if at >= n {
				break
			}
			cuts = append(cuts, at)
		}
		cuts = append(cuts, ends...)
	}
	sortInts(cuts)
	return cuts
}

func sortInts(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// diffStats counts what a run covered.
type diffStats struct {
	streams, requests, chunked, withLen, followedToEnd, negatives int
}

// checkDiffStream builds a stream from entropy, and checks fasthttp, the
// scan, and the scan over the stream with each chosen CRLF made a bare
// LF.
func checkDiffStream(t testing.TB, entropy []byte, st *diffStats) {
	e := &diffEntropy{b: entropy}
	s := buildDiffStream(e, false)
	if err := fasthttpReads(s); err != nil {
		t.Fatalf("fasthttp does not read the stream as built: %v\n%q", err, s.b)
	}
	cuts := diffCuts(e, len(s.b), s.ends)
	passed, bad, following := scanReads(t, s.b, cuts, s.ends)
	if bad {
		t.Fatalf("the scan refused a valid stream at %d (%q before it)\n%q", passed, s.b[max(0, passed-40):passed], s.b)
	}
	if !following && !s.mayLose {
		t.Fatalf("the scan stopped following a stream whose framing it can tell\n%q", s.b)
	}
	if st != nil {
		st.streams++
		st.requests += s.requests
		st.chunked += s.chunked
		st.withLen += s.withLen
		if following {
			st.followedToEnd++
		}
	}
	// The negative half: one CRLF the scan follows made a bare LF.
	if len(s.lineEnds) == 0 {
		return
	}
	for k := 1 + e.n(3); k > 0; k-- {
		cr := s.lineEnds[e.n(len(s.lineEnds))]
		bent := append(append([]byte(nil), s.b[:cr]...), s.b[cr+1:]...)
		var bentCuts []int
		for _, c := range cuts {
			if c > cr {
				c--
			}
			if c > 0 && c < len(bent) {
				bentCuts = append(bentCuts, c)
			}
		}
		passed, bad, _ := scanReads(t, bent, bentCuts, nil)
		if !bad || passed != cr {
			t.Fatalf("a bare LF at %d: bad %v, %d bytes passed\n%q", cr, bad, passed, bent)
		}
		if st != nil {
			st.negatives++
		}
	}
}

// TestReqHeadScanDifferential: many streams of valid pipelined requests
// (fixed seed), each read by fasthttp as built and passed whole by the
// scan, and refused by it at a bare LF put in one of their lines.
func TestReqHeadScanDifferential(t *testing.T) {
	r := rand.New(rand.NewSource(51))
	var st diffStats
	entropy := make([]byte, 4096)
	for i := 0; i < 3000; i++ {
		r.Read(entropy)
		checkDiffStream(t, entropy, &st)
	}
	if st.chunked < 1000 || st.withLen < 1000 || st.negatives < 3000 || st.followedToEnd < st.streams/2 {
		t.Errorf("too little covered: %+v", st)
	}
	t.Logf("%+v", st)
}

// FuzzReqHeadScanDifferential: the same, the stream's shape drawn from the
// fuzz input.
func FuzzReqHeadScanDifferential(f *testing.F) {
	addEntropySeeds(f, 1)
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 512))
	f.Fuzz(func(t *testing.T, entropy []byte) {
		checkDiffStream(t, entropy, nil)
	})
}

// addEntropySeeds adds 16 random inputs of 64 to 1,024 bytes, from seed,
// to a fuzz target whose input is the entropy a stream is drawn from.
func addEntropySeeds(f *testing.F, seed int64) {
	r := rand.New(rand.NewSource(seed))
	for i := 0; i < 16; i++ {
		b := make([]byte, 64+i*64)
		r.Read(b)
		f.Add(b)
	}
}

// scanGateway is a gateway, its request heads waited for a minute, in front
// of an engine that answers every request with a small JSON body: for
// streams of requests sent through the request scan. The engine is
// returned too, for what it was sent.
func scanGateway(t *testing.T) (*gateway, *rawUpstream) {
	t.Helper()
	up := startRawUpstream(t, func(c *scriptConn) {
		const answer = `{"ok":true}`
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
		c.BW.Flush()
	})
	return startGateway(t, Config{Upstream: up.URL(), ReadHeaderTimeout: time.Minute}), up
}

// TestReqHeadScanDifferentialThroughGateway sends streams of the same
// shapes (but those the gateway refuses, and HEAD's and HTTP/1.0's, whose
// answers a plain reader cannot frame) to a gateway, in writes of random sizes: the scan rides along the
// connection's reads, re-armed as fasthttp waits for each next request
// (connState), and no request of them is refused, each answered once.
func TestReqHeadScanDifferentialThroughGateway(t *testing.T) {
	g, _ := scanGateway(t)
	r := rand.New(rand.NewSource(52))
	entropy := make([]byte, 4096)
	whole, refused := 0, 0
	for sent := 0; sent < 100; {
		r.Read(entropy)
		e := &diffEntropy{b: entropy}
		s := buildDiffStream(e, true)
		sent++
		conn, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		var werr error // the gateway closed first: it refused a request
		for b := s.b; len(b) > 0 && werr == nil; {
			n := min(len(b), 1+e.n(300))
			_, werr = conn.Write(b[:n])
			b = b[n:]
		}
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(conn)
		for i := 0; i < s.requests; {
			resp, err := http.ReadResponse(br, nil)
			if err != nil && werr != nil {
				refused++
				break
			}
			if err != nil {
				t.Fatalf("answer %d of %d: %v\n%q", i+1, s.requests, err, s.b)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusContinue {
				continue
			}
			if resp.StatusCode == http.StatusBadRequest && bytes.Contains(body, []byte("CRLF")) {
				t.Fatalf("answer %d of %d: 400 %s\n%q", i+1, s.requests, body, s.b)
			}
			if resp.StatusCode >= 400 && resp.Close {
				// The gateway's own refusal (a field name with a space
				// in it, a method it does not serve): the connection
				// ends with it.
				refused++
				break
			}
			if i++; i == s.requests {
				whole++
			}
		}
		conn.Close()
	}
	if whole < 100 {
		t.Errorf("%d streams answered whole, %d refused by the gateway's own checks", whole, refused)
	}
	t.Logf("%d streams answered whole, %d refused by the gateway's own checks", whole, refused)
}
