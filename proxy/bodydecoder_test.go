package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http/httputil"
	"strings"
	"testing"

	"github.com/goodput/goodput/internal/testenv"
)

// decoded is the outcome of feeding a bodyDecoder one input.
type decoded struct {
	body  []byte
	done  bool  // as decode left it, before eof
	extra bool  // as decode left it
	err   error // decode's first error, or else eof's
}

// feed decodes pieces, in order, with a decoder ready for contentLength.
// decode works in place, so each piece is handed over as a fresh copy of
// exactly its length; the body is what p[:n] holds after each call. Feeding
// stops at the first error; without one, eof ends the input.
func feed(tb testing.TB, contentLength int, pieces [][]byte) decoded {
	tb.Helper()
	total := 0
	for _, piece := range pieces {
		total += len(piece)
	}
	copies := make([]byte, 0, total) // the pieces' copies, one after another
	r := decoded{body: make([]byte, 0, total)}
	var d bodyDecoder
	d.init(contentLength)
	for _, piece := range pieces {
		start := len(copies)
		copies = append(copies, piece...)
		p := copies[start:len(copies):len(copies)]
		n, err := d.decode(p)
		if n < 0 || n > len(p) {
			tb.Fatalf("decode(%q) = %d, outside [0, %d]", piece, n, len(p))
		}
		r.body = append(r.body, p[:n]...)
		if err != nil {
			r.err = err
			break
		}
	}
	r.done, r.extra = d.done, d.extra
	if r.err == nil {
		r.err = d.eof()
	}
	return r
}

// errClass is the class of a decode result's error: nil, errBodyFraming or
// errBodyCut; any other error is its own class.
func errClass(err error) error {
	framing, cut := errors.Is(err, errBodyFraming), errors.Is(err, errBodyCut)
	switch {
	case framing && !cut:
		return errBodyFraming
	case cut && !framing:
		return errBodyCut
	}
	return err
}

// sameOutcome reports whether two results agree: body, done, extra and
// error class.
func sameOutcome(a, b decoded) bool {
	return bytes.Equal(a.body, b.body) && a.done == b.done && a.extra == b.extra &&
		errClass(a.err) == errClass(b.err)
}

func (r decoded) String() string {
	return fmt.Sprintf("body %q, done %v, extra %v, err %v", r.body, r.done, r.extra, r.err)
}

// cut splits in into pieces of the sizes (each byte b is b+1 bytes),
// cycling through them; no sizes is one piece.
func cut(in, sizes []byte) [][]byte {
	if len(sizes) == 0 {
		return [][]byte{in}
	}
	var pieces [][]byte
	for i := 0; len(in) > 0; i++ {
		k := min(len(in), int(sizes[i%len(sizes)])+1)
		pieces = append(pieces, in[:k])
		in = in[k:]
	}
	return pieces
}

// byteWise is in one byte per piece, with an empty piece before, between
// and after them when empties is set.
func byteWise(in []byte, empties bool) [][]byte {
	var pieces [][]byte
	for i := range in {
		if empties {
			pieces = append(pieces, in[i:i])
		}
		pieces = append(pieces, in[i:i+1])
	}
	if empties {
		pieces = append(pieces, in[len(in):])
	}
	return pieces
}

// splitPoints is where checkAllWays splits in: at every point, except deep
// inside a long run of one byte (the filler of the limit cases, whose bytes
// the decoder takes alike), where every 61st point is enough.
func splitPoints(in []byte) []int {
	const near, every = 16, 61
	var at []int
	for i := 0; i <= len(in); i++ {
		if i%every != 0 && deepInRun(in, i, near) {
			continue
		}
		at = append(at, i)
	}
	return at
}

// deepInRun reports whether the near bytes on each side of the split at i
// are all one byte.
func deepInRun(in []byte, i, near int) bool {
	if i < near || i+near > len(in) {
		return false
	}
	for _, c := range in[i-near : i+near] {
		if c != in[i] {
			return false
		}
	}
	return true
}

