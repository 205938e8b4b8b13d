//go:build !race

package meter

import (
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/testenv"
)

// The race detector adds allocations of its own, so the allocation tests run
// only without -race.

// raceEnabled: see race_on_test.go.
const raceEnabled = false

// meterStream runs framer, parser and meter over input fed in reads of
// `read` bytes, reusing everything it is given (the proxy keeps ev and info
// per request too: passed to an interface method, they would escape).
func meterStream(input []byte, read int, f *SSEFramer, p Parser, m *Meter, rec *Record, ev *Event, info *EventInfo) int {
	n := 0
	f.Reset()
	p.Reset()
	m.Start(testT0)
	t := testT0
	for off := 0; off < len(input); off += read {
		f.Feed(input[off:min(off+read, len(input))])
		t = t.Add(time.Millisecond)
		for {
			ok, err := f.Next(ev)
			if err != nil || !ok {
				break
			}
			if p.Parse(ev, info) == nil {
				m.Observe(info, t)
			}
			n++
		}
	}
	for {
		ok, err := f.Flush(ev)
		if err != nil || !ok {
			break
		}
		if p.Parse(ev, info) == nil {
			m.Observe(info, t)
		}
		n++
	}
	m.Finish(rec)
	return n
}

// TestZeroAllocsPerEvent: once warmed up, framing, parsing and metering a
// whole recorded stream (and writing its record) allocates nothing: every
// recorded stream of the four metered APIs.
func TestZeroAllocsPerEvent(t *testing.T) {
	var (
		f    SSEFramer
		m    Meter
		rec  Record
		buf  []byte
		ev   Event
		info EventInfo
	)
	parsers := map[string]Parser{}
	for file, completions := range openAIFixtures(t) {
		parsers[file] = parserFor(completions)
	}
	for file, w := range apiFixtureWants {
		parsers[file] = newParser(APIResponses)
		if w.api == APIMessages {
			parsers[file] = newParser(APIMessages)
		}
	}
	for file, p := range parsers {
		input := readFixture(t, file)
		for _, read := range []int{1 << 20, 1500, 7} {
			run := func() {
				meterStream(input, read, &f, p, &m, &rec, &ev, &info)
				buf = rec.AppendJSON(buf[:0])
			}
			run() // warm up: buffers grow to this stream's needs
			if a := testenv.AllocsPerRun(20, run); a != 0 {
				t.Errorf("%s (reads of %d bytes): %v allocations per stream, want 0", file, read, a)
			}
		}
	}
}

// TestZeroAllocsRepeatedEnd: the same for a chat stream of several
// choices whose finish chunks carry their usage, one of them sent twice
// (StreamParser passes over the second).
func TestZeroAllocsRepeatedEnd(t *testing.T) {
	var (
		f    SSEFramer
		m    Meter
		rec  Record
		ev   Event
		info EventInfo
	)
	head, end := endsWithUsage(t)
	input := []byte(head + end(1) + "data: [DONE]\n\n")
	p := newParser(APIChat)
	for _, read := range []int{1 << 20, 7} {
		run := func() { meterStream(input, read, &f, p, &m, &rec, &ev, &info) }
		run()
		if rec.OSL != 42 {
			t.Fatalf("osl %d, want 42", rec.OSL)
		}
		if a := testenv.AllocsPerRun(20, run); a != 0 {
			t.Errorf("reads of %d bytes: %v allocations per stream, want 0", read, a)
		}
	}
}

