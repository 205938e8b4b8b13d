package main

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/goodput/goodput/bench"
	"github.com/goodput/goodput/bench/workload"
	"github.com/goodput/goodput/identity"
	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/config"
	"github.com/goodput/goodput/ratelimit"
	"github.com/goodput/goodput/sim"
	"github.com/goodput/goodput/slo"
)

// The demo's three tenants: one engine, three kinds of work, three SLO
// classes, three kinds of limit.
//
//   - acme sends chat (the chat shape) under the interactive class
//     (TTFT ≤ 500 ms, TPOT ≤ 50 ms, 99%), with generous limits.
//   - globex sends long generations (longgen) under the batch class
//     (E2E ≤ 30 s, 95%), with a tokens-per-minute limit.
//   - initech sends RAG prompts (rag) under the rag class (TTFT ≤ 2 s,
//     TPOT ≤ 100 ms, 95%), with a concurrency limit.
//
// Their shares of the offered request rate are fixed; the rate ramps over
// the run across the engine's predicted knee.
type demoTenant struct {
	name, shape, class string
	share              float64 // of the offered request rate

	limits  ratelimit.Limits
	reqs    []bench.Request
	offsets []time.Duration // planned send times from the start of the load
	key     string          // the tenant's gateway key: sent, never printed
}

// demoClasses are the demo's SLO classes.
func demoClasses() map[string]*slo.Class {
	ms := func(n int) cfgtypes.Duration { return cfgtypes.Duration(time.Duration(n) * time.Millisecond) }
	return map[string]*slo.Class{
		"interactive": {TTFT: ms(500), TPOT: ms(50), Objective: 0.99},
		"batch":       {E2E: ms(30_000), Objective: 0.95},
		"rag":         {TTFT: ms(2000), TPOT: ms(100), Objective: 0.95},
	}
}

func demoTenants() []*demoTenant {
	return []*demoTenant{
		{name: "acme", shape: "chat", class: "interactive", share: 0.5},
		{name: "globex", shape: "longgen", class: "batch", share: 0.2},
		{name: "initech", shape: "rag", class: "rag", share: 0.3},
	}
}

// demoPlan is everything the demo decided before it starts: the engine,
// its predicted knee for the tenants' mix, the load ramp and each tenant's
// requests, send times and limits.
type demoPlan struct {
	preset   string
	engine   sim.BatchConfig
	capacity sim.Capacity // for the mix's mean ISL and OSL
	from, to float64      // offered load at the start and at the end, × capacity.MaxRate
	duration time.Duration
	seed     int64
	tenants  []*demoTenant
}

// meanSample is how many requests of each shape estimate its mean ISL and
// OSL (the first requests the tenant will send).
const meanSample = 128

// newDemoPlan plans the run. The knee comes from the simulator's capacity
// formula (sim.BatchConfig.Capacity) for the mean ISL and OSL of the mix:
// under its step model the sustainable rate of a mix depends on the means
// only (each request costs a·ISL + b·(OSL−1) of step time and lives OSL
// steps), so the mix's knee is Capacity(mean ISL, mean OSL).
func newDemoPlan(preset string, duration time.Duration, from, to float64, seed int64) (*demoPlan, error) {
	bc, err := sim.Preset(preset)
	if err != nil {
		return nil, err
	}
	bc.Seed = seed
	p := &demoPlan{preset: preset, engine: bc, from: from, to: to, duration: duration, seed: seed, tenants: demoTenants()}
	var isl, osl float64
	works := make([]workload.Workload, len(p.tenants))
	for i, t := range p.tenants {
		w, err := workload.FromFlags(t.shape, "", "", seed+int64(i))
		if err != nil {
			return nil, err
		}
		works[i] = w
		mi, mo := meanLengths(w.Requests(meanSample))
		isl += t.share * mi
		osl += t.share * mo
	}
	p.capacity = bc.Capacity(int(math.Round(isl)), int(math.Round(osl)))
	if !(p.capacity.MaxRate > 0) {
		return nil, fmt.Errorf("the engine preset %s predicts no sustainable rate", preset)
	}
	for i, t := range p.tenants {
		r0, r1 := t.share*from*p.capacity.MaxRate, t.share*to*p.capacity.MaxRate
		t.offsets = rampOffsets(r0, r1, duration, seed+100+int64(i))
		if len(t.offsets) > 0 {
			t.reqs = works[i].Requests(len(t.offsets))
		}
	}
	p.setLimits()
	return p, nil
}

