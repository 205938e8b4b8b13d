package otlp

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/goodput/goodput/export"

	"github.com/goodput/goodput/meter"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// carrier is proxy.HeaderCarrier (and propagation.TextMapCarrier).
type carrier = interface {
	Get(key string) string
	Set(key, value string)
	Keys() []string
}

// Tracer follows each request as one span (proxy.Config.Trace): it starts
// at t0 as a child of the client's traceparent (or a new trace), the
// engine's request carries it as its parent, and it ends at the record's
// end with the GenAI attributes, an event at the first token, the outcome
// and the SLO verdict. The span is of kind server: it is the gateway's side
// of the client's call, and the engine's server span is its child.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

func newTracer(t trace.Tracer, prop propagation.TextMapPropagator) *Tracer {
	return &Tracer{tracer: t, prop: prop}
}

// Span names and attributes that the GenAI conventions do not name.
const (
	// EventFirstToken is the span event at the first token event, stamped
	// when the gateway read it (t0 + TTFT).
	EventFirstToken = "gen_ai.first_token"

	attrTenant      = "goodput.tenant"
	attrKeyID       = "goodput.key_id"
	attrRequestID   = "goodput.request_id"
	attrRoute       = "goodput.route"
	attrOutcome     = "goodput.outcome"
	attrSLO         = "goodput.slo"
	attrSLOGood     = "goodput.slo.good"
	attrMissReasons = "goodput.slo.miss_reasons"
	attrTPOT        = "goodput.tpot"
	attrITLMax      = "goodput.itl.max"
	attrEvents      = "goodput.token_events"
	attrQueueWait   = "goodput.queue_wait"
	attrOverhead    = "goodput.overhead"
)

// Start begins rec's span at t0, in the trace of the client's headers.
func (t *Tracer) Start(rec *meter.Record, client carrier) {
	ctx := t.prop.Extract(context.Background(), client)
	_, span := t.tracer.Start(ctx, rec.Route, trace.WithTimestamp(rec.Start), trace.WithSpanKind(trace.SpanKindServer))
	rec.Live.Span = span
}

// Upstream writes the span's trace context into the engine's request, and
// notes what the request asked for.
func (t *Tracer) Upstream(rec *meter.Record, maxTokens int, upstream carrier) {
	span, _ := rec.Live.Span.(trace.Span)
	if span == nil {
		return
	}
	if span.IsRecording() && rec.Inference() {
		if maxTokens > 0 {
			span.SetAttributes(semconv.GenAIRequestMaxTokens(maxTokens))
		}
		span.SetAttributes(semconv.GenAIRequestStream(rec.Stream))
	}
	t.prop.Inject(trace.ContextWithSpan(context.Background(), span), upstream)
}

// operation is the GenAI operation of a record's route ("" for none).
func operation(rec *meter.Record) attribute.KeyValue {
	switch rec.Route {
	case meter.APIChat.String(), meter.APIResponses.String(), meter.APIMessages.String(), meter.APIOllamaChat.String(),
		meter.APIChatBatch.String():
		// The GenAI conventions name a conversation turn "chat", whichever
		// API carries it.
		return semconv.GenAIOperationNameChat
	case meter.APICompletions.String(), meter.APIOllamaGenerate.String(), meter.APILlamaCpp.String(),
		meter.APITGI.String(), meter.APISGLang.String():
		return semconv.GenAIOperationNameTextCompletion
	}
	return attribute.KeyValue{}
}

// End completes rec's span from the finished, judged record and ends it at
// the record's end (t0 + e2e).
func (t *Tracer) End(rec *meter.Record) {
	span, _ := rec.Live.Span.(trace.Span)
	rec.Live.Span = nil
	if span == nil {
		return
	}
	end := time.Now()
	if rec.E2E >= 0 {
		end = rec.Start.Add(rec.E2E)
	}
	if !span.IsRecording() {
		span.End(trace.WithTimestamp(end))
		return
	}
	attrs := make([]attribute.KeyValue, 0, 24)
	if op := operation(rec); op.Valid() {
		// The GenAI conventions name the span "{operation} {model}".
		name := op.Value.AsString()
		if export.ValidLabel(rec.Model) {
			// A model that could not be a metric's label (over 256 bytes,
			// control characters) names no span either: a client sent it.
			name += " " + rec.Model
			attrs = append(attrs, semconv.GenAIRequestModel(rec.Model))
		}
		span.SetName(name)
		attrs = append(attrs, op)
	}
	if rec.ISL >= 0 {
		attrs = append(attrs, semconv.GenAIUsageInputTokens(rec.ISL))
	}
	if rec.OSL >= 0 {
		attrs = append(attrs, semconv.GenAIUsageOutputTokens(rec.OSL))
	}
	if rec.TTFT >= 0 {
		attrs = append(attrs, semconv.GenAIResponseTimeToFirstChunk(rec.TTFT.Seconds()))
		span.AddEvent(EventFirstToken, trace.WithTimestamp(rec.Start.Add(rec.TTFT)))
	}
	attrs = append(attrs,
		attribute.String(attrRequestID, rec.RequestID),
		attribute.String(attrRoute, rec.Route),
		attribute.String(attrOutcome, rec.Outcome.String()),
	)
	if rec.Status != 0 {
		attrs = append(attrs, semconv.HTTPResponseStatusCode(rec.Status))
	}
	if export.ValidLabel(rec.Tenant) {
		// As the model: a tenant header's value that could not be a label
		// (not UTF-8, over 256 bytes, control characters) is no attribute.
		// A string that is not UTF-8 fails the marshalling of the whole
		// batch of spans it is exported with.
		attrs = append(attrs, attribute.String(attrTenant, rec.Tenant))
	}
	if rec.KeyID != "" {
		attrs = append(attrs, attribute.String(attrKeyID, rec.KeyID))
	}
	for _, d := range []struct {
		key string
		d   time.Duration
	}{{attrTPOT, rec.TPOT}, {attrITLMax, rec.MaxITL}, {attrQueueWait, rec.QueueWait}, {attrOverhead, rec.Overhead}} {
		if d.d >= 0 {
			attrs = append(attrs, attribute.Float64(d.key, d.d.Seconds()))
		}
	}
	if rec.Events >= 0 {
		attrs = append(attrs, attribute.Int(attrEvents, rec.Events))
	}
	if rec.Judged {
		attrs = append(attrs, attribute.String(attrSLO, rec.SLO), attribute.Bool(attrSLOGood, rec.Good))
		if len(rec.MissReasons) > 0 {
			attrs = append(attrs, attribute.StringSlice(attrMissReasons, rec.MissReasons))
		}
	}
	if rec.Outcome != meter.OutcomeOK {
		attrs = append(attrs, semconv.ErrorTypeKey.String(rec.Outcome.String()))
		if failed(rec.Outcome) {
			span.SetStatus(codes.Error, validUTF8(rec.ErrorMessage))
		}
	}
	span.SetAttributes(attrs...)
	span.End(trace.WithTimestamp(end))
}

// validUTF8 returns s with every byte that is not UTF-8 replaced by U+FFFD:
// an engine's error message is quoted as it came (at most 512 bytes).
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// failed reports an outcome that is the service's failure (an error span):
// not the client's doing (a bad request, a missing key, leaving) nor a
// limit doing its job.
func failed(o meter.Outcome) bool {
	return o == meter.OutcomeUpstreamError || o == meter.OutcomeTimeout
}
