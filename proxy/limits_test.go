package proxy

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/goodput/goodput/identity"
	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
	"github.com/goodput/goodput/sim"
	"github.com/prometheus/client_golang/prometheus"
)

// tenantWithKey returns a tenant config with one fresh key.
func tenantWithKey(t testing.TB, name string, lim ratelimit.Limits) (ratelimit.TenantConfig, string) {
	t.Helper()
	key, hash, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return ratelimit.TenantConfig{
		Name:   name,
		Keys:   []ratelimit.KeyConfig{{ID: name + "-key", SHA256: hash}},
		Limits: lim,
	}, key
}

func newKeysAndGate(t testing.TB, backend ratelimit.BackendConfig, tenants ...ratelimit.TenantConfig) (*identity.Store, *ratelimit.Gate) {
	t.Helper()
	if backend.Backend == "redis" && backend.Redis.Timeout == 0 {
		// A decision past the default timeout (250 ms) fails open, and a
		// limit under test passes: on a machine loaded by the rest of the
		// suite one did (a request over a model's tpm got 200). Tests of
		// a slow Redis set their own timeout.
		backend.Redis.Timeout = cfgtypes.Duration(10 * time.Second)
	}
	gate, err := ratelimit.New(backend, tenants, nil)
	if err != nil {
		t.Fatal(err)
	}
	store, err := identity.NewStore(tenants, gate)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gate.Close() })
	return store, gate
}

const simChat = `{"model":"sim-llama","stream":true,"max_tokens":5,"ignore_eos":true,"messages":[{"role":"user","content":"hello there"}]}`

func TestKeysUnauthorized(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{})
	tc.Upstream = ratelimit.UpstreamConfig{APIKey: "engine-secret"}
	store, _ := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store})

	for _, c := range []struct {
		hdr  map[string]string
		want string
	}{
		{nil, "missing gateway key"},
		{map[string]string{"Authorization": "Bearer nope"}, "invalid gateway key"},
		{map[string]string{"X-Api-Key": key + "x"}, "invalid gateway key"},
	} {
		status, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, c.hdr)
		if err != nil || status != 401 || !strings.Contains(body, c.want) || !strings.Contains(body, `"code":"invalid_api_key"`) {
			t.Fatalf("%v: status %d body %s err %v", c.hdr, status, body, err)
		}
		if rec := g.record(t); rec.Outcome != meter.OutcomeUnauthorized || rec.Tenant != "" || rec.KeyID != "" {
			t.Fatalf("record %+v", rec)
		}
	}
	// A client without a valid key keeps no connection: idle ones
	// would hold the listener's slots (max_connections) for the idle
	// timeout, a denial of service for anyone who can connect.
	conn := rawPost(t, g.addr, chatBody, "")
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	answer, err := io.ReadAll(conn) // to the gateway's close
	conn.Close()
	if err != nil || !strings.HasPrefix(string(answer), "HTTP/1.1 401 ") || !strings.Contains(string(answer), "\r\nConnection: close\r\n") {
		t.Fatalf("a 401 keeps its connection: %v %q", err, answer)
	}
	g.record(t)
	for _, hdr := range []map[string]string{{"Authorization": "Bearer " + key}, {"X-Api-Key": key}} {
		status, _, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, hdr)
		if err != nil || status != 200 {
			t.Fatalf("valid key: status %d err %v", status, err)
		}
		rec := g.record(t)
		if rec.Outcome != meter.OutcomeOK || rec.Tenant != "acme" || rec.KeyID != "acme-key" {
			t.Fatalf("record %+v", rec)
		}
		h := up.lastHeaders()
		if strings.Contains(h, key) || strings.Contains(strings.ToLower(h), "x-api-key") {
			t.Fatalf("gateway key forwarded upstream:\n%s", h)
		}
		if !strings.Contains(h, "Authorization: Bearer engine-secret") {
			t.Fatalf("upstream credential not sent:\n%s", h)
		}
	}
}

func TestRateLimitRejection(t *testing.T) {
	_, simURL := startSim(t, sim.Config{})
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{RPM: 60, Burst: 2})
	store, gate := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	g := startGateway(t, Config{Upstream: simURL, Keys: store, Limits: gate})
	auth := map[string]string{"Authorization": "Bearer " + key}
	for i := 0; i < 2; i++ {
		status, hdr, _, err := post(t, g.URL()+"/v1/chat/completions", simChat, auth)
		if err != nil || status != 200 {
			t.Fatalf("request %d: %d %v", i, status, err)
		}
		if hdr.Get("x-ratelimit-limit-requests") != "60" || hdr.Get("x-ratelimit-remaining-requests") != strconv.Itoa(1-i) {
			t.Fatalf("allowed response headers: %v", hdr)
		}
		if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
			t.Fatalf("record %+v", rec)
		}
	}
	status, hdr, body, err := post(t, g.URL()+"/v1/chat/completions", simChat, auth)
	if err != nil || status != 429 || !strings.Contains(body, `"error"`) {
		t.Fatalf("third request: %d %s %v", status, body, err)
	}
	ra, _ := strconv.Atoi(hdr.Get("Retry-After"))
	if ra < 1 || ra > 2 || hdr.Get("x-ratelimit-remaining-requests") != "0" || hdr.Get("x-ratelimit-reset-requests") == "" {
		t.Fatalf("429 headers: %v", hdr)
	}
	rec := g.record(t)
	// The request asked for a stream; the gateway's answer is one JSON
	// body, and the record says it was none.
	if rec.Outcome != meter.OutcomeRateLimited || rec.Status != 429 || rec.Tenant != "acme" || rec.Stream {
		t.Fatalf("record %+v", rec)
	}
}

// Token limits are charged at admission with an estimate and reconciled with
// the real usage, so streamed requests cannot slip past them.
func TestTokenLimitReconciledOnStreams(t *testing.T) {
	for _, backend := range []string{"local", "redis"} {
		t.Run(backend, func(t *testing.T) { testTokenLimitReconciled(t, backend) })
	}
}