func meanLengths(reqs []bench.Request) (isl, osl float64) {
	if len(reqs) == 0 {
		return 0, 0
	}
	for _, r := range reqs {
		isl += float64(r.InputTokens)
		osl += float64(r.MaxTokens)
	}
	n := float64(len(reqs))
	return isl / n, osl / n
}

// rateAt is the total offered request rate at t from the start of the load.
func (p *demoPlan) rateAt(t time.Duration) float64 {
	return p.capacity.MaxRate * p.loadAt(t)
}

// loadAt is the offered load at t as a multiple of the knee.
func (p *demoPlan) loadAt(t time.Duration) float64 {
	f := min(max(t.Seconds()/p.duration.Seconds(), 0), 1)
	return p.from + (p.to-p.from)*f
}

// timeAtLoad is when the offered load reaches x × the knee; false when the
// ramp never does.
func (p *demoPlan) timeAtLoad(x float64) (time.Duration, bool) {
	if p.to == p.from {
		return 0, p.from >= x
	}
	f := (x - p.from) / (p.to - p.from)
	if f < 0 || f > 1 {
		return 0, f < 0 && p.from >= x
	}
	return time.Duration(f * float64(p.duration)), true
}

// rampOffsets returns the send times of a Poisson process whose rate grows
// linearly from r0 to r1 requests per second over d: unit-rate arrivals
// (workload.Arrivals) mapped through the inverse of the cumulative rate
// Λ(t) = r0·t + (r1−r0)·t²/(2d).
func rampOffsets(r0, r1 float64, d time.Duration, seed int64) []time.Duration {
	T := d.Seconds()
	if T <= 0 || r0 < 0 || r1 < 0 || r0+r1 <= 0 {
		return nil
	}
	total := T * (r0 + r1) / 2
	n := int(total + 6*math.Sqrt(total) + 10)
	a := (r1 - r0) / T
	var out []time.Duration
	for _, u := range workload.Arrivals(n, 1, 1, seed) {
		s := u.Seconds()
		// Λ(t) = s solved for t, in the form that is stable when a → 0.
		t := 2 * s / (r0 + math.Sqrt(max(r0*r0+2*a*s, 0)))
		if t >= T || math.IsNaN(t) {
			break
		}
		out = append(out, time.Duration(t*float64(time.Second)))
	}
	return out
}

// demoLimitAt is the offered load, × the knee, at which the tenants'
// limits are set to start refusing.
const demoLimitAt = 1.1

// setLimits derives each tenant's limits from the plan, so that they bite
// near the knee whatever the preset and duration:
//
//   - acme: generous (60,000 requests a minute, 1,024 at once): its
//     requests meet the engine's queue, not a limit.
//   - globex: a tokens-per-minute limit whose bucket (a minute's worth,
//     refilled at tpm/60 a second) runs dry when the offered load passes
//     demoLimitAt × the knee: tpm = the tokens its requests are charged up
//     to then (prompt bytes/4 + max_tokens, as the gateway charges them)
//     over (1 + that time in minutes).
//   - initech: a concurrency limit of its requests in flight at the knee
//     by Little's law: its rate there × (idle TTFT + OSL × the step time at
//     the knee), for its own mean ISL and OSL.
func (p *demoPlan) setLimits() {
	for _, t := range p.tenants {
		switch t.name {
		case "acme":
			t.limits = ratelimit.Limits{RPM: 60_000, MaxConcurrency: 1024}
		case "globex":
			at, ok := p.timeAtLoad(demoLimitAt)
			if !ok {
				at = p.duration
			}
			var charged float64
			for i, off := range t.offsets {
				if off > at {
					break
				}
				charged += float64(len(t.reqs[i].Prompt)/4 + t.reqs[i].MaxTokens)
			}
			tpm := int64(charged / (1 + at.Minutes()))
			// At least a few requests' worth, so that one request always fits.
			_, osl := meanLengths(t.reqs)
			t.limits = ratelimit.Limits{TPM: max(tpm, int64(4*osl), 8192)}
		case "initech":
			isl, osl := meanLengths(t.reqs)
			idle := p.engine.Capacity(int(isl), int(osl)).IdleTTFT
			e2e := idle.Seconds() + osl*p.capacity.StepTime.Seconds()
			conc := t.share * p.capacity.MaxRate * e2e
			t.limits = ratelimit.Limits{MaxConcurrency: max(int64(math.Ceil(conc)), 2)}
		}
	}
}

