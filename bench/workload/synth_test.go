package workload

import (
	"math"
	"strings"
	"testing"

	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/sim"
)

// tokenizer counts a prompt's tokens as an engine would report them.
type tokenizer struct {
	name  string
	count func(text string) int
	// strictFrom: the 2% bound holds from this length on (shorter texts
	// are measured and logged). Where every word costs the same, from 0.
	strictFrom int
}

var tokenizers = []tokenizer{
	// The simulator: words + the per-message overhead of one chat message.
	{"simulator chat", func(s string) int { return sim.Words(s) + sim.MessageOverheadTokens }, 0},
	// The simulator's completions: words + a beginning-of-sequence token.
	{"simulator completion", sim.CompletionPromptTokens, 0},
	// Another ratio and overhead: 1.3 tokens per word, 7 of template.
	{"1.3/word+7", func(s string) int { return int(math.Round(1.3*float64(sim.Words(s)))) + 7 }, 0},
	// Words cost differently: 1 token up to 4 letters, 2 above, plus 11.
	// Not a real case for Synth's words (each is one token in real BPE
	// vocabularies), but it shows what the blocks of every word once buy:
	// only a text's partial blocks vary.
	{"by word length+11", func(s string) int {
		n := 11
		for _, w := range strings.Fields(s) {
			n += 1 + len(w)/5
		}
		return n
	}, 1000},
}

// After calibrating on the probes, Text(n) is within 2% (or 2 tokens) of n
// by each tokenizer, from a few tokens to tens of thousands.
func TestSynthCalibration(t *testing.T) {
	for _, tk := range tokenizers {
		s := NewSynth(11)
		var samples []Sample
		for _, txt := range s.Probes() {
			samples = append(samples, Sample{Text: txt, Tokens: tk.count(txt)})
		}
		if !math.IsNaN(s.Error()) {
			t.Errorf("%s: Error before Calibrate = %v, want NaN", tk.name, s.Error())
		}
		if err := s.Calibrate(samples); err != nil {
			t.Fatalf("%s: %v", tk.name, err)
		}
		a, b := s.Model()
		worst := 0.0
		for _, n := range []int{16, 50, 100, 333, 1000, 4096, 20000} {
			for range 5 {
				got := tk.count(s.Text(n))
				miss := math.Abs(float64(got - n))
				worst = max(worst, miss/float64(n))
				if n >= tk.strictFrom && miss > max(2, 0.02*float64(n)) {
					t.Errorf("%s: Text(%d) is %d tokens", tk.name, n, got)
				}
			}
		}
		t.Logf("%s: fitted %.4f tokens/word + %.2f, fit error %.4f%%, worst Text miss %.3f%%", tk.name, a, b, 100*s.Error(), 100*worst)
	}
}

func TestSynthCalibrateErrors(t *testing.T) {
	s := NewSynth(1)
	x := s.Text(100)
	for _, c := range []struct {
		samples []Sample
		want    string
	}{
		{nil, "two samples of different lengths"},
		{[]Sample{{x, 104}}, "two samples of different lengths"},
		{[]Sample{{x, 104}, {s.Text(100), 104}}, "two samples of different lengths"},
		{[]Sample{{x, 104}, {"", 5}}, "sample 1"},
		{[]Sample{{x, 0}, {s.Text(10), 5}}, "sample 0"},
		{[]Sample{{x, 10}, {s.Text(1000), 5}}, "do not grow"},
	} {
		if err := s.Calibrate(c.samples); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", len(c.samples), err, c.want)
		}
	}
	if a, b := s.Model(); a != 1 || b != 0 {
		t.Errorf("a failed Calibrate changed the model to %v, %v", a, b)
	}
}

// Texts are deterministic for the seed, differ from call to call, and do
// not share a prefix.
func TestSynthText(t *testing.T) {
	a, b := NewSynth(5), NewSynth(5)
	seen := map[string]bool{}
	for i := range 200 {
		x, y := a.Text(40), b.Text(40)
		if x != y {
			t.Fatalf("call %d: same seed, different text", i)
		}
		if n := sim.Words(x); n != 40 {
			t.Fatalf("Text(40) has %d words", n)
		}
		prefix := strings.Join(strings.Fields(x)[:16], " ")
		if seen[prefix] {
			t.Fatalf("call %d: 16-word prefix repeated: %q", i, prefix)
		}
		seen[prefix] = true
	}
	if x := NewSynth(6).Text(40); x == NewSynth(5).Text(40) {
		t.Error("seeds 5 and 6 give the same text")
	}
	if n := sim.Words(a.Text(0)); n != 1 {
		t.Errorf("Text(0) has %d words, want 1", n)
	}
	if x := a.Text(100_000); sim.Words(x) != 100_000 || strings.HasPrefix(x, " ") || strings.HasSuffix(x, " ") {
		t.Errorf("Text(100000): %d words", sim.Words(x))
	}
}

// Text allocates nothing once the corpus is built.
func TestSynthTextAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	s := NewSynth(1)
	_ = s.Text(5000)
	if n := testenv.AllocsPerRun(200, func() { _ = s.Text(3000) }); n != 0 {
		t.Errorf("Text: %v allocations per call", n)
	}
}

func BenchmarkSynthText(b *testing.B) {
	s := NewSynth(1)
	_ = s.Text(4096)
	b.ReportAllocs()
	for b.Loop() {
		_ = s.Text(4096)
	}
}

func BenchmarkRequests1000Rag(b *testing.B) {
	w, _ := FromFlags("rag", "", "", 1)
	_ = w.Requests(1)
	b.ReportAllocs()
	for b.Loop() {
		_ = w.Requests(1000)
	}
}