func testTokenLimitReconciled(t *testing.T, backend string) {
	_, simURL := startSim(t, sim.Config{})
	// Each request: a tiny prompt, no max_tokens (charged: prompt bytes/4
	// and a default allowance of 16), but the engine generates 256 tokens.
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{TPM: 1000})
	bc := ratelimit.BackendConfig{Backend: backend}
	if backend == "redis" {
		bc.Redis = ratelimit.RedisConfig{URL: redisURL(t), KeyPrefix: fmt.Sprintf("gp-test-%d", time.Now().UnixNano())}
	}
	store, gate := newKeysAndGate(t, bc, tc)
	g := startGateway(t, Config{Upstream: simURL, Keys: store, Limits: gate, DefaultMaxTokens: 16})
	body := `{"model":"sim-llama","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	auth := map[string]string{"Authorization": "Bearer " + key, "X-Sim-ITL": "0s"}
	ok, limited := 0, 0
	for i := 0; i < 10; i++ {
		status, _, _, err := post(t, g.URL()+"/v1/chat/completions", body, auth)
		if err != nil {
			t.Fatal(err)
		}
		rec := g.record(t)
		switch status {
		case 200:
			ok++
			if rec.OSL != 256 {
				t.Fatalf("osl %d", rec.OSL)
			}
		case 429:
			limited++
			if rec.Outcome != meter.OutcomeRateLimited {
				t.Fatalf("record %+v", rec)
			}
		default:
			t.Fatalf("status %d", status)
		}
	}
	// 1000 tokens per minute, ~262 used per request: the fifth request finds
	// the bucket empty although each was admitted on an estimate of ~46.
	if ok != 4 || limited != 6 {
		t.Fatalf("%d admitted, %d limited; want 4 and 6", ok, limited)
	}
}

func TestQueueWaitIsPartOfTTFT(t *testing.T) {
	_, simURL := startSim(t, sim.Config{})
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{RPM: 600, Burst: 1})
	store, gate := newKeysAndGate(t, ratelimit.BackendConfig{MaxQueueWait: cfgtypes.Duration(2 * time.Second)}, tc)
	g := startGateway(t, Config{Upstream: simURL, Keys: store, Limits: gate})
	auth := map[string]string{"Authorization": "Bearer " + key}
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", simChat, auth); err != nil || status != 200 {
				t.Errorf("status %d err %v", status, err)
			}
		}()
	}
	wg.Wait()
	recs := []meter.Record{g.record(t), g.record(t)}
	var waited meter.Record
	for _, r := range recs {
		if r.QueueWait < 0 {
			t.Fatalf("queue_ms unknown with queueing on: %+v", r)
		}
		if r.QueueWait > waited.QueueWait {
			waited = r
		}
	}
	// 600 rpm = one request per 100 ms after the burst of one.
	if waited.QueueWait < 50*time.Millisecond || waited.TTFT < waited.QueueWait {
		t.Fatalf("queue %v, ttft %v", waited.QueueWait, waited.TTFT)
	}
}

// redisURL is the real Redis in CI (GOODPUT_REDIS_URL), else an in-process
// one.
func redisURL(t testing.TB) string {
	if u := os.Getenv("GOODPUT_REDIS_URL"); u != "" {
		return u
	}
	m := miniredis.RunT(t)
	return "redis://" + m.Addr() + "/0"
}

// Three gateway replicas share one Redis and hold a tenant to its global rpm
// within 5% over a minute of load.
func TestRedisReplicasHoldGlobalRPM(t *testing.T) {
	testenv.Long(t, "a minute of load")
	_, simURL := startSim(t, sim.Config{})
	const rpm, burst = 600, 10
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{RPM: rpm, Burst: burst})
	backend := ratelimit.BackendConfig{Backend: "redis", Redis: ratelimit.RedisConfig{URL: redisURL(t), KeyPrefix: fmt.Sprintf("gp-test-%d", time.Now().UnixNano())}}
	var gws []*gateway
	for i := 0; i < 3; i++ {
		store, gate := newKeysAndGate(t, backend, tc)
		gws = append(gws, startGateway(t, Config{Upstream: simURL, Keys: store, Limits: gate}))
	}
	var ok, limited, other atomic.Int64
	stop := time.Now().Add(60 * time.Second)
	var wg sync.WaitGroup
	// 3 replicas × 2 clients × ~8 req/s offered: well above 10 req/s.
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func(g *gateway) {
			defer wg.Done()
			for time.Now().Before(stop) {
				status, _, _, err := post(t, g.URL()+"/v1/chat/completions", `{"model":"sim-llama","max_tokens":1,"messages":[]}`, map[string]string{"Authorization": "Bearer " + key})
				switch {
				case err != nil:
					other.Add(1)
				case status == 200:
					ok.Add(1)
				case status == 429:
					limited.Add(1)
				default:
					other.Add(1)
				}
				time.Sleep(120 * time.Millisecond)
			}
		}(gws[i%3])
	}
	wg.Wait()
	// Drain the records: exactly one per request.
	n := int(ok.Load() + limited.Load() + other.Load())
	for _, g := range gws {
		for {
			select {
			case <-g.records:
				n--
				continue
			case <-time.After(200 * time.Millisecond):
			}
			break
		}
	}
	if n != 0 {
		t.Fatalf("records and requests differ by %d", n)
	}
	admitted := float64(ok.Load())
	want := float64(rpm + burst) // a minute's rate plus the initial burst
	t.Logf("admitted %v (want ~%v), limited %d, other %d", admitted, want, limited.Load(), other.Load())
	if other.Load() != 0 || limited.Load() == 0 {
		t.Fatalf("other %d limited %d", other.Load(), limited.Load())
	}
	if admitted < 0.95*want || admitted > 1.05*want {
		t.Fatalf("admitted %v in a minute, want %v ±5%%", admitted, want)
	}
}

// Redis stops mid-run: fail_open keeps serving, fail_closed answers 503;
// every request still ends in exactly one record; the gateway recovers
// within a second of Redis coming back.
func TestRedisOutage(t *testing.T) {
	_, simURL := startSim(t, sim.Config{})
	for _, policy := range []string{ratelimit.FailOpen, ratelimit.FailClosed} {
		t.Run(policy, func(t *testing.T) {
			m := miniredis.NewMiniRedis()
			if err := m.Start(); err != nil {
				t.Fatal(err)
			}
			addr := m.Addr()
			tc, key := tenantWithKey(t, "acme", ratelimit.Limits{RPM: 100000})
			backend := ratelimit.BackendConfig{Backend: "redis", OnBackendError: policy,
				Redis: ratelimit.RedisConfig{URL: "redis://" + addr + "/0", Timeout: cfgtypes.Duration(50 * time.Millisecond)}}
			store, gate := newKeysAndGate(t, backend, tc)
			g := startGateway(t, Config{Upstream: simURL, Keys: store, Limits: gate})
			send := func() (int, meter.Record, time.Duration) {
				start := time.Now()
				status, _, _, err := post(t, g.URL()+"/v1/chat/completions", `{"model":"sim-llama","max_tokens":1,"messages":[]}`, map[string]string{"Authorization": "Bearer " + key})
				if err != nil {
					t.Fatal(err)
				}
				return status, g.record(t), time.Since(start)
			}
			if s, rec, _ := send(); s != 200 || rec.Outcome != meter.OutcomeOK {
				t.Fatalf("before: %d %+v", s, rec)
			}
			m.Close() // Redis goes away
			for i := 0; i < 5; i++ {
				s, rec, took := send()
				if took > 500*time.Millisecond {
					t.Fatalf("a dead Redis added %v", took)
				}
				if policy == ratelimit.FailOpen && (s != 200 || rec.Outcome != meter.OutcomeOK) {
					t.Fatalf("fail_open: %d %+v", s, rec)
				}
				if policy == ratelimit.FailClosed && (s != 503 || rec.Outcome != meter.OutcomeRateLimited) {
					t.Fatalf("fail_closed: %d %+v", s, rec)
				}
			}
			m2 := miniredis.NewMiniRedis()
			if err := m2.StartAddr(addr); err != nil {
				t.Skipf("could not restart Redis on %s: %v", addr, err)
			}
			defer m2.Close()
			back := time.Now()
			for {
				// Recovered: the request passes and the limiter wrote its
				// state to Redis again (fail_open also passes while down).
				s, rec, _ := send()
				if s == 200 && rec.Outcome == meter.OutcomeOK && len(m2.Keys()) > 0 {
					break
				}
				if time.Since(back) > time.Second {
					t.Fatalf("not recovered %v after Redis came back", time.Since(back))
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("%s: recovered %v after Redis came back", policy, time.Since(back))
		})
	}
}

// A body over the limit is refused by fasthttp before the handler runs; it
// is still identified key first: counted against the key's tenant, or 401
// without a valid key.
func TestBodyTooLargeIdentified(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{})
	store, _ := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store, MaxBodyBytes: 1000})
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", 2000) + `"}]}`
	status, _, _, err := post(t, g.URL()+"/v1/chat/completions", big, map[string]string{"Authorization": "Bearer " + key, "X-Request-Id": "big-1"})
	if err != nil || status != 413 {
		t.Fatalf("status %d err %v", status, err)
	}
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeRejected || rec.Tenant != "acme" || rec.KeyID != "acme-key" || rec.Route != "chat" || rec.RequestID != "big-1" {
		t.Fatalf("record %+v", rec)
	}
	status, _, _, err = post(t, g.URL()+"/v1/chat/completions", big, nil)
	if err != nil || status != 401 {
		t.Fatalf("no key: status %d err %v", status, err)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeUnauthorized || rec.Tenant != "" {
		t.Fatalf("record %+v", rec)
	}
	// Chunked, the body is found too large while its chunks are read, after
	// fasthttp has let go of the headers: 413 all the same (not a 401 for a
	// key that was sent), identified from what the gateway kept of them.
	chunk := fmt.Sprintf("%x\r\n%s\r\n", len(big), big)
	raw := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key + "\r\nX-Request-Id: big-2\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk + "0\r\n\r\n"
	if line := rawExchange(t, g.addr, raw); !strings.Contains(line, " 413 ") {
		t.Fatalf("chunked: %s", line)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeRejected || rec.Status != 413 || rec.Tenant != "acme" || rec.KeyID != "acme-key" || rec.Route != "chat" || rec.RequestID != "big-2" {
		t.Fatalf("chunked: record %+v", rec)
	}
}

// oneSlotGateway is a gateway in front of the simulator (20 ms per token)
// whose one tenant has one concurrent stream and a queue of maxWait. It
// returns the tenant's key, its Authorization header, and a wait for the
// queue to hold n requests.
func oneSlotGateway(t *testing.T, maxWait time.Duration) (*gateway, string, map[string]string, func(n int)) {
	t.Helper()
	_, simURL := startSim(t, sim.Config{TTFT: 0, ITL: 20 * time.Millisecond})
	store, gate, key, reg := oneSlotLimits(t, maxWait)
	g := startGateway(t, Config{Upstream: simURL, Keys: store, Limits: gate})
	waitQueued := func(n int) { t.Helper(); waitQueuedIn(t, reg, n) }
	return g, key, map[string]string{"Authorization": "Bearer " + key}, waitQueued
}

// oneSlotLimits is one tenant, acme, with a key and a limit of one request
// at a time, queueing for up to maxWait; reg holds the gate's metrics.
func oneSlotLimits(t *testing.T, maxWait time.Duration) (store *identity.Store, gate *ratelimit.Gate, key string, reg *prometheus.Registry) {
	t.Helper()
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{MaxConcurrency: 1})
	reg = prometheus.NewRegistry()
	gate, err := ratelimit.New(ratelimit.BackendConfig{MaxQueueWait: cfgtypes.Duration(maxWait)}, []ratelimit.TenantConfig{tc}, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gate.Close() })
	store, err = identity.NewStore([]ratelimit.TenantConfig{tc}, gate)
	if err != nil {
		t.Fatal(err)
	}
	return store, gate, key, reg
}

