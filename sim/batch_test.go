package sim

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/testenv"
)

// The engine's tests run in virtual time: vrun drives the core exactly as
// Batching's loop does (arrivals join the queue, each step starts when the
// previous ended or, when idle, at the next arrival), without a clock.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type varrival struct {
	at          time.Duration // after t0
	prompt, out int
}

// vrun serves the arrivals (sorted by time) and returns their requests, in
// arrival order. onStep, if set, sees the engine after every step.
func vrun(t *testing.T, cfg BatchConfig, arrivals []varrival, onStep func(e *engine, end time.Time)) []*breq {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	e := newEngine(cfg)
	reqs := make([]*breq, len(arrivals))
	next := 0
	now := t0
	for steps := 0; ; steps++ {
		if steps > 10_000_000 {
			t.Fatal("the engine does not finish")
		}
		for next < len(arrivals) && !t0.Add(arrivals[next].at).After(now) {
			a := arrivals[next]
			reqs[next] = e.newReq(a.prompt, a.out, t0.Add(a.at))
			e.arrive(reqs[next])
			next++
		}
		end, ok := e.step(now)
		if !ok {
			if next == len(arrivals) {
				break
			}
			now = t0.Add(arrivals[next].at)
			continue
		}
		if onStep != nil {
			onStep(e, end)
		}
		now = end
	}
	for i, r := range reqs {
		if r.state != stDone || r.gen != r.out {
			t.Fatalf("request %d: state %d, %d of %d tokens", i, r.state, r.gen, r.out)
		}
		if !slices.IsSortedFunc(r.times, func(a, b time.Time) int { return a.Compare(b) }) || !r.times[0].After(r.arrival) {
			t.Fatalf("request %d: token times out of order: %v", i, r.times)
		}
	}
	return reqs
}

// testCfg is a small engine without jitter: 10 ms per step, 0.1 ms per
// prompt token, 1 ms per decoding request.
func testCfg() BatchConfig {
	return BatchConfig{
		MaxNumSeqs: 64, MaxNumBatchedTokens: 1024, KVCacheTokens: 1 << 20,
		StepBase: 10 * time.Millisecond, PrefillPerToken: 100 * time.Microsecond, DecodePerSeq: time.Millisecond,
	}
}

func itl(r *breq, i int) time.Duration { return r.times[i].Sub(r.times[i-1]) }

func ttftOf(r *breq) time.Duration { return r.times[0].Sub(r.arrival) }

// A decode step costs base + b·(decoding requests): the more requests run,
// the slower every one of them.
func TestBatchStepGrowsWithBatch(t *testing.T) {
	cfg := testCfg()
	for _, b := range []int{1, 4, 16} {
		var arr []varrival
		for range b {
			arr = append(arr, varrival{prompt: 32, out: 10})
		}
		reqs := vrun(t, cfg, arr, nil)
		// All prefill together in step 1 (32·b prompt tokens), then decode
		// together.
		if want := cfg.StepBase + time.Duration(32*b)*cfg.PrefillPerToken; ttftOf(reqs[0]) != want {
			t.Errorf("batch %d: TTFT %v, want %v", b, ttftOf(reqs[0]), want)
		}
		want := cfg.StepBase + time.Duration(b)*cfg.DecodePerSeq
		for _, r := range reqs {
			for i := 1; i < r.out; i++ {
				if itl(r, i) != want {
					t.Fatalf("batch %d: ITL %v, want %v", b, itl(r, i), want)
				}
			}
		}
	}
}

