// Package keyshape knows what a gateway key looks like, for the packages
// that must never write one out: identity, which makes keys, and the
// configuration checks, whose errors quote what they refuse.
package keyshape

import "bytes"

// Prefix starts every gateway key (identity.NewKey), so that a leaked key
// is recognisable (and secret scanners can be taught its shape).
const Prefix = "gp-"

// Holds reports whether b holds, anywhere in it, something shaped like a
// gateway key: Prefix and at least 16 characters of its base64url part, a
// whole key or a fragment long enough to matter.
func Holds(b []byte) bool {
	for {
		i := bytes.Index(b, []byte(Prefix))
		if i < 0 {
			return false
		}
		b = b[i+len(Prefix):]
		n := 0
		for n < len(b) && IsBase64URL(b[n]) {
			n++
		}
		if n >= 16 {
			return true
		}
	}
}

// IsBase64URL reports whether c is in base64url's alphabet (a key's
// encoding).
func IsBase64URL(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}
