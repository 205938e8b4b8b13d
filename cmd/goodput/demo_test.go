package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goodput/goodput/bench"
	"github.com/goodput/goodput/slo"
)

// demoTestArgs is a short, fast demo on free ports.
func demoTestArgs(t *testing.T, d time.Duration) *demoArgs {
	return &demoArgs{
		duration: d, grace: time.Second, preset: "a100-8b", from: 0.3, to: 1.5,
		listen: "127.0.0.1:0", adminListen: "127.0.0.1:0",
		reportFile: filepath.Join(t.TempDir(), "demo.html"), seed: 1, logLevel: "warn", live: "lines",
	}
}

// keysOf records the tenants' keys when the plan has them.
type keysOf struct {
	mu   sync.Mutex
	keys []string
}

func (k *keysOf) hook(p *demoPlan) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, t := range p.tenants {
		k.keys = append(k.keys, t.key)
	}
}

func (k *keysOf) check(t *testing.T, outputs ...string) {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.keys) != 3 {
		t.Fatalf("%d keys, want one per tenant", len(k.keys))
	}
	for _, key := range k.keys {
		if len(key) < 16 {
			t.Fatalf("key of %d characters: not a gateway key", len(key))
		}
		for _, out := range outputs {
			if strings.Contains(out, key) {
				t.Fatal("a gateway key appears in the demo's output")
			}
		}
	}
}

// summaryRequests returns each tenant's requests from the summary table.
func summaryRequests(t *testing.T, out string) map[string]int {
	t.Helper()
	i := strings.Index(out, "summary after")
	if i < 0 {
		t.Fatalf("no summary in the output:\n%s", out)
	}
	got := map[string]int{}
	for _, line := range strings.Split(out[i:], "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		switch f[0] {
		case "acme", "globex", "initech":
			if n, err := strconv.Atoi(f[3]); err == nil {
				got[f[0]] = n
			}
		}
	}
	return got
}

func wellFormedXML(t *testing.T, b []byte) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	dec.Strict = true
	for {
		_, err := dec.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("not well-formed: %v", err)
		}
	}
}

