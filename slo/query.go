package slo

import (
	"fmt"
	"net/http"
	"net/url"
)

// adminQuery reads the parameters names of an admin API request's query,
// each at most once ("" when absent). A query Go cannot read whole (a
// malformed percent-escape, a ';' separator) or a parameter given twice
// is an error, answered 400: Go's URL.Query drops a pair it cannot read,
// and ?tenant=acme;x was answered with every tenant's figures, as if no
// tenant had been asked for, and ?tenant=a&tenant=b with a's alone.
// Other parameters are ignored.
func adminQuery(r *http.Request, names ...string) (map[string]string, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("malformed query: %v", err)
	}
	out := make(map[string]string, len(names))
	for _, n := range names {
		switch v := q[n]; len(v) {
		case 0:
		case 1:
			out[n] = v[0]
		default:
			return nil, fmt.Errorf("%s: given %d times, want it once", n, len(v))
		}
	}
	return out, nil
}
