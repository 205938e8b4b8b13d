package bench

import (
	"strings"
	"testing"
)

// A base URL with a password is refused without quoting the password,
// however url.Parse splits it (a port and a query, a fragment, an escape
// it cannot read, another scheme): the message goes to a terminal or a
// CI log.
func TestCheckBaseURLHidesThePassword(t *testing.T) {
	for _, u := range []string{
		"http://admin:1234?s3cretpassw0rd@engine:8000",
		"http://admin:1234#s3cretpassw0rd@engine:8000",
		"http://user:s3cret/passw0rd@engine:8000",
		"http://user:s3cretpassw0rd%zz@engine:8000",
		"ftp://user:s3cretpassw0rd@engine:8000",
		"http://user:s3cretpassw0rd@engine:8000",
	} {
		err := CheckBaseURL(u)
		if err == nil || strings.Contains(err.Error(), "passw0rd") {
			t.Errorf("%q: %v; want it refused, no password", u, err)
		}
	}
	if err := CheckBaseURL("http://127.0.0.1:8000/prefix"); err != nil {
		t.Errorf("a valid base URL: %v", err)
	}
}
