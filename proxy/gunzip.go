package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"io"
	"sync"
)

// The gateway asks the engine for an identity-encoded response on metered
// routes (Accept-Encoding: identity). An engine, or a middleware in front
// of it, that compresses anyway would leave the response unmetered and,
// worse, pass to the client the usage chunk the gateway asked for on its
// behalf, which the client never asked for and may choke on. So a gzip
// response on a metered route is decoded as it streams: metered, stripped,
// and sent to the client identity-encoded (which every client accepts, and
// which is what the gateway asked the engine for). Other encodings (br,
// zstd) cannot be decoded without new dependencies: they pass through
// untouched and unmetered, and the record says so.

// isGzip reports a gzip Content-Encoding.
func isGzip(ce []byte) bool {
	return bytes.EqualFold(ce, []byte("gzip")) || bytes.EqualFold(ce, []byte("x-gzip"))
}

var gzipReaders sync.Pool // *gzip.Reader

// gunzipBody decodes a gzip body. It reads the gzip header on its first
// Read, so under the read deadline the reader set, not in the handler.
//
// A body may hold several gzip members (a server that compresses each
// write on its own). gzip.Reader's multistream mode reads the next
// member's header inside the Read that returns the last bytes of the one
// before, and so held a member's last events until the next member began
// (or the body ended): the members are read one by one here, each Read
// returning what a member gave as soon as it gave it, and the next header
// looked for at the Read after.
type gunzipBody struct {
	src io.Reader
	br  *bufio.Reader // src's bytes, kept from one member to the next
	zr  *gzip.Reader
	end bool // the member zr read has ended
	err error
}

func (g *gunzipBody) Read(p []byte) (int, error) {
	for {
		if g.err != nil {
			return 0, g.err
		}
		if g.zr == nil || g.end {
			if g.err = g.member(); g.err != nil {
				return 0, g.err
			}
		}
		n, err := g.zr.Read(p)
		if err == io.EOF {
			// The member's end (its trailer checked): another may follow.
			g.end, err = true, nil
		}
		if n > 0 || err != nil {
			return n, err
		}
	}
}

// member starts on the next member: io.EOF when the body has none.
func (g *gunzipBody) member() error {
	if g.zr == nil {
		zr, _ := gzipReaders.Get().(*gzip.Reader)
		if zr == nil {
			zr = new(gzip.Reader)
		}
		g.zr = zr
		// gzip.Reader would wrap a reader without ReadByte in a bufio.Reader
		// of its own at each Reset, dropping what the one before held.
		g.br = bufio.NewReader(g.src)
	}
	if err := g.zr.Reset(g.br); err != nil {
		return err // io.EOF: the body's end (before any member: an empty body, as before)
	}
	g.zr.Multistream(false)
	g.end = false
	return nil
}

// release returns the decoder to its pool. It is not closed: Close frees
// nothing, and would dereference the decompressor of one whose first
// header did not read (a body that is no gzip).
func (g *gunzipBody) release() {
	if g.zr != nil {
		gzipReaders.Put(g.zr)
		g.zr = nil
	}
}
