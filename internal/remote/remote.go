// Package remote bounds what the commands that read another server's API
// (goodput report, goodput compare) take from it: an answer's size
// (LimitBody), and the bytes of it they show the operator (Printable,
// Snippet).
package remote

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
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

// Printable returns s with what a terminal would act on or garble escaped
// as Go escapes it (strconv.Quote's style, without the quotes): control
// characters (ESC as \x1b, a newline as \n), other unprintable runes (a
// bidirectional override as \u202e) and bytes of invalid UTF-8 (\xff).
// Printable text, whatever its script, stays as it is.
func Printable(s string) string {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || !strconv.IsPrint(r) {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])>>4, 16))
			b.WriteString(strconv.FormatUint(uint64(s[i])&15, 16))
		case strconv.IsPrint(r):
			b.WriteString(s[i : i+n])
		default:
			q := strconv.QuoteRune(r) // '\x1b', '\n', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

// snippetLen is how much of an answer's body an error message shows.
const snippetLen = 300

// Snippet returns the start of an answer's body for an error message: its
// first 300 bytes (cut at a character's start, "…" after a cut),
// Printable.
func Snippet(body []byte) string {
	s := strings.TrimSpace(string(body))
	if len(s) <= snippetLen {
		return Printable(s)
	}
	cut := snippetLen
	for cut > snippetLen-utf8.UTFMax && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return Printable(s[:cut]) + "…"
}