// TTFT grows with the prompt: base + a·I, one step per
// max_num_batched_tokens chunk.
func TestBatchPrefillCost(t *testing.T) {
	cfg := testCfg()
	short := vrun(t, cfg, []varrival{{prompt: 100, out: 2}}, nil)[0]
	long := vrun(t, cfg, []varrival{{prompt: 3000, out: 2}}, nil)[0]
	if want := cfg.StepBase + 100*cfg.PrefillPerToken; ttftOf(short) != want {
		t.Errorf("short prompt: TTFT %v, want %v", ttftOf(short), want)
	}
	// 3000 tokens: chunks of 1024, 1024, 952 in three steps.
	if want := 3*cfg.StepBase + 3000*cfg.PrefillPerToken; ttftOf(long) != want {
		t.Errorf("long prompt: TTFT %v, want %v", ttftOf(long), want)
	}
	if c := cfg.Capacity(3000, 2); c.IdleTTFT != ttftOf(long) {
		t.Errorf("Capacity.IdleTTFT %v, the engine %v", c.IdleTTFT, ttftOf(long))
	}
	// A long prefill admitted beside running decodes stretches their step.
	reqs := vrun(t, cfg, []varrival{{prompt: 10, out: 20}, {at: 50 * time.Millisecond, prompt: 800, out: 2}}, nil)
	var maxGap time.Duration
	for i := 1; i < reqs[0].out; i++ {
		maxGap = max(maxGap, itl(reqs[0], i))
	}
	if want := cfg.StepBase + cfg.DecodePerSeq + 800*cfg.PrefillPerToken; maxGap != want {
		t.Errorf("decode gap beside an 800-token prefill: %v, want %v", maxGap, want)
	}
}

// With max_num_seqs 2, the third and later requests wait for a slot.
func TestBatchMaxNumSeqsQueues(t *testing.T) {
	cfg := testCfg()
	cfg.MaxNumSeqs = 2
	arr := make([]varrival, 5)
	for i := range arr {
		arr[i] = varrival{prompt: 16, out: 4}
	}
	maxWaiting := 0
	reqs := vrun(t, cfg, arr, func(e *engine, _ time.Time) {
		maxWaiting = max(maxWaiting, len(e.waiting))
		if len(e.running) > 2 {
			t.Fatalf("%d running", len(e.running))
		}
	})
	if maxWaiting != 3 {
		t.Errorf("max waiting %d, want 3", maxWaiting)
	}
	if reqs[0].firstSched != t0 || reqs[2].firstSched.Before(reqs[0].times[3]) {
		t.Errorf("request 3 was scheduled at %v, before request 1 ended (%v)", reqs[2].firstSched, reqs[0].times[3])
	}
}

// When the KV cache is full, a decode preempts the most recently admitted
// request; it recomputes its prompt and output so far and still produces
// all its tokens, in order.
func TestBatchPreemption(t *testing.T) {
	cfg := testCfg()
	cfg.KVCacheTokens = 8 * BlockSize
	arr := []varrival{{prompt: 30, out: 40}, {prompt: 30, out: 40}, {prompt: 30, out: 40}}
	var preemptions uint64
	var victim *breq
	maxUsage := 0.0
	reqs := vrun(t, cfg, arr, func(e *engine, _ time.Time) {
		preemptions = e.preemptions
		maxUsage = max(maxUsage, e.kvUsage())
		if e.freeBlocks < 0 {
			t.Fatalf("KV overcommitted: %d free blocks", e.freeBlocks)
		}
		for _, r := range e.waiting {
			if r.preempted > 0 && victim == nil {
				victim = r
			}
		}
	})
	if preemptions == 0 || victim == nil {
		t.Fatal("no preemption")
	}
	if victim != reqs[2] {
		t.Errorf("the victim was not the most recently admitted request")
	}
	if maxUsage != 1 {
		t.Errorf("KV usage peaked at %v", maxUsage)
	}
	// The victim's re-prefill (prompt + output so far) shows as one long
	// gap in its tokens.
	var maxGap time.Duration
	for i := 1; i < victim.out; i++ {
		maxGap = max(maxGap, itl(victim, i))
	}
	if maxGap < 3*cfg.StepBase {
		t.Errorf("victim's longest gap %v: no sign of waiting and recomputing", maxGap)
	}
	t.Logf("%d preemptions, victim preempted %d times, longest gap %v", preemptions, victim.preempted, maxGap)
}