// queuedResult is what the client of a request that queued got.
type queuedResult struct {
	status int
	body   string
	err    error
}

// queueBehindHolder starts a stream that holds its tenant's one slot
// (oneSlotLimits), then a request to path that queues behind it, and
// waits until the gate, whose metrics reg holds, has it queued.
func queueBehindHolder(t *testing.T, g *gateway, reg *prometheus.Registry, auth map[string]string, path, body string) (*clientStream, <-chan queuedResult) {
	t.Helper()
	holder := startStream(t, g.URL()+"/v1/chat/completions",
		`{"model":"sim-llama","stream":true,"max_tokens":20,"ignore_eos":true,"messages":[]}`, auth)
	queued := make(chan queuedResult, 1)
	go func() {
		status, _, b, err := post(t, g.URL()+path, body, auth)
		queued <- queuedResult{status, b, err}
	}()
	waitQueuedIn(t, reg, 1)
	return holder, queued
}

// endHolder ends queueBehindHolder's stream and returns the two requests'
// records, in the order they came, and what the queued one's client got.
func endHolder(t *testing.T, g *gateway, holder *clientStream, queued <-chan queuedResult) ([]meter.Record, queuedResult) {
	t.Helper()
	holder.end(t)
	recs := []meter.Record{g.record(t), g.record(t)}
	return recs, <-queued
}

// waitQueuedIn waits until the gate whose metrics reg holds has n requests
// queued.
func waitQueuedIn(t *testing.T, reg *prometheus.Registry, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if q := gaugeValue(t, reg, "goodput_ratelimit_queued_requests"); q == float64(n) {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("%v requests queued after 10s, want %d", q, n)
		}
	}
}

// gaugeValue is the sum of a gauge's series in reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// A client that leaves while its request waits in the queue ends the wait at
// once (not at max_queue_wait): one record, client_abort, its queue time,
// and no slot taken from the clients behind it.
func TestQueuedClientLeaves(t *testing.T) {
	const maxWait = 5 * time.Second
	g, key, auth, waitQueued := oneSlotGateway(t, maxWait)
	// A holds the only slot for about 20 × 20 ms.
	holder := startStream(t, g.URL()+"/v1/chat/completions",
		`{"model":"sim-llama","stream":true,"max_tokens":20,"ignore_eos":true,"messages":[]}`, auth)
	// B queues behind it, then leaves after 100 ms.
	sent := time.Now()
	conn := rawPost(t, g.addr, simChat, "Authorization: Bearer "+key+"\r\n")
	waitQueued(1)
	queued := time.Now()
	time.Sleep(100 * time.Millisecond) // B waits a while
	left := time.Now()
	conn.Close()
	rec := g.record(t)
	noticed := time.Since(left)
	if rec.Outcome != meter.OutcomeClientAbort || rec.Status != 499 || rec.Tenant != "acme" {
		t.Fatalf("queued client that left: %+v", rec)
	}
	// queue_ms is B's time in the queue: at least from when it was seen
	// queued to when it left, at most from when it was sent to its record.
	if lo, hi := left.Sub(queued), time.Since(sent); rec.QueueWait < lo || rec.QueueWait > hi {
		t.Fatalf("queue_ms %v, want between %v and %v", rec.QueueWait, lo, hi)
	}
	// At once, not at max_queue_wait: within a few 20 ms peeks where
	// timing is checked (GOODPUT_TIMING_TESTS=1), else well before maxWait.
	bound := maxWait / 2
	if testenv.StrictTiming() {
		bound = 500 * time.Millisecond
	}
	if noticed > bound {
		t.Fatalf("noticed %v after the client left, want within %v", noticed, bound)
	}
	if e := holder.end(t); holder.status != 200 || e.err != nil || !strings.HasSuffix(e.body, "data: [DONE]\n\n") {
		t.Fatalf("holder: status %d, err %v", holder.status, e.err)
	}
	if r := g.record(t); r.Outcome != meter.OutcomeOK {
		t.Fatalf("holder record %+v", r)
	}
	// The slot is free again: C goes straight through.
	if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", simChat, auth); err != nil || status != 200 {
		t.Fatalf("after: %d %v", status, err)
	}
	if r := g.record(t); r.Outcome != meter.OutcomeOK || r.QueueWait != 0 {
		t.Fatalf("after: %+v", r)
	}
	g.noMoreRecords(t)
	t.Logf("queued client noticed gone %v after it left (queue_ms %v)", noticed, rec.QueueWait)
}

