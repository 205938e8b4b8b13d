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
	pwStart, pwEnd, ok := password(raw)
	if !ok {
		return err
	}
	pw := raw[pwStart:pwEnd]
	shown := raw[:pwStart] + "xxxxx" + raw[pwEnd:]
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

// String is the URL raw with its password replaced by "xxxxx", found as Err
// finds it: what url.URL.Redacted shows, also where url.Parse took a piece
// of the password for a port and the rest for a path, a query or a
// fragment ("http://user:1234#pw@engine", which Redacted shows whole).
func String(raw string) string {
	pwStart, pwEnd, ok := password(raw)
	if !ok {
		return raw
	}
	return raw[:pwStart] + "xxxxx" + raw[pwEnd:]
}

// password returns where the password of URL raw is: after the first ':'
// of its user information, up to the last '@' (the whole user information
// without a ':', a token given as the user). ok is false without one.
func password(raw string) (start, end int, ok bool) {
	begin := 0
	if i := strings.Index(raw, "://"); i >= 0 {
		begin = i + 3
	}
	// The last '@': a password may hold '/', '?' or '#' unencoded (a
	// generated one often does, and that is why such a URL fails to
	// parse); one in the query as well hides more, never less.
	at := strings.LastIndexByte(raw[begin:], '@')
	if at < 0 {
		return 0, 0, false
	}
	start, end = begin, begin+at
	if i := strings.IndexByte(raw[begin:end], ':'); i >= 0 {
		start = begin + i + 1
	}
	return start, end, start < end
}
