// Package remote bounds what the commands that read another server's API
// (goodput report, goodput compare) take from it: an answer's size
// (LimitBody).
package remote

import (
	"errors"
	"io"
	"net/http"
)

// MaxBody is the bound on an answer's body the commands use: 64 MiB, far
// above any answer they ask for.
const MaxBody = 64 << 20

// ErrTooLarge ends the reading of an answer longer than the limit.
var ErrTooLarge = errors.New("answer larger than the limit")

// LimitBody returns a RoundTripper that sends requests through next
// (http.DefaultTransport when nil) and whose answers' bodies fail to read
// past max bytes, with ErrTooLarge (so an answer of any size costs at most
// max bytes to whoever reads it whole).
func LimitBody(next http.RoundTripper, max int64) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return limitBody{next: next, max: max}
}

// LimitClient returns a copy of c (a client with no timeout when nil) whose
// answers' bodies fail to read past max bytes (LimitBody).
func LimitClient(c *http.Client, max int64) *http.Client {
	var limited http.Client
	if c != nil {
		limited = *c
	}
	limited.Transport = LimitBody(limited.Transport, max)
	return &limited
}

type limitBody struct {
	next http.RoundTripper
	max  int64
}

func (l limitBody) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	if err == nil {
		resp.Body = &limitedBody{ReadCloser: resp.Body, left: l.max}
	}
	return resp, err
}

type limitedBody struct {
	io.ReadCloser
	left int64 // below zero: the answer went past the limit
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, ErrTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n, ErrTooLarge
	}
	return n, err
}