// Cut also empties the queue: a request waiting for capacity gets 503 at
// once, with one record, instead of waiting out max_queue_wait.
func TestCutQueued(t *testing.T) {
	g, _, auth, waitQueued := oneSlotGateway(t, 30*time.Second)
	type result struct {
		status int
		err    error
	}
	results := make(chan result, 2)
	const long = `{"model":"sim-llama","stream":true,"max_tokens":1000,"ignore_eos":true,"messages":[]}`
	st := startStream(t, g.URL()+"/v1/chat/completions", long, auth)
	go func() {
		e := <-st.rest
		results <- result{st.status, e.err}
	}()
	go func() {
		status, _, _, err := post(t, g.URL()+"/v1/chat/completions", long, auth)
		results <- result{status, err}
	}()
	waitQueued(1)
	g.p.Cut()
	got := map[string]int{}
	for range 2 {
		select {
		case r := <-results:
			switch {
			case r.status == 503 && r.err == nil:
				got["queued"]++
			case r.status == 200 && r.err != nil:
				got["streaming"]++
			default:
				t.Fatalf("status %d err %v", r.status, r.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("still waiting 5s after the cut")
		}
	}
	if got["queued"] != 1 || got["streaming"] != 1 {
		t.Fatalf("%v", got)
	}
	for range 2 {
		if rec := g.record(t); rec.Outcome != meter.OutcomeTimeout || !strings.Contains(rec.ErrorMessage, "shutting down") {
			t.Fatalf("record %+v", rec)
		}
	}
	g.noMoreRecords(t)
}

// A background Responses request is answered "queued" and generated later,
// out of the gateway's sight: it keeps the output it was charged at
// admission (its max_output_tokens), where a refund to the prompt alone let
// any number of them pass a token limit. So does a streamed one that ends
// early: the engine goes on generating it (found by review: cut streams were
// refunded).
func TestBackgroundRequestKeepsItsCharge(t *testing.T) {
	const queued = `{"id":"resp_1","object":"response","status":"queued","error":null,"output":[],"usage":null}`
	up := startRawUpstream(t, func(c *scriptConn) {
		if strings.Contains(string(c.Req.Body()), `"stream":true`) {
			writeSSEHead(c)
			writeChunk(c, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"status\":\"queued\"}}\n\n")
			c.Conn.Close() // cut mid-stream
			return
		}
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(queued), queued)
		c.BW.Flush()
	})
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{TPM: 1000})
	store, gate := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate})
	auth := map[string]string{"Authorization": "Bearer " + key}
	var statuses []int
	for i := 0; i < 6; i++ {
		stream := i%2 == 1
		body := `{"model":"m","background":true,"max_output_tokens":300,"input":"hi"}`
		if stream {
			body = `{"model":"m","background":true,"stream":true,"max_output_tokens":300,"input":"hi"}`
		}
		status, _, _, err := post(t, g.URL()+"/v1/responses", body, auth)
		if err != nil && !stream {
			t.Fatal(err)
		}
		statuses = append(statuses, status)
		rec := g.record(t)
		switch {
		case status == 429:
		case !stream && !rec.Deferred:
			t.Fatalf("record %+v: not deferred", rec)
		case stream && (rec.Outcome != meter.OutcomeUpstreamError || !rec.Background):
			t.Fatalf("a cut background stream: outcome %s background %v", rec.Outcome, rec.Background)
		}
	}
	// 1000 tokens a minute, about 317 charged per request and kept: three
	// pass, the rest wait for the bucket.
	want := []int{200, 200, 200, 429, 429, 429}
	if fmt.Sprint(statuses) != fmt.Sprint(want) {
		t.Fatalf("statuses %v, want %v", statuses, want)
	}
}

// A non-streamed answer that counts no output (no usage, as an engine
// without it sends; llama.cpp's answer of several choices, whose usage is
// the first choice's only, is recorded so too) keeps its admission charge:
// reconciled to its prompt alone, a tenant asking for such answers would
// pass its token limits.
func TestAnswerWithoutOutputCountKeepsItsCharge(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		const body = `{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a long answer"},"finish_reason":"stop"}]}`
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		c.BW.Flush()
	})
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{TPM: 1000})
	store, gate := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate})
	auth := map[string]string{"Authorization": "Bearer " + key}
	body := `{"model":"m","max_tokens":300,"messages":[{"role":"user","content":"hi"}]}`
	var statuses []int
	for i := 0; i < 5; i++ {
		status, _, _, err := post(t, g.URL()+"/v1/chat/completions", body, auth)
		if err != nil {
			t.Fatal(err)
		}
		rec := g.record(t)
		if status == 200 && (rec.Outcome != meter.OutcomeOK || rec.OSL != meter.Unknown) {
			t.Fatalf("record %+v", rec)
		}
		statuses = append(statuses, status)
	}
	// Each charged some 300 tokens of a tpm of 1000: three pass.
	if want := []int{200, 200, 200, 429, 429}; !slices.Equal(statuses, want) {
		t.Fatalf("statuses %v, want %v", statuses, want)
	}
}

// A request of several outputs (n choices, best_of candidates, several
// prompts) is charged at admission for each of them, on every route that
// has them: a tenant of 1000 tokens a minute is admitted one request of 2
// outputs of max_tokens 300, whose charge it keeps (the engine's answer
// counts nothing), refused the same again (600 asked, some 400 left), and
// refused as too large one of 4 outputs (1200), or of a hostile count.
// Ollama reads no n: one output there. Charged one output each, the three
// passed (the reconcile charges what was generated, but only afterwards).
func TestOutputsChargedAtAdmission(t *testing.T) {
	for _, backend := range []string{"local", "redis"} {
		t.Run(backend, func(t *testing.T) { testOutputsCharged(t, backend) })
	}
}

// gatewayOfTPMTenants starts a gateway to upstream with n tenants, each of
// one key (keys[i] is tenant i's) and a tpm of tpm, on the backend (local
// or redis).
func gatewayOfTPMTenants(t *testing.T, backend, upstream string, n int, tpm int64) (*gateway, []string) {
	t.Helper()
	var tenants []ratelimit.TenantConfig
	var keys []string
	for i := 0; i < n; i++ {
		tc, key := tenantWithKey(t, fmt.Sprintf("t%d", i), ratelimit.Limits{TPM: tpm})
		tenants, keys = append(tenants, tc), append(keys, key)
	}
	bc := ratelimit.BackendConfig{Backend: backend}
	if backend == "redis" {
		bc.Redis = ratelimit.RedisConfig{URL: redisURL(t), KeyPrefix: fmt.Sprintf("gp-test-%d", time.Now().UnixNano())}
	}
	store, gate := newKeysAndGate(t, bc, tenants...)
	return startGateway(t, Config{Upstream: upstream, Keys: store, Limits: gate}), keys
}

