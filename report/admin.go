package report

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/goodput/goodput/internal/remote"
	"github.com/goodput/goodput/internal/urlredact"
	"github.com/goodput/goodput/slo"
)

// chooseWindow returns the smallest rolling window of the admin API that
// covers a period starting at from, seen at now: the window of length L
// covers it when from ≥ now − L. When none does, it returns the longest
// window and covered false; it fails when the period ends before even the
// longest window starts.
func chooseWindow(from, to, now time.Time) (w slo.Window, covered bool, err error) {
	ws := slo.Windows()
	for _, w := range ws {
		if !from.Before(now.Add(-w.Length)) {
			return w, true, nil
		}
	}
	longest := ws[len(ws)-1]
	if to.Before(now.Add(-longest.Length)) {
		return slo.Window{}, false, fmt.Errorf("the period ends at %s, before the admin API's longest window (%s) starts: the live view keeps only the last %s; use --prometheus for older periods", stamp(to), longest.Name, longest.Name)
	}
	return longest, false, nil
}

// FromAdmin builds a report from one gateway's admin API at base (the admin
// listener, e.g. http://127.0.0.1:9090): GET /admin/api/slo and GET
// /admin/api/profile for the tenant, over the smallest rolling window that
// covers the period (see chooseWindow).
func FromAdmin(ctx context.Context, base string, q Query) (*Report, error) {
	if err := q.normalise(); err != nil {
		return nil, err
	}
	base, err := BaseURL(base)
	if err != nil {
		return nil, fmt.Errorf("admin URL: %w", err)
	}
	shown := urlredact.String(base) // what the report and its errors say: its password masked (a report is shared)
	w, covered, err := chooseWindow(q.From, q.To, q.Now)
	if err != nil {
		return nil, err
	}
	var snap slo.SLOSnapshot
	if err := getAdmin(ctx, q.Client, base+"/admin/api/slo?tenant="+url.QueryEscape(q.Tenant), &snap); err != nil {
		return nil, err
	}
	var prof slo.ProfileSnapshot
	if err := getAdmin(ctx, q.Client, base+"/admin/api/profile?tenant="+url.QueryEscape(q.Tenant)+"&window="+url.QueryEscape(w.Name), &prof); err != nil {
		return nil, err
	}
	if prof.Format != slo.ProfileFormat || prof.Version < 1 || prof.Version > slo.ProfileVersion {
		return nil, fmt.Errorf("the admin API at %s answered a profile of format %q version %d; this report reads %q versions 1 to %d", shown, prof.Format, prof.Version, slo.ProfileFormat, slo.ProfileVersion)
	}
	if !windowSecondsOK(w, prof.WindowSeconds) {
		return nil, fmt.Errorf("the admin API at %s answered a profile of the %s window covering %g seconds: a rolling window covers 0 to %g", shown, w.Name, prof.WindowSeconds, w.Length.Seconds())
	}
	for _, ts := range snap.Tenants {
		if ws := ts.Windows[w.Name]; ts.Tenant == q.Tenant && ws != nil && !windowSecondsOK(w, ws.Seconds) {
			return nil, fmt.Errorf("the admin API at %s answered the %s window of tenant %q covering %g seconds: a rolling window covers 0 to %g", shown, w.Name, q.Tenant, ws.Seconds, w.Length.Seconds())
		}
		if ts.Tenant != q.Tenant {
			continue
		}
		if bad := windowStatsProblem(ts.Windows[w.Name]); bad != "" {
			return nil, fmt.Errorf("the admin API at %s answered the %s window of tenant %q with %s: not a gateway's figures", shown, w.Name, q.Tenant, bad)
		}
		for _, m := range ts.Models {
			if bad := windowStatsProblem(m.Windows[w.Name]); bad != "" {
				return nil, fmt.Errorf("the admin API at %s answered the %s window of tenant %q, model %q with %s: not a gateway's figures", shown, w.Name, q.Tenant, m.Model, bad)
			}
		}
	}
	r := buildAdmin(q, shown, w, covered, &snap, &prof)
	r.GeneratedAt = q.Now
	if !q.To.After(r.Period.From) {
		// The window holds nothing of the period: the gateway started
		// after it ended (a window starts no earlier than the gateway).
		return nil, fmt.Errorf("the period ends at %s, before the admin API's %s window begins (%s: the gateway keeps nothing from before it started); use --prometheus for that period", stamp(q.To), w.Name, stamp(r.Period.From))
	}
	return r, nil
}

