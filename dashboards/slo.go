package dashboards

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

// The SLO counters (package slo) and what the recording rules in
// deploy/prometheus/goodput-rules.yaml make of them.
var (
	sloRequests = metric("goodput_slo_requests_total", tenantIs, modelIs)
	sloGood     = sloRequests.where(`result="good"`)
	sloMiss     = sloRequests.where(`result="miss"`)
	sloMisses   = metric("goodput_slo_misses_total", tenantIs, modelIs)
	objective   = metric("goodput_slo_objective", tenantIs)
	requests    = metric("goodput_requests_total", tenantIs, modelIs)
)

// burnRate is the recorded burn rate of a window (5m, 30m, 1h, 6h, 3d):
// the alerts' input, per tenant and class (the aggregation keeps only those
// labels, so that the table's columns join on them).
func burnRate(window string) expr {
	return maxOf(metric("tenant_slo:goodput_slo_burn_rate:rate"+window, tenantIs).expr(), "tenant", "slo")
}

// attainmentOver is good / judged by tenant and class over window.
func attainmentOver(window string, f func(sel, string) expr) expr {
	return ratio(sum(f(sloGood, window), "tenant", "slo"), sum(f(sloRequests, window), "tenant", "slo"))
}

// budgetLeftOver is 1 − burn rate over window: the share of the window's
// error budget not spent (negative when overspent), as the admin API's
// error_budget_remaining.
func budgetLeftOver(window string) expr {
	missRatio := ratio(sum(exactIncrease(sloMiss, window), "tenant", "slo"), sum(exactIncrease(sloRequests, window), "tenant", "slo"))
	return oneMinus(ratioOn(paren(missRatio), metric("tenant_slo:goodput_slo_error_budget:ratio", tenantIs).expr(), "tenant", "slo"))
}

const perClass = "{{tenant}} · {{slo}}"

func sloBoard() *dashboard.DashboardBuilder {
	table := tableOf("Per tenant and SLO class",
		"Over the dashboard's time range: attainment (good / judged requests) next to the class's objective, "+
			"the error budget left (1 − burn rate; negative when overspent), and the burn rates of the alert windows "+
			"(1 spends the budget exactly as fast as the objective allows; the fast page fires above 14.4 on 1h and 5m). "+
			"Burn rates are per tenant and class (recording rules): the model filter does not apply to them.",
		[]string{"Attainment", "Objective", "Error budget left", "Burn rate 5m", "Burn rate 1h", "Burn rate 6h", "Judged requests", "Misses"},
		[]string{unitRatio, unitRatio, unitRatio, unitFraction, unitFraction, unitFraction, unitCount, unitCount},
		column(attainmentOver(rangeWindow, exactIncrease)),
		column(maxOf(objective.expr(), "tenant", "slo")),
		column(budgetLeftOver(rangeWindow)),
		column(burnRate("5m")),
		column(burnRate("1h")),
		column(burnRate("6h")),
		column(sum(exactIncrease(sloRequests, rangeWindow), "tenant", "slo")),
		column(sum(exactIncrease(sloMiss, rangeWindow), "tenant", "slo")),
	)

	attainment := dashed(timeSeries("Attainment (5m) against objective",
		"Good / judged requests over the last 5 minutes at each point (the window of the fast burn-rate alert), "+
			"with the class's objective dashed.",
		unitRatio,
		series(attainmentOver("5m", rateOver), perClass),
		series(maxOf(objective.expr(), "tenant", "slo"), perClass+" objective"),
	).Max(1), "B")

	burn := withThresholdLines(timeSeries("Burn rate",
		"Miss ratio / error budget over 5m, 1h and 6h (recording rules). 1 spends a 30-day budget in 30 days; "+
			"the alerts page above 14.4 (1h and 5m) and 6 (6h and 30m). Per tenant and class: the model filter does not apply.",
		unitFraction,
		series(burnRate("5m"), perClass+" 5m"),
		series(burnRate("1h"), perClass+" 1h"),
		series(burnRate("6h"), perClass+" 6h"),
	), 6, 14.4)

	budget := statPanel("Error budget left over the time range",
		"1 − (misses / judged requests) / (1 − objective) over the dashboard's time range. "+
			"100% is untouched; 0 is spent; negative is overspent.",
		unitRatio,
		latest(budgetLeftOver(rangeWindow), perClass),
	).Thresholds(thresholds("red", level{0, "orange"}, level{0.5, "green"})).
		ColorScheme(dashboard.NewFieldColorBuilder().Mode(dashboard.FieldColorModeIdThresholds))

	reasons := stacked("Misses by reason",
		"Misses per second by reason. A miss with several reasons (a late first token and a slow stream) counts once for each.",
		unitReqPerS,
		series(sum(rate(sloMisses), "reason"), "{{reason}}"),
	)

	reasonsByTenant := bars("Misses by tenant and reason over the time range",
		"Misses over the dashboard's time range, most first; a miss with several reasons counts once for each.",
		unitCount,
		latest(expr("sort_desc(")+sum(exactIncrease(sloMisses, rangeWindow), "tenant", "reason")+" > 0)", "{{tenant}} · {{reason}}"),
	).NoValue("No misses")

	outcomes := stacked("Requests by outcome",
		"Every request that reached the gateway, by its one outcome (ok, upstream_error, client_error, client_abort, "+
			"timeout, rate_limited, unauthorized, rejected).",
		unitReqPerS,
		series(sum(rate(requests), "outcome"), "{{outcome}}"),
	)

	return newBoard("goodput-slo", "goodput: SLO overview",
		"Per tenant: attainment against the objective, error budget, burn rates and why requests miss.",
		tenantVar(), modelVar()).
		WithRow(row("Attainment and error budget")).
		WithPanel(table).
		WithPanel(attainment).
		WithPanel(burn).
		WithPanel(budget).
		WithRow(row("Misses")).
		WithPanel(reasons).
		WithPanel(reasonsByTenant).
		WithPanel(outcomes)
}