func testOutputsCharged(t *testing.T, backend string) {
	const answer = `{"object":"x","choices":[{"index":0,"text":"","finish_reason":"length"}]}`
	up := startRawUpstream(t, func(c *scriptConn) {
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
		c.BW.Flush()
	})
	const twice, over = "twice", "over"
	cases := []struct {
		name, path string
		bodies     map[string]string
		want       []int // twice, twice, over
	}{
		{"chat n", "/v1/chat/completions", map[string]string{
			twice: `{"model":"m","max_tokens":300,"n":2,"messages":[{"role":"user","content":"hi"}]}`,
			over:  `{"model":"m","max_tokens":300,"n":4,"messages":[{"role":"user","content":"hi"}]}`}, nil},
		{"chat n as a string, and 1e9 without max_tokens", "/v1/chat/completions", map[string]string{
			twice: `{"model":"m","max_tokens":300,"n":"2","messages":[{"role":"user","content":"hi"}]}`,
			over:  `{"model":"m","n":1e9,"messages":[{"role":"user","content":"hi"}]}`}, nil},
		{"chat n as pydantic reads a string", "/v1/chat/completions", map[string]string{
			twice: `{"model":"m","max_tokens":300,"n":" 2.0 ","messages":[{"role":"user","content":"hi"}]}`,
			over:  `{"model":"m","max_tokens":300,"n":"+1_0","messages":[{"role":"user","content":"hi"}]}`}, nil},
		{"invocations n", "/invocations", map[string]string{
			twice: `{"model":"m","max_tokens":300,"n":2,"messages":[{"role":"user","content":"hi"}]}`,
			over:  `{"model":"m","max_tokens":300,"n":1e300,"messages":[{"role":"user","content":"hi"}]}`}, nil},
		{"completions n", "/v1/completions", map[string]string{
			twice: `{"model":"m","max_tokens":300,"n":2,"prompt":"hi"}`,
			over:  `{"model":"m","max_tokens":300,"n":4,"prompt":"hi"}`}, nil},
		{"completions best_of", "/v1/completions", map[string]string{
			twice: `{"model":"m","max_tokens":300,"best_of":2,"prompt":"hi"}`,
			over:  `{"model":"m","max_tokens":300,"best_of":4,"n":1,"prompt":"hi"}`}, nil},
		{"completions prompts", "/v1/completions", map[string]string{
			twice: `{"model":"m","max_tokens":300,"prompt":["hi","ho"]}`,
			over:  `{"model":"m","max_tokens":300,"prompt":[[1,2],[3],[4],[5]]}`}, nil},
		{"completions prompts × n", "/v1/completions", map[string]string{
			twice: `{"model":"m","max_tokens":150,"n":2,"prompt":["hi","ho"]}`,
			over:  `{"model":"m","max_tokens":150,"n":4,"prompt":["hi","ho"]}`}, nil},
		{"llama.cpp prompts", "/completion", map[string]string{
			twice: `{"n_predict":300,"prompt":["hi","ho"]}`,
			over:  `{"n_predict":300,"prompt":["hi","ho"],"n_cmpl":2}`}, nil},
		{"tgi best_of", "/generate", map[string]string{
			twice: `{"inputs":"hi","parameters":{"max_new_tokens":300,"best_of":2,"do_sample":true}}`,
			over:  `{"inputs":"hi","parameters":{"max_new_tokens":300,"best_of":4,"do_sample":true}}`}, nil},
		{"tgi best_of on /", "/", map[string]string{
			twice: `{"inputs":"hi","parameters":{"max_new_tokens":300,"best_of":2,"do_sample":true}}`,
			over:  `{"inputs":"hi","parameters":{"max_new_tokens":300,"best_of":4,"do_sample":true}}`}, nil},
		{"sglang text", "/generate", map[string]string{
			twice: `{"text":["hi","ho"],"sampling_params":{"max_new_tokens":300}}`,
			over:  `{"text":["hi","ho"],"sampling_params":{"max_new_tokens":300,"n":2}}`}, nil},
		{"sglang n", "/generate", map[string]string{
			twice: `{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":300,"n":2}}`,
			over:  `{"input_ids":[[1],[2]],"sampling_params":[{"max_new_tokens":300,"n":2},{"max_new_tokens":300,"n":2}]}`}, nil},
		{"ollama reads no n", "/api/generate", map[string]string{
			twice: `{"model":"m","prompt":"hi","n":2,"options":{"num_predict":300}}`,
			over:  `{"model":"m","prompt":"hi","n":4,"options":{"num_predict":300}}`}, []int{200, 200, 200}},
	}
	g, keys := gatewayOfTPMTenants(t, backend, up.URL(), len(cases), 1000)
	for i, c := range cases {
		want := c.want
		if want == nil {
			want = []int{200, 429, 429}
		}
		auth := map[string]string{"Authorization": "Bearer " + keys[i]}
		var got []int
		for j, kind := range []string{twice, twice, over} {
			status, _, body, err := post(t, g.URL()+c.path, c.bodies[kind], auth)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, status)
			rec := g.record(t)
			if status != 429 {
				continue
			}
			// The second is over what is left; the third over the tpm.
			tooLarge := strings.Contains(body, "Request too large for tenant")
			if rec.Outcome != meter.OutcomeRateLimited || tooLarge != (j == 2) {
				t.Errorf("%s: request %d: outcome %s, answer %s", c.name, j+1, rec.Outcome, body)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: statuses %v, want %v", c.name, got, want)
		}
	}
}

