package sim

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"
)

// BlockSize is the KV cache's allocation unit in tokens, vLLM's default
// block size: a request holds ceil(tokens/BlockSize) blocks.
const BlockSize = 16

// BatchConfig configures the Batching scheduler, a model of vLLM's
// continuous-batching engine. The step model (see the package doc's
// "Batching mode") is
//
//	step = StepBase + PrefillPerToken·P + DecodePerSeq·D
//
// where P is the number of prompt (prefill) tokens computed in the step and
// D the number of requests that decode one token in it.
type BatchConfig struct {
	// MaxNumSeqs is vLLM's max_num_seqs: at most this many requests run
	// (hold KV and take part in steps) at once; the others wait.
	MaxNumSeqs int
	// MaxNumBatchedTokens is vLLM's max_num_batched_tokens: the tokens one
	// step may compute, decodes (one token each) first, prefill chunks
	// with the rest. At least MaxNumSeqs.
	MaxNumBatchedTokens int
	// KVCacheTokens is the KV cache's capacity in tokens (rounded down to
	// whole blocks of BlockSize).
	KVCacheTokens int
	// StepBase is the fixed cost of a step (weights read, launch overhead):
	// the inter-token latency of a single request.
	StepBase time.Duration
	// PrefillPerToken is the cost of one prompt token computed in a step.
	PrefillPerToken time.Duration
	// DecodePerSeq is the cost each decoding request adds to a step.
	DecodePerSeq time.Duration
	// Jitter spreads each step's duration uniformly over ±Jitter of it
	// (0.03: ±3%), drawn from a generator seeded with Seed. 0: none.
	Jitter float64
	// Seed seeds the jitter.
	Seed int64
}

// Presets are named BatchConfigs imitating, roughly, real engines serving
// real models with vLLM's defaults. Their numbers come from public
// benchmarks' orders of magnitude, not from a measurement:
//
//   - small-gpu: an 8B model (Llama-3-8B, bf16) on one 24 GB GPU (L4 / A10G
//     class). About 30 ms per token alone, prefill ~8k tokens/s, a KV cache
//     of ~6 GB (128 KiB per token: 48k tokens) and vLLM's max_num_seqs
//     lowered to 32, 2048 batched tokens.
//   - a100-8b: an 8B model on one A100 80 GB. 8 ms per token alone, prefill
//     ~25k tokens/s, +60 µs per decoding request (22 ms per step at 256),
//     ~56 GB of KV (450k tokens), max_num_seqs 256, 8192 batched tokens.
//   - h100-70b-tp4: a 70B model (Llama-3-70B) on four H100 80 GB with tensor
//     parallelism 4. 14 ms per token alone (tensor-parallel all-reduces
//     included), prefill ~16k tokens/s, +80 µs per decoding request, ~150 GB
//     of KV at 320 KiB per token (480k tokens), max_num_seqs 256, 8192
//     batched tokens.
//
// All have a ±3% step jitter.
var Presets = map[string]BatchConfig{
	"small-gpu": {
		MaxNumSeqs: 32, MaxNumBatchedTokens: 2048, KVCacheTokens: 48 << 10,
		StepBase: 30 * time.Millisecond, PrefillPerToken: 125 * time.Microsecond, DecodePerSeq: 400 * time.Microsecond,
		Jitter: 0.03,
	},
	"a100-8b": {
		MaxNumSeqs: 256, MaxNumBatchedTokens: 8192, KVCacheTokens: 450_000,
		StepBase: 8 * time.Millisecond, PrefillPerToken: 40 * time.Microsecond, DecodePerSeq: 60 * time.Microsecond,
		Jitter: 0.03,
	},
	"h100-70b-tp4": {
		MaxNumSeqs: 256, MaxNumBatchedTokens: 8192, KVCacheTokens: 480_000,
		StepBase: 14 * time.Millisecond, PrefillPerToken: 62 * time.Microsecond, DecodePerSeq: 80 * time.Microsecond,
		Jitter: 0.03,
	},
}

// PresetNames returns the preset names, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(Presets))
	for n := range Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Preset returns the named preset, or an error listing the known names.
func Preset(name string) (BatchConfig, error) {
	c, ok := Presets[name]
	if !ok {
		return BatchConfig{}, fmt.Errorf("sim: unknown preset %q (known: %s)", name, strings.Join(PresetNames(), ", "))
	}
	return c, nil
}