// checkReport checks the report is well-formed XML with the run's section
// and one SLO report per tenant.
func checkReport(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	wellFormedXML(t, b)
	page := string(b)
	for _, want := range []string{`<section id="demo">`, "predicted knee", "SLO report: acme", "SLO report: globex", "SLO report: initech"} {
		if !strings.Contains(page, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	return page
}

func TestDemoShortRun(t *testing.T) {
	a := demoTestArgs(t, 3*time.Second)
	var keys keysOf
	a.onPlan = keys.hook
	var out, errOut syncBuffer
	if code := runDemo(context.Background(), a, &out, &errOut, false); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	o := out.String()
	t.Logf("output:\n%s", o)
	for name, n := range summaryRequests(t, o) {
		if n == 0 {
			t.Errorf("%s: no requests in the summary", name)
		}
	}
	if got := summaryRequests(t, o); len(got) != 3 {
		t.Errorf("summary names %d tenants, want 3: %v", len(got), got)
	}
	for _, want := range []string{"live page: http://127.0.0.1:", "/metrics", "predicted knee", "report: " + a.reportFile} {
		if !strings.Contains(o, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	page := checkReport(t, a.reportFile)
	curve := curveFile(a.reportFile)
	if !strings.Contains(page, `href="`+filepath.Base(curve)+`"`) {
		t.Errorf("the report does not link the capacity curve %s", filepath.Base(curve))
	}
	cb, err := os.ReadFile(curve)
	if err != nil {
		t.Fatalf("capacity curve: %v", err)
	}
	wellFormedXML(t, cb)
	keys.check(t, o, errOut.String(), page, string(cb))
}

// TestDemoCapacityCurve: the ramp's slices become sweep steps: each
// request in the slice of its send, good by its tenant's class (bench's
// flags), failures counted, requests cut by the end left out.
func TestDemoCapacityCurve(t *testing.T) {
	p, err := newDemoPlan("a100-8b", 60*time.Second, 0.5, 1.5, 1)
	if err != nil {
		t.Fatal(err)
	}
	r := &demoRun{plan: p, results: map[string]*bench.Result{
		// Slices are 10s long: sends at 1s, 2s (slice 0), 15s (slice 1), 59s (slice 5), 61s (late: the last slice).
		"acme": {
			StartTimes: []float64{1, 2, 15, 59, 61, 30},
			Errors:     []string{"", "", "HTTP 429", "", "", "stopped with the run: context canceled"},
			TTFTs:      []float64{0.1, 0.2, 0, 0.3, 0.4, 0},
			Latencies:  []float64{1.1, 2.2, 0, 3.3, 4.4, 0},
			OutputLens: []int{11, 21, 0, 31, 41, 0},
			ITLs:       [][]float64{{0.1}, {0.1}, {}, {0.1}, {0.1}, {}},
			Goodput:    &bench.Extra{Good: []bool{true, false, false, true, false, false}},
		},
		// One request not sent: in no per-request array.
		"initech": {
			StartTimes: []float64{25},
			Errors:     []string{""},
			TTFTs:      []float64{0.5},
			Latencies:  []float64{1.5},
			OutputLens: []int{101},
			ITLs:       [][]float64{{0.01}},
			Goodput:    &bench.Extra{Good: []bool{true}, NotSent: 1},
		},
	}}
	s, cut := r.capacityCurve()
	if s == nil || len(s.Steps) != demoCurveSteps {
		t.Fatalf("curve %+v", s)
	}
	if cut != 2 {
		t.Errorf("%d requests left out, want 2 (one cut, one not sent)", cut)
	}
	want := []struct{ completed, failed, good int }{{2, 0, 1}, {0, 1, 0}, {1, 0, 1}, {0, 0, 0}, {0, 0, 0}, {2, 0, 1}}
	for i, w := range want {
		st := s.Steps[i]
		if st.Completed != w.completed || st.Failed != w.failed || st.Good != w.good {
			t.Errorf("step %d: completed %d failed %d good %d, want %+v", i, st.Completed, st.Failed, st.Good, w)
		}
		mid := time.Duration(i)*10*time.Second + 5*time.Second
		if got := float64(st.Load); math.Abs(got-p.rateAt(mid)) > 0.01 {
			t.Errorf("step %d: load %v, want the offered rate at %v (%v)", i, got, mid, p.rateAt(mid))
		}
	}
	if got := float64(s.Steps[0].RequestGoodput); got != 0.1 {
		t.Errorf("step 0: goodput %v req/s, want 1 good in 10s", got)
	}
	if got := float64(s.Steps[0].TTFT.P50); math.Abs(got-150) > 1e-9 {
		t.Errorf("step 0: TTFT p50 %v ms, want 150", got)
	}
	if s.Steps[3].TTFT.P50.Known() || s.Steps[3].Attainment.Known() {
		t.Error("an empty step has unknown latencies and attainment")
	}
}

// TestDemoInterrupt: SIGINT ends the demo early, with the summary and the
// report, and exit status 0.
func TestDemoInterrupt(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "demo.html")
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cmdDemo([]string{"--duration", "60s", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
			"--report", report, "--live", "lines"}, &out, &errOut)
	}()
	// The signal handler is in place once the run has begun.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "running for") {
		select {
		case code := <-done:
			t.Fatalf("the demo ended (%d) before it ran:\n%s\n%s", code, out.String(), errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo did not start:\n%s\n%s", out.String(), errOut.String())
		}
	}
	start := time.Now()
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 1 {
			t.Fatalf("exit %d after SIGINT, want 1 (a run cut short)\n%s\n%s", code, out.String(), errOut.String())
		}
	case <-time.After(45 * time.Second):
		t.Fatalf("the demo still runs 45s after SIGINT:\n%s", out.String())
	}
	t.Logf("ended %v after SIGINT", time.Since(start))
	o := out.String()
	if !strings.Contains(o, "interrupted after") {
		t.Errorf("the output does not say the run was interrupted:\n%s", o)
	}
	if got := summaryRequests(t, o); len(got) != 3 {
		t.Errorf("summary names %d tenants, want 3: %v\n%s", len(got), got, o)
	}
	checkReport(t, report)
}

func TestDemoArgs(t *testing.T) {
	for _, args := range [][]string{
		{"--duration", "0s"}, {"--duration", "13h"}, {"--grace", "-1s"}, {"--load-from", "0"}, {"--load-to", "NaN"},
		{"--preset", "tpu"}, {"--admin-listen", "off"}, {"--report", ""}, {"--live", "maybe"}, {"--log-level", "loud"}, {"extra"},
		{"--report", filepath.Join(t.TempDir(), "missing", "demo.html")},
	} {
		var errOut bytes.Buffer
		if code := cmdDemo(args, io.Discard, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
		if !strings.Contains(errOut.String(), "demo") && !strings.Contains(errOut.String(), "invalid") {
			t.Errorf("%v: no clear error: %q", args, errOut.String())
		}
	}
}

// TestRampOffsets: the arrivals follow the linear ramp of rates: the
// counts in each half match the integral of the rate.
func TestRampOffsets(t *testing.T) {
	const r0, r1 = 2.0, 10.0
	d := 100 * time.Second
	offs := rampOffsets(r0, r1, d, 7)
	// Λ(t) = r0·t + (r1−r0)·t²/(2T): 600 in all, 200 in the first half.
	var first int
	for i, o := range offs {
		if o < 0 || o >= d || (i > 0 && o < offs[i-1]) {
			t.Fatalf("offset %d = %v: out of [0, %v) or not sorted", i, o, d)
		}
		if o < d/2 {
			first++
		}
	}
	// Poisson counts: within 4 standard deviations.
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"all", float64(len(offs)), 600}, {"first half", float64(first), 200}, {"second half", float64(len(offs) - first), 400}} {
		if math.Abs(c.got-c.want) > 4*math.Sqrt(c.want) {
			t.Errorf("%s: %v arrivals, want %v ± %.0f", c.name, c.got, c.want, 4*math.Sqrt(c.want))
		}
	}
	if got := rampOffsets(3, 3, 10*time.Second, 1); math.Abs(float64(len(got))-30) > 4*math.Sqrt(30) {
		t.Errorf("a flat ramp at 3/s over 10s: %d arrivals, want about 30", len(got))
	}
	if rampOffsets(0, 0, d, 1) != nil || rampOffsets(1, 2, 0, 1) != nil {
		t.Error("no rate or no time should give no arrivals")
	}
}

