package compare

import (
	"context"
	"strings"
	"testing"

	"github.com/goodput/goodput/report"
)

// A source URL with a password is refused without quoting it, however
// url.Parse splits it: digits of it taken as a port and the rest as a
// query or a fragment, or a URL it cannot parse. url.URL.Redacted showed
// these whole.
func TestSourceURLPasswordNotQuoted(t *testing.T) {
	for _, u := range []string{
		"http://admin:1234?s3cretpassw0rd@127.0.0.1:1",
		"http://admin:1234#s3cretpassw0rd@127.0.0.1:1",
		"http://user:s3cret/passw0rd@127.0.0.1:1",
		"http://user:s3cret passw0rd@127.0.0.1:1",
	} {
		if _, err := ReadReal(context.Background(), u, RealOptions{}); err == nil || strings.Contains(err.Error(), "passw0rd") {
			t.Errorf("ReadReal %q: %v; want it refused, no password", u, err)
		}
		if _, err := ReadPrometheus(context.Background(), u, PromOptions{}); err == nil || strings.Contains(err.Error(), "passw0rd") {
			t.Errorf("ReadPrometheus %q: %v; want it refused, no password", u, err)
		}
		if _, err := report.BaseURL(u); err == nil || strings.Contains(err.Error(), "passw0rd") {
			t.Errorf("report.BaseURL %q: %v; want it refused, no password", u, err)
		}
	}
}
