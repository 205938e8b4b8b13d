package otlp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/export/otlp"
	"github.com/goodput/goodput/meter"
	"go.opentelemetry.io/otel"
)

// A shutdown that cannot flush says which of traces and metrics it lost
// (it said "context deadline exceeded" twice, once for each).
func TestShutdownSaysWhatItLost(t *testing.T) {
	rcv := startReceiver(t)
	tel, err := otlp.New(context.Background(), otlp.Config{Traces: true, Metrics: true, Endpoint: rcv.srv.URL, ServiceName: "gw-test"}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no time left to flush
	err = tel.Shutdown(ctx)
	if err == nil || !strings.Contains(err.Error(), "traces (the spans not yet sent are lost)") || !strings.Contains(err.Error(), "metrics (the last interval's are lost)") {
		t.Fatalf("shutdown: %v, want each of traces and metrics named", err)
	}
}

// The last spans' export failing at shutdown is in Shutdown's error, as
// the metrics' is: the batch processor hands it to the global error
// handler, which logs one a minute, so after an error in the minute
// before (a collector answering 500 all along) the spans lost at exit
// went unsaid, and Shutdown returned nil.
func TestShutdownSaysTheLastSpansWereLost(t *testing.T) {
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.Error(w, "collector trouble", http.StatusInternalServerError)
	}))
	defer col.Close()
	defer otel.SetErrorHandler(otel.GetErrorHandler())
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {})) // as one throttled
	ctx := context.Background()
	tel, err := otlp.New(ctx, otlp.Config{Traces: true, Endpoint: col.URL}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	rec := &meter.Record{Start: time.Now(), RequestID: "r1", Route: meter.APIChat.String(), Model: "m",
		Outcome: meter.OutcomeOK, ISL: 9, OSL: 3, E2E: time.Second, TTFT: meter.Unknown, TPOT: meter.Unknown}
	tel.Tracer.Start(rec, mapCarrier{})
	tel.Tracer.End(rec)
	err = tel.Shutdown(ctx)
	if err == nil || !strings.Contains(err.Error(), "traces (the spans not yet sent are lost)") || !strings.Contains(err.Error(), "500") {
		t.Fatalf("shutdown: %v, want the traces' export and the collector's 500 named", err)
	}
}

// Resource attributes that are not UTF-8 are refused at start: the
// resource goes with every export, and a string that is not UTF-8 fails
// its marshalling, so OTEL_RESOURCE_ATTRIBUTES=env=%ff (percent-decoded
// to a byte that is no UTF-8) lost every span and metric, said only by a
// warning a minute, "string field contains invalid UTF-8".
func TestResourceNotUTF8IsRefused(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string // in the error; "" for none
	}{
		{map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "team=a,deployment.environment=%ff%fe"}, `OTEL_RESOURCE_ATTRIBUTES: the value of "deployment.environment"`},
		{map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "k\xff=v"}, "OTEL_RESOURCE_ATTRIBUTES: the name"},
		{map[string]string{"OTEL_SERVICE_NAME": "gw\xff"}, "OTEL_SERVICE_NAME"},
		{map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "team=a%20b,zone=%C3%A9,novalue"}, ""},
	} {
		getenv := func(k string) string { return c.env[k] }
		err := otlp.CheckEnvironment(otlp.Config{Traces: true, Endpoint: "http://127.0.0.1:1"}, getenv)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "%ff")) {
			t.Errorf("%q: %v, want %q", c.env, err, c.want)
		}
	}
}