// TestDemoPlan: the knee comes from the simulator's capacity formula for
// the mix, the tenants' shares add up, and the limits are set.
func TestDemoPlan(t *testing.T) {
	p, err := newDemoPlan("a100-8b", 60*time.Second, 0.3, 1.5, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := p.engine.Capacity(p.capacity.ISL, p.capacity.OSL)
	if p.capacity != want || !(p.capacity.MaxRate > 0) {
		t.Errorf("capacity %+v, want the formula's %+v", p.capacity, want)
	}
	var share float64
	for _, tn := range p.tenants {
		share += tn.share
		if len(tn.reqs) != len(tn.offsets) || len(tn.reqs) == 0 {
			t.Errorf("%s: %d requests for %d send times", tn.name, len(tn.reqs), len(tn.offsets))
		}
	}
	if math.Abs(share-1) > 1e-9 {
		t.Errorf("shares add up to %v, want 1", share)
	}
	if at, ok := p.timeAtLoad(1); !ok || at != 35*time.Second {
		t.Errorf("the knee is crossed at %v (%v), want 35s", at, ok)
	}
	if got := p.rateAt(60 * time.Second); math.Abs(got-1.5*p.capacity.MaxRate) > 1e-9 {
		t.Errorf("rate at the end %v, want 1.5× the knee", got)
	}
	byName := map[string]*demoTenant{}
	for _, tn := range p.tenants {
		byName[tn.name] = tn
	}
	if byName["globex"].limits.TPM <= 0 || byName["initech"].limits.MaxConcurrency < 2 || byName["acme"].limits.MaxConcurrency == 0 {
		t.Errorf("limits: globex %+v, initech %+v, acme %+v", byName["globex"].limits, byName["initech"].limits, byName["acme"].limits)
	}
	cfg, err := p.gatewayConfig("http://127.0.0.1:1", "127.0.0.1:0", "127.0.0.1:0", "warn")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Tenants) != 3 || len(cfg.SLO.SLOs) != 3 {
		t.Errorf("config: %d tenants, %d classes", len(cfg.Tenants), len(cfg.SLO.SLOs))
	}
	for i, tn := range cfg.Tenants {
		if tn.Keys[0].SHA256 == p.tenants[i].key || p.tenants[i].key == "" {
			t.Errorf("%s: the configuration must hold the key's hash, not the key", tn.Name)
		}
	}
}

