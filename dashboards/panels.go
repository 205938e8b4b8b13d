package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/bargauge"
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// Every panel and variable queries the data source the user picks in the
// datasource variable.
var datasource = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

// Units (Grafana's unit ids).
const (
	unitSeconds  = "s"
	unitRatio    = "percentunit" // 0..1 shown as a percentage
	unitReqPerS  = "reqps"
	unitGapPerS  = "gaps/s"   // a custom unit, as tokens/s
	unitTokPerS  = "tokens/s" // a custom unit: Grafana shows it as a suffix
	unitTokens   = "short"
	unitCount    = "short"
	unitBytes    = "bytes"
	unitFraction = "none"
)

// Queries. A range query draws a line over time; an instant query gives one
// value per series at the end of the range (stat, table, bar gauge).

// series is a range query with a legend.
func series(e expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Expr(string(e)).LegendFormat(legend).Range()
}

// latest is an instant query with a legend.
func latest(e expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Expr(string(e)).LegendFormat(legend).Instant()
}

// heat is a range query of per-bucket counts, for a heatmap.
func heat(e expr) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Expr(string(e)).LegendFormat("{{le}}").
		Format(prometheus.PromQueryFormatHeatmap).Range()
}

// distribution is an instant query of per-bucket counts over the range.
func distribution(e expr) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Expr(string(e)).LegendFormat("{{le}}").
		Format(prometheus.PromQueryFormatHeatmap).Instant()
}

// column is an instant query in table format: one row per label set.
func column(e expr) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Expr(string(e)).Format(prometheus.PromQueryFormatTable).Instant()
}

// Panels. Widths are in Grafana's 24-column grid.

func timeSeries(title, desc, unit string, qs ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Title(title).Description(desc).Datasource(datasource).
		Unit(unit).Span(8).Height(8).
		Legend(common.NewVizLegendOptionsBuilder().ShowLegend(true).
			DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending)).
		LineWidth(1).FillOpacity(10).ShowPoints(common.VisibilityModeNever).SpanNulls(common.BoolOrFloat64{Bool: cog.ToPtr(false)})
	for _, q := range qs {
		p.WithTarget(q)
	}
	return p
}

// stacked is a time series whose series add up (a rate split by a label).
func stacked(title, desc, unit string, qs ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	return timeSeries(title, desc, unit, qs...).FillOpacity(60).LineWidth(0).
		Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal))
}

// dashed draws the series of query refID (B, C, …) as a dashed line: a
// bound next to the measured figure.
func dashed(p *timeseries.PanelBuilder, refID string) *timeseries.PanelBuilder {
	return p.OverrideByQuery(refID, []dashboard.DynamicConfigValue{
		{Id: "custom.lineStyle", Value: map[string]any{"fill": "dash", "dash": []int{10, 10}}},
		{Id: "custom.fillOpacity", Value: 0},
	})
}

// withThresholdLines draws dashed lines at the given values, orange at the
// first and red from the second on.
func withThresholdLines(p *timeseries.PanelBuilder, values ...float64) *timeseries.PanelBuilder {
	levels := make([]level, len(values))
	for i, v := range values {
		levels[i] = level{v, "red"}
		if i == 0 && len(values) > 1 {
			levels[i].color = "orange"
		}
	}
	return p.Thresholds(thresholds("green", levels...)).
		ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeDashed))
}

// A level is where a threshold's color starts.
type level struct {
	at    float64
	color string
}

// thresholds is base below the first level, then each level's color.
func thresholds(base string, levels ...level) *dashboard.ThresholdsConfigBuilder {
	steps := []dashboard.Threshold{{Value: nil, Color: base}}
	for _, l := range levels {
		steps = append(steps, dashboard.Threshold{Value: cog.ToPtr(l.at), Color: l.color})
	}
	return dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(steps)
}

// heatMap shows a histogram's buckets over time; its cells are in
// cellUnit (per second: see bucketRates).
func heatMap(title, desc, unit, cellUnit string, q *prometheus.DataqueryBuilder) *heatmap.PanelBuilder {
	return heatmap.NewPanelBuilder().Title(title).Description(desc).Datasource(datasource).
		Span(8).Height(8).WithTarget(q).
		Calculate(false).
		RowsFrame(heatmap.NewRowsHeatmapOptionsBuilder().Layout(common.HeatmapCellLayoutLe)).
		YAxis(heatmap.NewYAxisConfigBuilder().Unit(unit)).
		CellValues(heatmap.NewCellValuesBuilder().Unit(cellUnit)).
		Color(heatmap.NewHeatmapColorOptionsBuilder().Mode(heatmap.HeatmapColorModeScheme).
			Scheme("Spectral").Scale(heatmap.HeatmapColorScaleExponential).Exponent(0.5).Steps(64)).
		Tooltip(heatmap.NewHeatmapTooltipBuilder().Mode(common.TooltipDisplayModeSingle).YHistogram(true)).
		ShowLegend()
}

// statPanel shows the latest value of each series.
func statPanel(title, desc, unit string, qs ...*prometheus.DataqueryBuilder) *stat.PanelBuilder {
	p := stat.NewPanelBuilder().Title(title).Description(desc).Datasource(datasource).
		Unit(unit).Span(8).Height(8).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Values(false)).
		GraphMode(common.BigValueGraphModeNone).ColorMode(common.BigValueColorModeValue).
		TextMode(common.BigValueTextModeValueAndName)
	for _, q := range qs {
		p.WithTarget(q)
	}
	return p
}

// bars shows one horizontal bar per series (or per bucket of a
// distribution).
func bars(title, desc, unit string, qs ...*prometheus.DataqueryBuilder) *bargauge.PanelBuilder {
	p := bargauge.NewPanelBuilder().Title(title).Description(desc).Datasource(datasource).
		Unit(unit).Span(8).Height(8).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Values(false)).
		DisplayMode(common.BarGaugeDisplayModeGradient).Orientation(common.VizOrientationHorizontal).
		ShowUnfilled(true).Min(0)
	for _, q := range qs {
		p.WithTarget(q)
	}
	return p
}

// tableOf joins instant queries on their labels: one row per label set, one
// column per query, named by names[i] (the column of query A is names[0]),
// with unit units[i].
func tableOf(title, desc string, names, units []string, qs ...*prometheus.DataqueryBuilder) *table.PanelBuilder {
	rename := map[string]any{}
	p := table.NewPanelBuilder().Title(title).Description(desc).Datasource(datasource).
		Span(24).Height(8)
	for i, q := range qs {
		ref := refID(i)
		p.WithTarget(q.RefId(ref))
		rename["Value #"+ref] = names[i]
		decimals := 2
		if units[i] == unitCount {
			decimals = 0
		}
		p.OverrideByName(names[i], []dashboard.DynamicConfigValue{{Id: "unit", Value: units[i]}, {Id: "decimals", Value: decimals}})
	}
	return p.
		WithTransformation(dashboard.DataTransformerConfig{Id: "merge", Options: map[string]any{}}).
		WithTransformation(dashboard.DataTransformerConfig{Id: "organize", Options: map[string]any{
			"excludeByName": map[string]any{"Time": true},
			"renameByName":  rename,
		}})
}

// refID names a panel's i-th query as Grafana does: A, B, C, …
func refID(i int) string { return string(rune('A' + i)) }

// row starts a row of panels.
func row(title string) *dashboard.RowBuilder { return dashboard.NewRowBuilder(title) }