// A metered request that names no model (no "model", null, "" or not a
// string) counts against the limits of its tenant's default model (here
// its only model, m), on every metered route, with either backend: the
// engine runs its default model for it (vLLM its first served model; a
// one-model engine its model). Without it, each passed m's tpm of 1000
// with 5000 tokens asked for. A request naming another model is not held
// by m's limits (but on TGI's native routes, whose engine reads no model:
// TestNativeRoutesHeldByDefaultModelWhateverTheyName), nor
// is one of a route that reads no model (an embedding, charged its
// 2,000-token body).
func TestUnnamedRequestsHeldByDefaultModel(t *testing.T) {
	for _, backend := range []ratelimit.BackendConfig{{}, {Backend: "redis", Redis: ratelimit.RedisConfig{
		URL: redisURL(t), KeyPrefix: fmt.Sprintf("gp-test-unnamed-%d", time.Now().UnixNano())}}} {
		name := backend.Backend
		if name == "" {
			name = "local"
		}
		t.Run(name, func(t *testing.T) {
			const answer = `{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
			up := startRawUpstream(t, func(c *scriptConn) {
				fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
				c.BW.Flush()
			})
			tc, key := tenantWithKey(t, "acme", ratelimit.Limits{})
			tc.Models = map[string]ratelimit.Limits{"m": {TPM: 1000}}
			store, gate := newKeysAndGate(t, backend, tc)
			g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate, DefaultMaxTokens: 16})
			auth := map[string]string{"Authorization": "Bearer " + key}
			for _, c := range []struct{ path, body string }{
				{"/v1/chat/completions", `{"max_tokens":5000,"messages":[]}`},
				{"/v1/chat/completions", `{"model":null,"max_tokens":5000,"messages":[]}`},
				{"/v1/chat/completions", `{"model":"","max_tokens":5000,"messages":[]}`},
				{"/v1/chat/completions", `{"model":7,"max_tokens":5000,"messages":[]}`},
				{"/v1/completions", `{"prompt":"hi","max_tokens":5000}`},
				{"/v1/responses", `{"input":"hi","max_output_tokens":5000}`},
				{"/v1/messages", `{"max_tokens":5000,"messages":[]}`},
				{"/api/chat", `{"messages":[{"role":"user","content":"hi"}],"options":{"num_predict":5000}}`},
				{"/completion", `{"prompt":"hi","n_predict":5000}`},
				{"/generate", `{"inputs":"hi","parameters":{"max_new_tokens":5000}}`},
				{"/generate_stream", `{"inputs":"hi","parameters":{"max_new_tokens":5000}}`},
				{"/generate", `{"text":"hi","sampling_params":{"max_new_tokens":5000}}`},
			} {
				status, _, body, err := post(t, g.URL()+c.path, c.body, auth)
				rec := g.record(t)
				if err != nil || status != 429 || !strings.Contains(body, "model limit") || rec.Outcome != meter.OutcomeRateLimited || rec.Model != "" {
					t.Errorf("%s %s: status %d %s, %v; record %s %q; want 429 by the model limit, no model recorded", c.path, c.body, status, body, err, rec.Outcome, rec.Model)
				}
				if strings.Contains(c.body, `"model"`) || strings.Contains(c.body, `"inputs"`) {
					// TGI's native routes hold a request that names
					// another model alike (the test below).
					continue
				}
				named := strings.Replace(c.body, "{", `{"model":"other",`, 1)
				if status, _, body, err := post(t, g.URL()+c.path, named, auth); err != nil || status != 200 {
					t.Errorf("%s %s: status %d %s, %v; want 200", c.path, named, status, body, err)
				}
				g.record(t)
			}
			big := `{"input":"` + strings.Repeat("x", 8000) + `"}`
			if status, _, body, err := post(t, g.URL()+"/v1/embeddings", big, auth); err != nil || status != 200 {
				t.Errorf("an embedding of 2,000 tokens: status %d %s, %v; want 200", status, body, err)
			}
			g.record(t)
		})
	}
}

// TGI's native routes read no model (its GenerateRequest and
// CompatGenerateRequest have no such member): TGI runs its one model
// whatever a body's "model" says. A request there is held by its tenant's
// default model's limits, tpm and max_concurrency, whatever name it gives,
// listed or not; its record keeps the name given. A "model" naming another
// model once let a tenant held to its default model's limits past them.
// So too a body that names SGLang's input as well, on the routes SGLang
// does not serve (/generate_stream, /); on /generate SGLang's model
// gateway reads its model (TestSGLangGenerateHeldByTheModelItNames).
func TestNativeRoutesHeldByDefaultModelWhateverTheyName(t *testing.T) {
	natives := []struct{ path, body string }{ // a name, then max_new_tokens
		{"/generate", `{"model":%q,"inputs":"hi","parameters":{"max_new_tokens":%d}}`},
		{"/generate_stream", `{"model":%q,"inputs":"hi","parameters":{"max_new_tokens":%d}}`},
		{"/", `{"model":%q,"inputs":"hi","parameters":{"max_new_tokens":%d}}`},
		{"/generate_stream", `{"model":%q,"inputs":"hi","text":"hi","parameters":{"max_new_tokens":%[2]d},"sampling_params":{"max_new_tokens":%[2]d}}`},
		{"/", `{"model":%q,"inputs":"hi","text":"hi","parameters":{"max_new_tokens":%[2]d},"sampling_params":{"max_new_tokens":%[2]d}}`},
	}
	heldByModel := func(t *testing.T, g *gateway, auth map[string]string, path, body, name string) {
		t.Helper()
		status, _, answer, err := post(t, g.URL()+path, body, auth)
		rec := g.record(t)
		if err != nil || status != 429 || !strings.Contains(answer, "model limit") || rec.Outcome != meter.OutcomeRateLimited || rec.Model != name {
			t.Errorf("%s %s: status %d %s, %v; record %s %q; want 429 by the default model's limit, %q recorded", path, body, status, answer, err, rec.Outcome, rec.Model, name)
		}
	}
	prefix := fmt.Sprintf("gp-test-native-%d", time.Now().UnixNano())
	limiter := func(b ratelimit.BackendConfig, test string) ratelimit.BackendConfig {
		if b.Backend == "redis" {
			b.Redis.KeyPrefix += "-" + test // each test's keys of its own
		}
		return b
	}
	for _, backend := range []ratelimit.BackendConfig{{}, {Backend: "redis", Redis: ratelimit.RedisConfig{URL: redisURL(t), KeyPrefix: prefix}}} {
		name := backend.Backend
		if name == "" {
			name = "local"
		}
		t.Run(name+"/tpm", func(t *testing.T) {
			const answer = `{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
			up := startRawUpstream(t, func(c *scriptConn) {
				fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
				c.BW.Flush()
			})
			tc, key := tenantWithKey(t, "acme", ratelimit.Limits{})
			tc.Models = map[string]ratelimit.Limits{"m": {TPM: 1000}, "n": {}}
			tc.ModelDefault = map[string]bool{"m": true}
			store, gate := newKeysAndGate(t, limiter(backend, "tpm"), tc)
			g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate, DefaultMaxTokens: 16})
			auth := map[string]string{"Authorization": "Bearer " + key}
			for _, model := range []string{"anything-unlisted", "n"} {
				for _, c := range natives {
					heldByModel(t, g, auth, c.path, fmt.Sprintf(c.body, model, 5000), model)
				}
				// Where the engine reads the name, it is another model's.
				chat := fmt.Sprintf(`{"model":%q,"max_tokens":5000,"messages":[]}`, model)
				if status, _, body, err := post(t, g.URL()+"/v1/chat/completions", chat, auth); err != nil || status != 200 {
					t.Errorf("chat %s: status %d %s, %v; want 200", chat, status, body, err)
				}
				g.record(t)
			}
		})
		t.Run(name+"/max_concurrency", func(t *testing.T) {
			arrived, release := make(chan struct{}), make(chan struct{})
			up := startRawUpstream(t, func(c *scriptConn) {
				body := c.Req.Body()
				if bytes.Contains(body, []byte(`"hold"`)) {
					arrived <- struct{}{}
					<-release
				}
				answer := `{"generated_text":"hi"}` // TGI's
				if bytes.Contains(body, []byte(`"text"`)) {
					answer = `{"text":"hi","meta_info":{"prompt_tokens":1,"completion_tokens":1}}` // SGLang's
				}
				fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
				c.BW.Flush()
			})
			tc, key := tenantWithKey(t, "acme", ratelimit.Limits{})
			tc.Models = map[string]ratelimit.Limits{"m": {MaxConcurrency: 1}}
			store, gate := newKeysAndGate(t, limiter(backend, "conc"), tc)
			g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate, DefaultMaxTokens: 16})
			auth := map[string]string{"Authorization": "Bearer " + key}
			for _, holder := range []struct{ path, body string }{
				{"/generate", `{"model":"anything-unlisted","inputs":"hold"}`},
				{"/generate", `{"text":"hold"}`}, // SGLang's, naming none
			} {
				done := make(chan int)
				go func() {
					status, _, _, _ := post(t, g.URL()+holder.path, holder.body, auth)
					done <- status
				}()
				<-arrived // the holder is in flight: it holds m's one slot
				for _, c := range natives {
					heldByModel(t, g, auth, c.path, fmt.Sprintf(c.body, "other-unlisted", 5), "other-unlisted")
				}
				release <- struct{}{}
				if status := <-done; status != 200 {
					t.Errorf("%s %s: status %d, want 200", holder.path, holder.body, status)
				}
				g.record(t)
			}
		})
	}
}

