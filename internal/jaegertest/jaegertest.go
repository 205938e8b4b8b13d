// Package jaegertest runs a private Jaeger for tests: Jaeger v2, the
// `jaeger` binary (an OpenTelemetry Collector with Jaeger's storage and
// query extensions), taking OTLP/HTTP on a loopback port of its own,
// keeping the spans in memory and serving its query API on another. It
// is what users send the gateway's spans to: a real OTLP receiver, which
// refuses what the protocol does not allow, and a real backend, which
// shows them as users will see them.
package jaegertest

import (
	"encoding/json"
	"fmt"
	"go/build"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/testenv"
)

// Version is the Jaeger release the tests are written against (its
// configuration and query API), the one .ci/run builds.
const Version = "v1.75.0"

// Binary returns the path of the jaeger binary: on PATH, else where `go
// install` puts it (GOBIN, else GOPATH's bin). Without one it skips the
// test, except in CI (CI set), where it fails: CI must run these tests
// against a real Jaeger.
func Binary(t testing.TB) string {
	t.Helper()
	if bin, err := exec.LookPath("jaeger"); err == nil {
		return bin
	}
	dirs := []string{os.Getenv("GOBIN")}
	for _, p := range filepath.SplitList(build.Default.GOPATH) {
		dirs = append(dirs, filepath.Join(p, "bin"))
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		bin := filepath.Join(d, "jaeger")
		if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return bin
		}
	}
	const how = "Jaeger " + Version + " built from github.com/jaegertracing/jaeger/cmd/jaeger, as .ci/run does"
	if os.Getenv("CI") != "" {
		t.Fatalf("CI needs the jaeger binary (%s)", how)
	}
	t.Skipf("no jaeger binary (%s)", how)
	return ""
}