// Validate reports a configuration the engine cannot run.
func (c BatchConfig) Validate() error {
	var errs []error
	if c.MaxNumSeqs < 1 {
		errs = append(errs, fmt.Errorf("max_num_seqs %d: must be at least 1", c.MaxNumSeqs))
	}
	if c.MaxNumBatchedTokens < max(1, c.MaxNumSeqs) {
		errs = append(errs, fmt.Errorf("max_num_batched_tokens %d: must be at least max_num_seqs (%d)", c.MaxNumBatchedTokens, c.MaxNumSeqs))
	}
	if c.KVCacheTokens < BlockSize {
		errs = append(errs, fmt.Errorf("kv cache %d tokens: must hold at least one block (%d tokens)", c.KVCacheTokens, BlockSize))
	}
	if c.StepBase < 0 || c.PrefillPerToken < 0 || c.DecodePerSeq < 0 {
		errs = append(errs, errors.New("step costs must not be negative"))
	}
	if c.StepBase+c.PrefillPerToken+c.DecodePerSeq <= 0 {
		errs = append(errs, errors.New("a step must cost something (step base, prefill or decode cost)"))
	}
	if c.Jitter < 0 || c.Jitter >= 1 || math.IsNaN(c.Jitter) {
		errs = append(errs, fmt.Errorf("jitter %v: must be in [0, 1)", c.Jitter))
	}
	if len(errs) > 0 {
		return fmt.Errorf("sim: batch config: %w", errors.Join(errs...))
	}
	return nil
}

// Capacity is what the step model predicts for a workload where every
// request has the same prompt (ISL) and output (OSL) lengths. See the
// package doc's "Batching mode" for the derivation.
type Capacity struct {
	ISL, OSL int
	// MaxConcurrency is the largest batch the engine runs at once for this
	// workload: min(max_num_seqs, KV-limited batch, token-budget-limited
	// batch). More requests in flight than this wait, and their TTFT grows
	// with the queue.
	MaxConcurrency int
	// LimitedBy names the binding limit: "max_num_seqs", "kv_cache" or
	// "max_num_batched_tokens".
	LimitedBy string
	// KVSeqs is the KV-limited batch: KV capacity over a request's peak
	// footprint, ISL + OSL in whole blocks (a batch that never preempts).
	KVSeqs int
	// BudgetSeqs is the token-budget-limited batch,
	// max_num_batched_tokens·OSL/(ISL+OSL−1).
	BudgetSeqs int
	// MaxRate is the highest sustainable arrival rate (requests/s): above
	// it the waiting queue grows without bound.
	MaxRate float64
	// OutputTokensPerSec is MaxRate·OSL, the output throughput at the knee.
	OutputTokensPerSec float64
	// StepTime is the mean step duration at MaxRate; it is also the mean
	// inter-token latency there.
	StepTime time.Duration
	// IdleTTFT is the TTFT of a request alone in the engine:
	// ceil(ISL/max_num_batched_tokens)·StepBase + ISL·PrefillPerToken.
	IdleTTFT time.Duration
	// IdleITL is the inter-token latency of a request alone: StepBase +
	// DecodePerSeq.
	IdleITL time.Duration
}

// Capacity predicts the knee of a workload with prompts of isl tokens and
// outputs of osl tokens (isl below 0 counts as 0, osl below 1 as 1). With a
// batch of B running requests, each lives O steps (one prefill step, O−1
// decode steps), so B/O requests finish per step, and a step computes on
// average B·I/O prompt tokens and B·(O−1)/O decodes:
//
//	s(B) = base + a·B·I/O + b·B·(O−1)/O
//	rate(B) = B / (O·s(B)) = B / (O·base + B·(a·I + b·(O−1)))
//
// rate(B) grows with B, so the maximum sustainable rate is rate(Bmax) with
// Bmax = MaxConcurrency.
func (c BatchConfig) Capacity(isl, osl int) Capacity {
	isl = max(isl, 0)
	osl = max(osl, 1)
	capa := Capacity{ISL: isl, OSL: osl}
	I, O := float64(isl), float64(osl)
	kvTokens := float64(c.KVCacheTokens / BlockSize * BlockSize)
	capa.KVSeqs = max(1, int(kvTokens/float64(blocksFor(isl+osl)*BlockSize)))
	capa.BudgetSeqs = max(1, int(float64(max(c.MaxNumBatchedTokens, 1))*O/(I+O-1)))
	capa.MaxConcurrency, capa.LimitedBy = max(c.MaxNumSeqs, 1), "max_num_seqs"
	if capa.KVSeqs < capa.MaxConcurrency {
		capa.MaxConcurrency, capa.LimitedBy = capa.KVSeqs, "kv_cache"
	}
	if capa.BudgetSeqs < capa.MaxConcurrency {
		capa.MaxConcurrency, capa.LimitedBy = capa.BudgetSeqs, "max_num_batched_tokens"
	}
	B := float64(capa.MaxConcurrency)
	base, a, b := c.StepBase.Seconds(), c.PrefillPerToken.Seconds(), c.DecodePerSeq.Seconds()
	step := base + a*B*I/O + b*B*(O-1)/O
	if step > 0 {
		capa.MaxRate = B / (O * step)
	}
	capa.OutputTokensPerSec = capa.MaxRate * O
	capa.StepTime = time.Duration(step * float64(time.Second))
	chunks := (isl + c.MaxNumBatchedTokens - 1) / max(c.MaxNumBatchedTokens, 1)
	capa.IdleTTFT = time.Duration(max(chunks, 1))*c.StepBase + time.Duration(isl)*c.PrefillPerToken
	capa.IdleITL = c.StepBase + c.DecodePerSeq
	return capa
}