// poisson returns n arrivals at rate per second, seeded.
func poisson(seed int64, rate float64, n, prompt, out int) []varrival {
	rng := rand.New(rand.NewSource(seed))
	arr := make([]varrival, n)
	var at float64
	for i := range arr {
		at += rng.ExpFloat64() / rate
		arr[i] = varrival{at: time.Duration(at * float64(time.Second)), prompt: prompt, out: out}
	}
	return arr
}

func tokenTimes(reqs []*breq) [][]time.Time {
	out := make([][]time.Time, len(reqs))
	for i, r := range reqs {
		out[i] = r.times
	}
	return out
}

// Same seed and arrivals, same schedule; another seed, another jitter.
func TestBatchDeterministic(t *testing.T) {
	cfg := Presets["small-gpu"]
	cfg.Seed = 7
	arr := poisson(1, 3, 60, 300, 40)
	a := tokenTimes(vrun(t, cfg, arr, nil))
	b := tokenTimes(vrun(t, cfg, arr, nil))
	if !slices.EqualFunc(a, b, slices.Equal) {
		t.Fatal("two runs with the same seed differ")
	}
	cfg.Seed = 8
	if c := tokenTimes(vrun(t, cfg, arr, nil)); slices.EqualFunc(a, c, slices.Equal) {
		t.Fatal("another seed gives the same jitter")
	}
}

// load is what one rate of the ladder did.
type load struct {
	mult, rate  float64
	ttftP99     time.Duration // second half of the requests
	waitingEnd  int           // waiting when the last request arrived
	preemptions uint64
}

// grows reports an unbounded queue: at the last arrival more than 5% of
// the requests are still waiting.
func (l load) grows(n int) bool { return l.waitingEnd > n/20 }

func runLoad(t *testing.T, cfg BatchConfig, isl, osl int, mult float64, n int) load {
	c := cfg.Capacity(isl, osl)
	l := load{mult: mult, rate: mult * c.MaxRate}
	arr := poisson(42, l.rate, n, isl, osl)
	last := t0.Add(arr[len(arr)-1].at)
	var e0 *engine
	l.waitingEnd = -1
	reqs := vrun(t, cfg, arr, func(e *engine, end time.Time) {
		e0 = e
		if l.waitingEnd < 0 && !end.Before(last) {
			l.waitingEnd = len(e.waiting)
		}
	})
	l.preemptions = e0.preemptions
	var ttfts []time.Duration
	for _, r := range reqs[n/2:] {
		ttfts = append(ttfts, ttftOf(r))
	}
	slices.Sort(ttfts)
	l.ttftP99 = ttfts[len(ttfts)*99/100]
	return l
}

// The capacity formula predicts the model's own knee: on a ladder of
// rates around Capacity.MaxRate, the queue stays bounded up to ×0.7 and
// grows from ×1.4 on.
func TestBatchCapacityKnee(t *testing.T) {
	cases := []struct {
		preset   string
		isl, osl int
		limit    string
	}{
		{"small-gpu", 512, 128, "max_num_seqs"},
		{"small-gpu", 2000, 400, "kv_cache"},
		{"a100-8b", 1000, 200, "max_num_seqs"},
		{"a100-8b", 8000, 20, "max_num_batched_tokens"},
		{"h100-70b-tp4", 1000, 200, "max_num_seqs"},
	}
	const n = 1000
	for _, tc := range cases {
		cfg := Presets[tc.preset]
		c := cfg.Capacity(tc.isl, tc.osl)
		if c.LimitedBy != tc.limit {
			t.Errorf("%s ISL %d OSL %d: limited by %s, want %s", tc.preset, tc.isl, tc.osl, c.LimitedBy, tc.limit)
		}
		var lines []string
		knee := -1.0
		var p99 []time.Duration
		for _, m := range []float64{0.5, 0.7, 1, 1.4, 2} {
			l := runLoad(t, cfg, tc.isl, tc.osl, m, n)
			p99 = append(p99, l.ttftP99)
			lines = append(lines, fmt.Sprintf("  ×%-4v rate %7.3f/s  waiting at last arrival %4d  TTFT p99 %v  preemptions %d",
				m, l.rate, l.waitingEnd, l.ttftP99.Round(time.Millisecond), l.preemptions))
			if l.grows(n) && knee < 0 {
				knee = m
			}
			if m <= 0.7 && l.grows(n) {
				t.Errorf("%s ISL %d OSL %d: queue grows at ×%v of MaxRate", tc.preset, tc.isl, tc.osl, m)
			}
			if m >= 1.4 && !l.grows(n) {
				t.Errorf("%s ISL %d OSL %d: queue bounded at ×%v of MaxRate", tc.preset, tc.isl, tc.osl, m)
			}
		}
		if p99[4] < 10*p99[0] {
			t.Errorf("%s ISL %d OSL %d: TTFT p99 %v at ×2, %v at ×0.5: no explosion", tc.preset, tc.isl, tc.osl, p99[4], p99[0])
		}
		t.Logf("%s ISL %d OSL %d: predicted MaxRate %.3f/s, concurrency %d (%s); measured knee ×%v\n%s",
			tc.preset, tc.isl, tc.osl, c.MaxRate, c.MaxConcurrency, c.LimitedBy, knee, strings.Join(lines, "\n"))
	}
}