// TestDemoPrinter: on a terminal the table is redrawn in place every
// call; otherwise a line at most every 5 seconds, every tenant on it.
func TestDemoPrinter(t *testing.T) {
	tenants := demoTenants()
	snap := demoSnap{load: 0.8, tenants: map[string]*demoTenantSnap{}}
	for i, tn := range tenants {
		snap.tenants[tn.name] = &demoTenantSnap{requests: uint64(10 * (i + 1)), good: uint64(9 * (i + 1)), attainment: 0.9, objective: 0.99,
			goodRate: 1.5, rateLimited: uint64(i), inFlight: 3, ttft: slo.Dist{Count: 1, P50: 0.1, P99: 0.25}}
	}
	var lines bytes.Buffer
	p := newDemoPrinter(&lines, false, tenants)
	for s := 0; s <= 12; s++ {
		p.print(snap, time.Duration(s)*time.Second)
	}
	got := strings.Split(strings.TrimSpace(lines.String()), "\n")
	if len(got) != 3 { // at 0s, 5s and 10s
		t.Fatalf("%d lines in 12s, want 3:\n%s", len(got), lines.String())
	}
	for _, want := range []string{"acme 10 req 90.0%", "globex 20 req", "initech 30 req", "ttft p99 250ms", "429 2", "load 0.80× knee"} {
		if !strings.Contains(got[0], want) {
			t.Errorf("line %q lacks %q", got[0], want)
		}
	}
	if strings.Contains(lines.String(), "\x1b[") {
		t.Error("escape sequences outside a terminal")
	}

	// The view is printed at each second's tick plus the time its snapshot
	// took, which varies: a tick's line comes a little less than 5 s after
	// the last one as often as a little more. Still a line every 5 ticks,
	// not every 6.
	lines.Reset()
	p = newDemoPrinter(&lines, false, tenants)
	for s := 1; s <= 21; s++ {
		jitter := time.Duration(3-s%4) * time.Millisecond // 2, 1, 0, 3 ms after the tick
		p.print(snap, time.Duration(s)*time.Second+jitter)
	}
	if n := strings.Count(lines.String(), "\n"); n != 5 { // at 1, 6, 11, 16 and 21 s
		t.Errorf("%d lines in 21 ticks with jitter, want 5 (one every 5 ticks):\n%s", n, lines.String())
	}

	// The summary: rates over the whole run, met or missed by the objective.
	snap.tenants["globex"].attainment = 0.995
	snap.tenants["globex"].misses = map[string]uint64{"e2e": 1, "rate_limited": 3}
	r := &demoRun{plan: &demoPlan{tenants: tenants}, results: map[string]*bench.Result{"acme": {Completed: 9, Failed: 1}}}
	rows := r.summaryRows(snap, 10*time.Second)
	if rows[0].Met != "missed" || rows[1].Met != "met" || rows[0].GoodRate != "0.90" || rows[1].Misses != "rate_limited 3, e2e 1" ||
		rows[0].Client != "9 completed, 1 failed" || rows[2].Client != "no requests" {
		t.Errorf("summary rows: %+v", rows)
	}

	var table bytes.Buffer
	p = newDemoPrinter(&table, true, tenants)
	p.print(snap, time.Second)
	first := table.String()
	p.print(snap, 2*time.Second)
	second := strings.TrimPrefix(table.String(), first)
	if strings.Contains(first, "\x1b[5A") || !strings.HasPrefix(second, "\x1b[5A") {
		t.Errorf("the second draw should move up the table's 5 lines first: %q", second)
	}
	for _, want := range []string{"tenant", "attainment", "goodput req/s", "TTFT p50", "ITL p50", "in flight", "429s", "initech"} {
		if !strings.Contains(first, want) {
			t.Errorf("the table lacks %q:\n%s", want, first)
		}
	}
}

