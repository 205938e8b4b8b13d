package otlp_test

import (
	"context"
	"strings"
	"testing"

	"github.com/goodput/goodput/export/otlp"
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