// gatewayConfig is the gateway's configuration for the demo: the SLO
// classes, the three tenants with their limits and a fresh gateway key
// each (identity.NewKey; only its hash is configured), in front of
// upstream.
func (p *demoPlan) gatewayConfig(upstream, listen, admin, logLevel string) (*config.Config, error) {
	cfg := &config.Config{
		Upstream: upstream, Listen: listen, AdminListen: admin, LogLevel: logLevel,
		SLO: slo.Config{SLOs: demoClasses()},
		// The demo waits for its own load before it stops the gateway;
		// what is left then is cut soon.
		ShutdownGrace: cfgtypes.Duration(2 * time.Second),
	}
	for _, t := range p.tenants {
		key, hash, err := identity.NewKey()
		if err != nil {
			return nil, err
		}
		t.key = key
		cfg.Tenants = append(cfg.Tenants, ratelimit.TenantConfig{
			Name: t.name, SLO: t.class, Limits: t.limits,
			Keys: []ratelimit.KeyConfig{{ID: "demo-" + t.name, SHA256: hash}},
		})
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// describe is the plan in a few lines, for the start of the run and the
// report: the engine, its knee, the ramp, each tenant.
func (p *demoPlan) describe() []string {
	c, e := p.capacity, p.engine
	lines := []string{
		fmt.Sprintf("engine: batching simulator, preset %s (max_num_seqs %d, max_num_batched_tokens %d, KV cache %d tokens, step = %v + %v·prefill tokens + %v·decoding requests)",
			p.preset, e.MaxNumSeqs, e.MaxNumBatchedTokens, e.KVCacheTokens, e.StepBase, e.PrefillPerToken, e.DecodePerSeq),
		fmt.Sprintf("predicted knee for the mix (mean ISL %d, OSL %d): %.2f requests/s, %.0f output tokens/s, %d running (limited by %s)",
			c.ISL, c.OSL, c.MaxRate, c.OutputTokensPerSec, c.MaxConcurrency, c.LimitedBy),
	}
	ramp := fmt.Sprintf("load: %.2f → %.2f requests/s over %s (%.1f× → %.1f× the knee)", p.rateAt(0), p.rateAt(p.duration), p.duration, p.from, p.to)
	if at, ok := p.timeAtLoad(1); ok && p.from < 1 {
		ramp += fmt.Sprintf("; crosses the knee at %s", at.Round(time.Second))
	}
	lines = append(lines, ramp)
	classes := demoClasses()
	for _, t := range p.tenants {
		lines = append(lines, fmt.Sprintf("tenant %-8s %-7s %3.0f%% of the load, %d requests; SLO %s %s; limits %s",
			t.name, t.shape, 100*t.share, len(t.offsets), t.class, classes[t.class], limitsText(t.limits)))
	}
	return lines
}

func limitsText(l ratelimit.Limits) string {
	var parts []string
	if l.RPM > 0 {
		parts = append(parts, fmt.Sprintf("rpm %d", l.RPM))
	}
	if l.TPM > 0 {
		parts = append(parts, fmt.Sprintf("tpm %d", l.TPM))
	}
	if l.MaxConcurrency > 0 {
		parts = append(parts, fmt.Sprintf("max_concurrency %d", l.MaxConcurrency))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
