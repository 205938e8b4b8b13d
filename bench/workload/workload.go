package workload

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Request is one request to send: what to ask, not when (see Arrivals).
type Request struct {
	// Prompt is the text of the one user message (chat) or the prompt
	// (completions).
	Prompt string
	// InputTokens is the intended prompt length in the engine's tokens, as
	// Synth aimed for; 0 when unknown (a dataset's prompts).
	InputTokens int
	// MaxTokens is the number of output tokens to ask for (sent as
	// max_tokens with ignore_eos:true).
	MaxTokens int
}

// Workload is what bench sends: a source of requests and, for a profile,
// its own arrival process.
type Workload interface {
	// Requests returns n requests. The same seed, calibration and n give
	// the same requests, whatever was asked of the workload before.
	Requests(n int) []Request
	// Rate returns the arrival rate (requests per second) and burstiness
	// (gamma shape k) a profile carries; ok is false for presets and
	// datasets, which leave the arrival process to the caller.
	Rate() (perSecond, burstiness float64, ok bool)
	// Describe is one line for a report's label.
	Describe() string
	// Synth returns the synthesizer the workload writes its prompts with,
	// for Calibrate before Requests; nil for a dataset, whose prompts are
	// given.
	Synth() *Synth
}

// DefaultShape is the preset FromFlags uses when nothing is set.
const DefaultShape = "chat"

// FromFlags returns the workload named by at most one of shape (a preset:
// chat, rag, longgen, mixed), profile (a goodput.profile document: a file
// or an http(s) URL, with an optional #tenant or #tenant/model selector)
// and dataset (a JSONL file of prompts). With none set it is the chat
// preset. seed makes everything the workload generates deterministic.
func FromFlags(shape, profile, dataset string, seed int64) (Workload, error) {
	set := 0
	for _, v := range []string{shape, profile, dataset} {
		if v != "" {
			set++
		}
	}
	if set > 1 {
		return nil, errors.New("choose one workload: a shape, a profile or a dataset (more than one is set)")
	}
	switch {
	case profile != "":
		return LoadProfile(profile, seed)
	case dataset != "":
		return LoadDataset(dataset, seed)
	case shape == "":
		shape = DefaultShape
	}
	p, ok := presetByName(shape)
	if !ok {
		return nil, fmt.Errorf("unknown workload shape %q (want %s)", shape, strings.Join(ShapeNames(), ", "))
	}
	return newPresetWorkload(p, seed), nil
}

// Arrivals returns the send times of n requests as offsets from the start:
// the first at 0, then gaps drawn from a gamma distribution of shape
// burstiness (k) and scale 1/(k·rate), so that the mean rate is rate per
// second and k = mean²/variance of the gaps, like vLLM bench's
// --burstiness. k = 1 is a Poisson process, k < 1 burstier, k > 1 more
// regular, k = +Inf evenly spaced. A rate of +Inf (or not positive, or NaN)
// sends everything at once; a burstiness that is not positive or NaN is
// taken as 1. Deterministic for the seed.
func Arrivals(n int, rate, burstiness float64, seed int64) []time.Duration {
	if n <= 0 {
		return nil
	}
	out := make([]time.Duration, n)
	for i, t := range sumsOfGaps(n-1, rate, burstiness, seed) {
		out[i+1] = seconds(t)
	}
	return out
}

// Schedule returns the send times of n requests as vLLM's bench serve plans
// them, as offsets from the run's start: n gaps drawn as Arrivals draws
// them, the first before the first request, their running sums scaled so
// that the last request goes at exactly n/rate seconds. The scaling holds
// the offered rate at rate whatever the seed (the sums alone miss it by a
// few percent at a few dozen requests); the gaps keep their shape. A rate
// of +Inf (or not positive, or NaN, or above maxRate) sends everything at
// once. Deterministic for the seed.
func Schedule(n int, rate, burstiness float64, seed int64) []time.Duration {
	if n <= 0 {
		return nil
	}
	out := make([]time.Duration, n)
	sums := sumsOfGaps(n, rate, burstiness, seed)
	if len(sums) == 0 {
		return out
	}
	scale := 1.0
	if t := sums[n-1]; t > 0 {
		scale = float64(n) / rate / t
	}
	for i, s := range sums {
		out[i] = seconds(s * scale)
	}
	return out
}

// sumsOfGaps returns the running sums (seconds) of n gaps drawn from the
// gamma distribution of shape burstiness (not positive or NaN: 1; above
// maxShape: constant) and mean 1/rate; none for a rate that sends
// everything at once (+Inf, not positive, NaN, above maxRate).
func sumsOfGaps(n int, rate, burstiness float64, seed int64) []float64 {
	if n <= 0 || !(rate > 0) || rate > maxRate {
		return nil
	}
	k := burstiness
	if !(k > 0) {
		k = 1
	}
	r := newRand(seed, streamArrivals)
	sums := make([]float64, n)
	t := 0.0
	for i := range sums {
		if k > maxShape {
			t += 1 / rate
		} else {
			t += gamma(r, k) / (k * rate)
		}
		sums[i] = t
	}
	return sums
}

const (
	// maxRate: above it, a rate is treated as +Inf (gaps under a
	// nanosecond).
	maxRate = 1e9
	// maxShape: above it, gaps are constant (the gamma distribution's
	// spread is already below 0.1% of its mean).
	maxShape = 1e6
)

// seconds converts t seconds to a Duration, saturating.
func seconds(t float64) time.Duration {
	const maxSec = float64(1<<63-1) / 1e9
	if t >= maxSec {
		return 1<<63 - 1
	}
	return time.Duration(t * 1e9)
}
