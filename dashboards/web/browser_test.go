package web

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/goodput/goodput/internal/chrometest"
	"github.com/goodput/goodput/slo"
)

// stubAPI answers GET /admin/api/slo with the snapshot a test sets, or with
// an error status, in place of a gateway: the page's figures are then the
// test's, exactly.
type stubAPI struct {
	mu     sync.Mutex
	snap   *slo.SLOSnapshot
	status int // when not 0 and not 200, the answer (with a text body)
	reads  int
	read   chan struct{} // closed (and replaced) at each read
}

func (s *stubAPI) set(snap *slo.SLOSnapshot, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snap, s.status = snap, status
	if s.read == nil {
		s.read = make(chan struct{})
	}
}

func (s *stubAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	snap, status := s.snap, s.status
	s.reads++
	if s.read != nil {
		close(s.read)
	}
	s.read = make(chan struct{})
	s.mu.Unlock()
	if status != 0 && status != http.StatusOK {
		http.Error(w, "stub error", status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(snap); err != nil {
		panic(err)
	}
}

// after returns once the page has read the API twice more than it had
// when after was called: the first of those reads is then drawn (the page
// asks again only once it has drawn what it read).
func (s *stubAPI) after(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	want := s.reads + 2
	s.mu.Unlock()
	for {
		s.mu.Lock()
		n, ch := s.reads, s.read
		s.mu.Unlock()
		if n >= want {
			return
		}
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("the page read the API %d times in 30 s, want %d", n, want)
		}
	}
}

// openPage serves the live page and api, opens the page in headless
// Chromium (refreshing every 0.5 s) and returns its context and what the
// browser reported (chrometest.Problems).
func openPage(t *testing.T, api *stubAPI, before ...func(base string) chromedp.Action[chromedp.Void]) (context.Context, func() []string) {
	t.Helper()
	chrometest.Binary(t)
	mux := http.NewServeMux()
	mux.Handle("/admin/api/slo", api)
	mux.Handle("/", Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ctx := chrometest.Start(t, 1400, 1000)
	problems := chrometest.Problems(t, ctx)
	for _, b := range before {
		do(t, ctx, "prepare the browser", b(srv.URL))
	}
	do(t, ctx, "open the page", chromedp.Navigate(srv.URL+"/?refresh=0.5"))
	return ctx, problems
}

// do runs a on the browser of ctx, within 30 s, and returns its value.
func do[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(rctx, a)
	if err != nil {
		status, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('status').textContent`))
		t.Fatalf("%s: %v (the page's status: %q)", what, err, status)
	}
	return v
}

// poll waits until the page's expression is true.
func poll(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	do(t, ctx, what, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(20*time.Millisecond)))
}

// window is a window of requests judged, good of them, against one
// objective, over secs seconds, with output tokens and latencies.
func window(requests, good uint64, objective, secs float64, tokens uint64) *slo.WindowStats {
	miss := float64(requests-good) / float64(requests)
	budget := slo.ErrorBudget(objective)
	lat := slo.Dist{Count: good, Mean: 0.1, P50: 0.1, P90: 0.1, P95: 0.1, P99: 0.2, Max: 0.2}
	return &slo.WindowStats{
		Seconds: secs, Requests: requests, Good: good, Misses: requests - good,
		MissReasons: map[string]uint64{"ttft": requests - good},
		Attainment:  slo.Num(float64(good) / float64(requests)), Objective: slo.Num(objective),
		GoodRequestsPerSecond: slo.Num(float64(good) / secs), RequestsPerSecond: slo.Num(float64(requests) / secs),
		GoodOutputTokensPerSecond: slo.Num(float64(tokens) / secs), OutputTokensPerSecond: slo.Num(float64(tokens) / secs),
		OutputTokens: tokens, GoodOutputTokens: tokens,
		BurnRate: slo.Num(miss / budget), ErrorBudgetRemaining: slo.Num(1 - miss/budget),
		TTFT: lat, TPOT: lat, ITL: lat, E2E: lat,
	}
}

func snapshot(tenants map[string]*slo.WindowStats) *slo.SLOSnapshot {
	snap := &slo.SLOSnapshot{Time: time.Now(), Tenants: []slo.TenantSLO{}}
	for _, name := range []string{"near", "over", "one"} {
		if w := tenants[name]; w != nil {
			snap.Tenants = append(snap.Tenants, slo.TenantSLO{Tenant: name, SLOs: []string{"c"}, Models: []slo.ModelSLO{},
				Windows: map[string]*slo.WindowStats{"5m": w, "1h": w, "24h": w}})
		}
	}
	return snap
}

// A figure is never rounded onto a bound it is not: 1 miss in 25,000 is not
// 100.00 % attained, nor its error budget 100 % left, nor its burn rate
// 0.00; a budget overspent by 0.4 % is not "-0 %", a burn rate over 1 not
// "1.00" (coloured amber beside it), an attainment below the objective not
// the objective; one request in a day is not 0.000 requests/s. (And the
// misses' reasons are read out and copied apart.)
func TestLivePageRoundsNoFigureOntoABound(t *testing.T) {
	over := window(25000, 24749, 0.99, 300, 1e6)
	over.MissReasons["aborted"] = 2
	api := &stubAPI{}
	api.set(snapshot(map[string]*slo.WindowStats{
		"near": window(25000, 24999, 0.99, 300, 1e6),
		"over": over,
		"one":  window(1, 1, 0.99, 86400, 16),
	}), 200)
	if b := window(25000, 24749, 0.99, 300, 1e6).BurnRate; math.Abs(float64(b)-1.004) > 1e-9 {
		t.Fatalf("over burns %v, want 1.004", b)
	}
	ctx, problems := openPage(t, api)
	poll(t, ctx, "see the tenants", `document.querySelectorAll('tr.tenant').length === 3`)
	got := do(t, ctx, "read the table", chromedp.Evaluate[map[string]string](`(() => {
		const m = {};
		for (const td of document.querySelectorAll('tr.tenant td[data-field]')) {
			m[td.parentElement.dataset.tenant + '/' + td.dataset.field] = td.textContent;
		}
		for (const tr of document.querySelectorAll('tr.tenant')) {
			m[tr.dataset.tenant + '/rates'] = tr.children[8].textContent;
			m[tr.dataset.tenant + '/misses text'] = tr.querySelector('td[data-field=misses]').innerText;
			m[tr.dataset.tenant + '/class'] = tr.querySelector('td[data-field=attainment]').className;
		}
		return m;
	})()`))
	for k, want := range map[string]string{
		"near/attainment": "99.996 %", "near/budget": "99.6 %", "near/burn": "0.004", "near/class": "num good",
		"over/attainment": "98.996 %", "over/budget": "-0.4 %", "over/burn": "1.004", "over/class": "num warn",
		"one/attainment": "100.00 %", "one/budget": "100 %", "one/burn": "0.00",
		"one/rates": "0.00001 of 0.00001", "one/goodput": "0.0002",
		// as read out and copied, not "ttft 251aborted 2"
		"over/misses text": "ttft 251, aborted 2", "one/misses": "none",
	} {
		if got[k] != want {
			t.Errorf("%s: %q on the page, want %q", k, got[k], want)
		}
	}
	for _, p := range problems() {
		t.Errorf("the browser reported: %s", p)
	}
}

// The page's live region (role=status, which a screen reader reads out at
// each change) changes only when reading the API starts or stops failing:
// it held the time of the last read and the count of samples, and so was
// read out at every refresh. While reads fail, the table's numbers (the
// last read's) are marked stale, and no longer once a read succeeds.
func TestLivePageAnnouncesOnlyChanges(t *testing.T) {
	api := &stubAPI{}
	api.set(snapshot(map[string]*slo.WindowStats{"near": window(100, 99, 0.99, 300, 1e4)}), 200)
	ctx, problems := openPage(t, api)
	poll(t, ctx, "see the tenant", `document.querySelectorAll('tr.tenant').length === 1`)
	do(t, ctx, "watch the live region", chromedp.Evaluate[bool](`(() => {
		const live = document.querySelector('[role=status], [aria-live]:not([aria-live=off])');
		window.announced = [];
		new MutationObserver(() => window.announced.push(live.textContent)).observe(live, {childList: true, subtree: true, characterData: true});
		return true;
	})()`))
	type state struct {
		Announced []string `json:"announced"`
		Stale     bool     `json:"stale"`
		Status    string   `json:"status"`
	}
	read := func() state {
		return do(t, ctx, "read the page", chromedp.Evaluate[state](`({announced: window.announced,
			stale: document.getElementById('tenants').classList.contains('stale'),
			status: document.getElementById('status').textContent})`))
	}

	api.after(t)
	api.after(t)
	if s := read(); len(s.Announced) != 0 || s.Stale {
		t.Errorf("reading the API as usual: the live region changed %d times (%q), the table stale %v; status %q",
			len(s.Announced), s.Announced, s.Stale, s.Status)
	}

	api.set(nil, http.StatusServiceUnavailable)
	api.after(t)
	api.after(t)
	if s := read(); len(s.Announced) != 1 || !strings.Contains(s.Announced[0], "HTTP 503") || !s.Stale {
		t.Errorf("failing reads: the live region said %q, want it once, with HTTP 503; the table stale %v", s.Announced, s.Stale)
	}

	api.set(snapshot(map[string]*slo.WindowStats{"near": window(100, 99, 0.99, 300, 1e4)}), 200)
	api.after(t)
	api.after(t)
	if s := read(); len(s.Announced) != 2 || s.Stale || !strings.HasPrefix(s.Status, "updated ") {
		t.Errorf("reads again: the live region said %q, want the failure then its end; the table stale %v; status %q", s.Announced, s.Stale, s.Status)
	}
	for _, p := range problems() {
		if !strings.Contains(p, "503") { // the browser logs the failed reads
			t.Errorf("the browser reported: %s", p)
		}
	}
}

// Over a slow link a large snapshot takes longer than the page's 5 s to
// arrive, and arrives: the page gives up on a read only when nothing came
// for 5 s. It aborted every read 5 s after it began, so that a snapshot of
// 40 KB read at 4 KB/s (a few hundred series over a slow VPN are megabytes)
// was never shown: "timed out", again and again.
func TestLivePageReadsASlowSnapshot(t *testing.T) {
	snap := &slo.SLOSnapshot{Time: time.Now(), Tenants: []slo.TenantSLO{}}
	for i := range 14 {
		w := window(100, 99, 0.99, 300, 1e4)
		snap.Tenants = append(snap.Tenants, slo.TenantSLO{Tenant: fmt.Sprintf("tenant-%d", i), SLOs: []string{"c"}, Models: []slo.ModelSLO{},
			Windows: map[string]*slo.WindowStats{"5m": w, "1h": w, "24h": w}})
	}
	body, _ := json.Marshal(snap)
	const rate = 4 << 10 // bytes per second
	if secs := float64(len(body)) / rate; secs < 7 {
		t.Fatalf("the snapshot takes %.1f s at %d B/s: make it larger than 5 s with room", secs, rate)
	}
	api := &stubAPI{}
	api.set(snap, 200)
	ctx, problems := openPage(t, api, func(base string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			if _, err := cdp.Call(ctx, tg, network.Enable, network.EnableParams{}); err != nil {
				return err
			}
			_, err := cdp.Call(ctx, tg, network.EmulateNetworkConditionsByRule, network.EmulateNetworkConditionsByRuleParams{
				MatchedNetworkConditions: []*network.Conditions{{URLPattern: base + "/admin/api/slo", DownloadThroughput: rate, UploadThroughput: -1}},
			})
			return err
		})
	})
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if _, err := chromedp.Run(rctx, chromedp.Poll[bool](`document.querySelectorAll('tr.tenant').length === 14`,
		chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		status, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('status').textContent`))
		t.Fatalf("the page did not show the snapshot read at %d B/s (%d bytes) in 60 s: %v; its status: %q", rate, len(body), err, status)
	}
	for _, p := range problems() {
		t.Errorf("the browser reported: %s", p)
	}
}