// A demo stopped early (Ctrl-C) draws the curve from the slices it
// finished, and leaves out the requests of the others: the curve had every
// slice, the unfinished ones empty, and marked a knee among them. With fewer
// than two finished slices there is no curve. The load generator's line
// tells the requests the end cut or kept from being sent from the failed.
func TestDemoCurveStoppedEarly(t *testing.T) {
	p, err := newDemoPlan("a100-8b", 60*time.Second, 0.5, 1.5, 1)
	if err != nil {
		t.Fatal(err)
	}
	res := &bench.Result{
		// Slices are 10s long; stopped at 25s: slices 0 and 1 finished
		// (the request cut in flight was sent in slice 2).
		// One request was never sent: it is in no per-request array.
		StartTimes: []float64{1, 12, 21, 24},
		Errors:     []string{"", "", "", "stopped with the run: context canceled"},
		TTFTs:      []float64{0.1, 0.1, 0.1, 0},
		Latencies:  []float64{1, 1, 1, 0},
		OutputLens: []int{10, 10, 10, 0},
		ITLs:       [][]float64{{0.1}, {0.1}, {0.1}, {}},
		Goodput:    &bench.Extra{Good: []bool{true, true, true, false}, NotSent: 1, CutInFlight: 1},
		Completed:  3, Failed: 1,
	}
	r := &demoRun{plan: p, results: map[string]*bench.Result{"acme": res}, stoppedAfter: 25 * time.Second}
	s, cut := r.capacityCurve()
	if s == nil || len(s.Steps) != 2 {
		t.Fatalf("curve %+v, want the 2 finished slices", s)
	}
	if cut != 3 || s.Steps[0].Completed != 1 || s.Steps[1].Completed != 1 {
		t.Errorf("%d left out, steps %d and %d completed: want 3 left out (one sent in the unfinished slice, one cut, one not sent)", cut, s.Steps[0].Completed, s.Steps[1].Completed)
	}
	r.stoppedAfter = 15 * time.Second
	if s, _ := r.capacityCurve(); s != nil {
		t.Errorf("a curve of %d steps from one finished slice", len(s.Steps))
	}
	// A request of slice 1 still in flight at the stop (at 30s): slice 1
	// is not finished, whatever the clock says.
	res.StartTimes[3] = 18
	r.stoppedAfter = 30 * time.Second
	if s, _ := r.capacityCurve(); s != nil {
		t.Errorf("a curve of %d steps, with a request of slice 1 cut in flight", len(s.Steps))
	}
	if got := clientLine(res); got != "3 completed, 0 failed, 1 cut in flight by the end, 1 never sent (the run stopped)" {
		t.Errorf("load generator line %q", got)
	}
}

// Once the load has stopped sending (--duration passed, the grace running;
// or Ctrl-C), nothing is offered: the live line and the report's chart
// showed the ramp's last rate as offered until the demo ended.
func TestDemoLoadEnded(t *testing.T) {
	p, err := newDemoPlan("a100-8b", 20*time.Second, 0.3, 1.5, 1)
	if err != nil {
		t.Fatal(err)
	}
	v := newDemoView("127.0.0.1:1", p, 30*time.Second)
	if load, ended := v.loadAt(10 * time.Second); ended || math.Abs(load-0.9) > 1e-9 {
		t.Errorf("at 10s of 20s: load %v, ended %v; want 0.9, not ended", load, ended)
	}
	if load, ended := v.loadAt(26 * time.Second); !ended || math.Abs(load-1.5) > 1e-9 {
		t.Errorf("at 26s of 20s: load %v, ended %v; want 1.5 (at its end), ended", load, ended)
	}
	stopped := newDemoView("127.0.0.1:1", p, 30*time.Second)
	stopped.endLoad(5 * time.Second)
	if load, ended := stopped.loadAt(8 * time.Second); !ended || math.Abs(load-0.6) > 1e-9 {
		t.Errorf("stopped at 5s, at 8s: load %v, ended %v; want 0.6 (at the stop), ended", load, ended)
	}

	tenants := demoTenants()
	snap := func(at time.Duration) demoSnap {
		s := demoSnap{at: at, tenants: map[string]*demoTenantSnap{}}
		s.load, s.ended = v.loadAt(at)
		for _, tn := range tenants {
			s.tenants[tn.name] = &demoTenantSnap{attainment: 1, objective: 0.99}
		}
		return s
	}
	var lines bytes.Buffer
	pr := newDemoPrinter(&lines, false, tenants)
	pr.print(snap(10*time.Second), 10*time.Second)
	pr.print(snap(26*time.Second), 26*time.Second)
	got := strings.Split(strings.TrimSpace(lines.String()), "\n")
	if len(got) != 2 || !strings.Contains(got[0], "load 0.90× knee") || !strings.Contains(got[1], "load ended") {
		t.Errorf("live lines at 10s and 26s of a 20s load:\n%s", lines.String())
	}
	var table bytes.Buffer
	newDemoPrinter(&table, true, tenants).print(snap(26*time.Second), 26*time.Second)
	if strings.Contains(table.String(), "offered load") || !strings.Contains(table.String(), "load ended") {
		t.Errorf("live table at 26s of a 20s load:\n%s", table.String())
	}

	c := newDemoChart(p, []demoSnap{snap(0), snap(10 * time.Second), snap(26 * time.Second)})
	offered := strings.Fields(c.Lines[0].Points)
	if last := offered[len(offered)-1]; !strings.HasSuffix(last, ",270.0") { // the axis: 0 offered
		t.Errorf("offered at 26s of a 20s load plotted at %s, want 0 (y 270.0); points %v", last, offered)
	}
}