// checkAllWays decodes in three ways (in one call, split in two at every
// point, one byte per call) and checks that each gives want.
func checkAllWays(t *testing.T, contentLength int, in []byte, want decoded) {
	t.Helper()
	check := func(way string, pieces [][]byte) bool {
		t.Helper()
		if got := feed(t, contentLength, pieces); !sameOutcome(got, want) {
			t.Errorf("%s: got %v\nwant %v", way, got, want)
			return false
		}
		return true
	}
	check("one call", [][]byte{in})
	for _, i := range splitPoints(in) {
		if !check(fmt.Sprintf("split at %d", i), [][]byte{in[:i], in[i:]}) {
			break // one report is enough
		}
	}
	check("one byte per call", byteWise(in, false))
	check("one byte per call, empty reads between", byteWise(in, true))
}

// Inputs for the limits.
var (
	// A size line of maxChunkLine-1 bytes before its CRLF (the most that
	// is taken: the limit counts the line's CR, or its bare LF).
	longestSizeLine = "5;" + strings.Repeat("x", maxChunkLine-3)
	// A trailer section of exactly maxTrailerBytes bytes, its final CRLF
	// included.
	longestTrailer = "A: " + strings.Repeat("t", maxTrailerBytes-7) + "\r\n\r\n"
	// The same with bare LFs.
	longestTrailerLF = "A: " + strings.Repeat("t", maxTrailerBytes-5) + "\n\n"
)

// bodyDecoderCase is an input and what decoding it must give.
type bodyDecoderCase struct {
	name  string
	cl    int    // contentLength for init: ≥0, -1 chunked, -2 until close
	in    string // the bytes read from the connection
	body  string
	done  bool  // before eof
	extra bool  // bytes came after the body's end
	err   error // nil, errBodyFraming or errBodyCut
}

