package compare

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/goodput/goodput/bench/workload"
	"github.com/goodput/goodput/internal/remote"
	"github.com/goodput/goodput/slo"
)

// ReadProfile reads a workload profile (goodput.profile version 1, the
// JSON of GET /admin/api/profile) and picks the series of f: the tenant's
// own profile, or one (tenant, model) profile. Without a tenant the
// profile must hold exactly one.
//
// A profile has ISL/OSL histograms and sketch percentiles but no
// per-request values and no latencies: its ISL/OSL KS statistics are
// bucketed, and latencies and attainment are not compared.
func ReadProfile(name string, data []byte, f Filter) (*Side, error) {
	if f.RequestIDPrefix != "" {
		return nil, inputErr("%s: a profile has no request ids to select (--request-id-prefix needs a request log)", name)
	}
	var p slo.ProfileSnapshot
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&p); err != nil {
		return nil, inputErr("%s: not a goodput profile: %s", name, jsonErr(err, data, dec.InputOffset()))
	}
	if p.Format != slo.ProfileFormat {
		return nil, inputErr("%s: format %q, want %q", name, p.Format, slo.ProfileFormat)
	}
	if p.Version < 1 || p.Version > slo.ProfileVersion {
		return nil, inputErr("%s: profile version %d; this goodput reads versions up to %d", name, p.Version, slo.ProfileVersion)
	}
	var names []string
	var tp *slo.TenantProfile
	for i := range p.Tenants {
		names = append(names, remote.Printable(p.Tenants[i].Tenant))
		if p.Tenants[i].Tenant == f.Tenant {
			tp = &p.Tenants[i]
		}
	}
	sort.Strings(names)
	switch {
	case len(p.Tenants) == 0:
		return nil, inputErr("%s: the profile has no tenant (no traffic in its %s window)", name, p.Window)
	case f.Tenant == "" && len(p.Tenants) == 1:
		tp = &p.Tenants[0]
	case f.Tenant == "":
		return nil, inputErr("%s: the profile has %d tenants (%s): choose one with --tenant", name, len(names), strings.Join(names, ", "))
	case tp == nil:
		return nil, inputErr("%s: no tenant %q in the profile (it has %s)", name, f.Tenant, strings.Join(names, ", "))
	}
	wp := tp.Profile
	label := "tenant " + remote.Printable(tp.Tenant)
	if f.Model != "" {
		wp = nil
		var models []string
		for i := range tp.Models {
			models = append(models, remote.Printable(tp.Models[i].Model))
			if tp.Models[i].Model == f.Model {
				wp = tp.Models[i].Profile
			}
		}
		if wp == nil {
			return nil, inputErr("%s: tenant %q has no model %q in the profile (it has %s)", name, tp.Tenant, f.Model, strings.Join(models, ", "))
		}
		label += ", model " + f.Model
	}
	if wp == nil {
		return nil, inputErr("%s: tenant %q has no profile object", name, tp.Tenant)
	}
	// The checks bench --profile makes (bucket bounds, histograms that
	// fit them), and figures no gateway writes: compare read what bench
	// refused, and printed an ISL mean of -100 or 1e+308, a burstiness
	// of -1.
	if _, err := workload.ParseProfile(data); err != nil {
		return nil, inputErr("%s: %v", name, err)
	}
	if !(p.WindowSeconds >= 0 && p.WindowSeconds <= maxSeconds) {
		return nil, inputErr("%s: window_seconds is %s: not a profile the gateway writes", name, fmtValue(p.WindowSeconds))
	}
	if bad := profileImpossible(wp); bad != "" {
		return nil, inputErr("%s: %s: %s: not a profile the gateway writes", name, label, bad)
	}
	s := newSide(KindProfile, name)
	s.Label = label + ", window " + remote.Printable(p.Window)
	s.Requests = int(wp.Measured)
	if wp.Requests > wp.Measured {
		s.note("%d of the %d finished requests are not measured (an outcome other than ok, or no token counts): a profile does not say which", wp.Requests-wp.Measured, wp.Requests)
	}
	if p.WindowSeconds > 0 {
		s.Seconds = Num(p.WindowSeconds)
	}
	bounds := make([]float64, len(p.TokenBuckets))
	for i, b := range p.TokenBuckets {
		bounds[i] = float64(b)
	}
	s.ISL = profileDist(bounds, wp.ISL)
	s.OSL = profileDist(bounds, wp.OSL)
	ia := wp.InterArrival
	switch r := slo.ActiveRate(wp); {
	case known(Num(r)) && known(ia.Mean) && ia.Mean > 0:
		s.ArrivalRate = Num(r)
		s.RateFrom = "profile inter_arrival.mean_seconds (1 / the mean gap: the rate from the first arrival to the last)"
	case known(wp.ArrivalRate):
		s.ArrivalRate = wp.ArrivalRate
		s.RateFrom = "profile arrival_rate_per_second"
	}
	switch {
	case known(ia.GammaShape):
		s.Burstiness = ia.GammaShape
		s.BurstinessFrom = "profile inter_arrival.gamma_shape"
	case ia.Count >= 2 && known(ia.StdDev) && ia.StdDev == 0:
		s.Regular, s.Burstiness = true, Num(math.Inf(1))
		s.BurstinessFrom = "profile inter_arrival (zero variance)"
	}
	if known(wp.Concurrency.Mean) {
		s.ConcMean = wp.Concurrency.Mean
		s.ConcPeak = Num(wp.Concurrency.Peak)
		s.ConcFrom = "profile concurrency"
	}
	s.note("a profile has ISL/OSL histograms, not per-request values: KS is bucketed; it has no latencies")
	return s, nil
}

