// Package dashboards generates goodput's Grafana dashboards as code, with
// the Grafana Foundation SDK: every panel query is a typed Prometheus query
// built from the helpers in promql.go, and `go generate ./dashboards`
// writes the importable JSON next to this file (Boards lists the files).
//
// The JSON is committed. A test fails when it differs from what the
// generator produces, and cmd/goodput's dashboard test runs every panel
// query against a real Prometheus that scrapes a gateway under load.
package dashboards

//go:generate go run ./gen -out .

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// A Board is one dashboard and the file it is written to.
type Board struct {
	// File is the JSON file's name in dashboards/. Deployments provision
	// dashboards/*.json, so names are stable.
	File  string
	build func() *dashboard.DashboardBuilder
}

// Boards returns every dashboard, in the order of their links.
func Boards() []Board {
	return []Board{
		{File: "goodput-slo.json", build: sloBoard},
		{File: "goodput-latency.json", build: latencyBoard},
		{File: "goodput-traffic.json", build: trafficBoard},
		{File: "goodput-ratelimit.json", build: rateLimitBoard},
		{File: "goodput-gateway.json", build: gatewayBoard},
		{File: "goodput-engine.json", build: engineBoard},
	}
}

// Dashboard builds the dashboard, numbers its panels and names its queries
// (A, B, … in each panel).
func (b Board) Dashboard() (dashboard.Dashboard, error) {
	d, err := b.build().Build()
	if err != nil {
		return d, fmt.Errorf("%s: %w", b.File, err)
	}
	id := uint32(0)
	for _, pr := range d.Panels {
		id++
		switch {
		case pr.RowPanel != nil:
			pr.RowPanel.Id = id
			for i := range pr.RowPanel.Panels {
				id++
				number(&pr.RowPanel.Panels[i], id)
			}
		case pr.Panel != nil:
			number(pr.Panel, id)
		}
	}
	return d, nil
}

func number(p *dashboard.Panel, id uint32) {
	p.Id = cog.ToPtr(id)
	for i, t := range p.Targets {
		if q, ok := t.(prometheus.Dataquery); ok && q.RefId == nil {
			q.RefId = cog.ToPtr(refID(i))
			p.Targets[i] = q
		}
	}
}

// JSON is the dashboard as the committed file holds it: indented, with a
// final newline.
func (b Board) JSON() ([]byte, error) {
	d, err := b.Dashboard()
	if err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.File, err)
	}
	return append(out, '\n'), nil
}

// newBoard starts a dashboard with goodput's tag, links to the other
// dashboards (keeping the time range and the variables), and the
// datasource variable; vars follow it.
func newBoard(uid, title, desc string, vars ...cog.Builder[dashboard.VariableModel]) *dashboard.DashboardBuilder {
	b := dashboard.NewDashboardBuilder(title).Uid(uid).Description(desc).
		Tags([]string{"goodput"}).Editable().
		Time("now-1h", "now").Refresh("30s").Timezone("browser").
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		// Grafana's own annotations (and alert state changes), as in a
		// dashboard made in its editor.
		Annotation(dashboard.NewAnnotationQueryBuilder().Name("Annotations & Alerts").BuiltIn(1).Type("dashboard").
			Datasource(common.DataSourceRef{Type: cog.ToPtr("grafana"), Uid: cog.ToPtr("-- Grafana --")}).
			Enable(true).Hide(true).IconColor("rgba(0, 211, 255, 1)")).
		Link(dashboard.NewDashboardLinkBuilder("goodput").Type(dashboard.DashboardLinkTypeDashboards).
			Tags([]string{"goodput"}).AsDropdown(true).IncludeVars(true).KeepTime(true)).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus"))
	for _, v := range vars {
		b.WithVariable(v)
	}
	return b
}

// labelVar is a multi-value variable listing a label's values, "All" by
// default (".*", so that every query filters with =~).
func labelVar(name, label, query string) *dashboard.QueryVariableBuilder {
	all, allText := "$__all", "All"
	return dashboard.NewQueryVariableBuilder(name).Label(label).
		Query(dashboard.StringOrMap{String: cog.ToPtr(query)}).Definition(query).
		Datasource(datasource).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).IncludeAll(true).AllValue(".*").
		Current(dashboard.VariableOption{
			Text:  dashboard.StringOrArrayOfString{String: &allText},
			Value: dashboard.StringOrArrayOfString{String: &all},
		})
}

// The tenant and model variables of the gateway's dashboards. The model
// list follows the tenants chosen.
func tenantVar() *dashboard.QueryVariableBuilder {
	return labelVar("tenant", "Tenant", "label_values(goodput_requests_total, tenant)")
}

func modelVar() *dashboard.QueryVariableBuilder {
	return labelVar("model", "Model", `label_values(goodput_requests_total{tenant=~"$tenant"}, model)`)
}
