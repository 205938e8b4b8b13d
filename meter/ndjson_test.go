package meter

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"testing"
)

func frameNDJSON(input []byte, cuts []int, max int) framed {
	return frameWith(&SSEFramer{NDJSON: true, MaxEventSize: max}, input, cuts)
}

func checkNDJSONSplits(t *testing.T, input []byte, max int, want framed) {
	t.Helper()
	for i := -1; i <= len(input); i++ {
		var cuts []int
		if i >= 0 {
			cuts = []int{i}
		}
		if d := diffFramed(frameNDJSON(input, cuts, max), want); d != "" {
			t.Fatalf("input %q cut at %d: %s", input, i, d)
		}
	}
	if d := diffFramed(frameNDJSON(input, everyByte(len(input)), max), want); d != "" {
		t.Fatalf("input %q one byte at a time: %s", input, d)
	}
	if want.err == nil {
		if got := frameNDJSON(input, nil, max).concat(); !bytes.Equal(got, input) {
			t.Fatalf("Raw+Rest = %q, want %q", got, input)
		}
	}
}

func TestNDJSONFramerHandMade(t *testing.T) {
	// Hand-made: one line per event; CRLF; blank lines; last line without "\n".
	line := func(raw, data string) Event {
		return Event{Raw: []byte(raw), Data: []byte(data), HasData: true}
	}
	input := "{\"a\":1}\n{\"b\":2}\r\n\n  \r\n{\"c\":3}\n{\"d\":4}"
	last := line("{\"d\":4}", "{\"d\":4}")
	last.Unterminated = true
	checkNDJSONSplits(t, []byte(input), 0, framed{events: []Event{
		line("{\"a\":1}\n", "{\"a\":1}"),
		line("{\"b\":2}\r\n", "{\"b\":2}"),
		line("\n  \r\n{\"c\":3}\n", "{\"c\":3}"),
		last,
	}})
	checkNDJSONSplits(t, []byte("{}\n\n \n"), 0, framed{events: []Event{line("{}\n", "{}")}, rest: []byte("\n \n")})
	checkNDJSONSplits(t, []byte(""), 0, framed{})

	// Over the maximum size.
	fr := frameNDJSON([]byte("{}\n{\"long\":\"0123456789\"}\n{}\n"), nil, 10)
	if !errors.Is(fr.err, ErrEventTooLarge) || len(fr.events) != 1 {
		t.Fatalf("err %v, %d events", fr.err, len(fr.events))
	}
	checkNDJSONSplits(t, []byte("{}\n{\"long\":\"0123456789\"}\n{}\n"), 10, framed{events: []Event{line("{}\n", "{}")}, err: ErrEventTooLarge})
}

func TestNDJSONFramerOllamaFixtures(t *testing.T) {
	// Line counts from `wc -l` on each file (every file ends with "\n").
	want := map[string]int{
		"ollama/lcgo-api-chat-stream-done-reason-length.ndjson": 51,
		"ollama/lcgo-api-chat-stream-format-json.ndjson":        9,
		"ollama/lcgo-api-chat-stream-gemma3.ndjson":             22,
		"ollama/lcgo-api-generate-stream-gemma3.ndjson":         22,
		"ollama/oll-api-chat-stream-llama3-2024.ndjson":         50,
		"ollama/oll-api-generate-stream-llama3-2024.ndjson":     71,
	}
	kinds := provenance(t)
	for file, n := range want {
		if kinds[file] == "" {
			t.Errorf("%s not in PROVENANCE.tsv", file)
			continue
		}
		input := readFixture(t, file)
		whole := frameNDJSON(input, nil, 0)
		if whole.err != nil || len(whole.events) != n || len(whole.rest) != 0 {
			t.Errorf("%s: %d events (err %v, rest %q), want %d", file, len(whole.events), whole.err, whole.rest, n)
			continue
		}
		for i, ev := range whole.events {
			if !json.Valid(ev.Data) || ev.Unterminated {
				t.Errorf("%s: event %d is not one JSON line: %q", file, i, ev.Data)
			}
		}
		if d := diffFramed(frameNDJSON(input, everyByte(len(input)), 0), whole); d != "" {
			t.Errorf("%s one byte at a time: %s", file, d)
		}
		rng := rand.New(rand.NewPCG(5, uint64(len(input))))
		for k := 0; k < 10; k++ {
			cuts := randomCuts(rng, len(input))
			if d := diffFramed(frameNDJSON(input, cuts, 0), whole); d != "" {
				t.Errorf("%s cut at %v: %s", file, cuts, d)
			}
		}
	}
}
