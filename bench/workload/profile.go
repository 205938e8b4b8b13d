package workload

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/goodput/goodput/internal/remote"
	"github.com/goodput/goodput/slo"
)

// Profile fetching limits.
const (
	// MaxProfileBytes caps a profile document.
	MaxProfileBytes = 64 << 20
	// profileTimeout bounds fetching a profile over HTTP.
	profileTimeout = 30 * time.Second
)

// LoadProfile reads a goodput.profile document from a file or an http(s)
// URL and returns a workload that replays it. A #tenant or #tenant/model
// suffix selects one tenant's traffic, or one model's within a tenant (the
// model is everything after the first slash); without it the workload is
// the whole traffic, every tenant's. A URL keeps its query, so the
// gateway's own ?window= and ?tenant= parameters apply.
func LoadProfile(spec string, seed int64) (Workload, error) {
	src, sel := splitSelector(spec)
	name := redact(src)
	b, err := readProfile(src)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", name, err)
	}
	snap, err := ParseProfile(b)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", name, err)
	}
	w, err := newProfileWorkload(snap, sel, seed)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", name, err)
	}
	if sel != "" {
		name += "#" + sel
	}
	w.describe = "profile " + name + " " + w.describe
	return w, nil
}

// redact hides a URL's password, for messages and the report label.
func redact(src string) string {
	if !isURL(src) {
		return src
	}
	u, err := url.Parse(src)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

func isURL(s string) bool {
	return strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://")
}

// splitSelector splits "source#selector". For a file whose own name
// contains '#', the whole name wins when such a file exists.
func splitSelector(spec string) (src, sel string) {
	if isURL(spec) {
		if u, err := url.Parse(spec); err == nil && u.Fragment != "" {
			sel = u.Fragment
			u.Fragment, u.RawFragment = "", ""
			return u.String(), sel
		}
		return spec, ""
	}
	i := strings.LastIndexByte(spec, '#')
	if i < 0 {
		return spec, ""
	}
	if _, err := os.Stat(spec); err == nil {
		return spec, ""
	}
	return spec[:i], spec[i+1:]
}

func readProfile(src string) ([]byte, error) {
	var r io.Reader
	if isURL(src) {
		c := &http.Client{Timeout: profileTimeout}
		resp, err := c.Get(src)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				return nil, ue.Err // its URL may hold a password
			}
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
			// The server's words are printed: what a terminal would act on
			// is escaped, as compare escapes them.
			return nil, fmt.Errorf("GET: %s: %s", remote.Printable(resp.Status), remote.Printable(strings.TrimSpace(string(msg))))
		}
		r = resp.Body
	} else {
		f, err := os.Open(src)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, MaxProfileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxProfileBytes {
		return nil, fmt.Errorf("larger than %d MiB", MaxProfileBytes>>20)
	}
	return b, nil
}

