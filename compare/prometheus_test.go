package compare

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/goodput/goodput/compare/comparetest"
	"github.com/goodput/goodput/internal/remote"
	"github.com/goodput/goodput/slo"
)

// An answer over 64 MiB is refused as it is read, bad input said so, as
// goodput report refuses it: not read whole (a 160 MB answer took 712 MB),
// then called something other than Prometheus.
func TestPrometheusAnswerTooLarge(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[`))
		pad := []byte(strings.Repeat(" ", 1<<20))
		for i := 0; i <= remote.MaxBody>>20; i++ {
			if _, err := w.Write(pad); err != nil {
				return
			}
		}
		w.Write([]byte(`]}}`))
	}))
	defer srv.Close()
	_, err := ReadReal(context.Background(), srv.URL, RealOptions{})
	var ie *InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "answer to "+srv.URL+"/api/v1/query is larger than 64 MiB") {
		t.Errorf("error %v, want bad input naming the answer over 64 MiB", err)
	}
}

// A hostile server's bytes quoted in an error reach the operator's
// terminal escaped: ESC, other controls and invalid UTF-8 in an API error,
// a profile URL's error body and a profile's tenant and model names.
func TestRemoteTextEscaped(t *testing.T) {
	const hostile = "\x1b[2J\x1b]0;title\x07 \u202e \xff"
	mux := http.NewServeMux()
	mux.HandleFunc("/refused/api/v1/query", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]any{"status": "error", "errorType": "bad_data\x1b[2J", "error": hostile})
	})
	mux.HandleFunc("/body/admin/api/profile", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte(hostile))
	})
	mux.HandleFunc("/names/admin/api/profile", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(slo.ProfileSnapshot{Format: slo.ProfileFormat, Version: slo.ProfileVersion, Window: "1h",
			Tenants: []slo.TenantProfile{{Tenant: hostile}, {Tenant: "acme", Models: []slo.ModelProfile{{Model: hostile}}}}})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, c := range []struct {
		src    string
		filter Filter
		want   string
	}{
		// JSON decoding made \xff U+FFFD, which is printable.
		{srv.URL + "/refused", Filter{}, `refused the query (bad_data\x1b[2J: \x1b[2J\x1b]0;title\a \u202e ` + "\ufffd)"},
		{srv.URL + "/body/admin/api/profile", Filter{}, `answered HTTP 500: \x1b[2J\x1b]0;title\a \u202e \xff`},
		{srv.URL + "/names/admin/api/profile", Filter{Tenant: "globex"}, `(it has \x1b[2J\x1b]0;title\a \u202e ` + "\ufffd, acme)"},
		{srv.URL + "/names/admin/api/profile", Filter{Tenant: "acme", Model: "m"}, `(it has \x1b[2J\x1b]0;title\a \u202e ` + "\ufffd)"},
	} {
		_, err := ReadReal(context.Background(), c.src, RealOptions{Filter: c.filter})
		var ie *InputError
		if !errors.As(err, &ie) || strings.ContainsAny(err.Error(), "\x1b\x07\u202e") || !utf8.ValidString(err.Error()) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q, want bad input with %q", c.src, err, c.want)
		}
	}
}

// Values no query can have (NaN, infinities, negative counts or gauges,
// counts past 2^53) are bad input naming the value, the series and the
// query: negative counts printed "failed -10", "real -0.00278 req/s" and
// "load is overstated ×∞", and exited 1 (a tolerance exceeded).
func TestPrometheusBadValues(t *testing.T) {
	reqs := comparetest.Draw(comparetest.RAG, 1)
	window := time.Duration(reqs[len(reqs)-1].Start * 1e9).Round(time.Second)
	query := func(sub string) func(string, string) bool {
		return func(path, q string) bool { return path == "/api/v1/query" && strings.Contains(q, sub) }
	}
	for _, c := range []struct {
		name  string
		match func(path, query string) bool
		v     string
		want  string
	}{
		{"negative requests", query("sum by (outcome)"), "-10", `answered -10 for {outcome="ok"}, which cannot be a count (from 0 to 2^53); query: sum by (outcome) (`},
		{"NaN requests", query("sum by (outcome)"), "NaN", `answered NaN for {outcome="ok"}, which cannot be a count`},
		{"1e308 requests", query("sum by (outcome)"), "1e308", `answered 1e+308 for {outcome="ok"}, which cannot be a count`},
		{"infinite ISL buckets", query(promISL + "_bucket"), "+Inf", `answered +Inf for {le="1"}, which cannot be a count`},
		{"negative E2E buckets", query(promE2E + "_bucket"), "-1", `answered -1 for {le="0.05"}, which cannot be a count`},
		{"negative concurrency", query(promInFlight), "-1", `answered -1 for {q="mean"}, which cannot be a duration, token sum or gauge`},
		{"a negative request counter", func(path, q string) bool { return path == "/api/v1/query_range" }, "-1", `answered -1 for {} at 2026-`},
	} {
		srv := httptest.NewServer(&fakePrometheus{reqs: reqs, failed: 4, poison: c.match, poisonV: c.v})
		rl, err := ReadReal(context.Background(), srv.URL, RealOptions{Filter: Filter{Tenant: "acme"}, Window: window, Step: 10 * time.Second, Now: comparetest.Epoch.Add(window)})
		srv.Close()
		var ie *InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), "Prometheus at "+srv.URL+" "+c.want) {
			if err == nil {
				t.Errorf("%s: no error; read %d completed, %v failed, %v req/s", c.name, rl.Requests, rl.Failed, rl.ArrivalRate)
				continue
			}
			t.Errorf("%s: error %q, want bad input with %q", c.name, err, c.want)
		}
	}
}
