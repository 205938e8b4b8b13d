package sim

import (
	"unicode"
	"unicode/utf8"
)

// MessageOverheadTokens is the number of prompt tokens the simulator adds
// for each chat message on top of the words of its text (the role and the
// chat template's framing in a real tokenizer).
const MessageOverheadTokens = 4

// Words counts the whitespace-separated words of s, exactly as
// len(strings.Fields(s)) would, without allocating.
func Words(s string) int {
	n := 0
	inWord := false
	for i := 0; i < len(s); {
		c := s[i]
		var space bool
		if c < utf8.RuneSelf {
			space = asciiSpace[c]
			i++
		} else {
			r, size := utf8.DecodeRuneInString(s[i:])
			space = unicode.IsSpace(r)
			i += size
		}
		if space {
			inWord = false
		} else if !inWord {
			inWord = true
			n++
		}
	}
	return n
}

var asciiSpace = [utf8.RuneSelf]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// CompletionPromptTokens returns the prompt token count the simulator
// reports for a /v1/completions request with a text prompt: one
// beginning-of-sequence token plus Words(prompt). A prompt given as token
// ids counts one token per id.
func CompletionPromptTokens(prompt string) int {
	return 1 + Words(prompt)
}

// vocabulary holds the output words. They are plain ASCII letters so that
// they never need JSON escaping.
var vocabulary = [...]string{
	"the", "model", "answers", "with", "simulated", "tokens", "that", "arrive",
	"on", "a", "fixed", "schedule", "so", "every", "gap", "is",
	"known", "in", "advance", "and", "each", "test", "can", "check",
	"time", "to", "first", "token", "inter", "latency", "output", "length",
	"for", "this", "request", "stream", "of", "words", "from", "an",
	"engine", "simulator", "serving", "chat", "completions", "like", "vLLM", "does",
	"when", "it", "decodes", "one", "step", "after", "another", "until",
	"done", "or", "limit", "reached", "goodput", "measures", "useful", "work",
}

// spaced holds " "+word for every vocabulary word, so that building a token's
// text never allocates.
var spaced = func() (s [len(vocabulary)]string) {
	for i, w := range vocabulary {
		s[i] = " " + w
	}
	return s
}()

// mix64 is the splitmix64 finaliser: a cheap, well-distributed hash.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// TokenText returns the text of output token i (1-based) for the given seed:
// a vocabulary word chosen by hashing (seed, i), with a leading space for
// every token after the first. Output depends only on the seed and the
// position, never on the prompt, so every response of a simulator starts
// with the same words.
func TokenText(seed int64, i int) string {
	w := mix64(uint64(seed)^mix64(uint64(i))) % uint64(len(vocabulary))
	if i <= 1 {
		return vocabulary[w]
	}
	return spaced[w]
}
