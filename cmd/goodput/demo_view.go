package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/goodput/goodput/slo"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// demoView reads the gateway's own figures from its admin listener (the
// SLO view, /admin/api/slo, and the in-flight gauge of /metrics) and keeps
// a sample a call, for the recent rates and the report's chart.
type demoView struct {
	admin  string
	plan   *demoPlan
	window string // the admin API window that covers the whole run
	client *http.Client
	start  time.Time

	mu      sync.Mutex
	history []demoSnap
	loadEnd time.Duration // since start: when the load stopped sending (--duration, or Ctrl-C)
}

// demoSnap is the gateway's figures at one moment.
type demoSnap struct {
	at      time.Duration // since the view started
	load    float64       // offered load then (once ended, at its end), × the knee
	ended   bool          // the load sends no more: the requests left are in flight
	tenants map[string]*demoTenantSnap
}

// demoTenantSnap is one tenant's figures: counts and distributions over
// the run so far (the admin API's window), rates over the last few seconds.
type demoTenantSnap struct {
	requests, good, rateLimited uint64
	outTokens, goodOutTokens    uint64
	misses                      map[string]uint64
	attainment, objective       float64
	ttft, itl, e2e              slo.Dist
	inFlight                    float64
	// Rates over the last demoRecent (or since the start).
	reqRate, goodRate, goodTokRate float64
}

// demoRecent is the span of the "now" rates.
const demoRecent = 5 * time.Second

func newDemoView(admin string, plan *demoPlan, run time.Duration) *demoView {
	// The smallest window that holds the whole run (a window covers at
	// least its length less one slot).
	window := "24h"
	for _, w := range slo.Windows() {
		if run+5*time.Second <= w.Length-w.Slot {
			window = w.Name
			break
		}
	}
	return &demoView{admin: admin, plan: plan, window: window, start: time.Now(),
		client: &http.Client{Timeout: 5 * time.Second}, loadEnd: plan.duration}
}

// endLoad records that the load stopped sending at at (Ctrl-C), before
// --duration.
func (v *demoView) endLoad(at time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.loadEnd = min(v.loadEnd, at)
}

// loadAt is the offered load at at, × the knee, and whether the load has
// ended by then: after --duration (during --grace) or Ctrl-C nothing more
// is offered, where the ramp's last value was shown as still offered.
func (v *demoView) loadAt(at time.Duration) (float64, bool) {
	v.mu.Lock()
	end := v.loadEnd
	v.mu.Unlock()
	return v.plan.loadAt(min(at, end)), at >= end
}

// snapshot reads the gateway's figures now and records them.
func (v *demoView) snapshot(ctx context.Context) (demoSnap, error) {
	var sloSnap slo.SLOSnapshot
	if err := v.getJSON(ctx, "/admin/api/slo", &sloSnap); err != nil {
		return demoSnap{}, err
	}
	inFlight, err := v.inFlight(ctx)
	if err != nil {
		return demoSnap{}, err
	}
	at := time.Since(v.start)
	s := demoSnap{at: at, tenants: map[string]*demoTenantSnap{}}
	s.load, s.ended = v.loadAt(at)
	for _, t := range v.plan.tenants {
		ts := &demoTenantSnap{attainment: math.NaN(), objective: math.NaN(), inFlight: inFlight[t.name]}
		s.tenants[t.name] = ts
		for i := range sloSnap.Tenants {
			if sloSnap.Tenants[i].Tenant != t.name {
				continue
			}
			w := sloSnap.Tenants[i].Windows[v.window]
			if w == nil {
				break
			}
			ts.requests, ts.good, ts.misses = w.Requests, w.Good, w.MissReasons
			ts.rateLimited = w.MissReasons["rate_limited"]
			ts.outTokens, ts.goodOutTokens = w.OutputTokens, w.GoodOutputTokens
			ts.attainment, ts.objective = float64(w.Attainment), float64(w.Objective)
			ts.ttft, ts.itl, ts.e2e = w.TTFT, w.ITL, w.E2E
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	// The rates: against the latest sample at least demoRecent old, else
	// the start.
	var base *demoSnap
	for i := len(v.history) - 1; i >= 0; i-- {
		if at-v.history[i].at >= demoRecent {
			base = &v.history[i]
			break
		}
	}
	for name, ts := range s.tenants {
		var from time.Duration
		var req, good, goodTok uint64
		if base != nil {
			b := base.tenants[name]
			from, req, good, goodTok = base.at, b.requests, b.good, b.goodOutTokens
		}
		if secs := (at - from).Seconds(); secs > 0 {
			ts.reqRate = float64(sub(ts.requests, req)) / secs
			ts.goodRate = float64(sub(ts.good, good)) / secs
			ts.goodTokRate = float64(sub(ts.goodOutTokens, goodTok)) / secs
		}
	}
	v.history = append(v.history, s)
	return s, nil
}

// settle waits, at most wait, until the gateway has written the record of
// every request (a cut stream ends in the gateway a moment after the
// client left).
func (v *demoView) settle(ctx context.Context, wait time.Duration) {
	deadline := time.Now().Add(wait)
	for {
		inFlight, err := v.inFlight(ctx)
		var n float64
		for _, x := range inFlight {
			n += x
		}
		if (err == nil && n == 0) || time.Now().After(deadline) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// samples returns the recorded snapshots.
func (v *demoView) samples() []demoSnap {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]demoSnap(nil), v.history...)
}

func (v *demoView) getJSON(ctx context.Context, path string, out any) error {
	body, err := v.get(ctx, path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

func (v *demoView) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.admin+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := v.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d", path, resp.StatusCode)
	}
	return body, nil
}

// inFlight reads goodput_in_flight_requests by tenant from /metrics.
func (v *demoView) inFlight(ctx context.Context) (map[string]float64, error) {
	body, err := v.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return nil, fmt.Errorf("GET /metrics: %w", err)
	}
	out := map[string]float64{}
	if f := fams["goodput_in_flight_requests"]; f != nil {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tenant" {
					out[l.GetValue()] += m.GetGauge().GetValue()
				}
			}
		}
	}
	return out, nil
}