func bodyDecoderCases() []bodyDecoderCase {
	const chunked, untilClose = -1, -2
	hex10 := "0123456789"
	alphabet := "abcdefghijklmnopqrstuvwxyz"
	bin := "\x00\xff\r\n\x00"
	big := strings.Repeat("0123456789abcdef", 256) // 4096 bytes
	return []bodyDecoderCase{
		// Fixed length.
		{name: "fixed 0", cl: 0, in: "", done: true},
		{name: "fixed 0, extra", cl: 0, in: "X", done: true, extra: true},
		{name: "fixed exact", cl: 5, in: "hello", body: "hello", done: true},
		{name: "fixed exact, binary", cl: 5, in: bin, body: bin, done: true},
		{name: "fixed short", cl: 5, in: "hel", body: "hel", err: errBodyCut},
		{name: "fixed nothing", cl: 5, in: "", err: errBodyCut},
		{name: "fixed extra", cl: 5, in: "helloHTTP/1.1 200 OK\r\n", body: "hello", done: true, extra: true},
		{name: "fixed extra, one byte", cl: 5, in: "hello!", body: "hello", done: true, extra: true},

		// Until close: everything is body; eof ends it.
		{name: "until close", cl: untilClose, in: "5\r\nhello\r\n0\r\n\r\n", body: "5\r\nhello\r\n0\r\n\r\n"},
		{name: "until close, nothing", cl: untilClose, in: ""},

		// Chunked, well formed.
		{name: "empty body", cl: chunked, in: "0\r\n\r\n", done: true},
		{name: "single chunk", cl: chunked, in: "5\r\nhello\r\n0\r\n\r\n", body: "hello", done: true},
		{name: "several chunks", cl: chunked, in: "5\r\nhello\r\n1\r\n \r\n6\r\nworld!\r\n0\r\n\r\n", body: "hello world!", done: true},
		{name: "one-byte chunks", cl: chunked, in: "1\r\na\r\n1\r\nb\r\n1\r\nc\r\n0\r\n\r\n", body: "abc", done: true},
		{name: "hex lower", cl: chunked, in: "a\r\n" + hex10 + "\r\n1a\r\n" + alphabet + "\r\n0\r\n\r\n", body: hex10 + alphabet, done: true},
		{name: "hex upper", cl: chunked, in: "A\r\n" + hex10 + "\r\n1A\r\n" + alphabet + "\r\n0\r\n\r\n", body: hex10 + alphabet, done: true},
		{name: "hex mixed case", cl: chunked, in: "1b\r\n" + alphabet + "!\r\n1B\r\n" + alphabet + "?\r\n0\r\n\r\n", body: alphabet + "!" + alphabet + "?", done: true},
		{name: "hex f and F", cl: chunked, in: "f\r\n" + alphabet[:15] + "\r\nF\r\n" + alphabet[11:] + "\r\n0\r\n\r\n", body: alphabet[:15] + alphabet[11:], done: true},
		{name: "hex 1000", cl: chunked, in: "1000\r\n" + big + "\r\n0\r\n\r\n", body: big, done: true},
		{name: "leading zeros", cl: chunked, in: "0005\r\nhello\r\n00000000000000000000\r\n\r\n", body: "hello", done: true},
		{name: "binary data", cl: chunked, in: "5\r\n" + bin + "\r\n0\r\n\r\n", body: bin, done: true},
		{name: "data that looks like framing", cl: chunked, in: "6\r\n0\r\n\r\nx\r\n0\r\n\r\n", body: "0\r\n\r\nx", done: true},
		{name: "extension", cl: chunked, in: "5;name=value\r\nhello\r\n0\r\n\r\n", body: "hello", done: true},
		{name: "extensions, several", cl: chunked, in: "5;a=1;b=\"x y\";c\r\nhello\r\n0;last=yes\r\n\r\n", body: "hello", done: true},
		{name: "extension, empty", cl: chunked, in: "5;\r\nhello\r\n0;\r\n\r\n", body: "hello", done: true},
		{name: "whitespace after size", cl: chunked, in: "5 \r\nhello\r\n0\t\r\n\r\n", body: "hello", done: true},
		{name: "whitespace, several", cl: chunked, in: "5 \t \r\nhello\r\n0  \r\n\r\n", body: "hello", done: true},
		{name: "whitespace then extension", cl: chunked, in: "5 ;a=b\r\nhello\r\n0\t;z\r\n\r\n", body: "hello", done: true},
		{name: "trailer", cl: chunked, in: "5\r\nhello\r\n0\r\nX-Usage: 12\r\n\r\n", body: "hello", done: true},
		{name: "trailers, several", cl: chunked, in: "5\r\nhello\r\n0\r\nA: 1\r\nB: 2\r\nC: three\r\n\r\n", body: "hello", done: true},
		{name: "bare LF everywhere", cl: chunked, in: "5\nhello\n0\n\n", body: "hello", done: true},
		{name: "bare LF, trailers", cl: chunked, in: "5\nhello\n0\nA: 1\nB: 2\n\n", body: "hello", done: true},
		{name: "bare LF after extension", cl: chunked, in: "5;e=1\nhello\r\n0;f\n\r\n", body: "hello", done: true},
		{name: "bare LF after whitespace", cl: chunked, in: "5 \nhello\r\n0\t\n\n", body: "hello", done: true},
		{name: "bare LF and CRLF mixed", cl: chunked, in: "5\r\nhello\n6\nworld!\r\n0\nA: 1\r\nB: 2\n\r\n", body: "helloworld!", done: true},
		{name: "extra after the end", cl: chunked, in: "5\r\nhello\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n", body: "hello", done: true, extra: true},
		{name: "extra, one byte", cl: chunked, in: "5\r\nhello\r\n0\r\n\r\n5", body: "hello", done: true, extra: true},
		{name: "extra after trailers", cl: chunked, in: "5\r\nhello\r\n0\r\nA: 1\r\n\r\n5\r\nworld\r\n", body: "hello", done: true, extra: true},
		{name: "extra after bare LF end", cl: chunked, in: "5\nhello\n0\n\nX", body: "hello", done: true, extra: true},
		{name: "extra after empty body", cl: chunked, in: "0\r\n\r\n0\r\n\r\n", done: true, extra: true},
		{name: "longest size line", cl: chunked, in: longestSizeLine + "\r\nhello\r\n0\r\n\r\n", body: "hello", done: true},
		{name: "longest size line, bare LF", cl: chunked, in: longestSizeLine + "\nhello\r\n0\r\n\r\n", body: "hello", done: true},
		{name: "longest trailer section", cl: chunked, in: "5\r\nhello\r\n0\r\n" + longestTrailer, body: "hello", done: true},
		{name: "longest trailer section, bare LF", cl: chunked, in: "5\r\nhello\r\n0\r\n" + longestTrailerLF, body: "hello", done: true},
		{name: "largest size", cl: chunked, in: "fffffffffffffff\r\nabc", body: "abc", err: errBodyCut},

		// Chunked, malformed: the body up to the fault, then the error.
		{name: "size not hex", cl: chunked, in: "g\r\nhello\r\n0\r\n\r\n", err: errBodyFraming},
		{name: "size not hex after a digit", cl: chunked, in: "5x\r\nhello\r\n0\r\n\r\n", err: errBodyFraming},
		{name: "size 0x5", cl: chunked, in: "0x5\r\nhello\r\n0\r\n\r\n", err: errBodyFraming},
		{name: "size not hex in a later chunk", cl: chunked, in: "5\r\nhello\r\nzz\r\n", body: "hello", err: errBodyFraming},
		{name: "size with a space inside", cl: chunked, in: "5 5\r\nhello\r\n", err: errBodyFraming},
		{name: "size negative", cl: chunked, in: "-5\r\nhello\r\n", err: errBodyFraming},
		{name: "size missing", cl: chunked, in: "\r\nhello\r\n0\r\n\r\n", err: errBodyFraming},
		{name: "size missing, bare LF", cl: chunked, in: "\nhello\r\n", err: errBodyFraming},
		{name: "size missing, extension only", cl: chunked, in: ";a=b\r\nhello\r\n", err: errBodyFraming},
		{name: "size missing in a later chunk", cl: chunked, in: "5\r\nhello\r\n\r\n", body: "hello", err: errBodyFraming},
		{name: "size missing in a later chunk, extension", cl: chunked, in: "5\r\nhello\r\n;a\r\n", body: "hello", err: errBodyFraming},
		{name: "size after whitespace", cl: chunked, in: " 5\r\nhello\r\n", err: errBodyFraming},
		{name: "size after tab", cl: chunked, in: "\t5\r\nhello\r\n", err: errBodyFraming},
		{name: "size line CR without LF", cl: chunked, in: "5\rhello\r\n", err: errBodyFraming},
		{name: "extension CR without LF", cl: chunked, in: "5;a\rb\r\nhello\r\n", err: errBodyFraming},
		{name: "data not followed by CRLF", cl: chunked, in: "5\r\nhelloX\r\n0\r\n\r\n", body: "hello", err: errBodyFraming},
		{name: "data followed by CR without LF", cl: chunked, in: "5\r\nhello\rX0\r\n\r\n", body: "hello", err: errBodyFraming},
		{name: "data followed by CR CR LF", cl: chunked, in: "5\r\nhello\r\r\n0\r\n\r\n", body: "hello", err: errBodyFraming},
		{name: "data longer than its size", cl: chunked, in: "3\r\nhello\r\n0\r\n\r\n", body: "hel", err: errBodyFraming},
		{name: "size line too long", cl: chunked, in: longestSizeLine + "x\r\nhello\r\n0\r\n\r\n", err: errBodyFraming},
		{name: "size line too long, no end", cl: chunked, in: "5;" + strings.Repeat("x", 2*maxChunkLine), err: errBodyFraming},
		{name: "size line too long, digits", cl: chunked, in: strings.Repeat("0", maxChunkLine) + "\r\n\r\n", err: errBodyFraming},
		{name: "size overflow, 16 digits", cl: chunked, in: "1000000000000000\r\n", err: errBodyFraming},
		{name: "size overflow, 17 f", cl: chunked, in: strings.Repeat("f", 17) + "\r\n", err: errBodyFraming},
		{name: "size overflow in a later chunk", cl: chunked, in: "5\r\nhello\r\n" + strings.Repeat("F", 17) + "\r\n", body: "hello", err: errBodyFraming},
		{name: "trailer CR without LF", cl: chunked, in: "5\r\nhello\r\n0\r\nA: 1\rB: 2\r\n\r\n", body: "hello", err: errBodyFraming},
		{name: "trailer section too long", cl: chunked, in: "5\r\nhello\r\n0\r\nA: " + strings.Repeat("t", maxTrailerBytes-5) + "\r\n\r\n", body: "hello", err: errBodyFraming},
		{name: "trailer section too long, bare LF", cl: chunked, in: "5\r\nhello\r\n0\r\n" + longestTrailerLF[:3] + "t" + longestTrailerLF[3:], body: "hello", err: errBodyFraming},
		{name: "trailer section too long, many lines", cl: chunked, in: "0\r\n" + strings.Repeat("A: "+strings.Repeat("t", 1000)+"\r\n", maxTrailerBytes/1005+1) + "\r\n", err: errBodyFraming},
		{name: "trailer section too long, no end", cl: chunked, in: "0\r\n" + strings.Repeat("t", 2*maxTrailerBytes), err: errBodyFraming},
		{name: "garbage after the final CR", cl: chunked, in: "5\r\nhello\r\n0\r\n\rX", body: "hello", err: errBodyFraming},
		{name: "CR CR after the last chunk", cl: chunked, in: "0\r\n\r\r\n", err: errBodyFraming},

		// Chunked, cut short: eof before the end.
		{name: "cut: nothing", cl: chunked, in: "", err: errBodyCut},
		{name: "cut: mid size", cl: chunked, in: "1", err: errBodyCut},
		{name: "cut: after size", cl: chunked, in: "5 ", err: errBodyCut},
		{name: "cut: mid extension", cl: chunked, in: "5;a=", err: errBodyCut},
		{name: "cut: mid size CRLF", cl: chunked, in: "5\r", err: errBodyCut},
		{name: "cut: before data", cl: chunked, in: "5\r\n", err: errBodyCut},
		{name: "cut: mid data", cl: chunked, in: "5\r\nhe", body: "he", err: errBodyCut},
		{name: "cut: after data", cl: chunked, in: "5\r\nhello", body: "hello", err: errBodyCut},
		{name: "cut: mid data CRLF", cl: chunked, in: "5\r\nhello\r", body: "hello", err: errBodyCut},
		{name: "cut: before next size", cl: chunked, in: "5\r\nhello\r\n", body: "hello", err: errBodyCut},
		{name: "cut: mid last size line", cl: chunked, in: "5\r\nhello\r\n0\r", body: "hello", err: errBodyCut},
		{name: "cut: after last chunk", cl: chunked, in: "5\r\nhello\r\n0\r\n", body: "hello", err: errBodyCut},
		{name: "cut: mid trailer", cl: chunked, in: "5\r\nhello\r\n0\r\nX-Usage: 1", body: "hello", err: errBodyCut},
		{name: "cut: mid trailer CRLF", cl: chunked, in: "0\r\nA: 1\r", err: errBodyCut},
		{name: "cut: after trailer", cl: chunked, in: "0\r\nA: 1\r\n", err: errBodyCut},
		{name: "cut: mid final CRLF", cl: chunked, in: "5\r\nhello\r\n0\r\n\r", body: "hello", err: errBodyCut},
	}
}

