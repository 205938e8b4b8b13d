package report

import (
	"math"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 1, 5, 10, 30, 0, 0, time.UTC)

func TestParseTime(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Time
	}{
		{"now", now},
		{" now ", now},
		{"-24h", now.Add(-24 * time.Hour)},
		{"-90m", now.Add(-90 * time.Minute)},
		{"-7d", now.Add(-7 * 24 * time.Hour)},
		{"-1d12h", now.Add(-36 * time.Hour)},
		{"-1h30m15s", now.Add(-(time.Hour + 30*time.Minute + 15*time.Second))},
		{"2026-01-04T08:00:00Z", time.Date(2026, 1, 4, 8, 0, 0, 0, time.UTC)},
		{"2026-01-04T09:00:00.5+01:00", time.Date(2026, 1, 4, 8, 0, 0, 5e8, time.UTC)},
		{"2026-01-04", time.Date(2026, 1, 4, 0, 0, 0, 0, time.UTC)},
		{"1970-01-01", time.Unix(0, 0)},
	} {
		got, err := ParseTime(c.in, now)
		if err != nil || !got.Equal(c.want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "-", "-0s", "-d", "-xd", "-1y", "yesterday", "24h", "--1h", "-1h-1m", "2026-13-01",
		// Before 1970: 0001-01-01 is Go's zero time, which read as no start.
		"0001-01-01", "0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "-100000d"} {
		if got, err := ParseTime(bad, now); err == nil {
			t.Errorf("ParseTime(%q) = %v, want an error", bad, got)
		}
	}
}

func TestBaseURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:9090":      "http://127.0.0.1:9090",
		"http://127.0.0.1:9090/":     "http://127.0.0.1:9090",
		"127.0.0.1:9090":             "http://127.0.0.1:9090",
		"https://prom.example/base/": "https://prom.example/base",
	} {
		if got, err := BaseURL(in); err != nil || got != want {
			t.Errorf("BaseURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "ftp://x", "http://", "http://x/?q=1", "http://x:bad"} {
		if got, err := BaseURL(bad); err == nil {
			t.Errorf("BaseURL(%q) = %q, want an error", bad, got)
		}
	}
}

func TestQueryNormalise(t *testing.T) {
	ok := Query{Tenant: "acme", From: now.Add(-time.Hour), To: now, Now: now}
	if err := ok.normalise(); err != nil || ok.Worst != DefaultWorst || ok.Client == nil {
		t.Fatalf("normalise: %v %+v", err, ok)
	}
	for name, c := range map[string]struct {
		q    Query
		want string
	}{
		"no tenant":  {Query{From: now.Add(-time.Hour), To: now, Now: now}, "no tenant"},
		"reversed":   {Query{Tenant: "a", From: now, To: now.Add(-time.Hour), Now: now}, "not before its end"},
		"empty":      {Query{Tenant: "a", From: now, To: now, Now: now}, "not before its end"},
		"future end": {Query{Tenant: "a", From: now, To: now.Add(time.Hour), Now: now}, "in the future"},
		"no from":    {Query{Tenant: "a", To: now, Now: now}, "needs both"},
	} {
		if err := c.q.normalise(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", name, err, c.want)
		}
	}
}

// A report with the given counts and classes, finished.
func finished(requests, good Num, classes []Class, secs float64) *Report {
	r := newReport("acme", Source{Kind: SourcePrometheus}, now.Add(-time.Hour), now)
	r.Period.Seconds = secs
	r.SLO.Requests, r.SLO.Good = requests, good
	r.SLO.Classes = classes
	r.Goodput.GoodOutputTokens, r.Throughput.OutputTokens = 900, 1000
	r.finish(DefaultWorst)
	return r
}

func TestFinishSingleClass(t *testing.T) {
	r := finished(1000, 985, []Class{{Name: "interactive", Objective: 0.99, Requests: 1000, Good: 985}}, 100)
	s := r.SLO
	eq := func(name string, got Num, want float64) {
		t.Helper()
		if math.Abs(float64(got)-want) > 1e-12 {
			t.Errorf("%s = %v, want %v", name, float64(got), want)
		}
	}
	eq("misses", s.Misses, 15)
	eq("attainment", s.Attainment, 0.985)
	eq("objective", s.Objective, 0.99)
	eq("error budget", s.ErrorBudget, 0.01)
	eq("allowed misses", s.AllowedMisses, 10)
	eq("budget used", s.ErrorBudgetUsed, 1.5)
	eq("budget remaining", s.ErrorBudgetRemaining, -0.5)
	eq("good req/s", r.Goodput.GoodRequestsPerSecond, 9.85)
	eq("good tok/s", r.Goodput.GoodOutputTokensPerSecond, 9)
	eq("req/s", r.Throughput.RequestsPerSecond, 10)
	eq("tok/s", r.Throughput.OutputTokensPerSecond, 10)
	if s.Met == nil || *s.Met {
		t.Errorf("met = %v, want false (98.5%% < 99%%)", s.Met)
	}
	// Exactly on the objective is met (inclusive).
	r = finished(100, 99, []Class{{Name: "i", Objective: 0.99, Requests: 100, Good: 99}}, 100)
	if r.SLO.Met == nil || !*r.SLO.Met {
		t.Errorf("99 of 100 against 0.99: met = %v, want true", r.SLO.Met)
	}
}

// A period at exactly its objective spends exactly its error budget, with
// one class or several of the same objective, whatever the source: 27 good
// of 30 against 0.9 was 100.000000% used and -0.000000% left (1 − 0.9 is
// 0.09999999999999998 in binary floating point).
func TestFinishAtObjectiveSpendsBudgetExactly(t *testing.T) {
	for _, c := range []struct {
		name    string
		classes []Class
	}{
		{"one class", []Class{{Name: "i", Objective: 0.9, Requests: 30, Good: 27}}},
		{"two classes of one objective", []Class{{Name: "a", Objective: 0.9, Requests: 10, Good: 9}, {Name: "b", Objective: 0.9, Requests: 20, Good: 18}}},
		{"classes unknown, the source's objective", nil},
	} {
		r := newReport("acme", Source{Kind: SourceAdmin}, now.Add(-time.Hour), now)
		r.Period.Seconds = 60
		r.SLO.Requests, r.SLO.Good, r.SLO.Classes = 30, 27, c.classes
		if c.classes == nil {
			r.SLO.Objective = 0.9
		}
		r.finish(DefaultWorst)
		s := r.SLO
		if s.Objective != 0.9 || s.ErrorBudget != 0.1 || s.ErrorBudgetUsed != 1 || s.ErrorBudgetRemaining != 0 || s.Met == nil || !*s.Met {
			t.Errorf("%s: objective %v, budget %v, used %v, remaining %v, met %v; want 0.9, 0.1, 1, 0, true",
				c.name, float64(s.Objective), float64(s.ErrorBudget), float64(s.ErrorBudgetUsed), float64(s.ErrorBudgetRemaining), s.Met)
		}
		if got := fmtPct(s.ErrorBudgetUsed) + " " + fmtPct(s.ErrorBudgetRemaining); got != "100.00% 0.00%" {
			t.Errorf("%s: budget used and left print %q, want \"100.00%% 0.00%%\"", c.name, got)
		}
	}
}

// A class without requests in the period (a Prometheus report lists one
// whose counters did not grow) leaves the objective and the budget used
// those of the classes that had them, as in the live view, which leaves out
// a series without requests in its window: 3 misses of 3 against 0.8,
// beside a class of 0.99 with none, had the objective 0.7999999999999999
// and 4.999999999999999 of the budget used, where the class alone has 0.8
// and 5.
func TestFinishIdleClassKeepsTheObjective(t *testing.T) {
	run := func(classes []Class) SLOSummary {
		r := newReport("acme", Source{Kind: SourcePrometheus}, now.Add(-time.Hour), now)
		r.Period.Seconds = 60
		r.SLO.Requests, r.SLO.Good, r.SLO.Classes = 3, 0, classes
		r.finish(DefaultWorst)
		return r.SLO
	}
	busy := Class{Name: "batch", Objective: 0.8, Requests: 3, Good: 0}
	alone := run([]Class{busy})
	both := run([]Class{busy, {Name: "interactive", Objective: 0.99, Requests: 0, Good: 0}})
	if alone.Objective != 0.8 || alone.ErrorBudgetUsed != 5 || both.Objective != alone.Objective || both.ErrorBudgetUsed != alone.ErrorBudgetUsed || both.AllowedMisses != alone.AllowedMisses {
		t.Errorf("objective %v, budget used %v, allowed %v beside an idle class; %v, %v, %v alone; want 0.8 and 5, the same both",
			float64(both.Objective), float64(both.ErrorBudgetUsed), float64(both.AllowedMisses), float64(alone.Objective), float64(alone.ErrorBudgetUsed), float64(alone.AllowedMisses))
	}
}

// With several classes the allowed misses add up per class, as in the
// gateway's live view and the recording rules.
func TestFinishSeveralClasses(t *testing.T) {
	r := finished(1100, 1060, []Class{
		{Name: "batch", Objective: 0.9, Requests: 100, Good: 80},
		{Name: "interactive", Objective: 0.99, Requests: 1000, Good: 980},
	}, 10)
	allowed := 100*0.1 + 1000*0.01 // 20
	if got := float64(r.SLO.AllowedMisses); math.Abs(got-allowed) > 1e-9 {
		t.Errorf("allowed misses %v, want %v", got, allowed)
	}
	if got := float64(r.SLO.ErrorBudgetUsed); math.Abs(got-40/allowed) > 1e-9 {
		t.Errorf("budget used %v, want %v", got, 40/allowed)
	}
	if got := float64(r.SLO.Objective); math.Abs(got-(1-allowed/1100)) > 1e-12 {
		t.Errorf("objective %v, want the request-weighted %v", got, 1-allowed/1100)
	}
	// One class's objective unknown: so is the whole budget.
	r = finished(1100, 1060, []Class{
		{Name: "batch", Objective: unknown(), Requests: 100, Good: 80},
		{Name: "interactive", Objective: 0.99, Requests: 1000, Good: 980},
	}, 10)
	for name, v := range map[string]Num{"objective": r.SLO.Objective, "budget": r.SLO.ErrorBudget, "used": r.SLO.ErrorBudgetUsed, "remaining": r.SLO.ErrorBudgetRemaining} {
		if Known(v) {
			t.Errorf("%s = %v, want unknown", name, float64(v))
		}
	}
	if r.SLO.Met != nil {
		t.Errorf("met = %v, want unknown", *r.SLO.Met)
	}
}

func TestFinishNoRequests(t *testing.T) {
	r := finished(0, 0, []Class{{Name: "i", Objective: 0.99, Requests: 0, Good: 0}}, 60)
	if Known(r.SLO.Attainment) || Known(r.SLO.ErrorBudgetUsed) || r.SLO.Met != nil {
		t.Errorf("no requests: attainment %v, used %v, met %v; want unknown", r.SLO.Attainment, r.SLO.ErrorBudgetUsed, r.SLO.Met)
	}
	if r.SLO.Objective != 0.99 || r.SLO.AllowedMisses != 0 {
		t.Errorf("objective %v allowed %v; want 0.99 and 0", r.SLO.Objective, r.SLO.AllowedMisses)
	}
	if r.Goodput.GoodRequestsPerSecond != 0 {
		t.Errorf("goodput %v, want 0", r.Goodput.GoodRequestsPerSecond)
	}
	r = finished(10, 10, nil, 0)
	if Known(r.Goodput.GoodRequestsPerSecond) || Known(r.Throughput.RequestsPerSecond) {
		t.Errorf("a zero-length period has unknown rates, got %v", r.Goodput.GoodRequestsPerSecond)
	}
}

func TestWorstHours(t *testing.T) {
	h := func(i int, req, good Num) Hour {
		start := now.Add(time.Duration(i) * time.Hour)
		return Hour{Start: start, End: start.Add(time.Hour), Requests: req, Good: good, Misses: req - good, Attainment: ratio(good, req)}
	}
	hours := []Hour{h(0, 100, 99), h(1, 0, 0), h(2, 10, 5), h(3, 100, 50), h(4, 100, 100), h(5, 20, 10)}
	got := worstHours(hours, 3)
	var starts []int
	for _, g := range got {
		starts = append(starts, int(g.Start.Sub(now)/time.Hour))
	}
	// 50% three times: more misses first (3: 50, 5: 10, 2: 5); the empty
	// hour 1 is never a worst hour.
	if want := []int{3, 5, 2}; len(starts) != 3 || starts[0] != want[0] || starts[1] != want[1] || starts[2] != want[2] {
		t.Errorf("worst hours %v, want %v", starts, want)
	}
	if all := worstHours(hours, 100); len(all) != 5 {
		t.Errorf("%d hours with requests, want 5", len(all))
	}
}

func TestHourSpans(t *testing.T) {
	from := time.Date(2026, 1, 5, 9, 40, 0, 0, time.UTC)
	to := time.Date(2026, 1, 5, 12, 10, 0, 0, time.UTC)
	got := hourSpans(from, to)
	want := [][2]string{{"09:40", "10:00"}, {"10:00", "11:00"}, {"11:00", "12:00"}, {"12:00", "12:10"}}
	if len(got) != len(want) {
		t.Fatalf("spans %v", got)
	}
	for i, sp := range got {
		if sp[0].Format("15:04") != want[i][0] || sp[1].Format("15:04") != want[i][1] {
			t.Errorf("span %d = %v, want %v", i, sp, want[i])
		}
	}
	if got := hourSpans(from, from.Add(5*time.Minute)); len(got) != 1 || !got[0][1].Equal(from.Add(5*time.Minute)) {
		t.Errorf("a short period is one span, got %v", got)
	}
}

func TestTopReasons(t *testing.T) {
	rs := reasonList(map[string]Num{"e2e": 2, "ttft": 5, "error": 5, "weird": 1})
	if rs[0].Reason != "ttft" || rs[len(rs)-1].Reason != "weird" || len(rs) != 9 {
		t.Fatalf("reasonList %+v", rs)
	}
	top := topReasons(rs)
	var names []string
	for _, r := range top {
		names = append(names, r.Reason)
	}
	if strings.Join(names, ",") != "ttft,error,e2e,weird" {
		t.Errorf("top reasons %v, want ttft,error,e2e,weird (ties in reason order)", names)
	}
	if got := reasonsText(top); got != "ttft (5), error (5), e2e (2)" {
		t.Errorf("reasonsText = %q", got)
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{fmtCount(1234567), "1,234,567"},
		{fmtCount(12.34), "12.3"},
		{fmtCount(unknown()), "unknown"},
		{fmtPct(0.98765), "98.77%"},
		{fmtPct(0.99999), "99.999%"},
		{fmtPct(1), "100.00%"},
		{fmtPct(0.00001), "0.001%"},
		{fmtPct(-0.5), "-50.00%"},
		{fmtPct(Num(math.Inf(1))), "unknown"},
		{fmtNum(0.012345), "0.01235"},
		{fmtNum(12345.6), "12,346"},
		{fmtNum(2.5), "2.5"},
		{fmtSeconds(0.0123), "12.3 ms"},
		{fmtSeconds(2.5), "2.5 s"},
		{fmtSeconds(unknown()), "unknown"},
		{fmtSpan(3600), "1h"},
		{fmtSpan(90), "1m30s"},
		{fmtSpan(0.42), "420ms"},
		{fmtSpan(86400 * 7), "168h"},
		{fmtHour(Hour{Start: time.Date(2026, 1, 5, 23, 0, 0, 0, time.UTC), End: time.Date(2026, 1, 6, 0, 0, 0, 0, time.UTC)}), "2026-01-05 23:00–00:00 UTC"},
		{fmtHour(Hour{Start: time.Date(2026, 1, 5, 9, 40, 30, 0, time.UTC), End: time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)}), "2026-01-05 09:40:30–10:00:00 UTC"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
