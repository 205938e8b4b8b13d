// Package urlredact hides the password of a URL in the errors that quote
// it: a configuration's Redis URL, an engine's URL, whatever the operator
// gave with credentials in it, which a check or a start's log would
// otherwise print.
package urlredact

import (
	"errors"
	"strconv"
	"strings"
)

// Err is err, from parsing or refusing the URL raw, with the URL's
// password replaced by "xxxxx" where the message quotes the URL (go-redis's
// and net/url's errors quote it whole: a probe found a password in
// "goodput config check" and in the start's log), and anywhere else when it
// is long enough not to match the message's own words.
func Err(raw string, err error) error {
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 {
		start = i + 3
	}
	// The last '@': a password may hold '/', '?' or '#' unencoded (a
	// generated one often does, and that is why such a URL fails to
	// parse); one in the query as well hides more, never less.
	at := strings.LastIndexByte(raw[start:], '@')
	if at < 0 {
		return err
	}
	pwStart := start
	if i := strings.IndexByte(raw[start:start+at], ':'); i >= 0 {
		pwStart = start + i + 1
	}
	pw := raw[pwStart : start+at]
	if pw == "" {
		return err
	}
	shown := raw[:pwStart] + "xxxxx" + raw[start+at:]
	quote := func(s string) string { q := strconv.Quote(s); return q[1 : len(q)-1] }
	msg := strings.ReplaceAll(err.Error(), raw, shown)
	msg = strings.ReplaceAll(msg, quote(raw), quote(shown))
	if len(pw) >= 6 {
		msg = strings.ReplaceAll(msg, pw, "xxxxx")
	}
	// net/url cuts a URL at its '#' (and its query at '?'), and quotes
	// what is left: a password's part before one. Where the authority
	// ends at a '/', '?' or '#' in the password, its host is a part after
	// an '@' or a ':' in it ("user:Xy7@Kq9/Zr8@engine" has host Kq9),
	// which a message may name alone.
	for _, part := range strings.FieldsFunc(pw, func(c rune) bool { return strings.ContainsRune("#?/@:", c) }) {
		if len(part) >= 3 && part != pw {
			msg = strings.ReplaceAll(msg, part, "xxxxx")
		}
	}
	return errors.New(msg)
}