// profileDist is a profile's ISL or OSL: its bucket counts and its
// percentiles (sketch, within 0.5%) and exact mean.
func profileDist(bounds []float64, td slo.TokenDist) Dist {
	counts := make([]float64, len(td.Buckets))
	for i, c := range td.Buckets {
		counts[i] = float64(c)
	}
	d := histDist(bounds, counts)
	d.Given = map[string]float64{}
	for k, v := range map[string]slo.Num{"mean": td.Mean, "p50": td.P50, "p90": td.P90, "p95": td.P95, "p99": td.P99} {
		if known(v) {
			d.Given[k] = float64(v)
		}
	}
	return d
}

// profileImpossible says what of wp no gateway's profile holds ("" when
// nothing, or for nil): a token figure that is not from 0 to maxTokens, a
// negative or infinite rate, gap or concurrency, a negative gamma shape. Unknown figures (null) are no figure.
func profileImpossible(wp *slo.WorkProfile) string {
	if wp == nil {
		return ""
	}
	bad := func(v slo.Num, max float64) bool { return !math.IsNaN(float64(v)) && !(v >= 0 && float64(v) <= max) }
	for _, d := range []struct {
		name string
		td   slo.TokenDist
	}{{"isl", wp.ISL}, {"osl", wp.OSL}} {
		for _, v := range []struct {
			name string
			n    slo.Num
		}{{"mean", d.td.Mean}, {"min", d.td.Min}, {"max", d.td.Max}, {"p50", d.td.P50}, {"p90", d.td.P90}, {"p95", d.td.P95}, {"p99", d.td.P99}} {
			if bad(v.n, maxTokens) {
				return fmt.Sprintf("%s.%s is %s: want tokens from 0 to %d", d.name, v.name, fmtValue(float64(v.n)), maxTokens)
			}
		}
	}
	ia := wp.InterArrival
	for _, v := range []struct {
		name string
		n    slo.Num
		max  float64
	}{
		{"arrival_rate_per_second", wp.ArrivalRate, math.MaxFloat64},
		{"inter_arrival.mean_seconds", ia.Mean, maxSeconds},
		{"inter_arrival.stddev_seconds", ia.StdDev, maxSeconds},
		{"inter_arrival.cv", ia.CV, math.MaxFloat64},
		{"concurrency.mean", wp.Concurrency.Mean, math.MaxFloat64},
		{"concurrency.p95", wp.Concurrency.P95, math.MaxFloat64},
	} {
		if bad(v.n, v.max) {
			return fmt.Sprintf("%s is %s", v.name, fmtValue(float64(v.n)))
		}
	}
	if wp.Concurrency.Peak < 0 {
		return fmt.Sprintf("concurrency.peak is %d", wp.Concurrency.Peak)
	}
	if g := float64(ia.GammaShape); !math.IsNaN(g) && !(g >= 0 && !math.IsInf(g, 0)) {
		return fmt.Sprintf("inter_arrival.gamma_shape is %s: want a shape above 0", fmtValue(g))
	}
	return ""
}
