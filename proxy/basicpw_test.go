package proxy

import (
	"encoding/base64"
	"testing"

	"github.com/goodput/goodput/internal/testenv"
)

// Basic's password is found in a tenant or an id however its credentials
// are padded, without an allocation.
func TestBasicPasswordIn(t *testing.T) {
	const pw = "sk-engine-secret-v" // 23 bytes with "user:": padded "="
	v := []byte("job-" + pw)
	for name, c := range map[string]struct {
		creds string
		want  bool
	}{
		"padded":         {base64.StdEncoding.EncodeToString([]byte("user:" + pw)), true},
		"unpadded":       {base64.RawStdEncoding.EncodeToString([]byte("user:" + pw)), true},
		"no user":        {base64.StdEncoding.EncodeToString([]byte(":" + pw)), true},
		"short password": {base64.StdEncoding.EncodeToString([]byte("user:short")), false},
		"another":        {base64.StdEncoding.EncodeToString([]byte("user:sk-engine-other-value")), false},
		"no colon":       {base64.StdEncoding.EncodeToString([]byte("user" + pw)), false},
		"not base64":     {"!!!!not-base64!!!!", false},
		"URL alphabet":   {"_-_-_-_-_-_-_-_-", false},
		"empty":          {"", false},
	} {
		if got := basicPasswordIn(v, []byte(c.creds)); got != c.want {
			t.Errorf("%s %q: %v, want %v", name, c.creds, got, c.want)
		}
	}
	creds := []byte(base64.RawStdEncoding.EncodeToString([]byte("user:" + pw)))
	if n := testenv.AllocsPerRun(100, func() { basicPasswordIn(v, creds) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}
