package workload

import (
	"fmt"
	"github.com/goodput/goodput/slo"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// sourceTraffic is known traffic for the gateway's profiler: tenant acme
// (models m1 and m2) sends a chat/RAG mix at 2 req/s with bursty gaps
// (k = 0.5); tenant beta sends long generations at 1 req/s with regular
// gaps (k = 2).
func sourceTraffic() []traffic {
	r := rand.New(rand.NewPCG(1, 2))
	logn := func(med, sigma float64) int { return max(1, int(math.Round(med*math.Exp(sigma*r.NormFloat64())))) }
	var out []traffic
	for i, at := range Arrivals(3000, 2, 0.5, 3) {
		isl := logn(1000, 1)
		osl := logn(400, 0.8) // chat answers
		if isl > 2048 {
			osl = logn(100, 0.5) // RAG: long context, short answer
		}
		out = append(out, traffic{tenant: "acme", model: fmt.Sprintf("m%d", 1+i%2), at: at, isl: isl, osl: osl})
	}
	for _, at := range Arrivals(1000, 1, 2, 4) {
		out = append(out, traffic{tenant: "beta", model: "m1", at: at, isl: logn(150, 0.6), osl: logn(2000, 0.5)})
	}
	slices.SortStableFunc(out, func(a, b traffic) int { return int(a.at - b.at) })
	return out
}

func lengths(tr []traffic, keep func(traffic) bool) (isl, osl []float64) {
	for _, q := range tr {
		if keep(q) {
			isl, osl = append(isl, float64(q.isl)), append(osl, float64(q.osl))
		}
	}
	return isl, osl
}

func replayed(reqs []Request) (isl, osl []float64) {
	for _, r := range reqs {
		isl, osl = append(isl, float64(r.InputTokens)), append(osl, float64(r.MaxTokens))
	}
	return isl, osl
}

// ragShare is the share of (ISL, OSL) pairs that are RAG requests under
// the default thresholds: it only matches the source's when the
// correlation of ISL and OSL is kept.
func ragShare(isl, osl []float64) float64 {
	n := 0
	for i := range isl {
		if isl[i] >= 2048 && osl[i] <= 256 {
			n++
		}
	}
	return float64(n) / float64(len(isl))
}

// A profile made by the gateway's own profiler from known traffic, written
// as JSON and replayed: the sampled ISL and OSL distributions are close to
// the source's (two-sample Kolmogorov–Smirnov statistic), the ISL/OSL
// correlation is kept, and the arrival rate and gamma shape are the
// profile's.
func TestProfileReplay(t *testing.T) {
	src := sourceTraffic()
	doc := gatewayProfile(t, src)
	snap := decodeProfile(t, doc)
	path := filepath.Join(t.TempDir(), "profile.json")
	if err := os.WriteFile(path, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	var end time.Duration
	for _, q := range src {
		end = max(end, q.at)
	}
	for _, c := range []struct {
		sel        string
		keep       func(traffic) bool
		rate, k    float64 // the profile's own numbers
		genN, genK float64 // the generating process: requests, gamma shape
	}{
		{"#acme", func(q traffic) bool { return q.tenant == "acme" },
			slo.ActiveRate(snap.Tenants[0].Profile), float64(snap.Tenants[0].Profile.InterArrival.GammaShape), 3000, 0.5},
		{"#acme/m2", func(q traffic) bool { return q.tenant == "acme" && q.model == "m2" },
			slo.ActiveRate(snap.Tenants[0].Models[1].Profile), float64(snap.Tenants[0].Models[1].Profile.InterArrival.GammaShape), 1500, math.NaN()},
		// beta's requests come in the first two thirds of the window:
		// replayed at the rate they came, not diluted by the rest.
		{"#beta", func(q traffic) bool { return q.tenant == "beta" },
			slo.ActiveRate(snap.Tenants[1].Profile), float64(snap.Tenants[1].Profile.InterArrival.GammaShape), 1000, 2},
		{"", func(traffic) bool { return true }, math.NaN(), math.NaN(), 4000, math.NaN()},
	} {
		w, err := FromFlags("", path+c.sel, "", 9)
		if err != nil {
			t.Fatalf("%q: %v", c.sel, err)
		}
		si, so := lengths(src, c.keep)
		ri, ro := replayed(w.Requests(3000))
		di, do := ks(si, ri), ks(so, ro)
		rs, rr := ragShare(si, so), ragShare(ri, ro)
		rate, k, ok := w.Rate()
		// The rate the kept requests came at: one series' from its first
		// to its last; several, over the whole window (arrivalProcess).
		first, last := end, time.Duration(0)
		for _, q := range src {
			if c.keep(q) {
				first, last = min(first, q.at), max(last, q.at)
			}
		}
		genR := (c.genN - 1) / (last - first).Seconds()
		if c.sel == "" {
			genR = c.genN / end.Seconds() // the window covers the whole test
		}
		// The KS bound is the 0.1% critical value for the sample sizes.
		ksBound := 1.95 * math.Sqrt(float64(len(si)+len(ri))/float64(len(si)*len(ri)))
		t.Logf("%q: KS ISL %.4f OSL %.4f (bound %.4f); RAG share source %.3f replay %.3f; rate %.4f (generated at %v), k %.3f (generated at %v)",
			c.sel, di, do, ksBound, rs, rr, rate, genR, k, c.genK)
		t.Logf("%q: %s", c.sel, w.Describe())
		if di > ksBound || do > ksBound {
			t.Errorf("%q: KS statistic ISL %.4f, OSL %.4f: above %.4f", c.sel, di, do, ksBound)
		}
		if math.Abs(rs-rr) > 0.03 {
			t.Errorf("%q: RAG share %.3f in the source, %.3f replayed: ISL/OSL correlation lost", c.sel, rs, rr)
		}
		if !ok {
			t.Fatalf("%q: no arrival process", c.sel)
		}
		if !math.IsNaN(c.rate) && (rate != c.rate || k != c.k) {
			t.Errorf("%q: Rate() = %v, %v; the profile says %v, %v", c.sel, rate, k, c.rate, c.k)
		}
		if math.Abs(rate/genR-1) > 0.01 {
			t.Errorf("%q: rate %v, traffic generated at %v", c.sel, rate, genR)
		}
		if !math.IsNaN(c.genK) && math.Abs(k/c.genK-1) > 0.25 {
			t.Errorf("%q: gamma shape %v, traffic generated with %v", c.sel, k, c.genK)
		}
	}
}

// The whole traffic of several tenants adds their rates, and its shape is
// Σλ / Σ(λ/k).
func TestProfileWholeTrafficRate(t *testing.T) {
	doc := gatewayProfile(t, sourceTraffic())
	snap := decodeProfile(t, doc)
	w, err := newProfileWorkload(snap, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	var sum, disp float64
	for _, tp := range snap.Tenants {
		r, k := float64(tp.Profile.ArrivalRate), float64(tp.Profile.InterArrival.GammaShape)
		sum += r
		disp += r / k
	}
	rate, k, ok := w.Rate()
	if !ok || math.Abs(rate-sum) > 1e-9 || math.Abs(k-sum/disp) > 1e-9 {
		t.Errorf("whole traffic: %v, %v, %v; want %v, %v", rate, k, ok, sum, sum/disp)
	}
}

// A URL is fetched, keeps its query and takes a #tenant selector.
func TestProfileFromURL(t *testing.T) {
	doc := gatewayProfile(t, sourceTraffic())
	var gotQuery string
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		gotQuery = r.URL.RawQuery
		if r.URL.Path == "/missing" {
			http.Error(rw, "unknown window", http.StatusBadRequest)
			return
		}
		_, _ = rw.Write(doc)
	}))
	defer srv.Close()
	w, err := FromFlags("", srv.URL+"/admin/api/profile?window=5m#beta", "", 1)
	if err != nil {
		t.Fatal(err)
	}
	if gotQuery != "window=5m" || !strings.Contains(w.Describe(), "tenant beta") || !strings.Contains(w.Describe(), "traffic longgen") {
		t.Errorf("query %q, describe %q", gotQuery, w.Describe())
	}
	// A password in the URL never shows in the label or an error.
	withPass := strings.Replace(srv.URL, "http://", "http://admin:s3cret@", 1)
	w, err = FromFlags("", withPass+"/admin/api/profile", "", 1)
	if err != nil || strings.Contains(w.Describe(), "s3cret") {
		t.Errorf("describe %q, error %v", w.Describe(), err)
	}
	for _, u := range []string{withPass + "/missing", "http://admin:s3cret@127.0.0.1:1/x"} {
		if _, err := FromFlags("", u, "", 1); err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("error %v", err)
		}
	}
	if _, err := FromFlags("", srv.URL+"/missing", "", 1); err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "unknown window") {
		t.Errorf("bad status: %v", err)
	}
}

