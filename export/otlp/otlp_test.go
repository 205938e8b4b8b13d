package otlp_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	"github.com/goodput/goodput/export/otlp"
	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/proxy"
	"go.opentelemetry.io/otel"
	collmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	colltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// receiver is an in-process OTLP/HTTP (protobuf) collector: it keeps every
// span and metric exported to it.
type receiver struct {
	srv     *httptest.Server
	mu      sync.Mutex
	spans   []*tracepb.Span
	res     []*commonpb.KeyValue // the last resource's attributes
	metrics []*metricspb.Metric
}

func startReceiver(t *testing.T) *receiver { return startReceiverOn(t, nil) }

// startReceiverOn is startReceiver on ln (nil: a port of its own).
func startReceiverOn(t *testing.T, ln net.Listener) *receiver {
	r := &receiver{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
		var m colltrace.ExportTraceServiceRequest
		if !decode(t, w, req, &m) {
			return
		}
		r.mu.Lock()
		for _, rs := range m.ResourceSpans {
			r.res = rs.GetResource().GetAttributes()
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		reply(w, &colltrace.ExportTraceServiceResponse{})
	})
	mux.HandleFunc("POST /v1/metrics", func(w http.ResponseWriter, req *http.Request) {
		var m collmetrics.ExportMetricsServiceRequest
		if !decode(t, w, req, &m) {
			return
		}
		r.mu.Lock()
		for _, rm := range m.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				r.metrics = append(r.metrics, sm.Metrics...)
			}
		}
		r.mu.Unlock()
		reply(w, &collmetrics.ExportMetricsServiceResponse{})
	})
	r.srv = httptest.NewUnstartedServer(mux)
	if ln != nil {
		r.srv.Listener.Close()
		r.srv.Listener = ln
	}
	r.srv.Start()
	t.Cleanup(r.srv.Close)
	return r
}

func decode(t *testing.T, w http.ResponseWriter, req *http.Request, m proto.Message) bool {
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		t.Errorf("OTLP request of type %q", ct)
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return false
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err == nil {
		err = proto.Unmarshal(b, m)
	}
	if err != nil {
		t.Errorf("OTLP request: %v", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func reply(w http.ResponseWriter, m proto.Message) {
	b, _ := proto.Marshal(m)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

func (r *receiver) allSpans() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

// attrs flattens OTLP attributes to strings, for comparison.
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.Key] = anyString(kv.Value)
	}
	return m
}

func anyString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonpb.AnyValue_ArrayValue:
		var s []string
		for _, e := range x.ArrayValue.Values {
			s = append(s, anyString(e))
		}
		return "[" + strings.Join(s, ",") + "]"
	}
	return fmt.Sprint(v)
}

func noEnv(string) string { return "" }

const (
	clientTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientParent = "00f067aa0ba902b7"
)

// engine is an upstream that streams a chat completion and keeps the
// traceparent and tracestate of each request.
type engine struct {
	mu          sync.Mutex
	traceparent []string
	tracestate  []string
}

func (e *engine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	e.traceparent = append(e.traceparent, r.Header.Get("traceparent"))
	e.tracestate = append(e.tracestate, strings.Join(r.Header.Values("tracestate"), ","))
	e.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	f := w.(http.Flusher)
	for _, ev := range []string{
		`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}`,
		`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" world"},"finish_reason":null}]}`,
		`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"!"},"finish_reason":"stop"}]}`,
		`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":9,"total_tokens":12,"completion_tokens":3}}`,
		`[DONE]`,
	} {
		_, _ = io.WriteString(w, "data: "+ev+"\n\n")
		f.Flush()
	}
}

