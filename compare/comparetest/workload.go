// Package comparetest makes workloads for the tests of package compare and
// of the compare command: requests drawn from a shape (ISL, OSL, arrivals),
// written as a gateway request log of real meter.Records or as a benchmark
// result with vLLM bench serve's field names.
package comparetest

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"time"

	"github.com/goodput/goodput/meter"
)

// Shape describes a workload to draw.
type Shape struct {
	// ISL and OSL are log-normal: medians and sigma of the log.
	ISLMedian, ISLSigma float64
	OSLMedian, OSLSigma float64
	// Rate is the arrival rate (per second); K the gamma shape of the
	// inter-arrival gaps (1 Poisson, below 1 bursty).
	Rate, K float64
	N       int
}

// Chat is a chat-shaped benchmark: ISL ~128, OSL ~128, Poisson at 2/s.
var Chat = Shape{ISLMedian: 128, ISLSigma: 0.2, OSLMedian: 128, OSLSigma: 0.2, Rate: 2, K: 1, N: 400}

// RAG is RAG-shaped traffic: ISL ~4,000, OSL ~150, bursty (k 0.3) at 2/s.
var RAG = Shape{ISLMedian: 4000, ISLSigma: 0.3, OSLMedian: 150, OSLSigma: 0.3, Rate: 2, K: 0.3, N: 400}

// Request is one drawn request.
type Request struct {
	Start    float64 // seconds from the start
	ISL, OSL int
	TTFT     float64   // seconds
	Gaps     []float64 // seconds, OSL-1 of them
}

// E2E is TTFT plus every gap.
func (r Request) E2E() float64 {
	e := r.TTFT
	for _, g := range r.Gaps {
		e += g
	}
	return e
}

// Draw draws s.N requests with the given seed. Latencies follow one model
// whatever the shape (TTFT grows with ISL, gaps ~20 ms), so that two draws
// of one shape have the same latency distributions.
func Draw(s Shape, seed uint64) []Request {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]Request, s.N)
	t := 0.0
	for i := range out {
		t += gamma(rng, s.K) / (s.K * s.Rate)
		isl := max(1, int(math.Round(s.ISLMedian*math.Exp(s.ISLSigma*rng.NormFloat64()))))
		osl := max(1, int(math.Round(s.OSLMedian*math.Exp(s.OSLSigma*rng.NormFloat64()))))
		r := Request{Start: t, ISL: isl, OSL: osl, TTFT: 0.03 + float64(isl)*2e-5 + 0.01*rng.Float64()}
		r.Gaps = make([]float64, osl-1)
		for j := range r.Gaps {
			r.Gaps[j] = 0.015 + 0.01*rng.Float64()
		}
		out[i] = r
	}
	return out
}

// gamma draws from Gamma(k, 1) (Marsaglia and Tsang; k < 1 by boosting).
func gamma(rng *rand.Rand, k float64) float64 {
	if k < 1 {
		return gamma(rng, k+1) * math.Pow(rng.Float64(), 1/k)
	}
	d := k - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if math.Log(u) < 0.5*x*x+d-d*v+d*math.Log(v) {
			return d * v
		}
	}
}

// Epoch is the wall-clock start of a drawn request log.
var Epoch = time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)

func dur(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }

// Record is the gateway's record of a drawn request (outcome ok, streamed).
func Record(r Request, tenant, model string) *meter.Record {
	rec := &meter.Record{}
	rec.Reset()
	rec.Start = Epoch.Add(dur(r.Start))
	rec.RequestID = "req"
	rec.Tenant, rec.Model, rec.Route = tenant, model, "chat"
	rec.Stream, rec.Status, rec.Outcome = true, 200, meter.OutcomeOK
	rec.ISL, rec.OSL = r.ISL, r.OSL
	rec.TTFT, rec.TTFTContent = dur(r.TTFT), dur(r.TTFT)
	rec.E2E = dur(r.E2E())
	if r.OSL > 1 {
		rec.TPOT = (rec.E2E - rec.TTFT) / time.Duration(r.OSL-1)
	}
	for _, g := range r.Gaps {
		rec.ITL = append(rec.ITL, dur(g))
		rec.MaxITL = max(rec.MaxITL, dur(g))
	}
	rec.Events = r.OSL
	rec.Overhead, rec.WriteDelay = time.Millisecond, 0
	return rec
}

// RequestLog is the JSON Lines request log of reqs for one tenant and
// model, as the gateway writes it.
func RequestLog(reqs []Request, tenant, model string) []byte {
	var b []byte
	for _, r := range reqs {
		b = Record(r, tenant, model).AppendJSON(b)
	}
	return b
}

// BenchJSON is a benchmark result of reqs with vLLM bench serve's field
// names and --save-detailed's per-request arrays (seconds), as goodput
// bench writes it; extra fields are added as given.
func BenchJSON(reqs []Request, extra map[string]any) []byte {
	n := len(reqs)
	in, outl := make([]int, n), make([]int, n)
	ttfts, lats, starts := make([]float64, n), make([]float64, n), make([]float64, n)
	itls, errs := make([][]float64, n), make([]string, n)
	var end, tin, tout float64
	for i, r := range reqs {
		in[i], outl[i] = r.ISL, r.OSL
		ttfts[i], lats[i], starts[i] = r.TTFT, r.E2E(), 1000+r.Start
		itls[i] = r.Gaps
		end = max(end, r.Start+r.E2E())
		tin += float64(r.ISL)
		tout += float64(r.OSL)
	}
	m := map[string]any{
		"completed": n, "failed": 0, "duration": end,
		"total_input_tokens": tin, "total_output_tokens": tout,
		"request_throughput": float64(n) / end, "output_throughput": tout / end,
		"input_lens": in, "output_lens": outl, "ttfts": ttfts, "itls": itls,
		"latencies": lats, "start_times": starts, "errors": errs,
	}
	for k, v := range extra {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}
