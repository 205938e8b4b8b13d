package otlp

import (
	"context"
	"github.com/goodput/goodput/export"

	"github.com/goodput/goodput/meter"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
)

// Metrics records the GenAI semantic conventions' instruments from each
// finished record of an inference request (a proxy.Sink; never per event),
// beside the Prometheus metrics:
//
//   - gen_ai.client.token.usage: input and output tokens (gen_ai.token.type);
//   - gen_ai.client.operation.duration and gen_ai.server.request.duration:
//     t0 to the record's end (e2e);
//   - gen_ai.server.time_to_first_token and
//     gen_ai.client.operation.time_to_first_chunk: TTFT, of streams;
//   - gen_ai.server.time_per_output_token: TPOT;
//   - gen_ai.client.operation.time_per_output_chunk: every gap between token
//     events (the kept ones exactly, the summarised rest at their summary
//     bucket's value).
//
// Their attributes are gen_ai.operation.name, gen_ai.request.model and
// goodput.tenant with the bounded label values the Prometheus metrics use
// (Record.Labels), and error.type (the outcome) for a request that failed.
type Metrics struct {
	tokens, opDuration, reqDuration, ttft, ttfc, tpot, tpoc metric.Float64Histogram
}

// Bucket boundaries the GenAI conventions advise.
var (
	tokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
	durationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	ttftBuckets     = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}
	tpotBuckets     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}
)

func newMetrics(m metric.Meter) (*Metrics, error) {
	var out Metrics
	var err error
	for _, h := range []struct {
		dst           *metric.Float64Histogram
		name, unit, d string
		buckets       []float64
	}{
		{&out.tokens, "gen_ai.client.token.usage", "{token}", "Number of input and output tokens used.", tokenBuckets},
		{&out.opDuration, "gen_ai.client.operation.duration", "s", "GenAI operation duration.", durationBuckets},
		{&out.reqDuration, "gen_ai.server.request.duration", "s", "Generative AI server request duration such as time-to-last byte or last output token.", durationBuckets},
		{&out.ttft, "gen_ai.server.time_to_first_token", "s", "Time to generate first token for successful responses.", ttftBuckets},
		{&out.ttfc, "gen_ai.client.operation.time_to_first_chunk", "s", "Time to receive the first chunk in a streaming operation.", ttftBuckets},
		{&out.tpot, "gen_ai.server.time_per_output_token", "s", "Time per output token generated after the first token for successful responses.", tpotBuckets},
		{&out.tpoc, "gen_ai.client.operation.time_per_output_chunk", "s", "Time between consecutive chunks in a streaming operation.", tpotBuckets},
	} {
		if *h.dst, err = m.Float64Histogram(h.name, metric.WithUnit(h.unit), metric.WithDescription(h.d), metric.WithExplicitBucketBoundaries(h.buckets...)); err != nil {
			return nil, err
		}
	}
	return &out, nil
}

// Begin does nothing: the instruments take finished records only.
func (m *Metrics) Begin(*meter.Record) {}

// Record records rec's measures, when it is of an inference request.
func (m *Metrics) Record(rec *meter.Record) {
	op := operation(rec)
	if !op.Valid() {
		return
	}
	model, tenant := rec.Labels.Model, rec.Labels.Tenant
	if tenant == "" {
		// Not labelled (no judge): the raw values, where they could be a
		// label at all.
		model, tenant = rec.Model, rec.Tenant
		if !export.ValidLabel(model) {
			model = export.Other
		}
		if !export.ValidLabel(tenant) {
			tenant = export.Other
		}
	}
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, op, semconv.GenAIRequestModel(model), attribute.String(attrTenant, tenant))
	ok := rec.Outcome == meter.OutcomeOK
	if !ok {
		attrs = append(attrs, semconv.ErrorTypeKey.String(rec.Outcome.String()))
	}
	ctx := noCtx
	for _, n := range []struct {
		tokens int
		typ    attribute.KeyValue
	}{{rec.ISL, semconv.GenAITokenTypeInput}, {rec.OSL, semconv.GenAITokenTypeOutput}} {
		if n.tokens >= 0 {
			// A copy: NewSet sorts the slice it is given.
			typed := append(append(make([]attribute.KeyValue, 0, len(attrs)+1), attrs...), n.typ)
			m.tokens.Record(ctx, float64(n.tokens), metric.WithAttributeSet(attribute.NewSet(typed...)))
		}
	}
	// One options slice for every measurement (a variadic call would
	// allocate one per gap).
	set := []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attrs...))}
	if rec.E2E >= 0 {
		m.opDuration.Record(ctx, rec.E2E.Seconds(), set...)
		m.reqDuration.Record(ctx, rec.E2E.Seconds(), set...)
	}
	if rec.TTFT >= 0 {
		m.ttfc.Record(ctx, rec.TTFT.Seconds(), set...)
		if ok {
			m.ttft.Record(ctx, rec.TTFT.Seconds(), set...)
		}
	}
	if rec.TPOT >= 0 && ok {
		m.tpot.Record(ctx, rec.TPOT.Seconds(), set...)
	}
	for _, g := range rec.ITL {
		m.tpoc.Record(ctx, g.Seconds(), set...)
	}
	rest := &rec.ITLRest
	for i := 0; i < rest.Zero; i++ {
		m.tpoc.Record(ctx, 0, set...)
	}
	for i, n := range rest.Buckets {
		v := meter.GapBucketValue(rest.Offset + i)
		for j := uint32(0); j < n; j++ {
			m.tpoc.Record(ctx, v, set...)
		}
	}
}

// noCtx is the measurements' context: a record carries none.
var noCtx = context.Background()