// windowSecondsOK reports whether secs can be the time the rolling window
// w covers (slo's span: from its first slot's start, or the gateway's,
// to the snapshot, never more than its length). Other seconds come from
// a broken or hostile source: 1e300 overflowed the period's duration,
// which ran from 1734 to now in the report, for a negative duration.
func windowSecondsOK(w slo.Window, secs float64) bool {
	return secs >= 0 && secs <= w.Length.Seconds()
}

// windowStatsProblem says what of ws no gateway answers ("" when nothing,
// or for nil): more good requests than requests, misses that are not the
// rest, more good output tokens than output tokens, an objective outside
// [0, 1) or an attainment outside [0, 1], a negative latency. A broken or
// hostile source's figures were reported as they came: an attainment of
// 500% (50 good of 10 requests), an error budget used of -40000%, an
// objective of 500%.
func windowStatsProblem(ws *slo.WindowStats) string {
	if ws == nil {
		return ""
	}
	num := func(n slo.Num) float64 { return float64(n) }
	switch {
	case ws.Good > ws.Requests:
		return fmt.Sprintf("%d good of %d requests", ws.Good, ws.Requests)
	case ws.Misses != ws.Requests-ws.Good:
		return fmt.Sprintf("%d misses of %d requests, %d good", ws.Misses, ws.Requests, ws.Good)
	case ws.GoodOutputTokens > ws.OutputTokens:
		return fmt.Sprintf("%d good output tokens of %d", ws.GoodOutputTokens, ws.OutputTokens)
	case num(ws.Objective) < 0 || num(ws.Objective) >= 1: // 0: absent, as null is
		return fmt.Sprintf("an objective of %g", num(ws.Objective))
	case num(ws.Attainment) < 0 || num(ws.Attainment) > 1:
		return fmt.Sprintf("an attainment of %g", num(ws.Attainment))
	}
	for _, d := range []struct {
		name string
		d    slo.Dist
	}{{"TTFT", ws.TTFT}, {"TPOT", ws.TPOT}, {"ITL", ws.ITL}, {"E2E", ws.E2E}} {
		for _, v := range []slo.Num{d.d.Mean, d.d.P50, d.d.P90, d.d.P95, d.d.P99, d.d.Max} {
			if num(v) < 0 || math.IsInf(num(v), 0) {
				return fmt.Sprintf("a %s of %g seconds", d.name, num(v))
			}
		}
	}
	return ""
}

// getAdmin GETs an admin API URL and decodes its JSON into v.
func getAdmin(ctx context.Context, c *http.Client, u string, v any) error {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	body, status, err := fetch(ctx, c, req, "the gateway's admin API")
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		hint := ""
		if status == http.StatusNotFound {
			hint = " (is this a goodput gateway's admin listener, with SLO classes configured?)"
		}
		return fmt.Errorf("the admin API answered GET %s with HTTP %d%s: %s", u, status, hint, snippet(body))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("the admin API's answer to GET %s is not the expected JSON: %v", u, err)
	}
	return nil
}

// buildAdmin makes a report from the admin API's snapshots: snap is the
// live SLO view and prof the profile over window w. covered says whether w
// covers the period asked for in q (see chooseWindow). q must have Now and
// Worst set.
func buildAdmin(q Query, base string, w slo.Window, covered bool, snap *slo.SLOSnapshot, prof *slo.ProfileSnapshot) *Report {
	r := newReport(q.Tenant, Source{Kind: SourceAdmin, URL: base, Window: w.Name}, q.From, q.To)
	r.GeneratedAt = q.Now
	var ts *slo.TenantSLO
	for i := range snap.Tenants {
		if snap.Tenants[i].Tenant == q.Tenant {
			ts = &snap.Tenants[i]
		}
	}
	var ws *slo.WindowStats
	if ts != nil {
		ws = ts.Windows[w.Name]
	}
	secs := prof.WindowSeconds
	if ws != nil {
		secs = ws.Seconds
	}
	end := snap.Time
	if end.IsZero() {
		end = prof.GeneratedAt
	}
	r.Period.To = end
	r.Period.Seconds = secs
	r.Period.From = end.Add(-time.Duration(secs * float64(time.Second)))

	if ws == nil {
		r.noAdminSLO()
	} else {
		r.adminSLO(ts, ws, w)
	}
	r.adminTraffic(prof, q.Tenant)
	r.finish(q.Worst)
	r.adminNotes(q, base, w, covered, ts != nil)
	return r
}