// With concurrency at Capacity.MaxConcurrency a closed loop never queues;
// one more client than that waits.
func TestBatchCapacityConcurrency(t *testing.T) {
	cfg := testCfg()
	cfg.MaxNumSeqs = 8
	c := cfg.Capacity(100, 20)
	if c.MaxConcurrency != 8 || c.LimitedBy != "max_num_seqs" {
		t.Fatalf("capacity %+v", c)
	}
	// KV-limited: 2000 tokens hold 2000/128 = 15 requests of 120 tokens
	// (8 blocks).
	cfg.MaxNumSeqs = 64
	cfg.KVCacheTokens = 2000
	if c := cfg.Capacity(100, 20); c.MaxConcurrency != 15 || c.LimitedBy != "kv_cache" {
		t.Fatalf("capacity %+v", c)
	}
	// Zero or negative lengths do not break it.
	for _, w := range [][2]int{{0, 0}, {-5, -5}, {0, 1}} {
		if c := cfg.Capacity(w[0], w[1]); c.MaxRate <= 0 || math.IsInf(c.MaxRate, 0) || c.MaxConcurrency < 1 {
			t.Errorf("Capacity(%d, %d) = %+v", w[0], w[1], c)
		}
	}
}

func TestBatchConfigValidate(t *testing.T) {
	for _, name := range PresetNames() {
		if err := Presets[name].Validate(); err != nil {
			t.Errorf("preset %s: %v", name, err)
		}
	}
	bad := []BatchConfig{
		{},
		{MaxNumSeqs: 8, MaxNumBatchedTokens: 4, KVCacheTokens: 1024, StepBase: time.Millisecond},
		{MaxNumSeqs: 8, MaxNumBatchedTokens: 64, KVCacheTokens: 8, StepBase: time.Millisecond},
		{MaxNumSeqs: 8, MaxNumBatchedTokens: 64, KVCacheTokens: 1024},
		{MaxNumSeqs: 8, MaxNumBatchedTokens: 64, KVCacheTokens: 1024, StepBase: time.Millisecond, Jitter: 1},
	}
	for _, c := range bad {
		if _, err := NewBatching(c); err == nil {
			t.Errorf("NewBatching(%+v) accepted", c)
		}
	}
	if _, err := Preset("nope"); err == nil || !strings.Contains(err.Error(), "small-gpu") {
		t.Errorf("unknown preset: %v", err)
	}
}

