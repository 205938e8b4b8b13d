package keyshape

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	key := Prefix + strings.Repeat("aB3_-", 8) + "xyz" // 43 characters, as identity makes them
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"no key here", "no key here"},
		{"invalid input: my key is " + key, "invalid input: my key is " + Redacted},
		{key + " and " + key + ".", Redacted + " and " + Redacted + "."},
		{"gp-short1234 stays", "gp-short1234 stays"}, // under 16 characters: not a key's shape
		{"gp-gp-" + key[3:], Redacted},               // "-" is base64url: one run from the first gp-
		{"tail " + Prefix + "0123456789abcdef", "tail " + Redacted},
	} {
		got := Redact(c.in)
		if got != c.want {
			t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.want)
		}
		if Holds([]byte(got)) {
			t.Errorf("Redact(%q) = %q still holds a key's shape", c.in, got)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = Redact("upstream status 500: nothing to hide, gp-short") }); n != 0 {
		t.Errorf("Redact of a message without a key allocates %v times", n)
	}
}
