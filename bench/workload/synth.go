package workload

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/goodput/goodput/sim"
)

// Sample is a prompt and the number of prompt tokens the engine reported
// for it (usage.prompt_tokens), for Synth.Calibrate.
type Sample struct {
	Text   string
	Tokens int
}

// Synth writes prompt text meant to be a given number of engine tokens,
// without the engine's tokenizer: common English words separated by single
// spaces, which most BPE tokenizers count as about one token each. The
// engine's count is modelled as perWord·words + overhead (overhead: the
// chat template or the beginning-of-sequence token); Calibrate fits both
// from the engine's own counts. Until then the model is one token per word
// and no overhead.
//
// The text of a prompt is a slice of one long corpus, so Text allocates
// nothing once the corpus is long enough; every prompt starts at a
// different place in the corpus, so prompts do not share a prefix (an
// engine's prefix cache does not shortcut them).
//
// Safe for concurrent use.
type Synth struct {
	seed  uint64
	calls atomic.Uint64

	mu       sync.Mutex
	corpus   string   // words, each followed by one space
	starts   []uint32 // byte offset of each word in corpus, and one past the last
	perWord  float64
	overhead float64
	fitErr   float64
}

// NewSynth returns a synthesizer whose text depends only on seed (and on
// the calibration, which sets how many words a token count takes).
func NewSynth(seed int64) *Synth {
	return &Synth{seed: mix64(uint64(seed) ^ streamText), perWord: 1, fitErr: math.NaN()}
}

// Text returns prompt text meant to be tokens engine tokens (at least one
// word). Successive calls return different text.
func (s *Synth) Text(tokens int) string {
	c := s.calls.Add(1) - 1
	return s.textAt(mix64(s.seed^0x5bd1e995), c, tokens)
}

// textAt returns the text for tokens starting at the i-th place of a
// sequence of places keyed by key: the places of one sequence are distinct
// for the first startPlaces values of i.
func (s *Synth) textAt(key, i uint64, tokens int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.wordsFor(tokens)
	stride := mix64(key) | 1 // odd: i·stride mod 2^k is a permutation
	start := int((mix64(key^1) + i*stride) % startPlaces)
	s.ensure(start + w)
	return s.corpus[s.starts[start] : s.starts[start+w]-1]
}

// Words returns how many words Text(tokens) writes under the current
// calibration.
func (s *Synth) Words(tokens int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wordsFor(tokens)
}

func (s *Synth) wordsFor(tokens int) int {
	w := math.Round((float64(tokens) - s.overhead) / s.perWord)
	switch {
	case !(w >= 1):
		return 1
	case w > maxWords:
		return maxWords
	}
	return int(w)
}

const (
	// startPlaces is how many places in the corpus a prompt may start at.
	startPlaces = 1 << 18
	// maxWords caps a prompt: 2^21 words (about 10 MiB of text), beyond
	// the context window of the engines served today.
	maxWords = 1 << 21
	// blockWords: the corpus is made of blocks, each a random order of
	// every vocabulary word once.
	blockWords = len(vocabulary)
)

// ensure grows the corpus to at least n words. Call with s.mu held.
func (s *Synth) ensure(n int) {
	have := len(s.starts) - 1
	if have >= n {
		return
	}
	want := max(n, 2*have, startPlaces+4096)
	want = (want + blockWords - 1) / blockWords * blockWords
	if have < 0 {
		have = 0
		s.starts = append(s.starts, 0)
	}
	size := len(s.corpus)
	for b := have / blockWords; b < want/blockWords; b++ {
		size += blockBytes
	}
	buf := make([]byte, 0, size)
	buf = append(buf, s.corpus...)
	starts := make([]uint32, len(s.starts), want+1)
	copy(starts, s.starts)
	var perm [blockWords]uint8
	for b := have / blockWords; b < want/blockWords; b++ {
		for i := range perm {
			perm[i] = uint8(i)
		}
		x := mix64(s.seed ^ uint64(b)*0x9e3779b97f4a7c15)
		for i := blockWords - 1; i > 0; i-- {
			x = mix64(x)
			j := int(x % uint64(i+1))
			perm[i], perm[j] = perm[j], perm[i]
		}
		for _, p := range perm {
			buf = append(buf, vocabulary[p]...)
			buf = append(buf, ' ')
			starts = append(starts, uint32(len(buf)))
		}
	}
	s.corpus = string(buf)
	s.starts = starts
}