// A model's row is coloured by its judgement as its tenant's is: the model
// rows' muted text colour (tr.model td) overrode .good, .warn and .bad, so
// a model far below its objective showed in grey.
func TestLivePageColoursModelRows(t *testing.T) {
	bad, good := window(100, 50, 0.99, 300, 1e4), window(100, 100, 0.99, 300, 1e4)
	both := window(200, 150, 0.99, 300, 2e4)
	api := &stubAPI{}
	api.set(&slo.SLOSnapshot{Time: time.Now(), Tenants: []slo.TenantSLO{{
		Tenant: "acme", SLOs: []string{"c"}, Windows: map[string]*slo.WindowStats{"5m": both, "1h": both, "24h": both},
		Models: []slo.ModelSLO{
			{Model: "big", SLOs: []string{"c"}, Windows: map[string]*slo.WindowStats{"5m": bad, "1h": bad, "24h": bad}},
			{Model: "small", SLOs: []string{"c"}, Windows: map[string]*slo.WindowStats{"5m": good, "1h": good, "24h": good}},
		},
	}}}, 200)
	ctx, problems := openPage(t, api)
	poll(t, ctx, "see the models", `document.querySelectorAll('tr.model').length === 2`)
	got := do(t, ctx, "read the colours", chromedp.Evaluate[map[string]string](`(() => {
		const m = {}, color = sel => getComputedStyle(document.querySelector(sel)).color;
		m.tenant = color('tr.tenant td[data-field=attainment]');
		m.big = color('tr.model[data-model=big] td[data-field=attainment]');
		m.small = color('tr.model[data-model=small] td[data-field=attainment]');
		m.bigBudget = color('tr.model[data-model=big] td[data-field=budget]');
		m.name = color('tr.model[data-model=big] td[data-field=name]');
		const probe = document.createElement('span');
		document.body.appendChild(probe);
		for (const c of ['bad', 'good']) { probe.className = c; m[c] = getComputedStyle(probe).color; }
		return m;
	})()`))
	if got["tenant"] != got["bad"] || got["big"] != got["bad"] || got["bigBudget"] != got["bad"] || got["small"] != got["good"] {
		t.Errorf("attainment colours: tenant %s, model big %s (budget %s), model small %s; want bad %s, good %s",
			got["tenant"], got["big"], got["bigBudget"], got["small"], got["bad"], got["good"])
	}
	if got["name"] == got["bad"] {
		t.Errorf("the model's name is coloured too")
	}
	for _, p := range problems() {
		t.Errorf("the browser reported: %s", p)
	}
}