// noAdminSLO fills the SLO numbers of a tenant without judged requests in
// the window.
func (r *Report) noAdminSLO() {
	s := &r.SLO
	s.Requests, s.Good = 0, 0
	s.MissReasons = reasonList(nil)
	r.Goodput.GoodOutputTokens, r.Throughput.OutputTokens = 0, 0
	r.Latency.Method = "sketch"
	r.Latency.TokenEvents = TokenEvents{0, 0, 0, 0, 0}
}

// adminSLO fills the SLO numbers, latency and models from the tenant's
// live view ts over window w (ws is its numbers).
func (r *Report) adminSLO(ts *slo.TenantSLO, ws *slo.WindowStats, w slo.Window) {
	s := &r.SLO
	s.Requests, s.Good = Num(ws.Requests), Num(ws.Good)
	s.Objective = ws.Objective
	counts := map[string]Num{}
	for k, v := range ws.MissReasons {
		counts[remote.Printable(k)] += Num(v)
	}
	s.MissReasons = reasonList(counts)
	byModels := classesByModel(ts, w)
	for _, name := range ts.SLOs {
		c := Class{Name: name, Objective: unknown(), Requests: unknown(), Good: unknown()}
		if len(ts.SLOs) == 1 {
			c.Objective, c.Requests, c.Good = ws.Objective, s.Requests, s.Good
		} else if bc, ok := byModels[name]; ok {
			c = bc
		}
		c.Name = remote.Printable(c.Name)
		s.Classes = append(s.Classes, c)
	}
	r.Goodput.GoodOutputTokens = Num(ws.GoodOutputTokens)
	r.Throughput.OutputTokens = Num(ws.OutputTokens)
	r.Latency = Latency{Method: "sketch", TTFT: sketchDist(ws.TTFT), TPOT: sketchDist(ws.TPOT), ITL: sketchDist(ws.ITL), E2E: sketchDist(ws.E2E), TokenEvents: unknownTokenEvents()}
	if te := ws.TokenEvents; te != nil {
		r.Latency.TokenEvents = TokenEvents{
			Requests: Num(te.Requests), OSLNotEvents: Num(te.OSLNotEvents),
			OSLAboveEvents: Num(te.OSLAboveEvents), OSLBelowEvents: Num(te.OSLBelowEvents),
			MultiTokenEvents: Num(te.MultiTokenEvents),
		}
	}
	for _, m := range ts.Models {
		mw := m.Windows[w.Name]
		if mw == nil {
			continue
		}
		r.Models = append(r.Models, Model{
			Model: remote.Printable(m.Model), Requests: Num(mw.Requests), Good: Num(mw.Good),
			GoodOutputTokensPerSecond: mw.GoodOutputTokensPerSecond,
			OutputTokensPerSecond:     mw.OutputTokensPerSecond,
		})
	}
}

// classesByModel breaks a tenant's counts down by class where its models
// allow it: a class whose every model was judged against that class alone
// (a tenant's slo_by_model) has the sum of those models' counts, and their
// objective. A class that shares a model with another (slo_by_shape) is
// left out: the admin API does not split a model's counts by class.
func classesByModel(ts *slo.TenantSLO, w slo.Window) map[string]Class {
	out := map[string]Class{}
	mixed := map[string]bool{}
	for _, m := range ts.Models {
		mw := m.Windows[w.Name]
		if mw == nil || mw.Requests == 0 {
			continue
		}
		if len(m.SLOs) != 1 {
			for _, name := range m.SLOs {
				mixed[name] = true
			}
			continue
		}
		name := m.SLOs[0]
		c, seen := out[name]
		if !seen {
			c = Class{Name: name, Objective: mw.Objective, Requests: 0, Good: 0}
		} else if c.Objective != mw.Objective {
			c.Objective = unknown()
		}
		c.Requests += Num(mw.Requests)
		c.Good += Num(mw.Good)
		out[name] = c
	}
	for name := range mixed {
		delete(out, name)
	}
	return out
}