// ProbeTokens are the lengths of Probes: short enough for any engine's
// context window, spread enough to separate the per-word ratio from the
// overhead, three so that Error measures the fit.
var ProbeTokens = [...]int{16, 128, 1024}

// Probes returns calibration texts, one per ProbeTokens length: send each
// (with max_tokens 1), then Calibrate with the engine's prompt_tokens.
func (s *Synth) Probes() []string {
	out := make([]string, len(ProbeTokens))
	for i, n := range ProbeTokens {
		out[i] = s.Text(n)
	}
	return out
}

// Calibrate fits the model tokens = perWord·words + overhead by least
// squares to the engine's counts of at least two samples of different
// lengths (samples are best Synth's own text: other text has another
// ratio). On error the model does not change.
func (s *Synth) Calibrate(samples []Sample) error {
	var n, sw, st float64
	distinct := false
	for i, sm := range samples {
		w := sim.Words(sm.Text)
		if w == 0 || sm.Tokens <= 0 {
			return fmt.Errorf("calibration sample %d: needs text and a positive token count (got %d words, %d tokens)", i, w, sm.Tokens)
		}
		if i > 0 && w != sim.Words(samples[0].Text) {
			distinct = true
		}
		n++
		sw += float64(w)
		st += float64(sm.Tokens)
	}
	if !distinct {
		return errors.New("calibration needs at least two samples of different lengths")
	}
	mw, mt := sw/n, st/n
	var sxx, sxy float64
	for _, sm := range samples {
		dw := float64(sim.Words(sm.Text)) - mw
		sxx += dw * dw
		sxy += dw * (float64(sm.Tokens) - mt)
	}
	a := sxy / sxx
	b := mt - a*mw
	if !(a > 0) || math.IsInf(a, 0) {
		return fmt.Errorf("calibration: the token counts do not grow with the text (%.3g tokens per word)", a)
	}
	worst := 0.0
	for _, sm := range samples {
		pred := a*float64(sim.Words(sm.Text)) + b
		worst = max(worst, math.Abs(pred-float64(sm.Tokens))/float64(sm.Tokens))
	}
	s.mu.Lock()
	s.perWord, s.overhead, s.fitErr = a, b, worst
	s.mu.Unlock()
	return nil
}

// Model returns the current model: engine tokens per word and the fixed
// overhead in tokens.
func (s *Synth) Model() (perWord, overhead float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.perWord, s.overhead
}

// Error returns how close the last Calibrate got: the largest relative
// difference between the fitted model and the engine's count over its
// samples (0.01 = 1%); NaN before a successful Calibrate. A line through
// two samples fits them exactly (Error 0): calibrate on three or more
// lengths to measure the fit.
func (s *Synth) Error() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fitErr
}

// vocabulary: 128 common lowercase English words, each one token (with its
// leading space) in the usual BPE vocabularies (GPT-2/cl100k-style, Llama 3,
// Qwen, Mistral), so text made of them has a stable token count per word.
var vocabulary = [...]string{
	"the", "of", "and", "to", "in", "is", "that", "for",
	"it", "with", "as", "was", "on", "be", "at", "by",
	"this", "had", "not", "are", "but", "from", "or", "have",
	"an", "they", "which", "one", "you", "were", "all", "we",
	"her", "she", "there", "would", "their", "will", "when", "who",
	"him", "been", "has", "more", "if", "no", "out", "so",
	"said", "what", "up", "its", "about", "into", "than", "them",
	"can", "only", "other", "new", "some", "could", "time", "these",
	"two", "may", "then", "do", "first", "any", "my", "now",
	"such", "like", "our", "over", "man", "me", "even", "most",
	"made", "after", "also", "did", "many", "before", "must", "through",
	"back", "years", "where", "much", "your", "way", "well", "down",
	"should", "because", "each", "just", "those", "people", "how", "too",
	"little", "state", "good", "very", "make", "world", "still", "own",
	"see", "men", "work", "long", "get", "here", "between", "both",
	"life", "being", "under", "never", "day", "same", "another", "know",
}

// blockBytes is the length of one corpus block: every word and a space.
var blockBytes = func() int {
	n := 0
	for _, w := range vocabulary {
		n += len(w) + 1
	}
	return n
}()