// String formats the prediction in one line per figure.
func (c Capacity) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "workload: ISL %d, OSL %d\n", c.ISL, c.OSL)
	fmt.Fprintf(&b, "max concurrency: %d (limited by %s; kv_cache allows %d, max_num_batched_tokens %d)\n", c.MaxConcurrency, c.LimitedBy, c.KVSeqs, c.BudgetSeqs)
	fmt.Fprintf(&b, "max rate: %.3f requests/s (%.0f output tokens/s)\n", c.MaxRate, c.OutputTokensPerSec)
	fmt.Fprintf(&b, "step at the knee: %v (mean inter-token latency there)\n", c.StepTime.Round(time.Microsecond))
	fmt.Fprintf(&b, "idle: TTFT %v, ITL %v\n", c.IdleTTFT.Round(time.Microsecond), c.IdleITL.Round(time.Microsecond))
	return b.String()
}

// ---------------------------------------------------------------------------
// The engine: a discrete-event core in virtual time. It knows nothing of
// clocks or goroutines; Batching drives it in real time, tests drive it
// with virtual time.

type reqState uint8

const (
	stWaiting reqState = iota
	stRunning
	stDone     // all tokens produced
	stReleased // Release called before it was done
)

// breq is one request inside the engine.
type breq struct {
	prompt, out int
	arrival     time.Time
	firstSched  time.Time // when it was first scheduled (zero before)
	need        int       // tokens computed before the next output: prompt + generated
	computed    int       // tokens whose KV is computed
	blocks      int       // KV blocks held
	gen         int       // tokens produced
	times       []time.Time
	sched       int // tokens scheduled in the step being built
	state       reqState
	preempted   int
	notify      chan struct{} // real time: a token or an ending may be ready
}

type engine struct {
	cfg         BatchConfig
	totalBlocks int
	freeBlocks  int
	waiting     []*breq
	running     []*breq // admission order
	batch       []*breq // the step being built
	rng         uint64
	preemptions uint64
}

func newEngine(cfg BatchConfig) *engine {
	blocks := cfg.KVCacheTokens / BlockSize
	return &engine{cfg: cfg, totalBlocks: blocks, freeBlocks: blocks, rng: uint64(cfg.Seed)}
}

func (e *engine) newReq(prompt, out int, arrival time.Time) *breq {
	out = max(out, 1)
	prompt = max(prompt, 0)
	return &breq{prompt: prompt, out: out, arrival: arrival, need: max(prompt, 1), times: make([]time.Time, 0, min(out, 1024))}
}

// arrive puts r at the back of the waiting queue.
func (e *engine) arrive(r *breq) { e.waiting = append(e.waiting, r) }

func (e *engine) idle() bool { return len(e.running) == 0 && len(e.waiting) == 0 }

func blocksFor(tokens int) int { return (tokens + BlockSize - 1) / BlockSize }

// alloc grows r's KV to hold tokens; force lets it overcommit (a request
// alone in the engine that does not fit the cache still runs).
func (e *engine) alloc(r *breq, tokens int, force bool) bool {
	need := blocksFor(tokens) - r.blocks
	if need <= 0 {
		return true
	}
	if need > e.freeBlocks && !force {
		return false
	}
	e.freeBlocks -= need
	r.blocks += need
	return true
}

func (e *engine) free(r *breq) {
	e.freeBlocks += r.blocks
	r.blocks = 0
}

// preemptLast evicts the most recently admitted running request (vLLM's
// recompute preemption): its KV is freed and it goes back to the front of
// the waiting queue, to prefill its prompt and output so far again.
func (e *engine) preemptLast() *breq {
	v := e.running[len(e.running)-1]
	e.running = e.running[:len(e.running)-1]
	e.free(v)
	v.computed = 0
	v.sched = 0
	v.state = stWaiting
	v.preempted++
	e.preemptions++
	e.waiting = append(e.waiting, nil)
	copy(e.waiting[1:], e.waiting)
	e.waiting[0] = v
	return v
}

