package urlredact

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// A password is not quoted, whatever url.Parse made of the URL; a message
// that names a part of the URL alone (its host, as a password's piece)
// does not name a piece of the password either.
func TestErrHidesThePassword(t *testing.T) {
	for _, c := range []struct{ raw, secret string }{
		{"http://user:s3cretpassw0rd@engine:8000", "s3cretpassw0rd"},
		{"http://user:Xy7@Kq9/Zr8#Lm2@engine:8000", "Kq9"},
		{"http://user:p@ssw/0rd1@engine:8000", "ssw"},
		{"http://user:1234?s3cretpw@engine:8000", "s3cretpw"},
		{"http://user:1234#s3cretpw@engine:8000", "s3cretpw"},
		{"http://sk-s3cretpassw0rd@engine:8000", "s3cretpassw0rd"},
		{"http://user:s3cr%20tpw@[::1]:8000", "s3cr%20tpw"},
		{"http://user:sécret pw@engine", "sécret"},
	} {
		u, err := url.Parse(c.raw)
		var msg error
		if err != nil {
			msg = fmt.Errorf("%q is not a URL: %v", c.raw, err)
		} else {
			// What a check says of it: the URL, and its host alone.
			msg = fmt.Errorf("%q: give the engine's base URL (%s://%s)", c.raw, u.Scheme, u.Host)
		}
		got := Err(c.raw, msg).Error()
		if strings.Contains(got, c.secret) {
			t.Errorf("%q: %q holds %q", c.raw, got, c.secret)
		}
	}
	// No password: the error as it was.
	e := errors.New(`"http://engine:8000/v1": a path`)
	if got := Err("http://engine:8000/v1", e); got != e {
		t.Errorf("without a password: %v", got)
	}
}

func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"http://user:s3cret@engine:8000/v1":  "http://user:xxxxx@engine:8000/v1",
		"http://admin:1234#s3cret@engine:80": "http://admin:xxxxx@engine:80",
		"http://admin:1234?s3cret@engine:80": "http://admin:xxxxx@engine:80",
		"http://sk-token@engine":             "http://xxxxx@engine",
		"http://user:@engine":                "http://user:@engine",
		"http://engine:8000/v1":              "http://engine:8000/v1",
		"engine:8000":                        "engine:8000",
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
}