// ParseProfile decodes a goodput.profile document, rejecting another
// format, a version newer than this package reads, and histograms that do
// not fit the document's bucket bounds.
func ParseProfile(b []byte) (*slo.ProfileSnapshot, error) {
	var head struct {
		Format  *string `json:"format"`
		Version *int    `json:"version"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("not a JSON profile document: %w", err)
	}
	switch {
	case head.Format == nil:
		return nil, fmt.Errorf("not a %s document (no \"format\")", slo.ProfileFormat)
	case *head.Format != slo.ProfileFormat:
		return nil, fmt.Errorf("unknown format %q (want %q)", *head.Format, slo.ProfileFormat)
	case head.Version == nil || *head.Version < 1:
		return nil, errors.New("missing or invalid \"version\"")
	case *head.Version > slo.ProfileVersion:
		return nil, fmt.Errorf("%s version %d is newer than this goodput reads (%d): upgrade goodput", slo.ProfileFormat, *head.Version, slo.ProfileVersion)
	}
	var snap slo.ProfileSnapshot
	if err := json.Unmarshal(b, &snap); err != nil {
		return nil, fmt.Errorf("bad profile document: %w", err)
	}
	if len(snap.TokenBuckets) == 0 {
		return nil, errors.New("no token_bucket_bounds")
	}
	for i := 1; i < len(snap.TokenBuckets); i++ {
		if snap.TokenBuckets[i] <= snap.TokenBuckets[i-1] || snap.TokenBuckets[0] < 0 {
			return nil, errors.New("token_bucket_bounds are not increasing")
		}
	}
	nb := len(snap.TokenBuckets) + 1
	check := func(where string, p *slo.WorkProfile) error {
		if p == nil {
			return fmt.Errorf("%s: no profile", where)
		}
		if p.Measured > 0 && (len(p.ISL.Buckets) != nb || len(p.OSL.Buckets) != nb) {
			return fmt.Errorf("%s: isl/osl buckets have %d/%d entries, want %d", where, len(p.ISL.Buckets), len(p.OSL.Buckets), nb)
		}
		for _, c := range p.Joint {
			if c.ISLBucket < 0 || c.ISLBucket >= nb || c.OSLBucket < 0 || c.OSLBucket >= nb {
				return fmt.Errorf("%s: isl_osl cell (%d, %d) out of range", where, c.ISLBucket, c.OSLBucket)
			}
		}
		return nil
	}
	for _, t := range snap.Tenants {
		if err := check("tenant "+t.Tenant, t.Profile); err != nil {
			return nil, err
		}
		for _, m := range t.Models {
			if err := check("tenant "+t.Tenant+" model "+m.Model, m.Profile); err != nil {
				return nil, err
			}
		}
	}
	return &snap, nil
}

// tokenDist samples token counts within a histogram bucket from a
// piecewise log-linear CDF through the bucket bounds' cumulative shares,
// the profile's percentiles (where they agree with the buckets) and its
// exact min and max.
type tokenDist struct {
	bounds []int
	cum    []float64 // cum[i]: share of values ≤ bounds[i] (i < len(bounds)); 1 for the last bucket
	ys, cs []float64 // knots: y = ln(2+x), CDF at x
	lo, hi float64   // exact min and max
}

// knotY maps a token count to the interpolation axis (log, defined at 0).
func knotY(x float64) float64 { return math.Log(2 + x) }

// newTokenDist builds the distribution from the bucket counts (the
// marginal of the joint histogram, so that every cell's buckets have mass)
// and the profile's min, max and percentiles.
func newTokenDist(d slo.TokenDist, counts []float64, bounds []int) tokenDist {
	t := tokenDist{bounds: bounds, cum: make([]float64, len(counts))}
	var total, run float64
	first, last := -1, -1
	for i, c := range counts {
		total += c
		if c > 0 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	for i, c := range counts {
		run += c
		t.cum[i] = run / total
	}
	// The exact min and max, where they agree with the buckets.
	top := math.Inf(1) // the open last bucket has no upper bound
	if last < len(bounds) {
		top = float64(bounds[last])
	}
	t.lo, t.hi = float64(d.Min), min(float64(d.Max), maxWords)
	if !(t.lo >= t.bucketLo(first) && t.lo <= float64(t.boundOr(first, t.lo))) {
		t.lo = t.bucketLo(first)
	}
	if !(t.hi >= t.lo && t.hi >= t.bucketLo(last) && t.hi <= top) {
		t.hi = top
		if last >= len(bounds) {
			t.hi = 2 * float64(bounds[len(bounds)-1])
		}
		t.hi = max(t.hi, t.lo)
	}
	type knot struct{ x, c float64 }
	knots := []knot{{t.lo - 1, 0}}
	for i, b := range bounds {
		if x := float64(b); x > t.lo-1 && x < t.hi {
			knots = append(knots, knot{x, t.cum[i]})
		}
	}
	for _, p := range []struct {
		q float64
		v slo.Num
	}{{0.5, d.P50}, {0.9, d.P90}, {0.95, d.P95}, {0.99, d.P99}} {
		x := float64(p.v)
		if !(x > t.lo-1 && x <= t.hi) {
			continue
		}
		// Keep a percentile only where the buckets agree: the sketch
		// is within 0.5%, the bucket counts exact.
		b := t.bucketOf(x)
		below := 0.0
		if b > 0 {
			below = t.cum[b-1]
		}
		if p.q >= below && p.q <= t.cum[b] {
			knots = append(knots, knot{x, p.q})
		}
	}
	knots = append(knots, knot{t.hi, 1})
	sort.SliceStable(knots, func(i, j int) bool {
		return knots[i].x < knots[j].x || knots[i].x == knots[j].x && knots[i].c < knots[j].c
	})
	// Several shares at one x (equal percentiles: a length many requests
	// share) are a jump of the CDF there: it reaches the smallest at x and
	// the largest just after it. Two knots at the same y keep both, so that
	// the quantiles between them are x, not spread over the bucket below.
	lastX := math.Inf(-1)
	for _, k := range knots {
		n := len(t.cs)
		switch {
		case n > 0 && k.c < t.cs[n-1]: // disagrees with an earlier knot
		case k.x == lastX && n > 1 && t.ys[n-2] == t.ys[n-1]: // the jump's top
			t.cs[n-1] = k.c
		case k.x == lastX && k.c == t.cs[n-1]:
		default:
			t.ys = append(t.ys, knotY(k.x))
			t.cs = append(t.cs, k.c)
			lastX = k.x
		}
	}
	return t
}

// bucketLo and bucketHi are the smallest and largest token counts of
// bucket i.
func (t *tokenDist) bucketLo(i int) float64 {
	if i <= 0 {
		return 0
	}
	return float64(t.bounds[i-1] + 1)
}

func (t *tokenDist) bucketHi(i int) float64 {
	if i >= len(t.bounds) {
		return t.hi
	}
	return float64(t.bounds[i])
}

// boundOr returns bounds[i], or or for the open last bucket.
func (t *tokenDist) boundOr(i int, or float64) float64 {
	if i >= len(t.bounds) {
		return or
	}
	return float64(t.bounds[i])
}

// bucketOf returns the bucket of a (real) token count.
func (t *tokenDist) bucketOf(x float64) int {
	return sort.Search(len(t.bounds), func(i int) bool { return x <= float64(t.bounds[i]) })
}

// sample draws a token count in bucket b.
func (t *tokenDist) sample(r *rand.Rand, b int) int {
	below := 0.0
	if b > 0 {
		below = t.cum[b-1]
	}
	u := below + r.Float64()*(t.cum[b]-below)
	x := t.quantile(u)
	n := math.Ceil(x)
	lo, hi := max(t.bucketLo(b), t.lo), min(t.bucketHi(b), t.hi)
	if hi < lo { // a bucket the min/max do not reach: trust the bucket
		lo, hi = t.bucketLo(b), t.bucketHi(b)
	}
	return int(min(max(n, lo), hi, maxWords))
}

// quantile inverts the knot CDF.
func (t *tokenDist) quantile(u float64) float64 {
	j := sort.SearchFloat64s(t.cs, u)
	switch {
	case j == 0:
		return math.Exp(t.ys[0]) - 2
	case j >= len(t.cs):
		return math.Exp(t.ys[len(t.ys)-1]) - 2
	case t.cs[j] == t.cs[j-1]:
		return math.Exp(t.ys[j]) - 2
	}
	f := (u - t.cs[j-1]) / (t.cs[j] - t.cs[j-1])
	return math.Exp(t.ys[j-1]+f*(t.ys[j]-t.ys[j-1])) - 2
}

// cdf returns the share of values ≤ x.
func (t *tokenDist) cdf(x float64) float64 {
	y := knotY(x)
	// The first knot past y: at a jump's y the share is its top.
	j := sort.Search(len(t.ys), func(i int) bool { return t.ys[i] > y })
	switch {
	case j == 0:
		return 0
	case j >= len(t.ys):
		return 1
	}
	f := (y - t.ys[j-1]) / (t.ys[j] - t.ys[j-1])
	return t.cs[j-1] + f*(t.cs[j]-t.cs[j-1])
}

// source is one series of the profile to replay.
type source struct {
	weight   float64 // measured requests
	isl, osl tokenDist
	cells    []slo.JointCell
	cellCum  []float64
}

func newSource(p *slo.WorkProfile, bounds []int) (source, bool) {
	s := source{weight: float64(p.Measured)}
	var run float64
	for _, c := range p.Joint {
		if c.Count == 0 {
			continue
		}
		run += float64(c.Count)
		s.cells = append(s.cells, c)
		s.cellCum = append(s.cellCum, run)
	}
	if run == 0 {
		return s, false
	}
	s.weight = run
	isl := make([]float64, len(bounds)+1)
	osl := make([]float64, len(bounds)+1)
	for _, c := range s.cells {
		isl[c.ISLBucket] += float64(c.Count)
		osl[c.OSLBucket] += float64(c.Count)
	}
	s.isl = newTokenDist(p.ISL, isl, bounds)
	s.osl = newTokenDist(p.OSL, osl, bounds)
	return s, true
}

func (s *source) draw(r *rand.Rand) (isl, osl int) {
	u := r.Float64() * s.cellCum[len(s.cellCum)-1]
	i := sort.SearchFloat64s(s.cellCum, u)
	if i >= len(s.cells) {
		i = len(s.cells) - 1
	}
	c := s.cells[i]
	return s.isl.sample(r, c.ISLBucket), s.osl.sample(r, c.OSLBucket)
}

// profileWorkload replays a profile: a mixture of its selected series.
type profileWorkload struct {
	sources   []source
	weightCum []float64
	seed      int64
	rate, k   float64
	rateOK    bool
	synth     *Synth
	describe  string
}

func newProfileWorkload(snap *slo.ProfileSnapshot, sel string, seed int64) (*profileWorkload, error) {
	var picked []*slo.WorkProfile
	what := ""
	if sel == "" {
		for _, t := range snap.Tenants {
			picked = append(picked, t.Profile)
		}
		what = fmt.Sprintf("all traffic (%d tenants)", len(snap.Tenants))
		if len(snap.Tenants) == 1 {
			what = "tenant " + snap.Tenants[0].Tenant
		}
	} else {
		tn, model, byModel := strings.Cut(sel, "/")
		var tp *slo.TenantProfile
		names := make([]string, 0, len(snap.Tenants))
		for i := range snap.Tenants {
			names = append(names, remote.Printable(snap.Tenants[i].Tenant)) // printed in the error
			if snap.Tenants[i].Tenant == tn {
				tp = &snap.Tenants[i]
			}
		}
		if tp == nil {
			return nil, fmt.Errorf("no tenant %q in the profile (tenants: %s)", tn, strings.Join(names, ", "))
		}
		what = "tenant " + tn
		if !byModel {
			picked = append(picked, tp.Profile)
		} else {
			models := make([]string, 0, len(tp.Models))
			for _, m := range tp.Models {
				models = append(models, remote.Printable(m.Model)) // printed in the error
				if m.Model == model {
					picked = append(picked, m.Profile)
				}
			}
			if len(picked) == 0 {
				return nil, fmt.Errorf("no model %q for tenant %q in the profile (models: %s)", model, tn, strings.Join(models, ", "))
			}
			what += " model " + model
		}
	}
	if len(picked) == 0 {
		return nil, errors.New("the profile has no traffic")
	}
	w := &profileWorkload{seed: seed, synth: NewSynth(seed)}
	var measured uint64
	var cum float64
	for _, p := range picked {
		s, ok := newSource(p, snap.TokenBuckets)
		if !ok {
			continue
		}
		measured += p.Measured
		cum += s.weight
		w.sources = append(w.sources, s)
		w.weightCum = append(w.weightCum, cum)
	}
	if len(w.sources) == 0 {
		return nil, fmt.Errorf("%s: no measured requests to replay", what)
	}
	w.rate, w.k, w.rateOK = arrivalProcess(picked)
	rate := "no arrival rate"
	if w.rateOK {
		rate = fmt.Sprintf("%.4g req/s, gamma k %.3g", w.rate, w.k)
	}
	traffic := ""
	if len(picked) == 1 {
		traffic = ", traffic " + picked[0].Shapes.Traffic
	}
	w.describe = fmt.Sprintf("(%s window, %s, %d measured requests): ISL p50 %.0f p90 %.0f, OSL p50 %.0f p90 %.0f, %s%s",
		snap.Window, what, measured, w.quantile(true, 0.5), w.quantile(true, 0.9), w.quantile(false, 0.5), w.quantile(false, 0.9), rate, traffic)
	return w, nil
}

// arrivalProcess returns the arrival rate and gamma shape of the selected
// series. One series carries its own: the rate while its requests came
// (slo.ActiveRate), of which its gaps are. Several, active over different
// stretches of the window, are taken over the whole window. For several (the whole traffic of
// several tenants) the rates add up, and the shape is that of the sum of
// independent renewal streams over long windows: the index of dispersion
// of counts of a renewal stream tends to CV² = 1/k, and dispersions of
// independent streams add weighted by rate, so k = Σλ / Σ(λ/k).
func arrivalProcess(ps []*slo.WorkProfile) (rate, k float64, ok bool) {
	var disp float64
	for _, p := range ps {
		r := float64(p.ArrivalRate)
		if len(ps) == 1 {
			r = slo.ActiveRate(p)
		}
		if !(r > 0) || math.IsInf(r, 0) {
			continue
		}
		ki := float64(p.InterArrival.GammaShape)
		switch {
		case math.IsNaN(ki):
			// Too few gaps: Poisson; zero variance: evenly spaced.
			ki = 1
			if p.InterArrival.Count >= 2 {
				ki = math.Inf(1)
			}
		case !(ki > 0):
			ki = 1 // not a gamma shape: Poisson
		}
		rate += r
		disp += r / ki
	}
	if rate == 0 {
		return 0, 0, false
	}
	return rate, rate / disp, true // disp 0: +Inf, evenly spaced
}

// quantile returns a quantile of the replayed ISL (or OSL) distribution:
// of the mixture of the sources, by bisection on its CDF.
func (w *profileWorkload) quantile(isl bool, q float64) float64 {
	total := w.weightCum[len(w.weightCum)-1]
	cdf := func(x float64) float64 {
		var c float64
		for i := range w.sources {
			s := &w.sources[i]
			d := &s.osl
			if isl {
				d = &s.isl
			}
			c += s.weight / total * d.cdf(x)
		}
		return c
	}
	lo, hi := -1.0, 0.0
	for i := range w.sources {
		d := &w.sources[i].osl
		if isl {
			d = &w.sources[i].isl
		}
		hi = max(hi, d.hi)
	}
	for range 60 {
		mid := (lo + hi) / 2
		if cdf(mid) < q {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

func (w *profileWorkload) Requests(n int) []Request {
	if n <= 0 {
		return nil
	}
	r := newRand(w.seed, streamLengths)
	key := mix64(uint64(w.seed) ^ streamLengths)
	total := w.weightCum[len(w.weightCum)-1]
	out := make([]Request, n)
	for i := range out {
		j := 0
		if len(w.sources) > 1 {
			j = sort.SearchFloat64s(w.weightCum, r.Float64()*total)
			j = min(j, len(w.sources)-1)
		}
		isl, osl := w.sources[j].draw(r)
		isl = max(isl, 1) // a prompt has at least one token (and 0 means unknown)
		out[i] = Request{Prompt: w.synth.textAt(key, uint64(i), isl), InputTokens: isl, MaxTokens: max(osl, 1)}
	}
	return out
}

func (w *profileWorkload) Rate() (float64, float64, bool) { return w.rate, w.k, w.rateOK }
func (w *profileWorkload) Describe() string               { return w.describe }
func (w *profileWorkload) Synth() *Synth                  { return w.synth }