// step builds and runs one engine step starting at t0 and returns its end;
// false when there is nothing to run. Token times of the step are the end.
func (e *engine) step(t0 time.Time) (time.Time, bool) {
	if e.idle() {
		return time.Time{}, false
	}
	budget := e.cfg.MaxNumBatchedTokens
	e.batch = e.batch[:0]
	prefill, decodes := 0, 0
	preempted := false
	// Running requests first, in admission order: in practice the decodes,
	// one token each, then the chunks of partly prefilled prompts.
	for i := 0; i < len(e.running) && budget > 0; i++ {
		r := e.running[i]
		n := min(r.need-r.computed, budget)
		for !e.alloc(r, r.computed+n, len(e.running) == 1) {
			preempted = true
			if e.preemptLast() == r {
				r = nil
				break
			}
		}
		if r == nil {
			break
		}
		r.sched = n
		budget -= n
		e.batch = append(e.batch, r)
		if r.gen > 0 && r.computed == r.need-1 {
			decodes++
		} else {
			prefill += n
		}
	}
	// Then waiting requests, first come first served, while a slot, budget
	// and KV allow (vLLM admits nothing in a step that preempted).
	for !preempted && len(e.waiting) > 0 && len(e.running) < e.cfg.MaxNumSeqs && budget > 0 {
		r := e.waiting[0]
		n := min(r.need-r.computed, budget)
		if !e.alloc(r, r.computed+n, len(e.running) == 0) {
			break
		}
		e.waiting[0] = nil
		e.waiting = e.waiting[1:]
		r.state = stRunning
		if r.firstSched.IsZero() {
			r.firstSched = t0
		}
		e.running = append(e.running, r)
		r.sched = n
		budget -= n
		prefill += n
		e.batch = append(e.batch, r)
	}
	if len(e.batch) == 0 {
		// Cannot happen with a valid config (a lone request always runs),
		// but never spin: report idle.
		return time.Time{}, false
	}
	d := e.cfg.StepBase + time.Duration(prefill)*e.cfg.PrefillPerToken + time.Duration(decodes)*e.cfg.DecodePerSeq
	if j := e.cfg.Jitter; j > 0 {
		d = time.Duration(float64(d) * (1 + j*(2*e.uniform()-1)))
	}
	d = max(d, 1)
	end := t0.Add(d)
	finished := false
	for _, r := range e.batch {
		r.computed += r.sched
		r.sched = 0
		if r.computed < r.need {
			continue
		}
		r.times = append(r.times, end)
		r.gen++
		r.need++
		if r.gen == r.out {
			r.state = stDone
			e.free(r)
			finished = true
		}
	}
	if finished {
		k := 0
		for _, r := range e.running {
			if r.state == stRunning {
				e.running[k] = r
				k++
			}
		}
		clear(e.running[k:])
		e.running = e.running[:k]
	}
	return end, true
}

// release removes r wherever it is and frees its KV.
func (e *engine) release(r *breq) {
	switch r.state {
	case stWaiting:
		e.waiting = removeReq(e.waiting, r)
	case stRunning:
		e.running = removeReq(e.running, r)
	default:
		return
	}
	e.free(r)
	r.state = stReleased
}

func removeReq(s []*breq, r *breq) []*breq {
	for i, x := range s {
		if x == r {
			copy(s[i:], s[i+1:])
			s[len(s)-1] = nil
			return s[:len(s)-1]
		}
	}
	return s
}

// uniform returns a number in [0, 1) from a splitmix64 sequence.
func (e *engine) uniform() float64 {
	e.rng += 0x9e3779b97f4a7c15
	return float64(mix64(e.rng)>>11) / (1 << 53)
}

func (e *engine) kvUsage() float64 {
	if e.totalBlocks == 0 {
		return 0
	}
	return min(1, float64(e.totalBlocks-e.freeBlocks)/float64(e.totalBlocks))
}

// ---------------------------------------------------------------------------
// Batching: the engine stepped in real time.

// Batching is a Scheduler modelling vLLM's continuous batching: one engine
// loop steps the engine in real time, and each request's token i is due at
// the end of the step that produced it. TokenTime blocks until that step
// has been scheduled. The loop is a goroutine that runs only while requests
// wait or run, so an idle Batching holds none; Close stops it for good. It
// also reports the engine's state (Stats), which the simulator's /metrics
// serves. Use NewBatching; one Batching serves one Server.
type Batching struct {
	cfg BatchConfig
	now func() time.Time

	mu      sync.Mutex
	e       *engine
	looping bool
	closed  bool
	last    time.Time // end of the last step
	quit    chan struct{}
	wg      sync.WaitGroup
}