// adminTraffic fills the traffic shape from the tenant's profile.
func (r *Report) adminTraffic(prof *slo.ProfileSnapshot, tenant string) {
	var tp *slo.WorkProfile
	for i := range prof.Tenants {
		if prof.Tenants[i].Tenant == tenant {
			tp = prof.Tenants[i].Profile
		}
	}
	t := &r.Traffic
	t.Concurrency.Method = "exact"
	if tp == nil {
		t.Arrivals = 0
		return
	}
	t.Arrivals = Num(tp.Arrivals)
	t.InterArrival = InterArrival{Mean: tp.InterArrival.Mean, CV: tp.InterArrival.CV, GammaShape: tp.InterArrival.GammaShape}
	t.ISL = profileTokens(tp.ISL, prof.TokenBuckets)
	t.OSL = profileTokens(tp.OSL, prof.TokenBuckets)
	t.Concurrency.Mean, t.Concurrency.P95, t.Concurrency.Peak = tp.Concurrency.Mean, tp.Concurrency.P95, Num(tp.Concurrency.Peak)
	t.Shapes = ShapeMix{Counts: map[string]Num{}, Fractions: map[string]Num{}, Traffic: tp.Shapes.Traffic}
	for k, v := range tp.Shapes.Counts {
		t.Shapes.Counts[remote.Printable(k)] += Num(v)
	}
	for k, v := range tp.Shapes.Fractions {
		t.Shapes.Fractions[remote.Printable(k)] += v
	}
}

// adminNotes says where the numbers come from, which period they cover
// and what the admin API cannot tell.
func (r *Report) adminNotes(q Query, base string, w slo.Window, covered, judged bool) {
	r.Notes = append(r.Notes,
		fmt.Sprintf("Source: the live view of one gateway (admin API at %s), rolling %s window: %s to %s. The admin API keeps only rolling 5m, 1h and 24h windows that end now, so it cannot report an arbitrary past period, and it counts this gateway replica only; for a fleet of replicas or a past period use --prometheus.",
			base, w.Name, stamp(r.Period.From), stamp(r.Period.To)))
	if !covered {
		r.Notes = append(r.Notes, fmt.Sprintf("The requested period starts at %s, before the longest window (%s) of the admin API: only its last %s are reported.", stamp(q.From), w.Name, w.Name))
	} else if q.From.Before(r.Period.From.Add(-time.Second)) || q.To.Before(r.Period.To.Add(-time.Minute)) {
		r.Notes = append(r.Notes, fmt.Sprintf("Requested %s to %s; the %s window covers %s to %s instead (a window is made of whole minute or hour slots, ends now, and starts no earlier than the gateway did).",
			stamp(q.From), stamp(q.To), w.Name, stamp(r.Period.From), stamp(r.Period.To)))
	}
	if !judged {
		r.Notes = append(r.Notes, fmt.Sprintf("The gateway has no judged requests from tenant %q in this window (check the tenant name; requests are judged only when the gateway has SLO classes and a class for the tenant).", q.Tenant))
	}
	r.Notes = append(r.Notes,
		"Latency percentiles come from the gateway's mergeable quantile sketch (within 0.5% of the exact value, numpy's linear interpolation) over requests with outcome ok; mean and max are exact.",
		"Worst hours: unknown, because the admin API has no per-hour numbers; use --prometheus for them.",
		"Concurrency is time-weighted by the gateway (idle time counts as 0); burstiness is the gamma shape k = mean²/variance of the inter-arrival gaps (1: Poisson, below 1: burstier).")
	if len(r.SLO.Classes) > 1 {
		r.Notes = append(r.Notes, "Several SLO classes: the objective is the request-weighted mean of their objectives. The admin API does not break counts down by class: a class's counts are known only when each of its models was judged against it alone (slo_by_model).")
	}
}

func sketchDist(d slo.Dist) Dist {
	return Dist{Count: Num(d.Count), Mean: d.Mean, P50: d.P50, P90: d.P90, P95: d.P95, P99: d.P99, Max: d.Max}
}

func profileTokens(d slo.TokenDist, bounds []int) TokenDist {
	t := TokenDist{Count: Num(d.Count), Mean: d.Mean, Min: d.Min, Max: d.Max, P50: d.P50, P90: d.P90, P95: d.P95, P99: d.P99}
	if len(d.Buckets) == len(bounds)+1 {
		t.Buckets = make([]Bucket, len(d.Buckets))
		for i, c := range d.Buckets {
			le := "+Inf"
			if i < len(bounds) {
				le = strconv.Itoa(bounds[i])
			}
			t.Buckets[i] = Bucket{LE: le, Count: Num(c)}
		}
	}
	return t
}
