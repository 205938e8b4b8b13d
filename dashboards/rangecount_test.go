package dashboards

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goodput/goodput/internal/testenv"
)

// The figures over the dashboard's time range count every request, as
// goodput report does: in the real PromQL engine (promtool, with the
// project's rules), over ten minutes in which replica gw-1 judges 600
// requests of acme, all good, and replica gw-2, started 4 minutes before
// the end, judges 200, all misses (its series first scraped at 100), each
// panel's query answers 800 judged, 200 misses, attainment 0.75, a budget
// of 0.5 (objective 0.5) half left. increase() missed the 100 counted
// before gw-2's first scrape and extrapolated the rest to 112.5: 712.5
// judged, 112.5 misses, attainment 0.84, the budget 0.68 left.
func TestRangePanelsCountEveryRequest(t *testing.T) {
	rules, err := filepath.Abs("../deploy/prometheus/goodput-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// What each query over the range must answer, by dashboard file, panel
	// title and query: every query with $__range is here.
	want := map[string]string{
		"goodput-slo.json/Per tenant and SLO class/A":                        `{slo="interactive",tenant="acme"} 0.75`,
		"goodput-slo.json/Per tenant and SLO class/C":                        `{slo="interactive",tenant="acme"} 0.5`,
		"goodput-slo.json/Per tenant and SLO class/G":                        `{slo="interactive",tenant="acme"} 800`,
		"goodput-slo.json/Per tenant and SLO class/H":                        `{slo="interactive",tenant="acme"} 200`,
		"goodput-slo.json/Error budget left over the time range/A":           `{slo="interactive",tenant="acme"} 0.5`,
		"goodput-slo.json/Misses by tenant and reason over the time range/A": `{reason="ttft",tenant="acme"} 200`,
		"goodput-ratelimit.json/Denied share over the time range/A":          `{tenant="acme"} 0.25`,
		"goodput-traffic.json/ISL distribution over the time range/A":        `{le="+Inf"} 800`,
		"goodput-traffic.json/OSL distribution over the time range/A":        `{le="+Inf"} 800`,
	}
	// gw-1: 1 a second from the start; gw-2: 100 at its first scrape, 26
	// minutes in (a burst as it started), then 25 a minute.
	const old, born = `0+60x30`, `_x26 100+25x4`
	var series strings.Builder
	add := func(name, labels, values string) {
		fmt.Fprintf(&series, "      - series: '%s{%s}'\n        values: '%s'\n", name, labels, values)
	}
	const acme = `tenant="acme",model="m",slo="interactive"`
	add("goodput_slo_requests_total", `instance="gw-1",`+acme+`,result="good"`, old)
	add("goodput_slo_requests_total", `instance="gw-1",`+acme+`,result="miss"`, "0x30")
	add("goodput_slo_requests_total", `instance="gw-2",`+acme+`,result="good"`, "_x26 0x4")
	add("goodput_slo_requests_total", `instance="gw-2",`+acme+`,result="miss"`, born)
	add("goodput_slo_misses_total", `instance="gw-1",`+acme+`,reason="ttft"`, "0x30")
	add("goodput_slo_misses_total", `instance="gw-2",`+acme+`,reason="ttft"`, born)
	add("goodput_slo_misses_total", `instance="gw-2",`+acme+`,reason="tpot"`, "_x26 0x4")
	for _, inst := range []string{"gw-1", "gw-2"} {
		add("goodput_slo_objective", `instance="`+inst+`",tenant="acme",slo="interactive"`, "0.5x30")
	}
	add("goodput_ratelimit_decisions_total", `instance="gw-1",tenant="acme",limit="none",decision="allowed"`, old)
	add("goodput_ratelimit_decisions_total", `instance="gw-2",tenant="acme",limit="requests",decision="denied"`, born)
	for _, h := range []string{"goodput_input_tokens_bucket", "goodput_output_tokens_bucket"} {
		add(h, `instance="gw-1",tenant="acme",model="m",route="chat",le="+Inf"`, old)
		add(h, `instance="gw-2",tenant="acme",model="m",route="chat",le="+Inf"`, born)
	}
	vals := map[string]string{"tenant": ".*", "model": ".*", "__range": "10m"}
	var tests strings.Builder
	for _, bq := range boardQueries(t) {
		if !strings.Contains(bq.q.Expr, "$__range") {
			continue
		}
		key := bq.file + "/" + bq.panel.Title + "/" + bq.q.RefID
		sample, ok := want[key]
		if !ok {
			t.Errorf("%s: a query over the range this test does not check: %s", key, bq.q.Expr)
			continue
		}
		delete(want, key)
		labels, value, _ := strings.Cut(sample, " ")
		fmt.Fprintf(&tests, "      # %s\n      - expr: %q\n        eval_time: 30m\n        exp_samples:\n          - labels: '%s'\n            value: %s\n",
			key, Substitute(bq.q.Expr, vals), labels, value)
	}
	for key := range want {
		t.Errorf("%s: no such query over the range", key)
	}
	testenv.PromtoolTest(t, fmt.Sprintf("rule_files: [%q]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n", rules)+
		series.String()+"    promql_expr_test:\n"+tests.String())
}