// A request through the gateway, with a client's traceparent, becomes one
// span in the client's trace, exported over OTLP with the GenAI attributes,
// a first-token event at t0 + TTFT, the outcome and the SLO verdict; the
// engine's request carries the gateway span as its parent; and the GenAI
// metrics arrive beside it.
func TestTraceAndMetricsReachOTLPReceiver(t *testing.T) {
	rcv := startReceiver(t)
	ctx := context.Background()
	tel, err := otlp.New(ctx, otlp.Config{Traces: true, Metrics: true, Endpoint: rcv.srv.URL, ServiceName: "gw-test"}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if tel == nil || tel.Tracer == nil || tel.Metrics == nil {
		t.Fatalf("telemetry not on: %+v", tel)
	}
	eng := &engine{}
	up := httptest.NewServer(eng)
	defer up.Close()
	var got meter.Record
	p, err := proxy.New(proxy.Config{
		Upstream: up.URL,
		Judge:    verdict{},
		Trace:    tel.Tracer,
		IOLoop:   testenv.IOLoop(),
		Sink: proxy.Sinks{tel.Metrics, recordFunc(func(r *meter.Record) {
			got = *r
			got.ITL = append([]time.Duration(nil), r.ITL...)
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveGateway(t, p)

	body := `{"model":"llama-3","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Tenant", "acme")
	req.Header.Set("traceparent", "00-"+clientTrace+"-"+clientParent+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
	}
	resp.Body.Close()
	p.Wait()
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	spans := rcv.allSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans exported, want 1", len(spans))
	}
	s := spans[0]
	if tid := hex.EncodeToString(s.TraceId); tid != clientTrace {
		t.Errorf("trace id %s, want the client's %s", tid, clientTrace)
	}
	if pid := hex.EncodeToString(s.ParentSpanId); pid != clientParent {
		t.Errorf("parent span id %s, want the client's %s", pid, clientParent)
	}
	if s.Kind != tracepb.Span_SPAN_KIND_SERVER || s.Name != "chat llama-3" {
		t.Errorf("span %q of kind %v, want \"chat llama-3\", server", s.Name, s.Kind)
	}
	// The engine's parent is the gateway's span, in the client's trace.
	eng.mu.Lock()
	tps := eng.traceparent
	eng.mu.Unlock()
	if want := "00-" + clientTrace + "-" + hex.EncodeToString(s.SpanId) + "-01"; len(tps) != 1 || tps[0] != want {
		t.Errorf("engine got traceparent %q, want [%s]", tps, want)
	}
	// The engine writes its events back to back: when one read brings them
	// all, they share its time, and E2E equals TTFT.
	if got.Outcome != meter.OutcomeOK || got.TTFT <= 0 || got.E2E < got.TTFT {
		t.Fatalf("record %+v", got)
	}
	if st, want := time.Unix(0, int64(s.StartTimeUnixNano)), got.Start; !st.Equal(want) {
		t.Errorf("span starts at %v, want t0 %v", st, want)
	}
	if en, want := time.Unix(0, int64(s.EndTimeUnixNano)), got.Start.Add(got.E2E); !en.Equal(want) {
		t.Errorf("span ends at %v, want t0+e2e %v", en, want)
	}
	if len(s.Events) != 1 || s.Events[0].Name != otlp.EventFirstToken {
		t.Fatalf("events %v, want one %s", s.Events, otlp.EventFirstToken)
	}
	if at, want := time.Unix(0, int64(s.Events[0].TimeUnixNano)), got.Start.Add(got.TTFT); !at.Equal(want) {
		t.Errorf("first token event at %v, want t0+TTFT %v", at, want)
	}
	a := attrs(s.Attributes)
	for k, v := range map[string]string{
		"gen_ai.operation.name":      "chat",
		"gen_ai.request.model":       "llama-3",
		"gen_ai.request.max_tokens":  "64",
		"gen_ai.request.stream":      "true",
		"gen_ai.usage.input_tokens":  "9",
		"gen_ai.usage.output_tokens": "3",
		"http.response.status_code":  "200",
		"goodput.tenant":             "acme",
		"goodput.request_id":         got.RequestID,
		"goodput.outcome":            "ok",
		"goodput.slo":                "interactive",
		"goodput.slo.good":           "false",
		"goodput.slo.miss_reasons":   "[ttft]",
		"goodput.token_events":       "3",
	} {
		if a[k] != v {
			t.Errorf("attribute %s = %q, want %q", k, a[k], v)
		}
	}
	if v := a["gen_ai.response.time_to_first_chunk"]; v != fmt.Sprint(got.TTFT.Seconds()) {
		t.Errorf("gen_ai.response.time_to_first_chunk = %s, want %v", v, got.TTFT.Seconds())
	}
	if _, ok := a["error.type"]; ok {
		t.Error("error.type on a request that succeeded")
	}
	if s.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Error("error status on a request that succeeded")
	}
	rcv.mu.Lock()
	if r := attrs(rcv.res); r["service.name"] != "gw-test" {
		t.Errorf("resource %v, want service.name gw-test", r)
	}
	metrics := rcv.metrics
	rcv.mu.Unlock()
	checkMetrics(t, metrics, &got)
}

type recordFunc func(*meter.Record)

func (recordFunc) Begin(*meter.Record)      {}
func (f recordFunc) Record(r *meter.Record) { f(r) }

// verdict is a judge that misses every request on TTFT.
type verdict struct{}

func (verdict) Begin(*meter.Record) {}
func (verdict) Judge(r *meter.Record) {
	r.SLO, r.Judged, r.Good, r.MissReasons = "interactive", true, false, append(r.MissReasons, "ttft")
	r.Labels = meter.Labels{Tenant: "acme", Model: "other"}
}

// checkMetrics asserts the GenAI instruments of one streamed request.
func checkMetrics(t *testing.T, ms []*metricspb.Metric, rec *meter.Record) {
	t.Helper()
	byName := map[string]*metricspb.Metric{}
	for _, m := range ms {
		byName[m.Name] = m
	}
	type point struct {
		count uint64
		sum   float64
	}
	want := map[string]map[string]point{
		"gen_ai.client.token.usage":                     {"input": {1, 9}, "output": {1, 3}},
		"gen_ai.client.operation.duration":              {"": {1, rec.E2E.Seconds()}},
		"gen_ai.server.request.duration":                {"": {1, rec.E2E.Seconds()}},
		"gen_ai.server.time_to_first_token":             {"": {1, rec.TTFT.Seconds()}},
		"gen_ai.client.operation.time_to_first_chunk":   {"": {1, rec.TTFT.Seconds()}},
		"gen_ai.server.time_per_output_token":           {"": {1, rec.TPOT.Seconds()}},
		"gen_ai.client.operation.time_per_output_chunk": {"": {2, (rec.ITL[0] + rec.ITL[1]).Seconds()}},
	}
	for name, points := range want {
		m := byName[name]
		if m == nil {
			t.Errorf("metric %s not exported", name)
			continue
		}
		h := m.GetHistogram()
		if h == nil || h.AggregationTemporality != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE {
			t.Errorf("%s is not a cumulative histogram: %v", name, m)
			continue
		}
		if len(h.DataPoints) != len(points) {
			t.Errorf("%s: %d points, want %d", name, len(h.DataPoints), len(points))
		}
		for _, dp := range h.DataPoints {
			a := attrs(dp.Attributes)
			if a["gen_ai.operation.name"] != "chat" || a["gen_ai.request.model"] != "other" || a["goodput.tenant"] != "acme" {
				t.Errorf("%s: attributes %v, want chat, the model's label value other, tenant acme", name, a)
			}
			p, ok := points[a["gen_ai.token.type"]]
			if !ok {
				t.Errorf("%s: unexpected point %v", name, a)
				continue
			}
			if dp.Count != p.count || !near(dp.GetSum(), p.sum) {
				t.Errorf("%s %v: count %d sum %v, want %d and %v", name, a, dp.Count, dp.GetSum(), p.count, p.sum)
			}
		}
	}
}

func near(a, b float64) bool { d := a - b; return d < 1e-9 && d > -1e-9 }

// Telemetry is off by default; the OTEL_* variables turn each signal on or
// off, and settings this build cannot honour are refused, not ignored.
func TestEnvironmentTurnsSignalsOnAndOff(t *testing.T) {
	for _, c := range []struct {
		name            string
		file            otlp.Config
		env             map[string]string
		traces, metrics bool
		err             string
	}{
		{name: "default off"},
		{name: "service name alone", env: map[string]string{"OTEL_SERVICE_NAME": "gw"}},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, traces: true, metrics: true},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, traces: true},
		{name: "exporter otlp", env: map[string]string{"OTEL_METRICS_EXPORTER": "otlp"}, metrics: true},
		{name: "endpoint, traces none", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, metrics: true},
		{name: "file", file: otlp.Config{Traces: true}, traces: true},
		{name: "file, env none", file: otlp.Config{Traces: true, Metrics: true}, env: map[string]string{"OTEL_METRICS_EXPORTER": "none"}, traces: true},
		{name: "sdk disabled", file: otlp.Config{Traces: true}, env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}},
		{name: "grpc", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, err: "only http/protobuf"},
		{name: "grpc for an off signal", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}},
		{name: "signal protocol first", file: otlp.Config{Metrics: true}, env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf"}, metrics: true},
		{name: "zipkin", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: "only otlp and none"},
		{name: "bad endpoint", file: otlp.Config{Traces: true, Endpoint: "collector:4318"}, err: "http:// or https://"},
		{name: "bad endpoint variable", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://c:4318"}, err: "OTEL_EXPORTER_OTLP_ENDPOINT=ftp://c:4318: must be an http:// or https:// URL"},
		{name: "bad signal endpoint variable", file: otlp.Config{Metrics: true}, env: map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "c:4318/v1/metrics"}, err: "must be an http:// or https:// URL"},
		{name: "scheme in capitals", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "HTTPS://c:4318"}, traces: true, metrics: true},
		{name: "the file's endpoint wins", file: otlp.Config{Metrics: true, Endpoint: "http://c:4318"}, env: map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "c:4318/v1/metrics"}, metrics: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tel, err := otlp.New(context.Background(), c.file, func(k string) string { return c.env[k] })
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one saying %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer tel.Shutdown(context.Background())
			if !c.traces && !c.metrics {
				if tel != nil {
					t.Fatalf("telemetry on: %+v", tel)
				}
				return
			}
			if tel == nil || (tel.Tracer != nil) != c.traces || (tel.Metrics != nil) != c.metrics {
				t.Fatalf("telemetry %+v, want traces %v, metrics %v", tel, c.traces, c.metrics)
			}
		})
	}
}

// With no endpoint in the file or the environment, the signals go to a
// collector at localhost:4318 in plain HTTP, as a local collector listens
// and the README says: the SDK's own default asked for TLS there, and no
// span or metric arrived (a new user's probe).
func TestDefaultEndpointIsALocalCollector(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:4318")
	if err != nil {
		t.Skipf("the collector's port is taken here: %v", err)
	}
	rcv := startReceiverOn(t, ln)
	tel, err := otlp.New(context.Background(), otlp.Config{Metrics: true}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	tel.Metrics.Record(&meter.Record{Route: meter.APIChat.String(), Model: "m", Tenant: "t",
		Outcome: meter.OutcomeOK, ISL: 9, OSL: 3, E2E: time.Second, TTFT: meter.Unknown, TPOT: meter.Unknown})
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown (its last export): %v", err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.metrics) == 0 {
		t.Fatal("no metric reached the collector at localhost:4318")
	}
}

// A refused endpoint variable is quoted without its password (a review:
// the error printed it), and CheckEnvironment refuses what New would.
func TestEndpointVariableErrorMasksItsPassword(t *testing.T) {
	env := map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://u:hunter2secret@c:4318"}
	getenv := func(k string) string { return env[k] }
	_, err := otlp.New(context.Background(), otlp.Config{}, getenv)
	if err == nil || strings.Contains(err.Error(), "hunter2secret") || !strings.Contains(err.Error(), "ftp://u:xxxxx@c:4318") {
		t.Errorf("New: %v, want the variable refused with its password masked", err)
	}
	if cerr := otlp.CheckEnvironment(otlp.Config{}, getenv); cerr == nil || cerr.Error() != err.Error() {
		t.Errorf("CheckEnvironment: %v, want New's error", cerr)
	}
}

// Every request is one span, however it ends: one the gateway refuses
// before the engine (no upstream request, an error.type, no error status:
// the client's mistake), one off the generation routes (named other, its
// trace passed to the engine too). A client that does not sample its trace
// gets no span exported, and the engine still sees the trace, unsampled.
func TestSpanOfEveryRequest(t *testing.T) {
	ctx := context.Background()
	eng := &engine{}
	rcv, tel, p, addr := tracedGateway(t, eng)
	send := func(method, path, body, parent, flags string) int {
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("traceparent", "00-"+clientTrace+"-"+parent+"-"+flags)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := send("POST", "/v1/chat/completions", `{"model":"a","model":"b","messages":[]}`, "1111111111111111", "01"); code != 400 {
		t.Fatalf("duplicate key: %d, want 400", code)
	}
	if code := send("GET", "/v1/models", "", "2222222222222222", "01"); code != 200 {
		t.Fatalf("models: %d", code)
	}
	if code := send("POST", "/v1/completions", `{"model":"m","stream":true,"prompt":"x"}`, "3333333333333333", "00"); code != 200 {
		t.Fatalf("unsampled: %d", code)
	}
	// A model no label could hold names no span (a client chose it: a
	// hostile probe's 1 MiB model made a 1 MiB span name).
	long := strings.Repeat("m", 300)
	if code := send("POST", "/v1/chat/completions", `{"model":"`+long+`","messages":[]}`, "4444444444444444", "01"); code != 200 {
		t.Fatalf("long model: %d", code)
	}
	p.Wait()
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	spans := rcv.allSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3 (the unsampled request's is not exported)", len(spans))
	}
	byParent := map[string]*tracepb.Span{}
	for _, s := range spans {
		byParent[hex.EncodeToString(s.ParentSpanId)] = s
	}
	rej, other, longSpan := byParent["1111111111111111"], byParent["2222222222222222"], byParent["4444444444444444"]
	if rej == nil || other == nil || longSpan == nil {
		t.Fatalf("spans %v", spans)
	}
	if a := attrs(longSpan.Attributes); longSpan.Name != "chat" || a["gen_ai.request.model"] != "" {
		t.Errorf("a 300-byte model's span is %.40q, model attribute %.40q", longSpan.Name, a["gen_ai.request.model"])
	}
	a := attrs(rej.Attributes)
	if rej.Name != "chat" || a["goodput.outcome"] != "rejected" || a["error.type"] != "rejected" || a["http.response.status_code"] != "400" ||
		rej.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR || len(rej.Events) != 0 {
		t.Errorf("refused request's span %q %v, status %v, events %v", rej.Name, a, rej.Status, rej.Events)
	}
	if _, ok := a["gen_ai.usage.input_tokens"]; ok {
		t.Errorf("refused request has token counts: %v", a)
	}
	if a := attrs(other.Attributes); other.Name != "other" || a["goodput.route"] != "other" || a["goodput.outcome"] != "ok" || a["gen_ai.operation.name"] != "" {
		t.Errorf("models span %q %v", other.Name, a)
	}
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if len(eng.traceparent) != 3 {
		t.Fatalf("engine got %q, want 3 requests", eng.traceparent)
	}
	if want := "00-" + clientTrace + "-" + hex.EncodeToString(other.SpanId) + "-01"; eng.traceparent[0] != want {
		t.Errorf("engine got %q for /v1/models, want %s", eng.traceparent[0], want)
	}
	if tp := eng.traceparent[1]; !strings.HasPrefix(tp, "00-"+clientTrace+"-") || !strings.HasSuffix(tp, "-00") || strings.Contains(tp, "3333333333333333") {
		t.Errorf("engine got %q for the unsampled request, want the client's trace, a span of the gateway's, unsampled", tp)
	}
}

type mapCarrier map[string]string

func (m mapCarrier) Get(k string) string { return m[k] }
func (m mapCarrier) Set(k, v string)     { m[k] = v }
func (m mapCarrier) Keys() []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// The cost of tracing and of the OTLP metrics, once per request (go test
// ./export/otlp -run '^$' -bench . -benchmem).
func BenchmarkPerRequest(b *testing.B) {
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer col.Close()
	tel, err := otlp.New(context.Background(), otlp.Config{Traces: true, Metrics: true, Endpoint: col.URL}, noEnv)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = tel.Shutdown(ctx)
	}()
	rec := new(meter.Record)
	client := mapCarrier{"traceparent": "00-" + clientTrace + "-" + clientParent + "-01"}
	up := mapCarrier{}
	fill := func() {
		rec.Reset()
		rec.Start, rec.RequestID, rec.Tenant, rec.Model, rec.Route, rec.Stream = time.Now(), "r1", "acme", "llama-3", "chat", true
		rec.Status, rec.ISL, rec.OSL, rec.TTFT, rec.E2E, rec.TPOT = 200, 100, 64, 50*time.Millisecond, 700*time.Millisecond, 10*time.Millisecond
		rec.Labels = meter.Labels{Tenant: "acme", Model: "llama-3"}
		for range 63 {
			rec.ITL = append(rec.ITL, 10*time.Millisecond)
		}
	}
	b.Run("trace", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			fill()
			tel.Tracer.Start(rec, client)
			tel.Tracer.Upstream(rec, 64, up)
			tel.Tracer.End(rec)
		}
	})
	b.Run("metrics", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			fill()
			tel.Metrics.Record(rec)
		}
	})
}

// An unreachable collector fails every export: the log gets the first
// error at once, then one a minute with the count of the others.
func TestErrorLogIsThrottled(t *testing.T) {
	var lines []string
	now := time.Unix(1000, 0)
	h := otlp.ErrorLog(func(f string, args ...any) { lines = append(lines, fmt.Sprintf(f, args...)) }, time.Minute, func() time.Time { return now })
	errRefused := fmt.Errorf("traces export: connection refused")
	for i := 0; i < 100; i++ {
		h.Handle(errRefused)
		now = now.Add(time.Second)
	}
	want := []string{
		"WARNING: opentelemetry: traces export: connection refused",
		"WARNING: opentelemetry: traces export: connection refused (and 59 more errors in the last 1m0s)",
	}
	if len(lines) != 2 || lines[0] != want[0] || lines[1] != want[1] {
		t.Fatalf("logged %q, want %q", lines, want)
	}
}

// A collector's error body is quoted in the log clipped and on one line:
// one answering 500 with 1 MB made a 2 MB log from one warning and its
// repeat at shutdown.
func TestCollectorErrorBodyIsClipped(t *testing.T) {
	body := strings.Repeat("<p>upstream\r\ntrouble</p>\n", 1<<20/24)
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, body)
	}))
	defer col.Close()
	ctx := context.Background()
	tel, err := otlp.New(ctx, otlp.Config{Metrics: true, Endpoint: col.URL}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	tel.Metrics.Record(&meter.Record{Route: meter.APIChat.String(), Model: "m", Tenant: "acme",
		Outcome: meter.OutcomeOK, ISL: 9, OSL: 3, E2E: time.Second, TTFT: meter.Unknown, TPOT: meter.Unknown})
	shutdownErr := tel.Shutdown(ctx)
	if shutdownErr == nil || !strings.Contains(shutdownErr.Error(), "500") {
		t.Fatalf("shutdown: %v, want the collector's 500", shutdownErr)
	}
	var lines []string
	now := time.Unix(1000, 0)
	h := otlp.ErrorLog(func(f string, args ...any) { lines = append(lines, fmt.Sprintf(f, args...)) }, time.Minute, func() time.Time { return now })
	exportErr := fmt.Errorf("failed to send to %s: 500 Internal Server Error (body: %s)", col.URL, body)
	h.Handle(exportErr)
	h.Handle(exportErr)
	now = now.Add(time.Minute)
	h.Handle(exportErr)
	const most = 600 // 512 bytes of message, "…", the prefix and the count
	for _, l := range append(lines, shutdownErr.Error()) {
		if len(l) > most || strings.ContainsAny(l, "\r\n") || !utf8.ValidString(l) {
			t.Errorf("logged %d bytes: %.120q", len(l), l)
		}
		if !strings.Contains(l, "500 Internal Server Error") || !strings.Contains(l, "…") {
			t.Errorf("logged %.200q, want the status and a cut", l)
		}
	}
	if len(lines) != 2 {
		t.Errorf("logged %d lines, want 2", len(lines))
	}
}

// An export interval under its minimum is refused, from the file and from
// the environment: 1ms (or 1ns) made an idle gateway export metrics about
// 880 times a second on 196 ms of CPU a second; a span batch delay of 1 ms
// woke it a thousand times a second.
func TestExportIntervalsHaveAMinimum(t *testing.T) {
	rcv := startReceiver(t)
	for _, d := range []time.Duration{time.Nanosecond, time.Millisecond, 999 * time.Millisecond} {
		cfg := otlp.Config{Metrics: true, MetricInterval: cfgtypes.Duration(d)}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "otel.metric_interval: "+d.String()+" is less than 1s") {
			t.Errorf("metric_interval %v: %v", d, err)
		}
		if _, err := otlp.New(context.Background(), cfg, noEnv); err == nil {
			t.Errorf("New with metric_interval %v: no error", d)
		}
	}
	for _, c := range []struct {
		cfg      otlp.Config
		env, val string
		want     string // "" for none
	}{
		{otlp.Config{Metrics: true}, "OTEL_METRIC_EXPORT_INTERVAL", "1", "OTEL_METRIC_EXPORT_INTERVAL=1: less than 1000 (milliseconds, 1s)"},
		{otlp.Config{Metrics: true}, "OTEL_METRIC_EXPORT_INTERVAL", "999", "OTEL_METRIC_EXPORT_INTERVAL=999: less than 1000"},
		{otlp.Config{Metrics: true}, "OTEL_METRIC_EXPORT_INTERVAL", "1000", ""},
		// The file's interval wins over the variable's.
		{otlp.Config{Metrics: true, MetricInterval: cfgtypes.Duration(time.Second)}, "OTEL_METRIC_EXPORT_INTERVAL", "1", ""},
		// A signal that is off reads none of its variables.
		{otlp.Config{Traces: true}, "OTEL_METRIC_EXPORT_INTERVAL", "1", ""},
		{otlp.Config{Traces: true}, "OTEL_BSP_SCHEDULE_DELAY", "1", "OTEL_BSP_SCHEDULE_DELAY=1: less than 100 (milliseconds)"},
		{otlp.Config{Traces: true}, "OTEL_BSP_SCHEDULE_DELAY", "100", ""},
		// What the SDK would ignore without a word, or take and end the
		// process with (a queue of -1 spans panicked, one of 10^10 ran out
		// of memory: a new user's probe), is refused.
		{otlp.Config{Traces: true}, "OTEL_BSP_SCHEDULE_DELAY", "abc", "OTEL_BSP_SCHEDULE_DELAY=abc: not a positive whole number of milliseconds"},
		{otlp.Config{Traces: true}, "OTEL_BSP_SCHEDULE_DELAY", "-1", "OTEL_BSP_SCHEDULE_DELAY=-1: not a positive"},
		{otlp.Config{Metrics: true}, "OTEL_METRIC_EXPORT_INTERVAL", "abc", "OTEL_METRIC_EXPORT_INTERVAL=abc: not a positive"},
		{otlp.Config{Metrics: true}, "OTEL_METRIC_EXPORT_TIMEOUT", "0", "OTEL_METRIC_EXPORT_TIMEOUT=0: not a positive"},
		{otlp.Config{Traces: true}, "OTEL_BSP_EXPORT_TIMEOUT", "-5", "OTEL_BSP_EXPORT_TIMEOUT=-5: not a positive"},
		{otlp.Config{Traces: true}, "OTEL_BSP_MAX_QUEUE_SIZE", "-1", "OTEL_BSP_MAX_QUEUE_SIZE=-1: want a whole number from 1 to 1048576"},
		{otlp.Config{Traces: true}, "OTEL_BSP_MAX_QUEUE_SIZE", "9999999999", "OTEL_BSP_MAX_QUEUE_SIZE=9999999999: want a whole number"},
		{otlp.Config{Traces: true}, "OTEL_BSP_MAX_QUEUE_SIZE", "lots", "OTEL_BSP_MAX_QUEUE_SIZE=lots: want a whole number"},
		{otlp.Config{Traces: true}, "OTEL_BSP_MAX_QUEUE_SIZE", "4096", ""},
		{otlp.Config{Traces: true}, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "-1", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE=-1: want a whole number"},
		{otlp.Config{Traces: true}, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "256", ""},
	} {
		env := map[string]string{c.env: c.val}
		c.cfg.Endpoint = rcv.srv.URL
		tel, err := otlp.New(context.Background(), c.cfg, func(k string) string { return env[k] })
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v with %s=%s: %v, want %q", c.cfg, c.env, c.val, err, c.want)
		}
		_ = tel.Shutdown(context.Background())
	}
}

// Without a judge (no Record.Labels), the metrics take the record's own
// model and tenant where a label can hold them, and other where it cannot
// (over 256 bytes, invalid UTF-8), as the Prometheus metrics do: a 1 MiB
// model is not an attribute of every point.
func TestUnlabelledMetricsTakeOtherForWhatNoLabelHolds(t *testing.T) {
	rcv := startReceiver(t)
	ctx := context.Background()
	tel, err := otlp.New(ctx, otlp.Config{Metrics: true, Endpoint: rcv.srv.URL}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("m", 300)
	for _, r := range []struct{ model, tenant string }{
		{"llama-3", "acme"},
		{long, "acme"},
		{"llama-3", "bad\xffutf8"},
	} {
		tel.Metrics.Record(&meter.Record{Route: meter.APIChat.String(), Model: r.model, Tenant: r.tenant,
			Outcome: meter.OutcomeOK, ISL: 9, OSL: 3, E2E: time.Second, TTFT: meter.Unknown, TPOT: meter.Unknown})
	}
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	got := map[string]uint64{}
	for _, m := range rcv.metrics {
		if m.Name != "gen_ai.server.request.duration" {
			continue
		}
		for _, dp := range m.GetHistogram().DataPoints {
			a := attrs(dp.Attributes)
			got[a["gen_ai.request.model"]+" "+a["goodput.tenant"]] += dp.Count
		}
	}
	want := map[string]uint64{"llama-3 acme": 1, "other acme": 1, "llama-3 other": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("request duration points by model and tenant %v, want %v", got, want)
	}
}

// A tenant header that is not valid UTF-8 (or too long to be a label), and
// an engine's error message that is not, leave their span without them
// instead of failing the whole batch's marshalling ("string field contains
// invalid UTF-8"), which lost every span exported with it.
func TestSpansWithInvalidUTF8AreExported(t *testing.T) {
	ctx := context.Background()
	eng := &engine{}
	rcv, tel, p, addr := tracedGateway(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Engine-Error") == "" {
			eng.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"error\":{\"message\":\"engine says \xff\xfe\",\"code\":500}}\n\n")
	}))
	send := func(parent, tenant string, engineError bool) {
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Tenant", tenant)
		if engineError {
			req.Header.Set("X-Engine-Error", "1")
		}
		req.Header.Set("traceparent", "00-"+clientTrace+"-"+parent+"-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	send("1111111111111111", "acme", false)
	send("2222222222222222", "bad\xff\xfe", false)
	send("3333333333333333", strings.Repeat("t", 300), false)
	send("4444444444444444", "acme", true)
	p.Wait()
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	byParent := map[string]map[string]string{}
	status := map[string]string{}
	for _, s := range rcv.allSpans() {
		pid := hex.EncodeToString(s.ParentSpanId)
		byParent[pid] = attrs(s.Attributes)
		status[pid] = s.Status.GetMessage()
	}
	if len(byParent) != 4 {
		t.Fatalf("%d spans exported, want 4 (the batch of a span with invalid UTF-8 was lost)", len(byParent))
	}
	for pid, want := range map[string]string{"1111111111111111": "acme", "2222222222222222": "", "3333333333333333": "", "4444444444444444": "acme"} {
		if got := byParent[pid]["goodput.tenant"]; got != want {
			t.Errorf("span %s: goodput.tenant %.40q, want %q", pid, got, want)
		}
	}
	if msg := status["4444444444444444"]; !utf8.ValidString(msg) || !strings.Contains(msg, "engine says") {
		t.Errorf("engine error's span status %q, want the message, valid UTF-8", msg)
	}
}

// serveGateway serves p on a loopback port and returns its address; it
// stops when the test ends.
func serveGateway(t *testing.T, p *proxy.Proxy) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := p.Server()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return ln.Addr().String()
}

// tracedGateway starts a trace receiver, telemetry exporting traces to it,
// an engine serving eng, and a gateway in front of it tracing through the
// telemetry; it returns the receiver, the telemetry (for its Shutdown),
// the gateway (for its Wait) and its address. All stop when the test ends.
func tracedGateway(t *testing.T, eng http.Handler) (*receiver, *otlp.Telemetry, *proxy.Proxy, string) {
	t.Helper()
	rcv := startReceiver(t)
	tel, err := otlp.New(context.Background(), otlp.Config{Traces: true, Endpoint: rcv.srv.URL}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewServer(eng)
	t.Cleanup(up.Close)
	p, err := proxy.New(proxy.Config{Upstream: up.URL, Trace: tel.Tracer, IOLoop: testenv.IOLoop()})
	if err != nil {
		t.Fatal(err)
	}
	return rcv, tel, p, serveGateway(t, p)
}

// Spans the SDK drops when its queue is full (a collector that does not
// answer) are said in the gateway's log, as a warning: the SDK says so
// only in a debug message, and the gateway lost spans silently.
func TestDroppedSpansAreLogged(t *testing.T) {
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(release) })
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "2")
	t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1")
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "200")
	t.Setenv("OTEL_BSP_EXPORT_TIMEOUT", "300")
	lines := make(chan string, 100)
	otel.SetLogger(otlp.SDKLog(func(f string, args ...any) {
		select {
		case lines <- fmt.Sprintf(f, args...):
		default:
		}
	}, time.Minute, time.Now))
	t.Cleanup(func() { otel.SetLogger(logr.Discard()) })
	tel, err := otlp.New(context.Background(), otlp.Config{Traces: true, Endpoint: hang.URL}, func(k string) string {
		if k == "OTEL_BSP_SCHEDULE_DELAY" {
			return "100"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	up := httptest.NewServer(&engine{})
	t.Cleanup(up.Close)
	p, err := proxy.New(proxy.Config{Upstream: up.URL, Trace: tel.Tracer, IOLoop: testenv.IOLoop()})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveGateway(t, p)
	for range 20 {
		resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	p.Wait()
	for {
		select {
		case l := <-lines:
			if strings.Contains(l, "spans dropped") {
				if !strings.HasPrefix(l, "WARNING: opentelemetry: ") {
					t.Errorf("not a warning: %s", l)
				}
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no line about dropped spans 10 s after 20 spans met a queue of 2 and a collector that does not answer")
		}
	}
}

// The SDK's messages: a warning keeps its text apart from its pairs, and
// the processor's count of dropped spans, a uint32, is followed across
// its wrap (a gateway dropping spans for days said nothing more after it).
func TestSDKLogLines(t *testing.T) {
	var lines []string
	now := time.Unix(0, 0)
	l := otlp.SDKLog(func(f string, args ...any) { lines = append(lines, fmt.Sprintf(f, args...)) }, time.Minute, func() time.Time { return now })
	l.V(1).Info("limit reached", "v", "x")
	if want := "WARNING: opentelemetry: limit reached v=x"; len(lines) != 1 || lines[0] != want {
		t.Fatalf("lines %q, want %q", lines, want)
	}
	l.V(8).Info("exporting spans", "count", 3, "total_dropped", uint32(4294967290))
	now = now.Add(time.Minute)
	l.V(8).Info("exporting spans", "count", 3, "total_dropped", uint32(5))
	want := []string{
		"WARNING: opentelemetry: 4294967290 spans dropped (4294967290 since the start): the span queue was full, the collector slow or out of reach; raise OTEL_BSP_MAX_QUEUE_SIZE or fix the collector",
		"WARNING: opentelemetry: 11 spans dropped (4294967301 since the start): the span queue was full, the collector slow or out of reach; raise OTEL_BSP_MAX_QUEUE_SIZE or fix the collector",
	}
	if got := lines[1:]; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("lines %q\nwant %q", got, want)
	}
}