func TestProfileErrors(t *testing.T) {
	doc := string(gatewayProfile(t, sourceTraffic()))
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.json", doc)
	empty := strings.Replace(doc[:strings.Index(doc, `"tenants":`)], "", "", 1) + `"tenants":[]}`
	for _, c := range []struct{ spec, want string }{
		{write("fmt.json", strings.Replace(doc, `"goodput.profile"`, `"other.profile"`, 1)), `unknown format "other.profile"`},
		{write("nofmt.json", `{"version":1}`), `no "format"`},
		{write("v2.json", strings.Replace(doc, `"version":1`, `"version":2`, 1)), "version 2 is newer than this goodput reads (1)"},
		{write("v0.json", strings.Replace(doc, `"version":1`, `"version":0`, 1)), `invalid "version"`},
		{write("junk.json", "not json"), "not a JSON profile document"},
		{write("buckets.json", strings.Replace(doc, `"buckets":[`, `"buckets":[1,`, 1)), "buckets have 16/15 entries, want 15"},
		{write("empty.json", empty), "no traffic"},
		{good + "#nobody", `no tenant "nobody" in the profile (tenants: acme, beta)`},
		{good + "#acme/m9", `no model "m9" for tenant "acme" in the profile (models: m1, m2)`},
		{filepath.Join(dir, "absent.json"), "no such file"},
	} {
		_, err := FromFlags("", c.spec, "", 1)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", filepath.Base(c.spec), err, c.want)
		}
	}
	// A file whose own name holds '#' is read whole.
	hash := write("a#acme.json", doc)
	if w, err := FromFlags("", hash, "", 1); err != nil || !strings.Contains(w.Describe(), "all traffic") {
		t.Errorf("file with #: %v", err)
	}
}