// TestBodyDecoder checks each framing, decoded in one call, split in two at
// every point, and one byte per call.
func TestBodyDecoder(t *testing.T) {
	for _, tc := range bodyDecoderCases() {
		t.Run(tc.name, func(t *testing.T) {
			want := decoded{body: []byte(tc.body), done: tc.done, extra: tc.extra, err: tc.err}
			checkAllWays(t, tc.cl, []byte(tc.in), want)
		})
	}
}

// The cases' own premises: the limit inputs have the sizes they claim.
func TestBodyDecoderLimitInputs(t *testing.T) {
	if len(longestSizeLine) != maxChunkLine-1 {
		t.Errorf("longestSizeLine is %d bytes", len(longestSizeLine))
	}
	if len(longestTrailer) != maxTrailerBytes || len(longestTrailerLF) != maxTrailerBytes {
		t.Errorf("longest trailers are %d and %d bytes", len(longestTrailer), len(longestTrailerLF))
	}
}

// eof: a body until close ends there; one already done stays done.
func TestBodyDecoderEOF(t *testing.T) {
	var d bodyDecoder
	d.init(-2)
	if n, err := d.decode([]byte("abc")); n != 3 || err != nil || d.done {
		t.Fatalf("until close: decode = %d, %v, done %v", n, err, d.done)
	}
	if err := d.eof(); err != nil || !d.done || d.extra {
		t.Fatalf("until close: eof = %v, done %v, extra %v", err, d.done, d.extra)
	}

	d.init(3)
	if n, err := d.decode([]byte("abc")); n != 3 || err != nil || !d.done {
		t.Fatalf("fixed: decode = %d, %v, done %v", n, err, d.done)
	}
	for range 2 { // eof is idempotent
		if err := d.eof(); err != nil {
			t.Fatalf("fixed, done: eof = %v", err)
		}
	}

	// init forgets the previous body.
	d.init(-1)
	if d.done || d.extra {
		t.Fatal("init left done or extra set")
	}
	if err := d.eof(); !errors.Is(err, errBodyCut) {
		t.Fatalf("chunked, nothing read: eof = %v", err)
	}
}