// In real time: requests beyond max_num_seqs wait (the waiting count shows
// it), TokenTime blocks until the engine reaches the token, Release frees
// the slot, and Close unblocks everything and stops the loop.
func TestBatchingRealTime(t *testing.T) {
	cfg := testCfg()
	cfg.MaxNumSeqs = 1
	cfg.StepBase = time.Hour // the engine's first step never ends during the test
	b, err := NewBatching(cfg)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	s1 := b.Admit(Job{Start: now, PromptTokens: 10, CompletionTokens: 3})
	s2 := b.Admit(Job{Start: now, PromptTokens: 10, CompletionTokens: 3})
	s3 := b.Admit(Job{Start: now, PromptTokens: 10, CompletionTokens: 3})
	// Token 1 of s1 ends the first step, an hour away.
	if at := s1.TokenTime(1); at.Sub(now) < 59*time.Minute {
		t.Fatalf("token 1 at %v", at.Sub(now))
	}
	if st := b.Stats(); st.Running != 1 || st.Waiting != 2 || st.KVCacheUsage <= 0 {
		t.Fatalf("stats %+v", st)
	}
	s2.Release()
	if st := b.Stats(); st.Waiting != 1 {
		t.Fatalf("after Release: stats %+v", st)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	got := make(chan time.Time, 1)
	go func() {
		defer wg.Done()
		got <- s3.TokenTime(1) // blocks: s3 waits behind s1's hour-long step
	}()
	select {
	case <-got:
		t.Fatal("TokenTime of a waiting request returned")
	case <-time.After(20 * time.Millisecond):
	}
	b.Close()
	wg.Wait()
	if at := <-got; at.Sub(now) > time.Minute {
		t.Fatalf("after Close, TokenTime returned %v", at.Sub(now))
	}
	s1.Release()
	s3.Release()
	b.Close() // twice is fine
	if s := b.Admit(Job{Start: now, CompletionTokens: 2}); s.TokenTime(2).Sub(now) > time.Minute {
		t.Fatal("Admit after Close blocks")
	}
}

// End to end over HTTP: streams through the batching engine are well
// formed, and /metrics shows the engine under vLLM's names.
func TestBatchingHTTP(t *testing.T) {
	cfg := testCfg()
	cfg.StepBase = 2 * time.Millisecond
	cfg.DecodePerSeq = 100 * time.Microsecond
	cfg.PrefillPerToken = 10 * time.Microsecond
	cfg.MaxNumSeqs = 2
	b, err := NewBatching(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	h := start(t, Config{Model: "m-1", Scheduler: b})
	const n, tokens = 4, 8
	var wg sync.WaitGroup
	bodies := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, bodies[i], _ = h.post("/v1/chat/completions",
				`{"model":"m-1","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"two words"}]}`)
		}()
	}
	// A non-streaming request too.
	status, body, _ := h.post("/v1/completions", `{"model":"m-1","max_tokens":8,"prompt":"hi"}`)
	if status != 200 || !strings.Contains(body, `"completion_tokens":8`) {
		t.Fatalf("non-streaming: %d %s", status, body)
	}
	wg.Wait()
	for i, body := range bodies {
		evs := events(t, body)
		if len(evs) != tokens+3 || evs[len(evs)-1] != "data: [DONE]" {
			t.Fatalf("stream %d: %d events: %s", i, len(evs), tail(body))
		}
		var text strings.Builder
		for _, ev := range evs[1 : tokens+1] {
			m := dataJSON(t, ev)
			text.WriteString(m["choices"].([]any)[0].(map[string]any)["delta"].(map[string]any)["content"].(string))
		}
		if text.String() != OutputText(0, tokens) {
			t.Errorf("stream %d: text %q", i, text.String())
		}
		if fin := dataJSON(t, evs[tokens+1])["choices"].([]any)[0].(map[string]any)["finish_reason"]; fin != "length" {
			t.Errorf("stream %d: finish %v", i, fin)
		}
	}
	m := h.do("GET", "/metrics", "")
	defer m.Body.Close()
	var sb strings.Builder
	sc := bufio.NewScanner(m.Body)
	for sc.Scan() {
		sb.WriteString(sc.Text() + "\n")
	}
	got := parseMetrics(t, sb.String())
	want := map[string]float64{
		"vllm:num_requests_running":              0,
		"vllm:num_requests_waiting":              0,
		"vllm:kv_cache_usage_perc":               0,
		"vllm:num_preemptions_total":             0,
		"vllm:request_success_total{length}":     n + 1,
		"vllm:request_success_total{stop}":       0,
		"vllm:generation_tokens_total":           (n + 1) * tokens,
		"vllm:time_to_first_token_seconds_count": n + 1,
		"vllm:inter_token_latency_seconds_count": (n + 1) * (tokens - 1),
		"vllm:e2e_request_latency_seconds_count": n + 1,
		"vllm:request_queue_time_seconds_count":  n + 1,
	}
	for name, v := range want {
		s, ok := got[name]
		if !ok || float64(s.Value) != v || s.Metric["model_name"] != "m-1" {
			t.Errorf("%s: %v, want %v", name, s, v)
		}
	}
	// Five requests, two slots: someone waited.
	if s := got["vllm:request_queue_time_seconds_sum"]; s == nil || s.Value <= 0 {
		t.Errorf("queue time sum %v", s)
	}
}