// SGLang's server reads no model on /generate, but SGLang's model gateway,
// which serves several models there, sends a request to the workers of
// the model its body names (sgl-model-gateway/src/server.rs): a request
// there that names a listed model is held by that model's limits, not the
// default model's, as on the other routes; so is a body that names TGI's
// input too, which SGLang may run. Counted against the default model (m,
// without limits here), each passed big's tpm of 1000 with 5000 tokens
// asked for. A TGI body naming big is still the default model's: only TGI
// runs it.
func TestSGLangGenerateHeldByTheModelItNames(t *testing.T) {
	for _, backend := range []ratelimit.BackendConfig{{}, {Backend: "redis", Redis: ratelimit.RedisConfig{
		URL: redisURL(t), KeyPrefix: fmt.Sprintf("gp-test-sglang-model-%d", time.Now().UnixNano())}}} {
		name := backend.Backend
		if name == "" {
			name = "local"
		}
		t.Run(name, func(t *testing.T) {
			const answer = `{"text":"hi","meta_info":{"prompt_tokens":1,"completion_tokens":1}}`
			up := startRawUpstream(t, func(c *scriptConn) {
				fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
				c.BW.Flush()
			})
			tc, key := tenantWithKey(t, "acme", ratelimit.Limits{})
			tc.Models = map[string]ratelimit.Limits{"m": {}, "big": {TPM: 1000}}
			tc.ModelDefault = map[string]bool{"m": true}
			store, gate := newKeysAndGate(t, backend, tc)
			g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate, DefaultMaxTokens: 16})
			auth := map[string]string{"Authorization": "Bearer " + key}
			for _, c := range []struct {
				path, body string
				status     int
			}{
				{"/generate", `{"model":"big","text":"hi","sampling_params":{"max_new_tokens":5000}}`, 429},
				{"/generate", `{"model":"big","input_ids":[1,2],"sampling_params":{"max_new_tokens":5000}}`, 429},
				{"/generate", `{"model":"big","text":"` + strings.Repeat("x", shallowFrom) + `"}`, 429}, // parsed shallow
				{"/generate", `{"model":"big","inputs":"hi","text":"hi","parameters":{"max_new_tokens":5000},"sampling_params":{"max_new_tokens":5000}}`, 429},
				{"/generate", `{"model":"big","inputs":"hi","parameters":{"max_new_tokens":5000}}`, 200},
				{"/generate_stream", `{"model":"big","inputs":"hi","text":"hi","parameters":{"max_new_tokens":5000},"sampling_params":{"max_new_tokens":5000}}`, 200},
			} {
				status, _, body, err := post(t, g.URL()+c.path, c.body, auth)
				rec := g.record(t)
				if err != nil || status != c.status || c.status == 429 && !strings.Contains(body, "model limit") || rec.Model != "big" {
					t.Errorf("%s %.200s: status %d %s, %v; record %s %q; want %d, \"big\" recorded", c.path, c.body, status, body, err, rec.Outcome, rec.Model, c.status)
				}
			}
		})
	}
}

// TGI's native routes run the LoRA adapter their body names in
// parameters.adapter_id, and the base model for one TGI has not loaded:
// a request naming an adapter the tenant lists as a model is held by that
// model's limits (it passed them, counted against the default model), one
// naming an adapter it does not list by the default model's, whatever its
// `model` says; a large body's shallow copy keeps the adapter. The record
// keeps the model given.
func TestTGIAdapterHeldByItsLimits(t *testing.T) {
	const answer = `{"generated_text":"hi"}`
	prefix := fmt.Sprintf("gp-test-adapter-%d", time.Now().UnixNano())
	// Over the size a body is read whole from, and a parameters object
	// over the size a value is copied whole from in its shallow copy.
	pad := strings.Repeat(" ", 70<<10)
	stops := `,"stop":["` + strings.Repeat("x", 8<<10) + `"]`
	type request struct {
		body   string
		status int
	}
	for _, backend := range []ratelimit.BackendConfig{{}, {Backend: "redis", Redis: ratelimit.RedisConfig{URL: redisURL(t), KeyPrefix: prefix}}} {
		name := backend.Backend
		if name == "" {
			name = "local"
		}
		for _, c := range []struct {
			name     string
			models   map[string]ratelimit.Limits
			requests []request
		}{
			{"a listed adapter's limits", map[string]ratelimit.Limits{"base": {TPM: 1 << 20}, "lora-a": {TPM: 1000}, "small": {TPM: 1000}}, []request{
				{`{"inputs":"hi","parameters":{"adapter_id":"lora-a","max_new_tokens":5000}}`, 429},
				{`{"model":"base","inputs":"hi","parameters":{"adapter_id":"lora-a","max_new_tokens":5000}}`, 429},
				{`{"inputs":"hi"` + pad + `,"parameters":{"adapter_id":"lora-a","max_new_tokens":5000` + stops + `}}`, 429},
				{`{"model":"small","inputs":"hi","parameters":{"adapter_id":"lora-unlisted","max_new_tokens":5000}}`, 200},
				{`{"inputs":"hi","parameters":{"adapter_id":"lora-a","max_new_tokens":500}}`, 200},
			}},
			{"the default model's, for an adapter not listed", map[string]ratelimit.Limits{"base": {TPM: 1000}, "lora-a": {TPM: 1 << 20}}, []request{
				{`{"inputs":"hi","parameters":{"adapter_id":"lora-unlisted","max_new_tokens":5000}}`, 429},
				{`{"inputs":"hi"` + pad + `,"parameters":{"adapter_id":"lora-unlisted","max_new_tokens":5000` + stops + `}}`, 429},
				{`{"model":"lora-a","inputs":"hi","parameters":{"adapter_id":null,"max_new_tokens":5000}}`, 429},
				{`{"inputs":"hi","parameters":{"adapter_id":"lora-a","max_new_tokens":5000}}`, 200},
			}},
		} {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				up := startRawUpstream(t, func(c *scriptConn) {
					fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
					c.BW.Flush()
				})
				tc, key := tenantWithKey(t, "acme", ratelimit.Limits{})
				tc.Models = c.models
				tc.ModelDefault = map[string]bool{"base": true}
				b := backend
				if b.Backend == "redis" {
					b.Redis.KeyPrefix += "-" + strings.Fields(c.name)[1] // each case's keys of its own
				}
				store, gate := newKeysAndGate(t, b, tc)
				g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate, DefaultMaxTokens: 16})
				auth := map[string]string{"Authorization": "Bearer " + key}
				for _, r := range c.requests {
					status, _, body, err := post(t, g.URL()+"/generate", r.body, auth)
					rec := g.record(t)
					if err != nil || status != r.status {
						t.Errorf("%.120s: status %d %s, %v; want %d", r.body, status, body, err, r.status)
					}
					if r.status == 429 && !strings.Contains(body, "model limit") {
						t.Errorf("%.120s: %s, want the model limit's refusal", r.body, body)
					}
					if want := gjsonModel(r.body); rec.Model != want {
						t.Errorf("%.120s: record's model %q, want %q", r.body, rec.Model, want)
					}
				}
			})
		}
	}
}