// config is the collector's: the OTLP/HTTP receiver (no gRPC, no other
// protocol), the memory store, the query API and the health check, each
// on its own loopback port. Nothing else listens: the collector's own
// metrics (port 8888 by default) are off, and so are the query service's
// own traces, which it would export to the default OTLP endpoint,
// localhost:4318. No batch processor: spans are stored as they arrive.
const config = `service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
  jaeger_query:
    storage:
      traces: memstore
    enable_tracing: false
    http:
      endpoint: %[1]s
    grpc:
      endpoint: %[2]s
  healthcheckv2:
    use_v2: true
    http:
      endpoint: %[3]s
receivers:
  otlp:
    protocols:
      http:
        endpoint: %[4]s
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

// Server is a running Jaeger.
type Server struct {
	OTLP  string // the OTLP/HTTP base URL, http://127.0.0.1:port (/v1/traces appended by exporters)
	Query string // the query API's, http://127.0.0.1:port
	hc    *http.Client
}

// Start starts Jaeger and waits until its health check says every
// component is up (at most 30 s). It is stopped when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	query, grpc, health, otlp := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	conf := fmt.Sprintf(config, query, grpc, health, otlp)
	path := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", path)
	cmd.Dir = dir
	// None of the test's OTEL_ variables: they are the gateway's (its
	// batch delay), and the collector's own telemetry reads some of them.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, exited := testenv.StartChild(t, "jaeger", cmd)

	s := &Server{OTLP: "http://" + otlp, Query: "http://" + query, hc: &http.Client{Timeout: 5 * time.Second}}
	t.Cleanup(s.hc.CloseIdleConnections)
	// healthcheckv2's /status answers 200 once every component (the
	// receiver, the storage, the query API) has started, 503 before.
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("jaeger exited: %s\nconfig:\n%s", out.String(), conf)
		default:
		}
		if resp, err := s.hc.Get("http://" + health + "/status"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger not ready after 30s: %s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Get returns the status and body of GET path (with its query) from the
// query API.
func (s *Server) Get(t testing.TB, path string) (int, []byte) {
	t.Helper()
	resp, err := s.hc.Get(s.Query + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// FindSpans returns the spans of service's traces that started since
// then, as the query API's v3 search (GET /api/v3/traces) returns them,
// and the body it returned. No trace yet is no span (the API answers 404).
func (s *Server) FindSpans(t testing.TB, service string, since time.Time) ([]Span, []byte) {
	t.Helper()
	q := url.Values{
		"query.service_name":   {service},
		"query.start_time_min": {since.Add(-time.Minute).UTC().Format(time.RFC3339Nano)},
		"query.start_time_max": {time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano)},
		"query.num_traces":     {"100"},
	}
	code, body := s.Get(t, "/api/v3/traces?"+q.Encode())
	switch code {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, body
	default:
		t.Fatalf("GET /api/v3/traces: %d %s", code, body)
	}
	spans, err := ParseSpans(body)
	if err != nil {
		t.Fatalf("GET /api/v3/traces: %v\n%s", err, body)
	}
	return spans, body
}

// Span is a span as the v3 API returns it (OTLP JSON), flattened: its
// resource's attributes beside its own.
type Span struct {
	TraceID, SpanID, ParentSpanID string // hex; ParentSpanID "" for a root
	TraceState                    string // W3C tracestate
	Name                          string
	Kind                          int // OTLP's SpanKind: 2 is server
	Start, End                    time.Time
	Attrs                         map[string]Value
	Events                        []Event
	StatusCode                    int // OTLP's: 0 unset, 1 ok, 2 error
	StatusMessage                 string
	Resource                      map[string]Value
}

// Event is a span event.
type Event struct {
	Name  string
	Time  time.Time
	Attrs map[string]Value
}

// Value is an attribute's value: its OTLP type ("string", "int",
// "double", "bool", "array") and its text (an int's digits, a double as
// strconv formats it, an array as [a,b]).
type Value struct{ Type, Text string }

// SpanKindServer and StatusError are OTLP's numbers for them.
const (
	SpanKindServer = 2
	StatusError    = 2
)

// ParseSpans reads a v3 API answer: {"result": {"resourceSpans": [...]}}.
func ParseSpans(body []byte) ([]Span, error) {
	var doc struct {
		Result struct {
			ResourceSpans []struct {
				Resource struct {
					Attributes []jsonKV `json:"attributes"`
				} `json:"resource"`
				ScopeSpans []struct {
					Spans []struct {
						TraceID      string      `json:"traceId"`
						SpanID       string      `json:"spanId"`
						ParentSpanID string      `json:"parentSpanId"`
						TraceState   string      `json:"traceState"`
						Name         string      `json:"name"`
						Kind         enum        `json:"kind"`
						Start        json.Number `json:"startTimeUnixNano"`
						End          json.Number `json:"endTimeUnixNano"`
						Attributes   []jsonKV    `json:"attributes"`
						Events       []struct {
							Name       string      `json:"name"`
							Time       json.Number `json:"timeUnixNano"`
							Attributes []jsonKV    `json:"attributes"`
						} `json:"events"`
						Status struct {
							Code    enum   `json:"code"`
							Message string `json:"message"`
						} `json:"status"`
					} `json:"spans"`
				} `json:"scopeSpans"`
			} `json:"resourceSpans"`
		} `json:"result"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, err
	}
	var spans []Span
	for _, rs := range doc.Result.ResourceSpans {
		res, err := attrMap(rs.Resource.Attributes)
		if err != nil {
			return nil, err
		}
		for _, ss := range rs.ScopeSpans {
			for _, js := range ss.Spans {
				s := Span{
					TraceID: js.TraceID, SpanID: js.SpanID, ParentSpanID: js.ParentSpanID, TraceState: js.TraceState, Name: js.Name,
					Kind: int(js.Kind), StatusCode: int(js.Status.Code), StatusMessage: js.Status.Message,
					Resource: res,
				}
				if s.Start, err = unixNano(js.Start); err != nil {
					return nil, err
				}
				if s.End, err = unixNano(js.End); err != nil {
					return nil, err
				}
				if s.Attrs, err = attrMap(js.Attributes); err != nil {
					return nil, err
				}
				for _, je := range js.Events {
					e := Event{Name: je.Name}
					if e.Time, err = unixNano(je.Time); err != nil {
						return nil, err
					}
					if e.Attrs, err = attrMap(je.Attributes); err != nil {
						return nil, err
					}
					s.Events = append(s.Events, e)
				}
				spans = append(spans, s)
			}
		}
	}
	return spans, nil
}