// A chart's line breaks where the page could not read the API (the
// gateway restarting, say), and where a tenant was missing from what it
// read: it was drawn straight across, as if measured there.
func TestLivePageChartsBreakWhereNothingWasRead(t *testing.T) {
	both := snapshot(map[string]*slo.WindowStats{"near": window(100, 99, 0.99, 300, 1e4), "one": window(1, 1, 0.99, 300, 16)})
	api := &stubAPI{}
	api.set(both, 200)
	ctx, problems := openPage(t, api)
	poll(t, ctx, "see the tenants", `document.querySelectorAll('tr.tenant').length === 2`)
	api.after(t)
	api.set(nil, http.StatusServiceUnavailable)
	api.after(t)
	api.set(snapshot(map[string]*slo.WindowStats{"near": window(100, 99, 0.99, 300, 1e4)}), 200) // "one" missing
	api.after(t)
	api.set(both, 200)
	api.after(t)
	segments := do(t, ctx, "read the chart", chromedp.Evaluate[map[string]int](`(() => {
		const m = {};
		for (const p of document.querySelectorAll('#chart-attainment path[data-tenant]')) {
			if (p.getAttribute('stroke-dasharray')) continue; // the objective's line
			m[p.dataset.tenant] = (p.getAttribute('d').match(/M/g) || []).length;
		}
		return m;
	})()`))
	// near: read, failed, read, read: 2 segments; one: read, failed,
	// missing, read: 2 segments.
	if segments["near"] != 2 || segments["one"] != 2 {
		t.Errorf("attainment lines in %v segments, want 2 each (broken where nothing was read)", segments)
	}
	for _, p := range problems() {
		if !strings.Contains(p, "503") {
			t.Errorf("the browser reported: %s", p)
		}
	}
}

