package remote

import (
	"errors"
	"io"
	"math"
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

// What a hostile server sends cannot act on the terminal an error is
// printed in: ESC, other controls, unprintable runes and invalid UTF-8 come
// out as Go escapes; printable text in any script is untouched.
func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain {\"error\":\"x\"} ünïcode 日本": "plain {\"error\":\"x\"} ünïcode 日本",
		"\x1b[2Jcleared":              `\x1b[2Jcleared`,
		"a\nb\tc\rd\x00e\x7f":         `a\nb\tc\rd\x00e\x7f`,
		"\u009b2J \u202eevil \u2028":  `\u009b2J \u202eevil \u2028`,
		"bad \xff\xfe utf-8 \xe6\x97": `bad \xff\xfe utf-8 \xe6\x97`,
		"":                            "",
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSnippet(t *testing.T) {
	if got := Snippet([]byte("  \x1b[2J 500 oops\n")); got != `\x1b[2J 500 oops` {
		t.Errorf("short body: %q", got)
	}
	long := strings.Repeat("a", 299) + "日本" + strings.Repeat("b", 100)
	got := Snippet([]byte(long))
	if got != strings.Repeat("a", 299)+"…" {
		t.Errorf("a cut inside a character: %q", got)
	}
	if got := Snippet([]byte(strings.Repeat("\x1b", 400))); got != strings.Repeat(`\x1b`, 300)+"…" {
		t.Errorf("a long hostile body: %q", got)
	}
}

// NaN, infinities, negative values and counts past 2^53 are no kind's;
// NaN is a quantile's "no observation".
func TestKindHolds(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, c := range []struct {
		k    Kind
		v    float64
		want bool
	}{
		{Count, 0, true}, {Count, 12.5, true}, {Count, MaxCount, true},
		{Count, -5, false}, {Count, nan, false}, {Count, inf, false}, {Count, -inf, false},
		{Count, MaxCount + 2, false}, {Count, 1e308, false}, {Count, math.Copysign(0, -1), true},
		{Amount, 0.25, true}, {Amount, -0.001, false}, {Amount, nan, false}, {Amount, 1e308, false},
		{Quantile, nan, true}, {Quantile, 0.5, true}, {Quantile, -1, false}, {Quantile, inf, false},
		{Fraction, 0.99, true}, {Fraction, 1, true}, {Fraction, 0, true}, {Fraction, -5, false}, {Fraction, 1.5, false}, {Fraction, nan, false},
	} {
		if got := c.k.Holds(c.v); got != c.want {
			t.Errorf("%s holds %v: %v, want %v", c.k, c.v, got, c.want)
		}
	}
}