// NewBatching returns a continuous-batching scheduler for cfg.
func NewBatching(cfg BatchConfig) (*Batching, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Batching{cfg: cfg, now: time.Now, e: newEngine(cfg), quit: make(chan struct{})}, nil
}

// Config returns the scheduler's configuration.
func (b *Batching) Config() BatchConfig { return b.cfg }

// maxLag is how late the loop may wake and still start the next step at
// the end of the previous one (so sleep overshoot does not slow the model
// down); later than that, the step starts when the loop woke.
const maxLag = 5 * time.Millisecond

// Admit queues the job and returns its schedule.
func (b *Batching) Admit(j Job) Schedule {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.e.newReq(j.PromptTokens, j.CompletionTokens, j.Start)
	r.notify = make(chan struct{}, 1)
	s := &batchSchedule{b: b, r: r}
	if b.closed {
		r.state = stReleased
		return s
	}
	b.e.arrive(r)
	if !b.looping {
		b.looping = true
		b.wg.Add(1)
		go b.loop()
	}
	return s
}

func (b *Batching) loop() {
	defer b.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		b.mu.Lock()
		if b.closed {
			b.looping = false
			b.mu.Unlock()
			return
		}
		now := b.now()
		t0 := now
		if !b.last.IsZero() && !now.Before(b.last) && now.Sub(b.last) <= maxLag {
			t0 = b.last
		}
		end, ok := b.e.step(t0)
		if !ok {
			b.looping = false
			b.last = time.Time{}
			b.mu.Unlock()
			return
		}
		b.last = end
		for _, r := range b.e.batch {
			wake(r)
		}
		b.mu.Unlock()
		timer.Reset(end.Sub(b.now()))
		select {
		case <-timer.C:
		case <-b.quit:
			return
		}
	}
}

func wake(r *breq) {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// Close stops the engine loop: every TokenTime waiting returns at once
// (with the current time), and later requests are not scheduled. Close
// returns once the loop has stopped.
func (b *Batching) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	close(b.quit)
	for _, r := range b.e.running {
		wake(r)
	}
	for _, r := range b.e.waiting {
		wake(r)
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// BatchStats is the engine's state, as vLLM's /metrics reports it.
type BatchStats struct {
	Running, Waiting int
	KVCacheUsage     float64 // 0..1
	Preemptions      uint64
}

// Stats returns the engine's current state.
func (b *Batching) Stats() BatchStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return BatchStats{Running: len(b.e.running), Waiting: len(b.e.waiting), KVCacheUsage: b.e.kvUsage(), Preemptions: b.e.preemptions}
}

type batchSchedule struct {
	b        *Batching
	r        *breq
	released bool
}

// tokenReady returns token i's time once the engine has scheduled the
// step producing it; until then false and a channel that receives when it
// may be ready.
func (s *batchSchedule) tokenReady(i int) (time.Time, bool, <-chan struct{}) {
	b, r := s.b, s.r
	i = min(max(i, 1), r.out)
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.gen >= i {
		return r.times[i-1], true, nil
	}
	if b.closed || r.state == stReleased {
		return b.now(), true, nil
	}
	return time.Time{}, false, r.notify
}

// TokenTime blocks until the step producing token i has been scheduled and
// returns when it ends.
func (s *batchSchedule) TokenTime(i int) time.Time {
	for {
		t, ok, wait := s.tokenReady(i)
		if ok {
			return t
		}
		<-wait
	}
}

// Release frees the request's slot and KV at once.
func (s *batchSchedule) Release() {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.released {
		return
	}
	s.released = true
	b.e.release(s.r)
	wake(s.r)
}

// queueTime is how long the request waited before its first step.
func (s *batchSchedule) queueTime() time.Duration {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if s.r.firstSched.IsZero() {
		return 0
	}
	return max(0, s.r.firstSched.Sub(s.r.arrival))
}

// observeTokens feeds the request's token times to the TTFT and ITL
// histograms (a non-streaming response, once its body is out).
func (s *batchSchedule) observeTokens(start time.Time, m *engineStats) {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	r := s.r
	for i := 0; i < r.gen; i++ {
		if i == 0 {
			m.ttft.Observe(r.times[0].Sub(start).Seconds())
		} else {
			m.itl.Observe(r.times[i].Sub(r.times[i-1]).Seconds())
		}
	}
}
