// Package keyshape knows what a gateway key looks like, for the packages
// that must never write one out: identity, which makes keys, and the
// configuration checks, whose errors quote what they refuse.
package keyshape

import (
	"bytes"
	"strings"
)

// Prefix starts every gateway key (identity.NewKey), so that a leaked key
// is recognisable (and secret scanners can be taught its shape).
const Prefix = "gp-"

// BodyLen is the length of a gateway key's part after Prefix: 32 random
// bytes in unpadded base64url.
const BodyLen = 43

// fragmentLen is how many of a key's characters after Prefix make a
// fragment long enough to matter (Holds, Redact).
const fragmentLen = 16

// Holds reports whether b holds, anywhere in it, something shaped like a
// gateway key: Prefix and at least 16 characters of its base64url part, a
// whole key or a fragment long enough to matter.
func Holds(b []byte) bool { return holds(b, fragmentLen) }

// HoldsWhole reports whether b holds, anywhere in it, Prefix and at least
// BodyLen base64url characters: a whole key, as one is pasted. For names
// that may begin with "gp-" (a model "acme/gp-finetuned-support-v2"),
// which Holds would take for a fragment.
func HoldsWhole(b []byte) bool { return holds(b, BodyLen) }

func holds(b []byte, min int) bool {
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
		if n >= min {
			return true
		}
	}
}

// IsBase64URL reports whether c is in base64url's alphabet (a key's
// encoding).
func IsBase64URL(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// Redacted replaces a gateway key's characters in Redact's output.
const Redacted = Prefix + "[redacted]"

// Redact returns s with everything Holds would find (Prefix and the 16 or
// more base64url characters after it) replaced by Redacted, for text that
// came from elsewhere (an engine's error message may quote the prompt, and
// the prompt may hold a key). It returns s itself, allocating nothing, when
// there is nothing to replace.
func Redact(s string) string { return redact(s, fragmentLen) }

// RedactWhole is Redact of what HoldsWhole finds (Prefix and BodyLen or
// more base64url characters): for the gateway's own messages, which name
// hosts and files that may begin with "gp-" (an upstream
// http://gp-vllm-east:8000), and may quote a key pasted whole into the
// wrong field of a configuration.
func RedactWhole(s string) string { return redact(s, BodyLen) }

func redact(s string, min int) string {
	var b strings.Builder
	last := 0 // s[:last] is in b
	for i := 0; ; {
		j := strings.Index(s[i:], Prefix)
		if j < 0 {
			break
		}
		start := i + j
		end := start + len(Prefix)
		for end < len(s) && IsBase64URL(s[end]) {
			end++
		}
		if end-start-len(Prefix) >= min {
			b.WriteString(s[last:start])
			b.WriteString(Redacted)
			last = end
		}
		i = end
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// CredentialHeader reports whether a request header named name carries
// credentials (Authorization, Proxy-Authorization, X-Api-Key, Azure's
// Api-Key, Cookie): such a header is never a tenant's name, which every
// record, metric and log shows.
func CredentialHeader(name string) bool {
	for _, c := range [...]string{"Authorization", "Proxy-Authorization", "X-Api-Key", "Api-Key", "Cookie"} {
		if strings.EqualFold(strings.TrimSpace(name), c) {
			return true
		}
	}
	return false
}
