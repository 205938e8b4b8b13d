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
