package bench

import (
	"context"
	"fmt"
	"math"
	"net"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/bench/workload"
	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/proxy"
	"github.com/goodput/goodput/sim"
)

func startSim(t testing.TB, cfg sim.Config) (*sim.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New(cfg)
	go s.Serve(ln)
	t.Cleanup(func() { s.Shutdown() })
	return s, "http://" + ln.Addr().String()
}

// requests makes n chat requests of 1 to 12 output tokens.
func requests(n int) []Request {
	out := make([]Request, n)
	for i := range out {
		out[i] = Request{Prompt: strings.Repeat("word ", 1+i%20), InputTokens: 1 + i%20, MaxTokens: 1 + i%12}
	}
	return out
}

// TestRunAgainstSim checks every request's figures against what the
// simulator recorded sending: counts equal, one ITL gap per token event
// after the first, and TTFT and E2E never below the simulator's schedule
// (bench's send is before the simulator read the request, its reads after
// the simulator's writes, which are never before they are due). The
// distance to the simulator's recorded flush times is logged; the
// simulator takes those just after each flush returns, so bench may read an
// event a few microseconds before its stamp. The same for every endpoint:
// the Responses and Messages APIs' streams are metered by the same rules
// (their token events are the output deltas alone, one per token).
func TestRunAgainstSim(t *testing.T) {
	for _, ep := range []string{"chat", "responses", EndpointMessages} {
		t.Run(strings.TrimPrefix(ep, "/v1/"), func(t *testing.T) { runAgainstSim(t, ep) })
	}
}

