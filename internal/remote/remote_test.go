package remote

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// An answer of exactly the limit reads whole; one byte more fails with
// ErrTooLarge, having read no more than the limit and a byte.
func TestLimitBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := 1000
		if r.URL.Path == "/over" {
			n = 1001
		}
		io.WriteString(w, strings.Repeat("x", n))
	}))
	defer srv.Close()
	c := LimitClient(srv.Client(), 1000)
	get := func(path string) (int, error) {
		resp, err := c.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return len(b), err
	}
	if n, err := get("/at"); n != 1000 || err != nil {
		t.Errorf("an answer at the limit: %d bytes, %v", n, err)
	}
	if n, err := get("/over"); !errors.Is(err, ErrTooLarge) || n > 1001 {
		t.Errorf("an answer over the limit: %d bytes, %v; want ErrTooLarge", n, err)
	}
	if LimitClient(nil, 1).Transport == nil {
		t.Error("no transport for a nil client")
	}
}