// After the end, decode takes nothing: bytes set extra, an empty read does
// not.
func TestBodyDecoderAfterDone(t *testing.T) {
	for _, cl := range []int{0, -1} {
		var d bodyDecoder
		d.init(cl)
		if cl == -1 {
			if n, err := d.decode([]byte("0\r\n\r\n")); n != 0 || err != nil || !d.done || d.extra {
				t.Fatalf("decode = %d, %v, done %v, extra %v", n, err, d.done, d.extra)
			}
		}
		if n, err := d.decode(nil); n != 0 || err != nil || d.extra {
			t.Fatalf("cl %d: empty read after the end: %d, %v, extra %v", cl, n, err, d.extra)
		}
		p := []byte("5\r\nhello\r\n")
		if n, err := d.decode(p); n != 0 || err != nil || !d.extra {
			t.Fatalf("cl %d: bytes after the end: %d, %v, extra %v", cl, n, err, d.extra)
		}
		if string(p) != "5\r\nhello\r\n" {
			t.Fatalf("cl %d: bytes after the end were changed: %q", cl, p)
		}
	}
}

// A framing error names the byte that broke the framing.
func TestBodyDecoderErrorNamesByte(t *testing.T) {
	var d bodyDecoder
	d.init(-1)
	_, err := d.decode([]byte("5\r\nhello!"))
	if !errors.Is(err, errBodyFraming) || !strings.Contains(err.Error(), "'!'") {
		t.Fatalf("err = %v, want a framing error naming '!'", err)
	}
}

