package proxy

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/redistest"
	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
	"github.com/goodput/goodput/sim"
)

// outageSample is one request sent during the outage test.
type outageSample struct {
	phase  string // when it started
	endPh  string // when it ended
	start  time.Time
	took   time.Duration
	status int
	body   string
	err    error
}

// TestRedisOutageRealServer runs streamed load through the gateway while a
// real redis-server is hung (SIGSTOP: connections stay open, nothing
// answers), then killed (connections refused), then started again:
//   - every request ends in exactly one record whose outcome matches what
//     the client got, and no stream is cut;
//   - fail_open serves everything, fail_closed answers 503 while Redis is
//     out and 200 otherwise;
//   - no request takes longer than the slowest healthy one plus the Redis
//     timeout (50ms) and a margin for the race detector, and once the
//     breaker has opened most take no longer than healthy ones;
//   - the gateway writes its limits to Redis again within a second of the
//     server coming back.
func TestRedisOutageRealServer(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds of load")
	}
	_, simURL := startSim(t, sim.Config{TTFT: 5 * time.Millisecond, ITL: 5 * time.Millisecond})
	for _, policy := range []string{ratelimit.FailOpen, ratelimit.FailClosed} {
		t.Run(policy, func(t *testing.T) { testRedisOutageRealServer(t, simURL, policy) })
	}
}

