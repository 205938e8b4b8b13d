package meter

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// maxFuzzInput bounds fuzz inputs: larger ones make the fuzzer spend its
// time minimizing rather than exploring.
const maxFuzzInput = 4 << 10

// addFixtureSeeds adds every recorded stream as a seed (the first
// maxFuzzInput bytes of it).
func addFixtureSeeds(f *testing.F, add func([]byte)) {
	f.Helper()
	kinds := provenance(f)
	for file := range kinds {
		b, err := os.ReadFile(filepath.Join(fixturesDir, filepath.FromSlash(file)))
		if err != nil {
			f.Fatalf("seed %s: %v", file, err)
		}
		add(b[:min(len(b), maxFuzzInput)])
	}
	for _, s := range []string{
		"", "\r", "\n", "\r\n\r\n", "data: a\r", "data: a\r\n\r", "data: a\r\rdata: b\r\r",
		"\xEF\xBB\xBF\ndata: x\n\n", ": c\n\nevent: error\ndata: {\"error\":{\"message\":\"m\"}}\n\n",
		"data:{\"choices\":[]}\n\ndata: [DONE]", vllmContinuous,
	} {
		add([]byte(s))
	}
}

// FuzzSSEFramer: the framer never panics, Raw+Rest reproduces the input,
// and the events do not depend on where the input is cut.
func FuzzSSEFramer(f *testing.F) {
	addFixtureSeeds(f, func(b []byte) { f.Add(b, uint16(len(b)/2), uint8(0)) })
	f.Fuzz(func(t *testing.T, input []byte, cut uint16, maxSel uint8) {
		if len(input) > maxFuzzInput {
			t.Skip()
		}
		maxSize := []int{0, 16, 64, 300}[maxSel%4]
		whole := frameSSE(input, nil, maxSize)
		if got := whole.concat(); !bytes.Equal(got, input) {
			t.Fatalf("Raw+Rest = %q, want %q", got, input)
		}
		lim := limit(maxSize)
		for i, ev := range whole.events {
			if len(ev.Raw) == 0 || (lim > 0 && len(ev.Raw) > lim) {
				t.Fatalf("event %d: Raw of %d bytes (max %d)", i, len(ev.Raw), lim)
			}
			if last := ev.Raw[len(ev.Raw)-1]; !ev.Unterminated && last != '\n' && last != '\r' {
				t.Fatalf("event %d: terminated event ends with %q", i, last)
			}
			if ev.Unterminated && i != len(whole.events)-1 {
				t.Fatalf("event %d: unterminated event is not the last", i)
			}
		}
		c := int(cut) % (len(input) + 1)
		split := frameSSE(input, []int{c}, maxSize)
		if d := diffFramed(split, whole); d != "" {
			t.Fatalf("cut at %d: %s", c, d)
		}
		if whole.err == nil && !bytes.Equal(split.concat(), input) {
			t.Fatalf("cut at %d: Raw+Rest differs from the input", c)
		}
		if len(input) <= 512 {
			if d := diffFramed(frameSSE(input, everyByte(len(input)), maxSize), whole); d != "" {
				t.Fatalf("one byte at a time: %s", d)
			}
		}
		// SkipLarge: the pieces and events are still the input, and the
		// events that are not pieces do not depend on where it is cut.
		if maxSize > 0 {
			skip := func(cuts []int) framed {
				return frameWith(&SSEFramer{MaxEventSize: maxSize, SkipLarge: true}, input, cuts)
			}
			sw, sc := skip(nil), skip([]int{c})
			if sw.err != nil || !bytes.Equal(sw.concat(), input) || !bytes.Equal(sc.concat(), input) {
				t.Fatalf("SkipLarge: err %v; Raw+Rest differs from the input", sw.err)
			}
			if d := diffFramed(unskipped(sc), unskipped(sw)); d != "" {
				t.Fatalf("SkipLarge, cut at %d: %s", c, d)
			}
		}
		nd := frameNDJSON(input, nil, maxSize)
		if got := nd.concat(); !bytes.Equal(got, input) {
			t.Fatalf("NDJSON Raw+Rest = %q, want %q", got, input)
		}
		if d := diffFramed(frameNDJSON(input, []int{c}, maxSize), nd); d != "" {
			t.Fatalf("NDJSON cut at %d: %s", c, d)
		}
	})
}

// FuzzChatParser: the parsers and the Meter never panic, and what they
// report is consistent.
func FuzzChatParser(f *testing.F) {
	addFixtureSeeds(f, func(b []byte) { f.Add(b) })
	for _, s := range []string{
		`{"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":1e3,"completion_tokens":-1}}`,
		`{"error":{"message":1}}`, `{"object":"error"}`, `{"choices":null,"usage":[]}`,
	} {
		f.Add([]byte("data: " + s + "\n\n"))
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		if len(input) > maxFuzzInput {
			t.Skip()
		}
		var (
			fr   SSEFramer
			ev   Event
			info EventInfo
			m    Meter
			rec  Record
		)
		parsers := []Parser{newParser(APIChat), newParser(APICompletions), newParser(APIResponses), newParser(APIMessages)}
		m.Start(testT0)
		check := func(p Parser, ev *Event, k int) {
			if err := p.Parse(ev, &info); err != nil {
				return
			}
			if info.UsageOnly && (info.Token || !info.HasUsage) {
				t.Fatalf("UsageOnly with Token %v HasUsage %v", info.Token, info.HasUsage)
			}
			if info.Content && !info.Token {
				t.Fatalf("Content without Token: %+v", info)
			}
			if !info.HasUsage && (info.PromptTokens != Unknown || info.CompletionTokens != Unknown) {
				t.Fatalf("counts without usage: %+v", info)
			}
			m.Observe(&info, testT0.Add(time.Duration(k)*time.Millisecond))
		}
		fr.Feed(input)
		for k := 0; ; k++ {
			ok, err := fr.Flush(&ev)
			if err != nil || !ok {
				break
			}
			for _, p := range parsers {
				check(p, &ev, k)
			}
		}
		// The input as the data of one event, and as a response body.
		raw := Event{Data: input, HasData: true}
		for _, p := range parsers {
			check(p, &raw, 0)
		}
		if strings.HasPrefix(string(input), "{") {
			raw.Type = []byte("error")
			check(parsers[0], &raw, 0)
		}
		_ = ParseResponseBody(APIChat, input, 1, &info)
		_ = ParseResponseBody(APICompletions, input, 1, &info)
		m.Finish(&rec)
		if rec.Events < 0 || len(rec.ITL) != max(rec.Events-1, 0) {
			t.Fatalf("Events %d with %d gaps", rec.Events, len(rec.ITL))
		}
		if rec.TPOT != Unknown && (rec.OSL <= 1 || rec.TPOT < 0) {
			t.Fatalf("TPOT %v with OSL %d", rec.TPOT, rec.OSL)
		}
		_ = rec.AppendJSON(nil)
	})
}

// unskipped is fr without its skipped pieces (and its rest).
func unskipped(fr framed) framed {
	var out framed
	for _, ev := range fr.events {
		if !ev.Skipped {
			out.events = append(out.events, ev)
		}
	}
	return out
}
