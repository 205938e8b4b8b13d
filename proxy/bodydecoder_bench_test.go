package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http/httputil"
	"testing"
)

// chunkedEvents is a chunked body as an engine sends it, one write per
// chunk: 64 events (chat.completion.chunk, about 200 bytes each), one per
// chunk, then the last chunk.
func chunkedEvents() [][]byte {
	var writes [][]byte
	for i := 0; i < 64; i++ {
		ev := fmt.Sprintf(`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"tok%03d"},"logprobs":null,"finish_reason":null}]}`+"\n\n", i)
		writes = append(writes, fmt.Appendf(nil, "%x\r\n%s\r\n", len(ev), ev))
	}
	return append(writes, []byte("0\r\n\r\n"))
}

// BenchmarkBodyDecoder takes the chunked framing off a 64-event body, fed
// one chunk per read as a direct stream reads it, against net/http's
// chunked reader over a bufio.Reader on the same bytes (the baseline, in
// the same run). Reported: ns per event.
//
//	go test -run '^$' -bench BodyDecoder -count 6 ./proxy
func BenchmarkBodyDecoder(b *testing.B) {
	reads := chunkedEvents() // one read per write, as on a socket
	events := float64(len(reads) - 1)
	b.Run("direct", func(b *testing.B) {
		buf := make([]byte, 4096)
		var d bodyDecoder
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			d.init(-1)
			for _, r := range reads {
				if _, err := d.decode(buf[:copy(buf, r)]); err != nil {
					b.Fatal(err)
				}
			}
			if !d.done || d.extra {
				b.Fatal("body not ended cleanly")
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/events, "ns/event")
	})
	b.Run("httputil", func(b *testing.B) {
		src := &pieceReader{}
		br := bufio.NewReaderSize(src, 2048)
		buf := make([]byte, 4096)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			src.pieces, src.next = reads, 0
			br.Reset(src)
			cr := httputil.NewChunkedReader(br)
			for {
				_, err := cr.Read(buf)
				if err == io.EOF {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/events, "ns/event")
	})
}

// pieceReader returns one piece per Read, as a socket returns what one
// write brought.
type pieceReader struct {
	pieces [][]byte
	next   int
}

func (r *pieceReader) Read(p []byte) (int, error) {
	if r.next == len(r.pieces) {
		return 0, io.EOF
	}
	n := copy(p, r.pieces[r.next])
	r.next++
	return n, nil
}