// TestZeroAllocsNativeAPIs: the same for every stream of Ollama's and
// llama.cpp's native APIs (Ollama's framed as NDJSON), and for their
// non-streamed bodies.
func TestZeroAllocsNativeAPIs(t *testing.T) {
	var (
		f    SSEFramer
		m    Meter
		rec  Record
		buf  []byte
		ev   Event
		info EventInfo
	)
	for file, w := range nativeWants {
		input := readFixture(t, file)
		p := newParser(w.api)
		f.NDJSON = w.api.NDJSON()
		for _, read := range []int{1 << 20, 1500, 7} {
			run := func() {
				meterStream(input, read, &f, p, &m, &rec, &ev, &info)
				buf = rec.AppendJSON(buf[:0])
			}
			run()
			if a := testenv.AllocsPerRun(20, run); a != 0 {
				t.Errorf("%s (reads of %d bytes): %v allocations per stream, want 0", file, read, a)
			}
		}
	}
	for api, body := range map[API]string{
		APIOllamaChat: `{"model":"m","message":{"role":"assistant","content":"Paris."},"done":true,"prompt_eval_count":26,"eval_count":3}`,
		APILlamaCpp:   `{"content":"Paris.","stop":true,"tokens_predicted":3,"tokens_evaluated":9}`,
		APITGI:        `[{"generated_text":" Paris.","details":{"finish_reason":"length","generated_tokens":2,"seed":null,"prefill":[],"tokens":[]}}]`,
		APISGLang:     `{"text":" Paris.","meta_info":{"id":"a","finish_reason":{"type":"stop","matched":2},"prompt_tokens":7,"completion_tokens":3}}`,
		APICompletions: `[{"index":0,"content":"Paris.","stop":true,"tokens_predicted":3,"tokens_evaluated":9},` +
			`{"index":1,"content":"Rome.","stop":true,"tokens_predicted":3,"tokens_evaluated":9}]`,
	} {
		// The body's bytes are made once, as the gateway's are read once
		// into its buffer: ParseResponseBody passes them on (parseLean), so
		// a conversion inside the run would be the test's own allocation.
		b := []byte(body)
		runBody := func() {
			m.Start(testT0)
			_ = ParseResponseBody(api, b, 1, &info)
			m.ObserveBody(&info, testT0.Add(time.Second))
			m.Finish(&rec)
		}
		runBody()
		if a := testenv.AllocsPerRun(50, runBody); a != 0 {
			t.Errorf("%v body: %v allocations per response", api, a)
		}
	}
}

func TestZeroAllocsNDJSONAndBody(t *testing.T) {
	input := readFixture(t, "ollama/lcgo-api-chat-stream-gemma3.ndjson")
	var (
		f  = SSEFramer{NDJSON: true}
		ev Event
	)
	run := func() {
		f.Reset()
		for off := 0; off < len(input); off += 100 {
			f.Feed(input[off:min(off+100, len(input))])
			for {
				if ok, err := f.Next(&ev); err != nil || !ok {
					break
				}
			}
		}
		for {
			if ok, err := f.Flush(&ev); err != nil || !ok {
				break
			}
		}
	}
	run()
	if a := testenv.AllocsPerRun(20, run); a != 0 {
		t.Errorf("NDJSON framer: %v allocations per stream", a)
	}

	body := []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}`)
	var info EventInfo
	var m Meter
	var rec Record
	runBody := func() {
		m.Start(testT0)
		_ = ParseResponseBody(APIChat, body, 1, &info)
		m.ObserveBody(&info, testT0.Add(time.Second))
		m.Finish(&rec)
	}
	runBody()
	if a := testenv.AllocsPerRun(50, runBody); a != 0 {
		t.Errorf("ParseResponseBody + Meter: %v allocations per response", a)
	}
}

// A stream longer than the kept gaps allocates nothing per event either:
// the summary of the later gaps has a bounded size, reused from stream to
// stream.
func TestZeroAllocsLongStream(t *testing.T) {
	var (
		m   Meter
		rec Record
	)
	gap := func(k int) time.Duration { return time.Duration(500+k%3000) * time.Microsecond }
	run := func() { longStream(&m, &rec, 3*MaxKeptGaps, gap) }
	run()
	if a := testenv.AllocsPerRun(5, run); a != 0 {
		t.Errorf("%v allocations per stream of %d events", a, 3*MaxKeptGaps)
	}
}

// An event over the maximum read lean (llama.cpp's last event, its prompt
// long) allocates nothing either, once the framer's buffers have grown:
// its pieces pass, its lean data is kept in the framer's own buffer.
func TestZeroAllocsLeanEvent(t *testing.T) {
	fixture := string(readFixture(t, "llamacpp/llamacpp-src-completion-stream-native.txt"))
	final, _ := llamaCppFinal(`[]`)
	last := strings.LastIndex(strings.TrimSuffix(fixture, "\n\n"), "\n\n") + 2
	input := []byte(fixture[:last] + "data: " + final + "\n\n")
	var (
		f    = SSEFramer{SkipLarge: true, Lean: true, MaxEventSize: 1024}
		m    Meter
		rec  Record
		ev   Event
		info EventInfo
	)
	p := newParser(APILlamaCpp)
	for _, read := range []int{1 << 20, 333, 7} {
		run := func() { meterStream(input, read, &f, p, &m, &rec, &ev, &info) }
		run()
		if rec.ISL != 12 || rec.OSL != 6 || rec.UsageSource != UsageUpstream {
			t.Fatalf("reads of %d bytes: isl %d osl %d (%v)", read, rec.ISL, rec.OSL, rec.UsageSource)
		}
		if a := testenv.AllocsPerRun(20, run); a != 0 {
			t.Errorf("reads of %d bytes: %v allocations per stream, want 0", read, a)
		}
	}
}