// A request waiting in its queue when a reload revokes its key (the tenant
// stays, under a new key: a rotation, or a leaked key withdrawn) is refused
// as one of a removed tenant is, and gives back the slot and the tokens it
// was granted: admitted with the key revoked, it reached the engine after
// the operator had withdrawn the key, for as long as max_queue_wait let it
// wait (an operator's probe saw one admitted 0.5 s after the reload). On
// both backends: Redis holds the slot as a lease, and the tokens in its
// buckets. A background request is refunded too, although one the engine
// saw keeps its charge whatever its outcome (usedTokens).
func TestQueuedRequestOfARevokedKey(t *testing.T) {
	for _, backend := range []string{"local", "redis"} {
		for _, queued := range []struct{ name, path, body string }{
			{"chat", "/v1/chat/completions", simChat},
			{"background", "/v1/responses", `{"model":"sim-llama","input":"hi","background":true,"max_output_tokens":900}`},
		} {
			t.Run(backend+"/"+queued.name, func(t *testing.T) {
				testQueuedRequestOfARevokedKey(t, backend, queued.path, queued.body)
			})
		}
	}
}

func testQueuedRequestOfARevokedKey(t *testing.T, backend, path, queuedBody string) {
	_, simURL := startSim(t, sim.Config{TTFT: 0, ITL: 20 * time.Millisecond})
	// One slot, and 1000 tokens a minute: the holder and the queued
	// request fit (its 900 tokens are charged as it is admitted), and the
	// new key's request of 500 fits only if those 900 came back.
	lim := ratelimit.Limits{MaxConcurrency: 1, TPM: 1000}
	tc, key := tenantWithKey(t, "acme", lim)
	bc := ratelimit.BackendConfig{Backend: backend, MaxQueueWait: cfgtypes.Duration(10 * time.Second)}
	if backend == "redis" {
		bc.Redis = ratelimit.RedisConfig{URL: redisURL(t), KeyPrefix: fmt.Sprintf("gp-test-revoked-%d", time.Now().UnixNano()),
			Timeout: cfgtypes.Duration(10 * time.Second)}
	}
	reg := prometheus.NewRegistry()
	gate, err := ratelimit.New(bc, []ratelimit.TenantConfig{tc}, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gate.Close() })
	store, err := identity.NewStore([]ratelimit.TenantConfig{tc}, gate)
	if err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, Config{Upstream: simURL, Keys: store, Limits: gate})
	auth := map[string]string{"Authorization": "Bearer " + key}
	holder, queued := queueBehindHolder(t, g, reg, auth, path, queuedBody)
	rotated, newKey := tenantWithKey(t, "acme", lim)
	rotated.Keys[0].ID = "acme-new"
	if err := store.Reload([]ratelimit.TenantConfig{rotated}, nil); err != nil {
		t.Fatal(err)
	}
	recs, res := endHolder(t, g, holder, queued)
	if res.err != nil || res.status != 401 || !strings.Contains(res.body, "gateway key no longer valid") {
		t.Fatalf("the queued request of the revoked key: %d %q %v, want 401", res.status, res.body, res.err)
	}
	n := 0
	for _, rec := range recs {
		if rec.Outcome == meter.OutcomeUnauthorized {
			n++
			if rec.Tenant != "acme" || rec.KeyID != "acme-key" {
				t.Errorf("the queued request's record: tenant %q key %q, want acme's old key", rec.Tenant, rec.KeyID)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d unauthorized records of 2, want 1", n)
	}
	// The slot it was granted is free again, and its tokens are back: the
	// new key's request is admitted at once, not queued behind a slot
	// nobody holds nor refused for tokens the engine never used.
	status, _, body, err := post(t, g.URL()+"/v1/chat/completions",
		`{"model":"sim-llama","stream":true,"max_tokens":500,"messages":[{"role":"user","content":"hello there"}]}`,
		map[string]string{"Authorization": "Bearer " + newKey, "X-Sim-ITL": "0s"})
	if rec := g.record(t); err != nil || status != 200 || rec.QueueWait > time.Second {
		t.Errorf("the new key's request: %d %.200s %v, queued %v; want 200 at once", status, body, err, rec.QueueWait)
	}
}

// gjsonModel is a body's "model" string, or "".
func gjsonModel(body string) string {
	if _, after, ok := strings.Cut(body, `"model":"`); ok {
		m, _, _ := strings.Cut(after, `"`)
		return m
	}
	return ""
}

// A request waiting in its queue when a reload removes its tenant is
// refused (401: its key is valid no more), and its record keeps the tenant
// and key it began with, as every request a reload outlives (an operator's
// probe found it recorded with neither, under other).
func TestQueuedRequestOfARemovedTenant(t *testing.T) {
	_, simURL := startSim(t, sim.Config{TTFT: 0, ITL: 20 * time.Millisecond})
	store, gate, key, reg := oneSlotLimits(t, 10*time.Second)
	g := startGateway(t, Config{Upstream: simURL, Keys: store, Limits: gate})
	auth := map[string]string{"Authorization": "Bearer " + key}
	holder, queued := queueBehindHolder(t, g, reg, auth, "/v1/chat/completions", simChat)
	beta, _ := tenantWithKey(t, "beta", ratelimit.Limits{})
	if err := store.Reload([]ratelimit.TenantConfig{beta}, nil); err != nil {
		t.Fatal(err)
	}
	recs, res := endHolder(t, g, holder, queued)
	if res.err != nil || res.status != 401 || !strings.Contains(res.body, "its tenant was removed while the request waited") {
		t.Fatalf("the queued request: %d %q %v", res.status, res.body, res.err)
	}
	for _, rec := range recs {
		if rec.Outcome == meter.OutcomeUnauthorized && (rec.Tenant != "acme" || rec.KeyID != "acme-key") {
			t.Errorf("the queued request's record: tenant %q key %q, want acme's", rec.Tenant, rec.KeyID)
		}
	}
	if recs[0].Outcome != meter.OutcomeUnauthorized && recs[1].Outcome != meter.OutcomeUnauthorized {
		t.Errorf("records %s and %s, want one unauthorized", recs[0].Outcome, recs[1].Outcome)
	}
}
