package proxy

import (
	"bufio"
	"bytes"
	"io"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/valyala/fasthttp"
)

// The differential test (reqhead_diff_test.go) builds streams that
// fasthttp reads as built. These take such streams and edit them a little
// (a byte, a CR or an LF, a framing field line, long or folded, a chunk
// line), and read what comes out with fasthttp's own reader, the way its
// server does: wherever fasthttp goes on to read a next request on a
// connection it keeps, the scan must be following from that request's
// first byte (else a chunked request behind it ending "0\r\n\n" is not
// refused: smuggling), and the scan must refuse no LF that fasthttp reads
// as a body's data (a false 400). They found a framing field line longer
// than the scan keeps, after another framing field, read with the wrong
// value.

// mutReads is one read of a stream by fasthttp, as its server reads a
// connection: the offsets at which it reads a next request on a
// connection it keeps, and each request's end and body.
type mutReads struct {
	starts []int
	ends   []int
	bodies []string
}

func fasthttpMutReads(b []byte, oneByte bool) (m mutReads) {
	src := bytes.NewReader(b)
	var r io.Reader = src
	if oneByte {
		r = iotest.OneByteReader(r)
	}
	br := bufio.NewReaderSize(r, clientReadBuf)
	at := func() int { return len(b) - src.Len() - br.Buffered() }
	var req fasthttp.Request
	for {
		req.Reset()
		start := at()
		if err := req.Header.Read(br); err != nil {
			return m
		}
		if err := req.ContinueReadBody(br, 1<<20, false); err != nil {
			return m
		}
		if len(m.ends) > 0 {
			m.starts = append(m.starts, start)
		}
		m.ends = append(m.ends, at())
		m.bodies = append(m.bodies, string(req.Body()))
		if req.Header.ConnectionClose() {
			return m
		}
	}
}

// mutEdits are what mutate puts into a stream.
var mutEdits = []string{"\r", "\n", "\r\n", " ", "\t", ":", ",", "0", "5", "a", "F", ";", "\"", "chunked", "identity",
	"Transfer-Encoding: chunked\r\n", "Content-Length: 5\r\n", "\r\n ", "\r\n\t", "0\r\n\r\n",
	"Content-Length:" + strings.Repeat(" ", 40) + "5\r\n", "Transfer-Encoding:" + strings.Repeat(" ", 40) + "chunked\r\n",
	"Content-Length: " + strings.Repeat("0", 50) + "7\r\n", "Transfer-Encoding:\r\n chunked\r\n", "Content-Length:\r\n 3\r\n",
	"Expect: 100-continue\r\n", "Connection: close\r\n", "Connection: keep-alive\r\n", "HTTP/1.0",
	"X-Long: " + strings.Repeat("v", 60) + "\r\n", " " + strings.Repeat("w", 60) + "\r\n", "\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
	"3\r\nabc\r\n", "0\r\n", "000", "ffffffffff\r\n"}

// mutate makes one to three edits of s, drawn from e: an insertion, a
// deletion, or a byte replaced.
func mutate(e *diffEntropy, s []byte) []byte {
	out := append([]byte(nil), s...)
	for k := 1 + e.n(3); k > 0 && len(out) > 0; k-- {
		p := e.n(len(out))
		switch e.n(3) {
		case 0:
			out = slices.Insert(out, p, []byte(mutEdits[e.n(len(mutEdits))])...)
		case 1:
			out = slices.Delete(out, p, min(len(out), p+1+e.n(3)))
		default:
			out[p] = mutEdits[e.n(len(mutEdits))][0]
		}
	}
	return out
}

// checkMutStream builds a stream from entropy, edits it, and checks the
// scan over it (in reads cut at every byte, or at random) against
// fasthttp's reads of it (whole, and a byte at a time).
func checkMutStream(t testing.TB, entropy []byte) {
	e := &diffEntropy{b: entropy}
	b := mutate(e, buildDiffStream(e, false).b)
	var cuts []int
	if e.n(2) == 0 {
		for i := 1; i < len(b); i++ {
			cuts = append(cuts, i)
		}
	} else {
		for at := 1 + e.n(64); at < len(b); at += 1 + e.n(64) {
			cuts = append(cuts, at)
		}
	}
	whole := fasthttpMutReads(b, false)
	for _, reads := range []mutReads{whole, fasthttpMutReads(b, true)} {
		at := 0
		var h reqHeadScan
		h.arm()
		for _, cut := range slices.Compact(slices.Sorted(slices.Values(append(append(cuts, reads.starts...), len(b))))) {
			if cut <= at {
				continue
			}
			n := h.scan(b[at:cut])
			if h.bad {
				if p := at + n; dataLF(b, p, whole) {
					t.Fatalf("the scan refused the LF at %d, a body's data to fasthttp (requests ending at %v)\n%q", p, whole.ends, b)
				}
				break
			}
			at = cut
			if slices.Contains(reads.starts, at) && (!h.on || !h.next || h.begun || h.body || h.line != 0) {
				t.Fatalf("fasthttp reads a request at %d, the scan is not at its start: %+v\n%q", at, h, b)
			}
		}
	}
}

// dataLF reports whether the LF at p in b is a byte of a body fasthttp
// reads (reads: its reads of b): made another byte, the requests end where
// they did, and a body is not the same.
func dataLF(b []byte, p int, reads mutReads) bool {
	if b[p] != '\n' || len(reads.ends) == 0 || p >= reads.ends[len(reads.ends)-1] {
		return false
	}
	x := append([]byte(nil), b...)
	x[p] = 'X'
	other := fasthttpMutReads(x, false)
	if !slices.Equal(other.ends, reads.ends) {
		return false
	}
	for i := range reads.bodies {
		if len(other.bodies[i]) != len(reads.bodies[i]) {
			return false
		}
	}
	return !slices.Equal(other.bodies, reads.bodies)
}

func TestReqHeadScanMutations(t *testing.T) {
	n := 20000
	if testing.Short() || raceEnabled {
		// The scan runs on one goroutine: the race detector finds nothing
		// in it that the normal build's run does not, at ten times the
		// cost (CI runs the test in both).
		n = 2000
	}
	r := rand.New(rand.NewSource(8))
	entropy := make([]byte, 4096)
	for i := 0; i < n; i++ {
		r.Read(entropy)
		checkMutStream(t, entropy)
	}
}

func FuzzReqHeadScanMutations(f *testing.F) {
	addEntropySeeds(f, 2)
	f.Fuzz(func(t *testing.T, entropy []byte) {
		checkMutStream(t, entropy)
	})
}