// decode allocates nothing, whatever the framing and however the reads
// split it.
func TestBodyDecoderAllocatesNothing(t *testing.T) {
	in := []byte("5;ext=1\r\nhello\r\n1A \r\n" + strings.Repeat("z", 26) + "\r\n" +
		"3\nabc\n" + "100\r\n" + strings.Repeat("y", 256) + "\r\n0\r\nA: 1\r\nB: 2\n\r\n")
	const want = 5 + 26 + 3 + 256
	buf := make([]byte, len(in))
	var d bodyDecoder
	for _, cl := range []int{-1, len(in), -2} {
		for _, step := range []int{1, 2, 3, 7, 64, len(in)} {
			allocs := testenv.AllocsPerRun(100, func() {
				copy(buf, in)
				d.init(cl)
				body := 0
				for i := 0; i < len(buf); i += step {
					n, err := d.decode(buf[i:min(i+step, len(buf))])
					if err != nil {
						panic(err)
					}
					body += n
				}
				if cl == -1 && (body != want || !d.done || d.extra) {
					panic("chunked input not decoded")
				}
				if d.eof() != nil {
					panic("eof")
				}
			})
			if allocs != 0 {
				t.Errorf("contentLength %d, reads of %d bytes: %v allocations per body", cl, step, allocs)
			}
		}
	}
}