func testRedisOutageRealServer(t *testing.T, simURL, policy string) {
	rp := redistest.Start(t)
	// A tight Redis timeout shows the breaker's worth most clearly, but on a
	// loaded machine (the race detector, packages in parallel) a decision
	// Redis answered can miss 50 ms and trip the breaker with no fault: the
	// tight value only in CI's quiet timing step, the default otherwise.
	timeout := 250 * time.Millisecond
	if testenv.StrictTiming() {
		timeout = 50 * time.Millisecond
	}
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{RPM: 1000000, TPM: 100000000, MaxConcurrency: 64})
	backend := ratelimit.BackendConfig{Backend: "redis", OnBackendError: policy,
		Redis: ratelimit.RedisConfig{URL: "redis://" + rp.Addr() + "/0", Timeout: cfgtypes.Duration(timeout)}}
	store, gate := newKeysAndGate(t, backend, tc)
	g := startGateway(t, Config{Upstream: simURL, Keys: store, Limits: gate})

	var mu sync.Mutex
	phase := "healthy"
	setPhase := func(p string) {
		mu.Lock()
		phase = p
		mu.Unlock()
	}
	var samples []outageSample
	// Records are drained as they come: fail_closed answers thousands of
	// quick 503s while Redis refuses connections.
	outcomes := map[meter.Outcome]int{}
	nrec := 0
	drainDone := make(chan struct{})
	drainStop := make(chan struct{})
	go func() {
		defer close(drainDone)
		for {
			select {
			case rec := <-g.records:
				mu.Lock()
				outcomes[rec.Outcome]++
				nrec++
				mu.Unlock()
			case <-drainStop:
				// Every request has ended (Proxy.Wait): take what is left.
				for {
					select {
					case rec := <-g.records:
						mu.Lock()
						outcomes[rec.Outcome]++
						nrec++
						mu.Unlock()
					default:
						return
					}
				}
			}
		}
	}()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const clients = 4
	body := `{"model":"sim-llama","stream":true,"max_tokens":4,"ignore_eos":true,"messages":[{"role":"user","content":"hi"}]}`
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				ph := phase
				mu.Unlock()
				start := time.Now()
				status, _, b, err := post(t, g.URL()+"/v1/chat/completions", body, map[string]string{"Authorization": "Bearer " + key})
				s := outageSample{phase: ph, start: start, took: time.Since(start), status: status, body: b, err: err}
				mu.Lock()
				s.endPh = phase
				samples = append(samples, s)
				mu.Unlock()
			}
		}()
	}

	time.Sleep(500 * time.Millisecond)
	setPhase("hung")
	rp.Stop()
	time.Sleep(700 * time.Millisecond)
	setPhase("dead")
	rp.Kill() // a stopped process dies on SIGKILL too
	time.Sleep(700 * time.Millisecond)
	setPhase("restarting")
	rp.Restart()
	back := time.Now()
	var recovered time.Duration
	for recovered == 0 {
		if rp.DBSize() > 0 {
			recovered = time.Since(back)
			break
		}
		if time.Since(back) > 3*time.Second {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Let the "recovered" phase run for a while before stopping.
	setPhase("recovered")
	time.Sleep(400 * time.Millisecond)
	close(stop)
	wg.Wait()

	if recovered == 0 {
		t.Fatalf("no limit written to Redis within 3s of it coming back")
	}
	if recovered > time.Second {
		t.Fatalf("limits written to Redis again only %v after it came back", recovered)
	}

	// Exactly one record per request, in any order: match them by outcome.
	// Once no request is in flight every record is in the channel.
	waited := make(chan struct{})
	go func() {
		g.p.Wait()
		close(waited)
	}()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatalf("%d requests still without a record 10s after the load", g.p.InFlight())
	}
	close(drainStop)
	<-drainDone
	if nrec != len(samples) {
		t.Fatalf("%d records for %d requests", nrec, len(samples))
	}

	byPhase := map[string]map[int]int{}
	tookByPhase := map[string][]time.Duration{}
	var healthyMax time.Duration
	want := map[meter.Outcome]int{}
	for _, s := range samples {
		if s.err != nil {
			t.Fatalf("%s: request failed on the client side: %v", s.phase, s.err)
		}
		// Requests that straddle a change of phase are judged by the
		// status rules only.
		if s.phase == s.endPh {
			if byPhase[s.phase] == nil {
				byPhase[s.phase] = map[int]int{}
			}
			byPhase[s.phase][s.status]++
			tookByPhase[s.phase] = append(tookByPhase[s.phase], s.took)
		}
		switch s.status {
		case 200:
			want[meter.OutcomeOK]++
			if !strings.HasSuffix(s.body, "data: [DONE]\n\n") {
				t.Fatalf("%s: a 200 stream did not end cleanly: %q", s.phase, s.body)
			}
		case 503:
			want[meter.OutcomeRateLimited]++
		default:
			t.Fatalf("%s: status %d: %s", s.phase, s.status, s.body)
		}
		if s.phase == "healthy" && s.endPh == "healthy" && s.took > healthyMax {
			healthyMax = s.took
		}
	}
	if fmt.Sprint(outcomes) != fmt.Sprint(want) {
		t.Fatalf("record outcomes %v, client statuses say %v", outcomes, want)
	}

	// Latency: Redis out adds at most its timeout per decision. The margin
	// absorbs scheduling noise: 250 ms on a quiet machine (strict timing),
	// 1 s on a shared one under -race.
	margin := time.Second
	if testenv.StrictTiming() {
		margin = 250 * time.Millisecond
	}
	limit := healthyMax + timeout + margin
	var worst []time.Duration
	for _, s := range samples {
		worst = append(worst, s.took)
		if s.took > limit {
			t.Errorf("%s: a request took %v; healthy max %v + timeout %v + margin %v", s.phase, s.took, healthyMax, timeout, margin)
		}
	}
	sort.Slice(worst, func(i, j int) bool { return worst[i] > worst[j] })
	var lat []string
	for _, ph := range []string{"healthy", "hung", "dead", "restarting", "recovered"} {
		d := tookByPhase[ph]
		if len(d) == 0 {
			continue
		}
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		lat = append(lat, fmt.Sprintf("%s n=%d p50=%v max=%v", ph, len(d), d[len(d)/2].Round(100*time.Microsecond), d[len(d)-1].Round(100*time.Microsecond)))
	}

	// After a few failures the breaker opens: most requests made while Redis
	// hangs do not wait out the timeout at all.
	med := func(ph string) time.Duration {
		d := tookByPhase[ph]
		if len(d) == 0 {
			t.Fatalf("no request ran wholly while Redis was %s", ph)
		}
		return d[len(d)/2]
	}
	if policy == ratelimit.FailOpen && med("hung") > med("healthy")+timeout/2 {
		t.Errorf("median request while Redis hung %v, healthy %v: every request waits for Redis", med("hung"), med("healthy"))
	}

	switch policy {
	case ratelimit.FailOpen:
		for ph, st := range byPhase {
			if st[503] != 0 {
				t.Errorf("fail_open: %d requests refused while %s", st[503], ph)
			}
		}
	case ratelimit.FailClosed:
		for _, ph := range []string{"hung", "dead"} {
			if byPhase[ph][503] == 0 {
				t.Errorf("fail_closed: nothing refused while Redis was %s: %v", ph, byPhase[ph])
			}
		}
		for _, ph := range []string{"healthy", "recovered"} {
			if byPhase[ph][503] != 0 || byPhase[ph][200] == 0 {
				t.Errorf("fail_closed: while %s: %v", ph, byPhase[ph])
			}
		}
	}
	t.Logf("%s: %d requests, statuses by phase %v; latency: %s; limits back in Redis %v after restart",
		policy, len(samples), byPhase, strings.Join(lat, "; "), recovered.Round(time.Millisecond))
}
