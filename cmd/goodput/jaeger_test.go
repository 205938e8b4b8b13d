package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/jaegertest"
)

// The spans of `goodput serve` reach a real OTLP backend, Jaeger v2, and
// read back through its query API as README's OpenTelemetry section says:
// one per request, of kind server, named "chat <model>" or
// "text_completion <model>", in the client's trace when it sent a
// traceparent, with the GenAI and goodput attributes of the request's
// record (the request log's line), a gen_ai.first_token event at t0 +
// TTFT, and an error status on the one the engine failed. Nothing Jaeger
// returns holds the gateway key. The in-process receiver of export/otlp
// checks the protocol's messages; this checks that a backend users run
// takes them, and shows them as users will see them.
func TestSpansReachJaeger(t *testing.T) {
	j := jaegertest.Start(t) // skips (fails in CI) without the binary
	// A span batch leaves every 100 ms, the least the gateway takes (the
	// SDK's default is 5 s): the spans reach Jaeger soon after their
	// request.
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")

	const service = "goodput-jaeger-test"
	dir := t.TempDir()
	key, keyLines := newKey(t, "acme", "acme-1")
	yaml := `sim: {ttft: 20ms, itl: 5ms}
slos:
  interactive: {ttft: 5s, tpot: 1s, objective: 0.9}
tenants:
  - name: acme
    slo: interactive
    keys:
` + keyLines + `otel:
  traces: true
  metrics: false
  endpoint: ` + j.OTLP + `
  service_name: ` + service + `
`
	cfg := loadYAML(t, dir, yaml)
	logPath := filepath.Join(dir, "requests.jsonl")
	cfg.Listen, cfg.AdminListen, cfg.RequestLog = "127.0.0.1:0", "127.0.0.1:0", logPath
	since := time.Now()
	gw, logs := startServe(t, cfg)

	const (
		clientTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
		clientParent = "00f067aa0ba902b7"
		clientState  = "rojo=00f067aa0ba902b7"
	)
	type request struct {
		id, path, body string
		hdr            map[string]string
		code           int
		name           string // the span's
		op, route      string
		stream         bool
		maxTokens      int
	}
	requests := []request{
		{id: "jaeger-stream", path: "/v1/chat/completions",
			body: `{"model":"sim-llama","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`,
			hdr: map[string]string{
				"traceparent": "00-" + clientTrace + "-" + clientParent + "-01",
				// A tracestate goes into the span: the member that holds
				// the key must not.
				"tracestate": clientState + ",vendor=" + key,
			},
			code: 200, name: "chat sim-llama", op: "chat", route: "chat", stream: true, maxTokens: 8},
		{id: "jaeger-whole", path: "/v1/chat/completions",
			body: `{"model":"sim-llama","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`,
			code: 200, name: "chat sim-llama", op: "chat", route: "chat", maxTokens: 4},
		{id: "jaeger-text", path: "/v1/completions",
			body: `{"model":"sim-llama","stream":true,"max_tokens":3,"prompt":"once upon"}`,
			code: 200, name: "text_completion sim-llama", op: "text_completion", route: "completions", stream: true, maxTokens: 3},
		{id: "jaeger-fail", path: "/v1/chat/completions",
			body: `{"model":"sim-llama","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
			hdr:  map[string]string{"X-Sim-Fault": "status=503"},
			code: 503, name: "chat sim-llama", op: "chat", route: "chat", maxTokens: 5},
	}
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	for _, r := range requests {
		req, _ := http.NewRequest("POST", "http://"+gw.Proxy+r.path, strings.NewReader(r.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("X-Request-Id", r.id)
		for k, v := range r.hdr {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != r.code || resp.Header.Get("X-Request-Id") != r.id {
			t.Fatalf("%s: %d, X-Request-Id %q; want %d, %s", r.id, resp.StatusCode, resp.Header.Get("X-Request-Id"), r.code, r.id)
		}
	}

	// Until Jaeger has the four spans, and the request log the four
	// records they are compared with.
	var spans []jaegertest.Span
	var found []byte
	var records map[string]logRecord
	deadline := time.Now().Add(30 * time.Second)
	for {
		spans, found = j.FindSpans(t, service, since)
		records = readRequestLog(t, logPath)
		if len(spans) >= len(requests) && len(records) >= len(requests) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s Jaeger has %d spans and the request log %d records, want %d\ngateway log:\n%s", len(spans), len(records), len(requests), logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(spans) != len(requests) {
		t.Fatalf("Jaeger has %d spans, want %d: %s", len(spans), len(requests), found)
	}

	byID := map[string]jaegertest.Span{}
	for _, s := range spans {
		byID[s.Attrs["goodput.request_id"].Text] = s
	}
	traces := map[string]bool{}
	for _, r := range requests {
		s, ok := byID[r.id]
		if !ok {
			t.Errorf("no span with goodput.request_id %s: %s", r.id, found)
			continue
		}
		rec, ok := records[r.id]
		if !ok {
			t.Fatalf("no request log record %s", r.id)
		}
		traces[s.TraceID] = true
		checkJaegerSpan(t, r.id, s, rec)
		if s.Name != r.name || s.Kind != jaegertest.SpanKindServer {
			t.Errorf("%s: span %q of kind %d, want %q of kind server (%d)", r.id, s.Name, s.Kind, r.name, jaegertest.SpanKindServer)
		}
		if got := s.Resource["service.name"]; got.Text != service {
			t.Errorf("%s: service.name %q, want %s", r.id, got.Text, service)
		}
		for k, want := range map[string]jaegertest.Value{
			"gen_ai.operation.name":     {Type: "string", Text: r.op},
			"gen_ai.request.model":      {Type: "string", Text: "sim-llama"},
			"gen_ai.request.max_tokens": {Type: "int", Text: fmt.Sprint(r.maxTokens)},
			"gen_ai.request.stream":     {Type: "bool", Text: fmt.Sprint(r.stream)},
			"http.response.status_code": {Type: "int", Text: fmt.Sprint(r.code)},
			"goodput.route":             {Type: "string", Text: r.route},
			"goodput.tenant":            {Type: "string", Text: "acme"},
			"goodput.key_id":            {Type: "string", Text: "acme-1"},
		} {
			if got := s.Attrs[k]; got != want {
				t.Errorf("%s: %s = %+v, want %+v", r.id, k, got, want)
			}
		}
		if r.id == "jaeger-stream" {
			// The client's trace, under the client's span.
			if s.TraceID != clientTrace || s.ParentSpanID != clientParent || s.TraceState != clientState {
				t.Errorf("%s: trace %s, parent %q, tracestate %q; want the client's %s, %s, %s",
					r.id, s.TraceID, s.ParentSpanID, s.TraceState, clientTrace, clientParent, clientState)
			}
		} else if s.ParentSpanID != "" || s.TraceID == clientTrace {
			t.Errorf("%s: trace %s, parent %q; want a trace of its own, no parent", r.id, s.TraceID, s.ParentSpanID)
		}
		if r.stream && len(s.Events) == 0 {
			t.Errorf("%s: a stream's span has no %s event", r.id, "gen_ai.first_token")
		}
	}
	if len(traces) != len(requests) {
		t.Errorf("%d traces, want one per request", len(traces))
	}
	fail := byID["jaeger-fail"]
	if fail.StatusCode != jaegertest.StatusError || fail.StatusMessage == "" || fail.Attrs["goodput.outcome"].Text != "upstream_error" {
		t.Errorf("the failed request's span: status %d %q, outcome %q; want error, the record's error, upstream_error",
			fail.StatusCode, fail.StatusMessage, fail.Attrs["goodput.outcome"].Text)
	}

	// What else users look at: the client's trace by its id, the v1 API
	// (Jaeger's UI), the service and its operations (the span names).
	bodies := map[string][]byte{"/api/v3/traces": found}
	get := func(p string) []byte {
		t.Helper()
		code, body := j.Get(t, p)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", p, code, body)
		}
		bodies[p] = body
		return body
	}
	byTrace, err := jaegertest.ParseSpans(get("/api/v3/traces/" + clientTrace))
	if err != nil {
		t.Fatal(err)
	}
	if len(byTrace) != 1 || byTrace[0].Attrs["goodput.request_id"].Text != "jaeger-stream" {
		t.Errorf("the client's trace holds %+v, want the streamed request's span", byTrace)
	}
	var v1 struct {
		Data []struct {
			TraceID string `json:"traceID"`
			Spans   []struct {
				OperationName string `json:"operationName"`
			} `json:"spans"`
		} `json:"data"`
	}
	if err := json.Unmarshal(get("/api/traces?"+url.Values{"service": {service}}.Encode()), &v1); err != nil {
		t.Fatal(err)
	}
	if len(v1.Data) != len(requests) {
		t.Errorf("the v1 API (Jaeger's UI) finds %d traces, want %d", len(v1.Data), len(requests))
	}
	get("/api/traces/" + clientTrace)
	var ops struct {
		Operations []struct {
			Name     string `json:"name"`
			SpanKind string `json:"spanKind"`
		} `json:"operations"`
	}
	if err := json.Unmarshal(get("/api/v3/operations?"+url.Values{"service": {service}}.Encode()), &ops); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range ops.Operations {
		names = append(names, o.Name+" ("+o.SpanKind+")")
	}
	slices.Sort(names)
	if want := []string{"chat sim-llama (server)", "text_completion sim-llama (server)"}; !slices.Equal(names, want) {
		t.Errorf("operations %q, want %q", names, want)
	}
	if services := get("/api/v3/services"); !bytes.Contains(services, []byte(`"`+service+`"`)) {
		t.Errorf("services %s, want %s among them", services, service)
	}

	// The key the requests carried is in nothing Jaeger has.
	secret := strings.TrimPrefix(key, "gp-")
	for p, body := range bodies {
		if i := bytes.Index(body, []byte(secret)); i >= 0 {
			t.Errorf("GET %s returns the gateway key: …%s…", p, body[max(0, i-200):min(len(body), i+len(secret)+20)])
		}
	}
	// The collector took every batch: the exporter says so when one is
	// refused (a partial success, a 400).
	if strings.Contains(logs.String(), "WARNING: opentelemetry") {
		t.Errorf("the gateway's log has an export warning:\n%s", logs.String())
	}
}

// logRecord is what the span is compared with in a request log line.
type logRecord struct {
	Time        time.Time `json:"time"`
	RequestID   string    `json:"request_id"`
	Status      int       `json:"status"`
	Outcome     string    `json:"outcome"`
	Error       string    `json:"error"`
	ISL         *int      `json:"isl"`
	OSL         *int      `json:"osl"`
	TTFTms      *float64  `json:"ttft_ms"`
	E2Ems       *float64  `json:"e2e_ms"`
	TPOTms      *float64  `json:"tpot_ms"`
	MaxITLms    *float64  `json:"max_itl_ms"`
	Overheadms  *float64  `json:"overhead_ms"`
	Queuems     *float64  `json:"queue_ms"`
	Events      *int      `json:"events"`
	SLO         string    `json:"slo"`
	Good        *bool     `json:"good"`
	MissReasons []string  `json:"miss_reasons"`
}

// readRequestLog returns the records of the request log's whole lines, by
// request id.
func readRequestLog(t *testing.T, path string) map[string]logRecord {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	recs := map[string]logRecord{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var r logRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("request log: %v: %s", err, sc.Text())
		}
		recs[r.RequestID] = r
	}
	return recs
}

// checkJaegerSpan compares a span with its request's record: the times (the
// log's are in microseconds), counts, outcome, verdict and error.
func checkJaegerSpan(t *testing.T, id string, s jaegertest.Span, rec logRecord) {
	t.Helper()
	const us = time.Microsecond
	near := func(a, b time.Duration) bool { return a-b < us && b-a < us }
	if d := s.Start.Sub(rec.Time); d < 0 || d >= us {
		t.Errorf("%s: span starts at %v, the record at %v (t0)", id, s.Start, rec.Time)
	}
	if rec.E2Ems == nil {
		t.Errorf("%s: the record has no e2e", id)
	} else if !near(s.End.Sub(s.Start), logMillis(*rec.E2Ems)) {
		t.Errorf("%s: span lasts %v, the record's e2e %v ms", id, s.End.Sub(s.Start), *rec.E2Ems)
	}
	intAttr := func(k string, want *int) {
		got, ok := s.Attrs[k]
		switch {
		case want == nil && ok:
			t.Errorf("%s: %s = %+v, the record has none", id, k, got)
		case want != nil && got != (jaegertest.Value{Type: "int", Text: fmt.Sprint(*want)}):
			t.Errorf("%s: %s = %+v, want the record's %d", id, k, got, *want)
		}
	}
	intAttr("gen_ai.usage.input_tokens", rec.ISL)
	intAttr("gen_ai.usage.output_tokens", rec.OSL)
	intAttr("goodput.token_events", rec.Events)
	intAttr("http.response.status_code", &rec.Status)
	// Durations in seconds; none where the record has none.
	secondsAttr := func(k string, want *float64) {
		got, ok := s.Attrs[k]
		if want == nil {
			if ok {
				t.Errorf("%s: %s = %+v, the record has none", id, k, got)
			}
			return
		}
		secs, err := strconv.ParseFloat(got.Text, 64)
		if got.Type != "double" || err != nil || !near(time.Duration(math.Round(secs*1e9)), logMillis(*want)) {
			t.Errorf("%s: %s = %+v, the record's %v ms", id, k, got, *want)
		}
	}
	secondsAttr("gen_ai.response.time_to_first_chunk", rec.TTFTms)
	secondsAttr("goodput.tpot", rec.TPOTms)
	secondsAttr("goodput.itl.max", rec.MaxITLms)
	secondsAttr("goodput.overhead", rec.Overheadms)
	secondsAttr("goodput.queue_wait", rec.Queuems)
	if got := s.Attrs["goodput.outcome"]; got.Text != rec.Outcome {
		t.Errorf("%s: goodput.outcome %q, the record's %q", id, got.Text, rec.Outcome)
	}

	// TTFT: the event at t0 + TTFT.
	var first []jaegertest.Event
	for _, e := range s.Events {
		if e.Name == "gen_ai.first_token" {
			first = append(first, e)
		}
	}
	if len(first) != len(s.Events) {
		t.Errorf("%s: events %+v, want only gen_ai.first_token", id, s.Events)
	}
	if rec.TTFTms == nil && len(first) > 0 {
		t.Errorf("%s: no TTFT in the record, but events %+v", id, first)
	}
	if rec.TTFTms != nil && (len(first) != 1 || !near(first[0].Time.Sub(s.Start), logMillis(*rec.TTFTms))) {
		t.Errorf("%s: first token events %+v, want one at t0 + %v ms (t0 %v)", id, first, *rec.TTFTms, s.Start)
	}

	// The verdict.
	if rec.Good == nil {
		t.Fatalf("%s: the record was not judged", id)
	}
	if got := s.Attrs["goodput.slo"]; got != (jaegertest.Value{Type: "string", Text: rec.SLO}) {
		t.Errorf("%s: goodput.slo %+v, the record's %q", id, got, rec.SLO)
	}
	if got := s.Attrs["goodput.slo.good"]; got != (jaegertest.Value{Type: "bool", Text: fmt.Sprint(*rec.Good)}) {
		t.Errorf("%s: goodput.slo.good %+v, the record's %v", id, got, *rec.Good)
	}
	miss, hasMiss := s.Attrs["goodput.slo.miss_reasons"]
	if len(rec.MissReasons) == 0 && hasMiss || len(rec.MissReasons) > 0 && miss != (jaegertest.Value{Type: "array", Text: "[" + strings.Join(rec.MissReasons, ",") + "]"}) {
		t.Errorf("%s: goodput.slo.miss_reasons %+v, the record's %q", id, miss, rec.MissReasons)
	}

	// A failure: error.type, and for the engine's an error status with
	// the record's error.
	errType, hasErrType := s.Attrs["error.type"]
	if rec.Outcome == "ok" {
		if hasErrType || s.StatusCode == jaegertest.StatusError {
			t.Errorf("%s: a request that succeeded has error.type %+v, status %d %q", id, errType, s.StatusCode, s.StatusMessage)
		}
	} else {
		if errType.Text != rec.Outcome {
			t.Errorf("%s: error.type %+v, want the outcome %s", id, errType, rec.Outcome)
		}
		failed := rec.Outcome == "upstream_error" || rec.Outcome == "timeout"
		if failed && (s.StatusCode != jaegertest.StatusError || s.StatusMessage != rec.Error) {
			t.Errorf("%s: status %d %q, want error with the record's %q", id, s.StatusCode, s.StatusMessage, rec.Error)
		}
		if !failed && s.StatusCode == jaegertest.StatusError {
			t.Errorf("%s: outcome %s (not the service's failure), but status error %q", id, rec.Outcome, s.StatusMessage)
		}
	}
}

// logMillis is a request log's milliseconds as a duration, to the nanosecond.
func logMillis(v float64) time.Duration { return time.Duration(math.Round(v * 1e6)) }