// jsonKV is an OTLP JSON attribute: {"key": k, "value": {"stringValue": v}}.
type jsonKV struct {
	Key   string   `json:"key"`
	Value anyValue `json:"value"`
}

// anyValue is OTLP JSON's AnyValue; 64-bit ints are strings in it.
type anyValue struct {
	String *string      `json:"stringValue"`
	Int    *json.Number `json:"intValue"`
	Double *json.Number `json:"doubleValue"`
	Bool   *bool        `json:"boolValue"`
	Array  *struct {
		Values []anyValue `json:"values"`
	} `json:"arrayValue"`
}

func (v anyValue) value() (Value, error) {
	switch {
	case v.String != nil:
		return Value{"string", *v.String}, nil
	case v.Int != nil:
		if _, err := strconv.ParseInt(v.Int.String(), 10, 64); err != nil {
			return Value{}, fmt.Errorf("intValue %q: %v", *v.Int, err)
		}
		return Value{"int", v.Int.String()}, nil
	case v.Double != nil:
		f, err := strconv.ParseFloat(v.Double.String(), 64)
		if err != nil {
			return Value{}, fmt.Errorf("doubleValue %q: %v", *v.Double, err)
		}
		return Value{"double", strconv.FormatFloat(f, 'g', -1, 64)}, nil
	case v.Bool != nil:
		return Value{"bool", strconv.FormatBool(*v.Bool)}, nil
	case v.Array != nil:
		texts := make([]string, len(v.Array.Values))
		for i, e := range v.Array.Values {
			ev, err := e.value()
			if err != nil {
				return Value{}, err
			}
			texts[i] = ev.Text
		}
		return Value{"array", "[" + strings.Join(texts, ",") + "]"}, nil
	}
	return Value{}, fmt.Errorf("a value of no type this package reads")
}

func attrMap(kvs []jsonKV) (map[string]Value, error) {
	m := make(map[string]Value, len(kvs))
	for _, kv := range kvs {
		v, err := kv.Value.value()
		if err != nil {
			return nil, fmt.Errorf("attribute %s: %v", kv.Key, err)
		}
		if _, dup := m[kv.Key]; dup {
			return nil, fmt.Errorf("attribute %s twice", kv.Key)
		}
		m[kv.Key] = v
	}
	return m, nil
}

// enum is an OTLP JSON enum: its number, or its name as protojson may
// write it (SPAN_KIND_SERVER, STATUS_CODE_ERROR).
type enum int

func (e *enum) UnmarshalJSON(b []byte) error {
	var n int
	if err := json.Unmarshal(b, &n); err == nil {
		*e = enum(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	names := map[string]int{
		"SPAN_KIND_UNSPECIFIED": 0, "SPAN_KIND_INTERNAL": 1, "SPAN_KIND_SERVER": 2, "SPAN_KIND_CLIENT": 3,
		"SPAN_KIND_PRODUCER": 4, "SPAN_KIND_CONSUMER": 5,
		"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2,
	}
	n, ok := names[s]
	if !ok {
		return fmt.Errorf("enum %q", s)
	}
	*e = enum(n)
	return nil
}

// unixNano reads a time in nanoseconds since the epoch (a string, as OTLP
// JSON writes 64-bit ints, or a number).
func unixNano(n json.Number) (time.Time, error) {
	if n == "" {
		return time.Time{}, nil
	}
	ns, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("time %q: %v", n, err)
	}
	return time.Unix(0, ns), nil
}

// freeAddr returns a loopback address whose port was free a moment ago:
// the collector is told its ports in its configuration.
func freeAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