// A steady engine step allocates nothing.
func TestBatchStepAlloc(t *testing.T) {
	e := newEngine(testCfg())
	for range 32 {
		e.arrive(e.newReq(100, 1000, t0))
	}
	now := t0
	for range 3 {
		now, _ = e.step(now)
	}
	if n := testenv.AllocsPerRun(200, func() { now, _ = e.step(now) }); n != 0 {
		t.Fatalf("%v allocations per step", n)
	}
}

// A client that leaves while its request waits for a slot frees the slot
// at once (the simulator polls the connection while it waits for the
// engine), and Shutdown stops a response waiting for an hour-long step.
func TestBatchingClientGoneAndShutdown(t *testing.T) {
	cfg := testCfg()
	cfg.MaxNumSeqs = 1
	cfg.StepBase = time.Hour
	b, err := NewBatching(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	h := start(t, Config{Scheduler: b})
	const req = `{"stream":true,"max_tokens":4,"messages":[{"role":"user","content":"a b"}]}`
	first := h.do("POST", "/v1/chat/completions", req, "X-Request-Id", "first")
	defer first.Body.Close()
	ctx, cancel := context.WithCancel(context.Background())
	second := h.doCtx(ctx, "POST", "/v1/chat/completions", req, "X-Request-Id", "second")
	waitFor(t, "the second request to wait", func() bool { st := b.Stats(); return st.Running == 1 && st.Waiting == 1 })
	cancel()
	second.Body.Close()
	if tr := h.waitTrace("second"); tr.Ending != EndClientGone {
		t.Errorf("second: ending %v", tr.Ending)
	}
	waitFor(t, "the slot to be freed", func() bool { return b.Stats().Waiting == 0 })
	if err := h.s.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if tr := h.waitTrace("first"); tr.Ending != EndShutdown {
		t.Errorf("first: ending %v", tr.Ending)
	}
	waitFor(t, "the engine to empty", func() bool { st := b.Stats(); return st.Running == 0 && st.KVCacheUsage == 0 })
}

// BenchmarkBatchStep measures one engine step with 256 requests decoding
// (the a100-8b preset at its max_num_seqs).
func BenchmarkBatchStep(b *testing.B) {
	cfg := Presets["a100-8b"]
	e := newEngine(cfg)
	for range cfg.MaxNumSeqs {
		e.arrive(e.newReq(100, 1000, t0))
	}
	now, _ := e.step(t0)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%900 == 0 { // keep them decoding: fresh requests before they end
			b.StopTimer()
			e = newEngine(cfg)
			for range cfg.MaxNumSeqs {
				e.arrive(e.newReq(100, 1000, t0))
			}
			now, _ = e.step(now)
			b.StartTimer()
		}
		now, _ = e.step(now)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*cfg.MaxNumSeqs), "ns/token")
}
