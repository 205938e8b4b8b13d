// Package remote bounds what the commands that read another server's API
// (goodput report, goodput compare) take from it: an answer's size
// (LimitBody), the bytes of it they show the operator (Printable,
// Snippet), and the numbers they believe (Kind).
package remote

import (
	"errors"
	"io"
	"math"
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

// Kind says what a number a server answers can be: a value of no kind's
// range (NaN, an infinity, a negative count, a count past 2^53) is a
// malformed answer, to refuse with the query and series it came in, never
// a figure to print.
type Kind int

const (
	// Count is a count or a counter's growth (requests, tokens, a
	// histogram's buckets): from 0 to MaxCount. Not necessarily whole: an
	// extrapolated increase() is not.
	Count Kind = iota
	// Amount is a measure (seconds, a sum of seconds or tokens, a gauge):
	// from 0 to MaxCount.
	Amount
	// Quantile is an Amount, or NaN: histogram_quantile of no observation,
	// an unknown figure.
	Quantile
	// Fraction is from 0 to 1 (an SLO objective).
	Fraction
)

// MaxCount is the largest count a float64 holds exactly with every whole
// number below it (2^53): no gateway counts that many requests or tokens,
// nor measures that many seconds.
const MaxCount = 1 << 53

// Holds reports whether v can be a number of kind k.
func (k Kind) Holds(v float64) bool {
	switch k {
	case Quantile:
		return math.IsNaN(v) || (v >= 0 && v <= MaxCount)
	case Fraction:
		return v >= 0 && v <= 1
	}
	return v >= 0 && v <= MaxCount // false for NaN
}

// String says what a number of kind k is, for "… which cannot be %s".
func (k Kind) String() string {
	switch k {
	case Count:
		return "a count (from 0 to 2^53)"
	case Amount:
		return "a duration, token sum or gauge (from 0 to 2^53)"
	case Quantile:
		return "a percentile (from 0 to 2^53, or NaN for none)"
	case Fraction:
		return "an objective (from 0 to 1)"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// FormatValue writes v for a message about it: -5, NaN, +Inf, 1e+308.
func FormatValue(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