// A profile with no measured request (every request failed) has nothing to
// replay.
func TestProfileNothingMeasured(t *testing.T) {
	t0 := time.Duration(0)
	doc := gatewayProfile(t, []traffic{{tenant: "a", model: "m", at: t0, isl: -1, osl: -1}})
	if _, err := newProfileWorkload(decodeProfile(t, doc), "", 1); err == nil || !strings.Contains(err.Error(), "no measured requests") {
		t.Errorf("error %v", err)
	}
}

// No profile document makes the replay panic: it is an error or a
// workload whose requests have positive lengths.
func FuzzProfile(f *testing.F) {
	f.Add(gatewayProfile(f, sourceTraffic()[:300]))
	f.Add([]byte(`{"format":"goodput.profile","version":1,"token_bucket_bounds":[16],"tenants":[{"tenant":"a","profile":{"measured":1,"isl":{"buckets":[0,0],"min":null,"max":-5},"osl":{"buckets":[1,0]},"isl_osl":[{"isl_bucket":1,"osl_bucket":0,"count":3}]},"models":[]}]}`))
	f.Add([]byte(`{"format":"goodput.profile","version":1,"token_bucket_bounds":[16,32],"tenants":[{"tenant":"a","profile":{"measured":0,"arrival_rate_per_second":-1,"inter_arrival":{"gamma_shape":-3},"isl_osl":[{"isl_bucket":9,"osl_bucket":0,"count":3}]}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		snap, err := ParseProfile(b)
		if err != nil {
			return
		}
		w, err := newProfileWorkload(snap, "", 1)
		if err != nil {
			return
		}
		_ = w.Describe()
		_, _, _ = w.Rate()
		for _, r := range w.Requests(20) {
			if r.InputTokens < 1 || r.MaxTokens < 1 || r.Prompt == "" {
				t.Fatalf("request %+v", r)
			}
		}
	})
}

// Within a bucket, draws stay inside the bucket and inside the exact min
// and max: the open last bucket ends at max, the first begins at min; a
// percentile that agrees with the buckets is honoured.
func TestProfileBucketsMinMaxPercentiles(t *testing.T) {
	doc := `{"format":"goodput.profile","version":1,"window":"1h","token_bucket_bounds":[16,32,64],
	  "tenants":[{"tenant":"a","models":[],"profile":{"measured":100,"arrival_rate_per_second":1,
	    "inter_arrival":{"count":1,"gamma_shape":null},
	    "isl":{"min":40,"max":500,"p50":60,"p90":300,"p95":null,"p99":null,"buckets":[0,0,50,50]},
	    "osl":{"min":0,"max":9,"p50":null,"p90":null,"p95":null,"p99":null,"buckets":[100,0,0,0]},
	    "isl_osl":[{"isl_bucket":2,"osl_bucket":0,"count":50},{"isl_bucket":3,"osl_bucket":0,"count":50}]}}]}`
	w := tenantAWorkload(t, doc)
	reqs := w.Requests(4000)
	var isl []float64
	for _, r := range reqs {
		if r.InputTokens < 40 || r.InputTokens > 500 || r.MaxTokens < 1 || r.MaxTokens > 9 {
			t.Fatalf("request outside min/max: %+v", r)
		}
		isl = append(isl, float64(r.InputTokens))
	}
	// p50 = 60 and p90 = 300 are knots of the CDF.
	if p := quantileOf(isl, 0.5); p < 57 || p > 64 {
		t.Errorf("ISL p50 %.1f, profile says 60", p)
	}
	if p := quantileOf(isl, 0.9); p < 280 || p > 320 {
		t.Errorf("ISL p90 %.1f, profile says 300", p)
	}
	if rate, k, ok := w.Rate(); !ok || rate != 1 || k != 1 {
		t.Errorf("Rate() = %v, %v, %v; want 1, 1 (Poisson: one gap)", rate, k, ok)
	}
}

// A length most requests share (a fixed prompt template, a fixed
// max_tokens) shows as equal percentiles: the CDF jumps there, from at most
// the smallest of their shares to at least the largest. Replayed, those
// requests keep that length instead of being spread over the bucket below
// it (a profile whose ISL p50 to p99 were 2996, bucket 2049–4096, replayed
// with an ISL p50 of about 2,500).
func TestProfileEqualPercentilesAreAPointMass(t *testing.T) {
	doc := `{"format":"goodput.profile","version":1,"window":"1h","token_bucket_bounds":[16,32,64,128],
	  "tenants":[{"tenant":"a","models":[],"profile":{"measured":100,"arrival_rate_per_second":1,
	    "inter_arrival":{"count":1,"gamma_shape":null},
	    "isl":{"min":20,"max":100,"p50":100,"p90":100,"p95":100,"p99":100,"buckets":[0,4,0,96,0]},
	    "osl":{"min":1,"max":16,"p50":null,"p90":null,"p95":null,"p99":null,"buckets":[100,0,0,0,0]},
	    "isl_osl":[{"isl_bucket":1,"osl_bucket":0,"count":4},{"isl_bucket":3,"osl_bucket":0,"count":96}]}}]}`
	w := tenantAWorkload(t, doc)
	var isl []float64
	for _, r := range w.Requests(4000) {
		isl = append(isl, float64(r.InputTokens))
	}
	// p50 = p99 = 100 says only that the share below 100 is at most 0.5:
	// the quantiles from p50 on are 100, those below within the bucket.
	for _, q := range []float64{0.55, 0.75, 0.9, 0.98} {
		if p := quantileOf(isl, q); p != 100 {
			t.Errorf("ISL p%.0f %.1f, profile says 100 from p50 to p99", q*100, p)
		}
	}
	if p := quantileOf(isl, 0.3); p < 65 || p >= 100 {
		t.Errorf("ISL p30 %.1f, want within its bucket (65–100) below the jump", p)
	}
	if p := w.quantile(true, 0.5); math.Abs(p-100) > 0.5 {
		t.Errorf("described ISL p50 %.1f, profile says 100", p)
	}
}

// tenantAWorkload is the replay of tenant a's profile in doc, seed 1.
func tenantAWorkload(t *testing.T, doc string) *profileWorkload {
	t.Helper()
	snap, err := ParseProfile([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	w, err := newProfileWorkload(snap, "a", 1)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// What a profile's source says is printed with what a terminal would act
// on escaped, as compare prints it: the tenants' and models' names an
// error lists (a profile file is shared, and its names are whatever its
// writer put there) and the body of an answer that is not 200. An ESC[2J
// and an OSC 8 link reached the terminal raw.
func TestProfileErrorsPrintable(t *testing.T) {
	const evil = `\u001b[2J\u001b]8;;http://evil.example\u0007x\u001b]8;;\u0007\nlevel=ERROR`
	doc := string(gatewayProfile(t, sourceTraffic()))
	doc = strings.Replace(doc, `"tenant":"beta"`, `"tenant":"beta`+evil+`"`, 1)
	doc = strings.Replace(doc, `"model":"m2"`, `"model":"m2`+evil+`"`, 1)
	p := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.WriteHeader(http.StatusInternalServerError)
		rw.Write([]byte("down\x1b[2J\x1b]8;;http://evil.example\x07x\x1b]8;;\x07\nlevel=ERROR"))
	}))
	defer srv.Close()
	for _, spec := range []string{p + "#nobody", p + "#acme/m9", srv.URL + "/admin/api/profile"} {
		_, err := FromFlags("", spec, "", 1)
		if err == nil {
			t.Fatalf("%s: no error", spec)
		}
		if msg := err.Error(); strings.ContainsAny(msg, "\x1b\x07\n") || !strings.Contains(msg, `\x1b[2J\x1b]8;;http://evil.example\a`) {
			t.Errorf("%s: error %q, want the control characters escaped", spec, msg)
		}
	}
}
