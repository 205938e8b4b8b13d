package workload

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"

	"github.com/goodput/goodput/internal/stats"
	"github.com/goodput/goodput/sim"
)

// Dataset limits.
const (
	// MaxDatasetLine caps one JSONL line (one entry of a JSON array).
	MaxDatasetLine = 16 << 20
	// DefaultOutputTokens is MaxTokens for an entry that does not say
	// (vLLM's --custom-output-len default).
	DefaultOutputTokens = 256
	// replyTokensPerWord estimates the tokens of a ShareGPT reply from its
	// words: a typical ratio of English text in BPE tokenizers.
	replyTokensPerWord = 1.3
)

// entry is one prompt of a dataset.
type entry struct {
	prompt    string
	maxTokens int
}

// datasetLine is the union of the accepted line formats.
type datasetLine struct {
	// vLLM's custom dataset (--dataset-name custom).
	Prompt       *string `json:"prompt"`
	OutputTokens *int    `json:"output_tokens"`
	// ShareGPT.
	Conversations []struct {
		From  string `json:"from"`
		Value string `json:"value"`
	} `json:"conversations"`
}

// parseEntry reads one entry; where names it in errors.
func parseEntry(b []byte, where string) (entry, error) {
	var l datasetLine
	if err := json.Unmarshal(b, &l); err != nil {
		return entry{}, fmt.Errorf("%s: not a JSON object: %w", where, err)
	}
	switch {
	case l.Prompt != nil:
		e := entry{prompt: *l.Prompt, maxTokens: DefaultOutputTokens}
		if l.OutputTokens != nil {
			if *l.OutputTokens <= 0 {
				return entry{}, fmt.Errorf("%s: output_tokens must be positive, got %d", where, *l.OutputTokens)
			}
			e.maxTokens = *l.OutputTokens
		}
		if e.prompt == "" {
			return entry{}, fmt.Errorf("%s: empty prompt", where)
		}
		return e, nil
	case l.Conversations != nil:
		for i, t := range l.Conversations {
			if t.From != "human" && t.From != "user" {
				continue
			}
			if t.Value == "" {
				return entry{}, fmt.Errorf("%s: empty first human turn", where)
			}
			e := entry{prompt: t.Value, maxTokens: DefaultOutputTokens}
			if i+1 < len(l.Conversations) {
				if w := sim.Words(l.Conversations[i+1].Value); w > 0 {
					e.maxTokens = int(math.Ceil(replyTokensPerWord * float64(w)))
				}
			}
			return e, nil
		}
		return entry{}, fmt.Errorf("%s: no human turn in conversations", where)
	}
	return entry{}, fmt.Errorf(`%s: want a "prompt" (vLLM custom format) or "conversations" (ShareGPT)`, where)
}

// readDataset reads JSONL entries, or one JSON array of entries (the
// ShareGPT files are arrays).
func readDataset(r io.Reader) ([]entry, string, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	// Skip a byte-order mark and leading white space to see the first byte.
	for {
		b, err := br.Peek(1)
		if err != nil {
			if err == io.EOF {
				return nil, "", errors.New("empty dataset")
			}
			return nil, "", err
		}
		if b[0] == ' ' || b[0] == '\t' || b[0] == '\r' || b[0] == '\n' {
			_, _ = br.ReadByte()
			continue
		}
		if bom, _ := br.Peek(3); bytes.Equal(bom, []byte("\xef\xbb\xbf")) {
			_, _ = br.Discard(3)
			continue
		}
		if b[0] == '[' {
			es, err := readArray(br)
			return es, "JSON array", err
		}
		break
	}
	var out []entry
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 64<<10), MaxDatasetLine)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		e, err := parseEntry(b, fmt.Sprintf("line %d", line))
		if err != nil {
			return nil, "", err
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, "", fmt.Errorf("line %d: longer than %d MiB", line+1, MaxDatasetLine>>20)
		}
		return nil, "", fmt.Errorf("line %d: %w", line+1, err)
	}
	return out, "JSONL", nil
}

func readArray(r io.Reader) ([]entry, error) {
	dec := json.NewDecoder(r)
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	var out []entry
	for i := 0; dec.More(); i++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("entry %d of the array: %w", i, err)
		}
		if len(raw) > MaxDatasetLine {
			return nil, fmt.Errorf("entry %d of the array: longer than %d MiB", i, MaxDatasetLine>>20)
		}
		e, err := parseEntry(raw, fmt.Sprintf("entry %d of the array", i))
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("after entry %d of the array: %w", len(out), err)
	}
	return out, nil
}

// LoadDataset reads a dataset file (see the package documentation for the
// formats) into a workload that sends its prompts in a seeded random
// order.
func LoadDataset(path string, seed int64) (Workload, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	es, kind, err := readDataset(f)
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", path, err)
	}
	if len(es) == 0 {
		return nil, fmt.Errorf("dataset %s: no entries", path)
	}
	return newDatasetWorkload(path, kind, es, seed), nil
}

type datasetWorkload struct {
	name, kind string
	entries    []entry // in the seeded order
	describe   string
}

func newDatasetWorkload(name, kind string, es []entry, seed int64) *datasetWorkload {
	r := newRand(seed, streamDataset)
	r.Shuffle(len(es), func(i, j int) { es[i], es[j] = es[j], es[i] })
	words := make([]int, len(es))
	outs := make([]int, len(es))
	for i, e := range es {
		words[i], outs[i] = sim.Words(e.prompt), e.maxTokens
	}
	slices.Sort(words)
	slices.Sort(outs)
	// numpy's percentiles, as every other figure bench prints.
	q := func(v []int, p float64) string {
		x := stats.QuantileAt(len(v), func(k int) float64 { return float64(v[k]) }, p)
		return strconv.FormatFloat(math.Round(x*10)/10, 'f', -1, 64)
	}
	d := fmt.Sprintf("dataset %s (%s, %d prompts): prompt words median %s p90 %s, max_tokens median %s p90 %s",
		name, kind, len(es), q(words, 0.5), q(words, 0.9), q(outs, 0.5), q(outs, 0.9))
	return &datasetWorkload{name: name, kind: kind, entries: es, describe: d}
}

// Requests returns the first n entries of the seeded order, starting over
// when n is larger than the dataset. InputTokens is 0: the prompt's length
// in the engine's tokens is not known without its tokenizer.
func (w *datasetWorkload) Requests(n int) []Request {
	if n <= 0 {
		return nil
	}
	out := make([]Request, n)
	for i := range out {
		e := w.entries[i%len(w.entries)]
		out[i] = Request{Prompt: e.prompt, MaxTokens: e.maxTokens}
	}
	return out
}

func (w *datasetWorkload) Rate() (float64, float64, bool) { return 0, 0, false }
func (w *datasetWorkload) Describe() string               { return w.describe }
func (w *datasetWorkload) Synth() *Synth                  { return nil }
