// Package clip bounds the text the gateway quotes from elsewhere (an
// engine's error, a parser's, an OpenTelemetry collector's answer) in its
// records, its answers and its own log.
package clip

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Max is the most bytes of such a message before its "…": the request
// log's `error`, an answer's message, a warning that quotes a collector.
const Max = 512

// Text returns s cut to max bytes at a UTF-8 boundary, with "…" after a
// cut.
func Text(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max
	for i := 0; i < utf8.UTFMax-1 && n > 0 && !utf8.RuneStart(s[n]); i++ {
		n-- // back to the start of the rune cut through (valid UTF-8: 3 bytes at most)
	}
	return s[:n] + "…"
}

// Line returns s as one line of valid UTF-8 of at most max bytes before
// its "…" (Text): each run of white space and control characters (line
// breaks, tabs, escapes) is one space, none at either end, and each byte
// that is not UTF-8 is U+FFFD. Only the first bytes of a long s are read.
func Line(s string, max int) string {
	var b strings.Builder
	space := false
	for _, r := range s { // a byte that is not UTF-8 is read as U+FFFD
		if b.Len() > max {
			return Text(b.String(), max)
		}
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	return Text(b.String(), max)
}
