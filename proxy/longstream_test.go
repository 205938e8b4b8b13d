package proxy

import (
	"math"
	"testing"

	"github.com/goodput/goodput/export"
	"github.com/goodput/goodput/meter"
	"github.com/prometheus/client_golang/prometheus"
)

// A stream of more token events than a record keeps gaps: the record holds
// the first meter.MaxKeptGaps and a summary of the rest, and the Prometheus
// ITL histogram still counts every gap exactly (the later ones observed as
// they came).
func TestLongStreamBoundedRecordExactHistogram(t *testing.T) {
	const events = meter.MaxKeptGaps + 1 + 2500
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
		for k := 1; k < events; k++ {
			if writeChunk(c, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n") != nil {
				return
			}
		}
		writeChunk(c, "data: [DONE]\n\n")
		endChunks(c)
	})
	reg := prometheus.NewRegistry()
	metrics := export.NewMetrics(reg, export.NewLabeler(export.NewLabelSet(nil, 32), export.NewLabelSet(nil, 32)))
	g := startGateway(t, Config{Upstream: up.URL(), Sink: metrics})
	status, _, _, err := post(t, g.URL()+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[]}`, nil)
	if err != nil || status != 200 {
		t.Fatalf("status %d, %v", status, err)
	}
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeOK || rec.Events != events {
		t.Fatalf("outcome %v, %d events; want ok, %d", rec.Outcome, rec.Events, events)
	}
	if len(rec.ITL) != meter.MaxKeptGaps || rec.ITLRest.Count != events-1-meter.MaxKeptGaps {
		t.Fatalf("%d gaps kept, %d summarised; want %d and %d", len(rec.ITL), rec.ITLRest.Count, meter.MaxKeptGaps, events-1-meter.MaxKeptGaps)
	}
	sum := rec.ITLRest.Sum.Seconds()
	for _, gap := range rec.ITL {
		sum += gap.Seconds()
	}
	if rec.MaxITL < rec.ITLRest.Max {
		t.Fatalf("max itl %v below the summarised max %v", rec.MaxITL, rec.ITLRest.Max)
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "goodput_inter_token_latency_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			found = true
			if h.GetSampleCount() != uint64(events-1) {
				t.Errorf("ITL histogram counts %d gaps, want %d", h.GetSampleCount(), events-1)
			}
			if d := math.Abs(h.GetSampleSum() - sum); d > 1e-9*float64(events) {
				t.Errorf("ITL histogram sum %v, the record's gaps add up to %v", h.GetSampleSum(), sum)
			}
		}
	}
	if !found {
		t.Fatal("no ITL histogram")
	}
}