func runAgainstSim(t *testing.T, endpoint string) {
	simSrv, url := startSim(t, sim.Config{TTFT: 5 * time.Millisecond, ITL: time.Millisecond})
	const n, maxConc = 40, 6
	path, _ := NormalizeEndpoint(endpoint)
	res, err := Run(context.Background(), Options{
		BaseURL: url, Endpoint: endpoint, Requests: requests(n), RequestIDPrefix: "sim-",
		Arrival: Arrival{Rate: math.Inf(1), MaxConcurrency: maxConc}, Warmup: 3,
		Goodput: SLO{TTFT: time.Minute}, Label: Label{Engine: "sim"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != n || res.Failed != 0 || res.ModelID != simSrv.Model() {
		t.Fatalf("completed %d failed %d model %q; errors %v", res.Completed, res.Failed, res.ModelID, res.Errors)
	}
	if res.RequestGoodput == nil || math.Abs(*res.RequestGoodput-res.RequestThroughput) > 1e-9 {
		t.Fatalf("goodput %v, throughput %v: every request meets a 1-minute TTFT", res.RequestGoodput, res.RequestThroughput)
	}
	if res.MaxConcurrentRequests > maxConc || *res.MaxConcurrency != maxConc {
		t.Fatalf("peak concurrency %d over the limit %d", res.MaxConcurrentRequests, maxConc)
	}
	queued := 0
	var dTTFT []float64
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("sim-%d", i)
		if res.Goodput.RequestIDs[i] != id {
			t.Fatalf("request %d id %q", i, res.Goodput.RequestIDs[i])
		}
		tr, err := simSrv.WaitTrace(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		toks := tr.TokenEvents()
		isl := sim.MessageOverheadTokens + sim.Words(requests(n)[i].Prompt) // one user message
		if res.OutputLens[i] != tr.CompletionTokens || res.InputLens[i] != tr.PromptTokens || tr.CompletionTokens != 1+i%12 ||
			tr.PromptTokens != isl || tr.Path != path {
			t.Fatalf("%s %s: isl %d osl %d; the simulator counted %d and %d (want %d and %d)", tr.Path, id,
				res.InputLens[i], res.OutputLens[i], tr.PromptTokens, tr.CompletionTokens, isl, 1+i%12)
		}
		if len(res.ITLs[i]) != len(toks)-1 {
			t.Fatalf("%s: %d gaps for %d token events", id, len(res.ITLs[i]), len(toks))
		}
		// Chat streams add a role chunk and a finish chunk; the other two
		// APIs' token events are the tokens.
		if extra := len(toks) - tr.CompletionTokens; extra != map[string]int{EndpointChat: 2}[path] {
			t.Fatalf("%s: %d token events for %d tokens", id, len(toks), tr.CompletionTokens)
		}
		dueTTFT := tr.TTFT.Seconds()
		dueE2E := (tr.TTFT + time.Duration(tr.CompletionTokens-1)*tr.ITL).Seconds()
		if res.TTFTs[i] < dueTTFT || res.Latencies[i] < dueE2E {
			t.Fatalf("%s: bench TTFT %.6f E2E %.6f s below the simulator's schedule %.6f %.6f", id, res.TTFTs[i], res.Latencies[i], dueTTFT, dueE2E)
		}
		dTTFT = append(dTTFT, (res.TTFTs[i]-toks[0].At.Sub(tr.Start).Seconds())*1000)
		if res.QueueTimes[i] > 0 {
			queued++
		}
	}
	if queued == 0 {
		t.Fatal("40 requests at once with 6 slots: none waited for a slot")
	}
	// vLLM's client-side queueing figure; without a finite rate, no
	// queue-inclusive E2EL (as vLLM).
	if q := res.Metrics[MetricClientQueue]; q == nil || q.Max <= 0 || res.Metrics[MetricE2ELQueue] != nil {
		t.Fatalf("client queue metrics %v", res.Metrics)
	}
	// The warm-up went to the server but not into the figures.
	w := res.Goodput.Warmup
	if w == nil || w.Requests != 3 || w.Completed != 3 {
		t.Fatalf("warm-up %+v", w)
	}
	if _, ok := simSrv.Trace("sim-warmup-2"); !ok {
		t.Fatal("no warm-up request reached the simulator")
	}
	if res.NumPrompts != n || len(res.TTFTs) != n {
		t.Fatalf("%d prompts, %d TTFTs", res.NumPrompts, len(res.TTFTs))
	}
	sort.Float64s(dTTFT)
	t.Logf("bench TTFT − the simulator's first flush after its start: p50 %.3f ms, p99 %.3f ms; arrival lateness p50 %.3f ms p99 %.3f ms (includes the wait for a slot)",
		percentile(dTTFT, 50), percentile(dTTFT, 99), res.Goodput.Lateness.P50, res.Goodput.Lateness.P99)
}

// recordSink keeps the gateway's records by request id.
type recordSink struct {
	mu   sync.Mutex
	recs map[string]meter.Record
	got  chan struct{}
}

func (s *recordSink) Begin(*meter.Record) {}
func (s *recordSink) Record(r *meter.Record) {
	s.mu.Lock()
	c := *r
	c.ITL = append([]time.Duration(nil), r.ITL...)
	s.recs[r.RequestID] = c
	s.mu.Unlock()
	s.got <- struct{}{}
}

// TestRunThroughGateway is the comparison the package promises: the same
// requests measured by bench and by the gateway in front of the engine.
// Per request, bench's TTFT and E2E are never below the gateway's (bench's
// send comes before the gateway's t0 and its reads after the gateway's
// stamps), and the difference is the client's side of the network: within
// 2 ms at p99 on a quiet machine (checked with GOODPUT_TIMING_TESTS=1).
//
// What is compared is each request's own clock points, so the run avoids
// two bursts that would measure something else:
//
//   - New connections. On one, bench's t_send comes once the kernel has
//     completed the handshake, the gateway's t0 only once it has accepted
//     the connection, started serving it and read the headers: the first
//     request of each connection also carries that time, which the gateway
//     cannot see (docs/MEASURES.md). A warm-up of one request per slot
//     opens every connection the run uses. Without it the 8 connections
//     were dialed at once and accepted one after another, and those 8 of
//     200 requests (4%: above the 99th percentile by themselves) were 0.4
//     to 1.4 ms apart, 6 ms when a pause fell in that burst.
//   - Simultaneous sends. A closed loop starts all its clients at the same
//     instant; here bench, the gateway and the engine share one process
//     (on 2 cores in CI), so the gateway read those requests' headers one
//     after the other while bench wrote the rest, and the engine's equal
//     TTFTs then brought their first tokens together. Those first
//     requests were still most of the largest differences, and a single
//     stall there moved several past the p99. Requests arrive instead as
//     vLLM's default does, a Poisson process (fixed seed), at about 3/4 of
//     what 8 slots carry.
//
// 400 requests: the p99 (numpy's interpolation) is then about the 5th
// largest difference; of 200 it was the 3rd.
func TestRunThroughGateway(t *testing.T) {
	for _, ep := range []string{EndpointCompletions, EndpointResponses, EndpointMessages} {
		t.Run(strings.TrimPrefix(ep, "/v1/"), func(t *testing.T) {
			testenv.Bounded(t, func() error { return runThroughGateway(t, ep) })
		})
	}
}

// runThroughGateway makes one run of TestRunThroughGateway, with a
// simulator and a gateway of its own, and returns an error when a p99 of
// bench's numbers less the gateway's is over 2 ms (a bound under
// testenv.Bounded; never under the race detector).
func runThroughGateway(t *testing.T, endpoint string) error {
	// The engine, the gateway and bench share this process (and its heap):
	// collect less often while measuring, as the proxy's own comparison
	// with the simulator does.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	_, simURL := startSim(t, sim.Config{TTFT: 10 * time.Millisecond, ITL: 2 * time.Millisecond})
	const n, conc = 400, 8
	sink := &recordSink{recs: map[string]meter.Record{}, got: make(chan struct{}, 2*n)}
	p, err := proxy.New(proxy.Config{Upstream: simURL, Sink: sink, IOLoop: testenv.IOLoop()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := p.Server()
	go srv.Serve(proxy.NewListener(ln, 0, nil))
	t.Cleanup(func() {
		srv.Shutdown()
		p.Wait()
		p.CloseIdle()
	})

	res, err := Run(context.Background(), Options{
		BaseURL: "http://" + ln.Addr().String(), Endpoint: endpoint, Model: "sim-llama",
		Requests: requests(n), RequestIDPrefix: "gw-", Seed: 1,
		Arrival: Arrival{Rate: 300, MaxConcurrency: conc}, Warmup: conc, Headers: []Header{{"X-Tenant", "bench"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != n {
		t.Fatalf("completed %d of %d: %v", res.Completed, n, res.Errors)
	}
	if w := res.Goodput.Warmup; w == nil || w.Completed != conc {
		t.Fatalf("warm-up %+v", w)
	}
	if c := res.Goodput.Connect; c.New != 0 {
		t.Fatalf("%d measured requests opened a connection; the warm-up should have opened all %d", c.New, conc)
	}
	deadline := time.After(10 * time.Second)
	for got := 0; got < n+conc; got++ {
		select {
		case <-sink.got:
		case <-deadline:
			t.Fatalf("%d gateway records of %d after 10s", got, n+conc)
		}
	}
	var dTTFT, dE2E []float64 // bench − gateway, ms
	for i, id := range res.Goodput.RequestIDs {
		sink.mu.Lock()
		rec, ok := sink.recs[id]
		sink.mu.Unlock()
		if !ok {
			t.Fatalf("no gateway record for %s", id)
		}
		if rec.Outcome != meter.OutcomeOK || rec.Tenant != "bench" || rec.Route != endpointAPI(endpoint).String() || !rec.Inference() {
			t.Fatalf("%s: outcome %v tenant %q route %q", id, rec.Outcome, rec.Tenant, rec.Route)
		}
		if rec.ISL != res.InputLens[i] || rec.OSL != res.OutputLens[i] || rec.Events != len(res.ITLs[i])+1 {
			t.Fatalf("%s: gateway isl %d osl %d events %d; bench %d %d %d gaps", id, rec.ISL, rec.OSL, rec.Events, res.InputLens[i], res.OutputLens[i], len(res.ITLs[i]))
		}
		// Durations compared as durations: seconds are a monotone function
		// of nanoseconds, so ≥ holds exactly.
		if res.TTFTs[i] < rec.TTFT.Seconds() || res.Latencies[i] < rec.E2E.Seconds() {
			t.Fatalf("%s: bench TTFT %.6f s E2E %.6f s below the gateway's %.6f s %.6f s", id, res.TTFTs[i], res.Latencies[i], rec.TTFT.Seconds(), rec.E2E.Seconds())
		}
		dTTFT = append(dTTFT, (res.TTFTs[i]-rec.TTFT.Seconds())*1000)
		dE2E = append(dE2E, (res.Latencies[i]-rec.E2E.Seconds())*1000)
	}
	sort.Float64s(dTTFT)
	sort.Float64s(dE2E)
	p99t, p99e := percentile(dTTFT, 99), percentile(dE2E, 99)
	t.Logf("bench − gateway over %d requests (up to %d at once): TTFT p50 %.3f p99 %.3f ms; E2E p50 %.3f p99 %.3f ms",
		n, res.MaxConcurrentRequests, percentile(dTTFT, 50), p99t, percentile(dE2E, 50), p99e)
	if raceEnabled || p99t <= 2 && p99e <= 2 {
		return nil
	}
	return fmt.Errorf("bench − gateway p99: TTFT %.3f ms, E2E %.3f ms; want both within 2 ms", p99t, p99e)
}

// With a workload that writes its prompts, Run first fits them to the
// server's counts: the simulator counts words + 4 per chat message (a
// Responses input text and a Messages user message alike), so after
// calibration every prompt is the intended length.
func TestRunCalibratesPrompts(t *testing.T) {
	for _, ep := range []string{EndpointChat, EndpointResponses, EndpointMessages} {
		t.Run(strings.TrimPrefix(ep, "/v1/"), func(t *testing.T) { runCalibratesPrompts(t, ep) })
	}
}

func runCalibratesPrompts(t *testing.T, endpoint string) {
	simSrv, url := startSim(t, sim.Config{})
	w, err := workload.FromFlags("rag", "", "", 7)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Options{
		BaseURL: url, Endpoint: endpoint, Workload: w, NumPrompts: 8, RequestIDPrefix: "cal-",
	})
	if err != nil {
		t.Fatal(err)
	}
	cal := res.Goodput.Calibration
	if cal == nil || cal.Error != "" || math.Abs(cal.TokensPerWord-1) > 1e-9 || math.Abs(cal.Overhead-4) > 1e-6 {
		t.Fatalf("calibration %+v", cal)
	}
	if tr, ok := simSrv.Trace("cal-calibrate-2"); !ok || tr.Path != endpoint || tr.CompletionTokens != 1 {
		t.Fatalf("no calibration request of one token reached the simulator's %s: %+v", endpoint, tr)
	}
	want := w.Requests(8) // deterministic: the same requests Run sent
	for i, q := range want {
		if d := res.InputLens[i] - q.InputTokens; d < -1 || d > 1 || res.OutputLens[i] != q.MaxTokens {
			t.Errorf("request %d: ISL %d OSL %d, the workload wanted %d and %d", i, res.InputLens[i], res.OutputLens[i], q.InputTokens, q.MaxTokens)
		}
	}
	if res.Completed != 8 || res.NumPrompts != 8 {
		t.Fatalf("completed %d of %d", res.Completed, res.NumPrompts)
	}
	// A second run with the same workload (a sweep's next step) keeps the
	// fit and sends no calibration request.
	res, err = Run(context.Background(), Options{
		BaseURL: url, Endpoint: endpoint, Workload: w, NumPrompts: 2, RequestIDPrefix: "cal2-",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Goodput.Calibration; c == nil || !c.Reused || math.Abs(c.Overhead-4) > 1e-6 {
		t.Fatalf("second calibration %+v", c)
	}
	if _, ok := simSrv.Trace("cal2-calibrate-0"); ok {
		t.Fatal("calibrated again")
	}
}

// An open loop follows vLLM's schedule and clock: its first request goes
// one gap after the start, its last at n/rate, and the duration runs from
// the start (a probe: the first request went at 0 and the duration began
// at it, so request throughput spread from 6.8 to 10.4 req/s over three
// seeds at 10/s where vLLM's stays near 9.3). Bounds from below only: a
// timer never fires early, and a late one only lengthens both.
func TestRunFollowsVLLMsSchedule(t *testing.T) {
	_, url := startSim(t, sim.Config{})
	const n, rate = 8, 40.0 // evenly spaced: 25 ms apart, the last at 200 ms
	res, err := Run(context.Background(), Options{BaseURL: url, Model: "sim-llama", Requests: requests(n),
		Arrival: Arrival{Rate: rate, Burstiness: 1e7}}) // past the gamma's spread: constant gaps
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != n {
		t.Fatalf("%d completed: %q", res.Completed, res.Errors)
	}
	if got := res.StartTimes[0]; got < 0.025 {
		t.Errorf("first request sent at %.4f s, want one gap (0.025 s) in", got)
	}
	if got := res.StartTimes[n-1]; got < n/rate {
		t.Errorf("last request sent at %.4f s, want at %.3f", got, n/rate)
	}
	if res.Duration < res.StartTimes[n-1] {
		t.Errorf("duration %.4f s shorter than the last send's %.4f from the start", res.Duration, res.StartTimes[n-1])
	}
}
