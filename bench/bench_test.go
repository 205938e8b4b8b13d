package bench

import (
	"context"
	"math"
	"testing"

	"github.com/goodput/goodput/sim"
)

// BenchmarkBenchDrive drives a simulator that answers at once (TTFT and ITL
// 0, 16 output tokens, so 18 token events and a usage chunk per stream) with
// b.N streamed chat requests, and reports the rate bench sustained and the
// p99 of its arrival lateness. The simulator shares the process: for the
// client alone, run `goodput sim` in its own process and `goodput bench`
// against it (see the README).
//
//	open:   every request planned at once, at most 256 in flight (the
//	        lateness is then mostly the wait for a slot)
//	rate:   an open loop at 2,000 requests per second (Poisson): lateness
//	        is how far sends fell behind their plan
//	closed: 64 clients, each sending its next request when one ends
func BenchmarkBenchDrive(b *testing.B) {
	_, url := startSim(b, sim.Config{DefaultMaxTokens: 16, MaxTraces: -1})
	reqs := make([]Request, 0)
	for _, c := range []struct {
		name    string
		arrival Arrival
	}{
		{"open", Arrival{Rate: math.Inf(1), MaxConcurrency: 256}},
		{"rate", Arrival{Rate: 2000}},
		{"closed", Arrival{Concurrency: 64}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for len(reqs) < b.N {
				reqs = append(reqs, Request{Prompt: "a short prompt of a few words", InputTokens: 8, MaxTokens: 16})
			}
			b.ReportAllocs()
			b.ResetTimer()
			res, err := Run(context.Background(), Options{
				BaseURL: url, Endpoint: EndpointChat, Model: "sim-llama", Requests: reqs[:b.N], Arrival: c.arrival,
			})
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if res.Failed > 0 {
				b.Fatalf("%d failed: %v", res.Failed, res.Errors)
			}
			b.ReportMetric(res.RequestThroughput, "req/s")
			b.ReportMetric(res.Goodput.Lateness.P99, "lateness-p99-ms")
			b.ReportMetric(res.Metrics[MetricTTFT].Median, "ttft-p50-ms")
		})
	}
}
