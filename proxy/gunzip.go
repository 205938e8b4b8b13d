package proxy

import (
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
type gunzipBody struct {
	src io.Reader
	zr  *gzip.Reader
	err error
}

func (g *gunzipBody) Read(p []byte) (int, error) {
	if g.zr == nil {
		if g.err != nil {
			return 0, g.err
		}
		zr, _ := gzipReaders.Get().(*gzip.Reader)
		var err error
		if zr == nil {
			zr, err = gzip.NewReader(g.src)
		} else {
			err = zr.Reset(g.src)
		}
		if err != nil {
			if zr != nil {
				gzipReaders.Put(zr)
			}
			g.err = err
			return 0, err
		}
		g.zr = zr
	}
	return g.zr.Read(p)
}

// release returns the decoder to its pool.
func (g *gunzipBody) release() {
	if g.zr != nil {
		_ = g.zr.Close()
		gzipReaders.Put(g.zr)
		g.zr = nil
	}
}