// demoPrinter prints the live view: a table redrawn in place every second
// on a terminal, else a line every 5 seconds.
type demoPrinter struct {
	w       io.Writer
	table   bool
	tenants []*demoTenant
	lines   int           // lines of the last table drawn
	last    time.Duration // when the last line was printed (lines mode)
}

// demoLineEvery is the pace of the live view when it is not a terminal.
const demoLineEvery = 5 * time.Second

// demoLineSlack is how much sooner than demoLineEvery after the last line
// the next one may come: the view is printed once a second, a tick's time
// plus the snapshot's (two GETs to the admin listener), so the fifth tick
// after a line can come a little less than 5 s after it, and holding the
// line for the sixth made it a line every 6 s. Half a tick.
const demoLineSlack = 500 * time.Millisecond

func newDemoPrinter(w io.Writer, table bool, tenants []*demoTenant) *demoPrinter {
	return &demoPrinter{w: w, table: table, tenants: tenants, last: -demoLineEvery}
}

func (p *demoPrinter) print(s demoSnap, elapsed time.Duration) {
	if !p.table {
		if elapsed-p.last < demoLineEvery-demoLineSlack {
			return
		}
		p.last = elapsed
		var b strings.Builder
		if s.ended {
			fmt.Fprintf(&b, "%4ds load ended", int(elapsed.Seconds()))
		} else {
			fmt.Fprintf(&b, "%4ds load %.2f× knee", int(elapsed.Seconds()), s.load)
		}
		for _, t := range p.tenants {
			ts := s.tenants[t.name]
			fmt.Fprintf(&b, " | %s %d req %s good %.1f req/s %.0f tok/s ttft p99 %s in flight %.0f 429 %d",
				t.name, ts.requests, pct(ts.attainment), ts.goodRate, ts.goodTokRate, msOf(ts.ttft, ts.ttft.P99), ts.inFlight, ts.rateLimited)
		}
		fmt.Fprintln(p.w, b.String())
		return
	}
	var b strings.Builder
	if p.lines > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", p.lines) // back to the table's first line
	}
	rows := demoTable(s, p.tenants)
	offered := fmt.Sprintf("offered load %.2f× the knee", s.load)
	if s.ended {
		offered = "load ended, requests in flight finishing"
	}
	fmt.Fprintf(&b, "\x1b[2K%s   %s   (goodput: last 5s; the rest: since the start)\n", time.Duration(elapsed.Seconds())*time.Second, offered)
	for _, row := range rows {
		b.WriteString("\x1b[2K")
		b.WriteString(row)
		b.WriteByte('\n')
	}
	p.lines = len(rows) + 1
	fmt.Fprint(p.w, b.String())
}

// demoTable formats the live per-tenant table: counts, attainment and
// latencies over the run so far, goodput over the last 5 seconds.
func demoTable(s demoSnap, tenants []*demoTenant) []string {
	out := []string{fmt.Sprintf("%-8s %8s %10s %9s  %13s %7s  %8s %8s  %7s %7s  %9s %5s",
		"tenant", "requests", "attainment", "objective", "goodput req/s", "tok/s", "TTFT p50", "p99", "ITL p50", "p99", "in flight", "429s")}
	for _, t := range tenants {
		ts := s.tenants[t.name]
		out = append(out, fmt.Sprintf("%-8s %8d %10s %9s  %13.2f %7.0f  %8s %8s  %7s %7s  %9.0f %5d",
			t.name, ts.requests, pct(ts.attainment), pct(ts.objective), ts.goodRate, ts.goodTokRate,
			msOf(ts.ttft, ts.ttft.P50), msOf(ts.ttft, ts.ttft.P99), msOf(ts.itl, ts.itl.P50), msOf(ts.itl, ts.itl.P99), ts.inFlight, ts.rateLimited))
	}
	return out
}

// pct formats a ratio as a percentage, "-" when undefined.
func pct(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}

// msOf formats a distribution's quantile, "-" when it has no values.
func msOf(d slo.Dist, q slo.Num) string {
	if d.Count == 0 {
		return "-"
	}
	return ms(q)
}

// ms formats seconds as milliseconds (or seconds above 10 s), "-" when
// undefined.
func ms(v slo.Num) string {
	f := float64(v)
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return "-"
	case f >= 10:
		return fmt.Sprintf("%.1fs", f)
	}
	return fmt.Sprintf("%.0fms", 1000*f)
}