// A window that covers less than its name says (the gateway started, or its
// figures began again, 12 minutes ago: its "1h" and "24h" hold 12 minutes)
// says so beside the window's choice; one that covers its length does not.
// The page showed "24h" over 12 minutes' figures without a word.
func TestLivePageSaysWhatAWindowCovers(t *testing.T) {
	w5, w1h := window(100, 99, 0.99, 290, 1e4), window(300, 297, 0.99, 720, 3e4)
	api := &stubAPI{}
	api.set(&slo.SLOSnapshot{Time: time.Now(), Tenants: []slo.TenantSLO{{
		Tenant: "acme", SLOs: []string{"c"}, Models: []slo.ModelSLO{},
		Windows: map[string]*slo.WindowStats{"5m": w5, "1h": w1h, "24h": w1h},
	}}}, 200)
	ctx, problems := openPage(t, api)
	poll(t, ctx, "see the tenant", `document.querySelectorAll('tr.tenant').length === 1`)
	choose := func(win string) string {
		return do(t, ctx, "choose "+win, chromedp.Evaluate[string](`(() => {
			const s = document.getElementById('window');
			s.value = `+fmt.Sprintf("%q", win)+`;
			s.dispatchEvent(new Event('change'));
			const n = document.getElementById('covers');
			return n && !n.hidden ? n.textContent : '';
		})()`))
	}
	if got := choose("1h"); got != "covers only the last 12 min: the gateway's figures begin then" {
		t.Errorf("1h over 720 s: the page says %q", got)
	}
	if got := choose("24h"); got != "covers only the last 12 min: the gateway's figures begin then" {
		t.Errorf("24h over 720 s: the page says %q", got)
	}
	if got := choose("5m"); got != "" {
		t.Errorf("5m over 290 s (its slots): the page says %q", got)
	}
	for _, p := range problems() {
		t.Errorf("the browser reported: %s", p)
	}
}