// FuzzBodyDecoderChunked: any body, encoded by net/http's chunked writer in
// chunks of fuzzed sizes, decodes back to itself, however the encoding is
// split between reads.
func FuzzBodyDecoderChunked(f *testing.F) {
	f.Add([]byte(""), []byte(nil), []byte(nil))
	f.Add([]byte("hello"), []byte(nil), []byte{0})
	f.Add([]byte("hello, world"), []byte{0, 1, 2}, []byte{0, 3, 1})
	f.Add([]byte("data: {\"x\":1}\n\n"), []byte{4}, []byte{2, 200})
	f.Add([]byte("0\r\n\r\n"), []byte{0}, []byte{1})
	f.Add(bytes.Repeat([]byte("abcdefghijklmnopqrstuvwxyz"), 40), []byte{255, 17}, []byte{6, 0, 100})
	f.Fuzz(func(t *testing.T, body, chunkSizes, readSizes []byte) {
		var enc bytes.Buffer
		cw := httputil.NewChunkedWriter(&enc)
		for rest, i := body, 0; len(rest) > 0; i++ {
			k := len(rest)
			if len(chunkSizes) > 0 {
				k = min(k, int(chunkSizes[i%len(chunkSizes)])+1)
			}
			if _, err := cw.Write(rest[:k]); err != nil {
				t.Fatal(err)
			}
			rest = rest[k:]
		}
		if err := cw.Close(); err != nil { // writes only "0\r\n"
			t.Fatal(err)
		}
		enc.WriteString("\r\n") // the end of the (empty) trailer section

		got := feed(t, -1, cut(enc.Bytes(), readSizes))
		want := decoded{body: body, done: true}
		if !sameOutcome(got, want) {
			t.Fatalf("encoding %q\ngot  %v\nwant %v", enc.Bytes(), got, want)
		}
	})
}

// FuzzBodyDecoderArbitrary: any bytes as a chunked body. decode never
// panics nor claims more bytes than it was given; split reads give what one
// read gives; and it agrees with net/http's chunked reader where both take
// the input.
func FuzzBodyDecoderArbitrary(f *testing.F) {
	for _, tc := range bodyDecoderCases() {
		if tc.cl == -1 && len(tc.in) < 256 {
			f.Add([]byte(tc.in), []byte(nil))
			f.Add([]byte(tc.in), []byte{0, 2, 1})
		}
	}
	f.Add([]byte("5\r\nhello\r\n0\r\n\r\n"), []byte{0})
	f.Fuzz(func(t *testing.T, in, readSizes []byte) {
		whole := feed(t, -1, [][]byte{in})
		if split := feed(t, -1, cut(in, readSizes)); !sameOutcome(split, whole) {
			t.Fatalf("input %q, reads %v:\nsplit %v\nwhole %v", in, readSizes, split, whole)
		}
		if oneByte := feed(t, -1, byteWise(in, false)); !sameOutcome(oneByte, whole) {
			t.Fatalf("input %q:\nbyte-wise %v\nwhole     %v", in, oneByte, whole)
		}

		// net/http's reader stops after the last chunk's size line and
		// reads no trailers; it wants CRLF everywhere.
		br := bufio.NewReader(bytes.NewReader(in))
		goBody, goErr := io.ReadAll(httputil.NewChunkedReader(br))
		if goErr != nil {
			return
		}
		if whole.done && whole.err == nil && !bytes.Equal(whole.body, goBody) {
			t.Fatalf("input %q: body %q, net/http's %q", in, whole.body, goBody)
		}
		// Where net/http takes the chunks and an empty trailer section
		// follows, the input is well formed: it must be taken the same.
		rest, _ := io.ReadAll(br)
		if bytes.HasPrefix(rest, []byte("\r\n")) {
			want := decoded{body: goBody, done: true, extra: len(rest) > 2}
			if !sameOutcome(whole, want) {
				t.Fatalf("input %q, well formed for net/http:\ngot  %v\nwant %v", in, whole, want)
			}
		}
	})
}
