package bench

import (
	"context"
	"strings"
	"testing"
)

// A request id prefix that would make ids a gateway does not keep is
// refused before anything is sent: past 128 characters the gateway gave
// every record an id of its own, and goodput compare --request-id-prefix
// found none of the run's requests; with a control character every
// request was refused (400).
func TestRequestIDPrefixChecked(t *testing.T) {
	for _, c := range []struct{ prefix, want string }{
		{strings.Repeat("p", maxIDPrefix+1), "the request id prefix has 116 characters; at most 115"},
		{"run\x01-", `the request id prefix holds "\x01" at byte 3`},
		{"run 7-", `the request id prefix holds " " at byte 3`},
		{"run-é-", `the request id prefix holds "\xc3" at byte 4`},
	} {
		// The address is never dialled: the options are refused first.
		_, err := Run(context.Background(), Options{BaseURL: "http://127.0.0.1:1", Model: "m", RequestIDPrefix: c.prefix,
			Requests: []Request{{Prompt: "a", MaxTokens: 1}}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.prefix, err, c.want)
		}
	}
	if len(strings.Repeat("p", maxIDPrefix)+"warmup-999999") != 128 {
		t.Fatal("the longest id is not 128 characters")
	}
	if err := checkIDPrefix(strings.Repeat("p", maxIDPrefix)); err != nil {
		t.Fatal(err)
	}
	if err := checkIDPrefix("bench-0a1b2c3d-"); err != nil {
		t.Fatal(err)
	}
}
