package meter

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// ev builds an expected event.
func sev(raw, data string, hasData bool) Event {
	e := Event{Raw: []byte(raw), HasData: hasData}
	if hasData {
		e.Data = []byte(data)
	}
	return e
}

// checkAllSplits frames input whole, then split in two at every position, in
// three at every pair of positions (short inputs), one byte at a time and at
// random positions, and requires the same events and rest every time.
func checkAllSplits(t *testing.T, input []byte, max int, want framed) {
	t.Helper()
	whole := frameSSE(input, nil, max)
	if d := diffFramed(whole, want); d != "" {
		t.Fatalf("whole input %q: %s", input, d)
	}
	if want.err == nil && !bytes.Equal(whole.concat(), input) {
		t.Fatalf("Raw+Rest = %q, want the input %q", whole.concat(), input)
	}
	for i := 0; i <= len(input); i++ {
		if d := diffFramed(frameSSE(input, []int{i}, max), want); d != "" {
			t.Fatalf("input %q cut at %d: %s", input, i, d)
		}
	}
	if len(input) <= 64 {
		for i := 0; i <= len(input); i++ {
			for j := i; j <= len(input); j++ {
				if d := diffFramed(frameSSE(input, []int{i, j}, max), want); d != "" {
					t.Fatalf("input %q cut at %d and %d: %s", input, i, j, d)
				}
			}
		}
	}
	if d := diffFramed(frameSSE(input, everyByte(len(input)), max), want); d != "" {
		t.Fatalf("input %q fed one byte at a time: %s", input, d)
	}
	rng := rand.New(rand.NewPCG(1, uint64(len(input))))
	for k := 0; k < 20; k++ {
		cuts := randomCuts(rng, len(input))
		if d := diffFramed(frameSSE(input, cuts, max), want); d != "" {
			t.Fatalf("input %q cut at %v: %s", input, cuts, d)
		}
	}
}

func randomCuts(rng *rand.Rand, n int) []int {
	var cuts []int
	for c := 0; n > 0; {
		c += 1 + rng.IntN(1+n/4)
		if c >= n {
			break
		}
		cuts = append(cuts, c)
	}
	return cuts
}

func TestSSEFramerHandMade(t *testing.T) {
	// All hand-made: the WHATWG event-stream rules, one case each.
	withType := func(e Event, typ, id string) Event {
		if typ != "" {
			e.Type = []byte(typ)
		}
		if id != "" {
			e.ID = []byte(id)
		}
		return e
	}
	unterminated := func(e Event) Event { e.Unterminated = true; return e }
	cases := []struct {
		name  string
		input string
		want  []Event
		rest  string
	}{
		{"empty input", "", nil, ""},
		{"two LF events", "data: a\n\ndata: b\n\n",
			[]Event{sev("data: a\n\n", "a", true), sev("data: b\n\n", "b", true)}, ""},
		{"data without space", "data:a\n\n", []Event{sev("data:a\n\n", "a", true)}, ""},
		{"only one space is stripped", "data:  a \n\n", []Event{sev("data:  a \n\n", " a ", true)}, ""},
		{"multi-line data", "data: a\ndata:b\ndata:\n\n",
			[]Event{sev("data: a\ndata:b\ndata:\n\n", "a\nb\n", true)}, ""},
		{"data line without colon", "data\n\n", []Event{sev("data\n\n", "", true)}, ""},
		{"CRLF endings", "data: a\r\n\r\ndata: b\r\ndata: c\r\n\r\n",
			[]Event{sev("data: a\r\n\r\n", "a", true), sev("data: b\r\ndata: c\r\n\r\n", "b\nc", true)}, ""},
		{"CR endings", "data: a\r\rdata: b\rdata: c\r\r",
			[]Event{sev("data: a\r\r", "a", true), sev("data: b\rdata: c\r\r", "b\nc", true)}, ""},
		{"mixed endings", "data: a\r\ndata: b\rdata: c\n\r\n",
			[]Event{sev("data: a\r\ndata: b\rdata: c\n\r\n", "a\nb\nc", true)}, ""},
		{"CRLF line then LF blank", "data: a\r\n\ndata: b\n\r\r\n",
			[]Event{sev("data: a\r\n\n", "a", true), sev("data: b\n\r", "b", true)}, "\r\n"},
		{"event id retry comment", ": hi\nevent: error\nid: 7\nretry: 1000\ndata: {}\n\n",
			[]Event{withType(sev(": hi\nevent: error\nid: 7\nretry: 1000\ndata: {}\n\n", "{}", true), "error", "7")}, ""},
		{"event without space and last one wins", "event:a\nevent:b\ndata: x\n\n",
			[]Event{withType(sev("event:a\nevent:b\ndata: x\n\n", "x", true), "b", "")}, ""},
		{"id with NUL ignored", "id: a\x00b\ndata: x\n\n", []Event{sev("id: a\x00b\ndata: x\n\n", "x", true)}, ""},
		{"unknown field ignored", "foo: bar\ndata: x\n\n", []Event{sev("foo: bar\ndata: x\n\n", "x", true)}, ""},
		// llama.cpp's streamed error before its pull request #16109
		// (server_sent_event(sink, "error", error_data)): an error: line
		// is a data line and makes the event's type error.
		{"llama.cpp's error field", "error: {\"code\":500,\"message\":\"m\",\"type\":\"server_error\"}\n\n",
			[]Event{withType(sev("error: {\"code\":500,\"message\":\"m\",\"type\":\"server_error\"}\n\n", `{"code":500,"message":"m","type":"server_error"}`, true), "error", "")}, ""},
		{"error field without space or colon", "error:x\nerror\n\n", []Event{withType(sev("error:x\nerror\n\n", "x\n", true), "error", "")}, ""},
		{"error field joins the data lines", "data: a\nerror: b\r\n\r\n", []Event{withType(sev("data: a\nerror: b\r\n\r\n", "a\nb", true), "error", "")}, ""},
		{"a later event line names another type", "error: x\nevent: y\n\n", []Event{withType(sev("error: x\nevent: y\n\n", "x", true), "y", "")}, ""},
		{"an error line after an event line", "event: y\nerror: x\n\n", []Event{withType(sev("event: y\nerror: x\n\n", "x", true), "error", "")}, ""},
		{"errors field ignored", "errors: x\nerr: y\n\n", []Event{sev("errors: x\nerr: y\n\n", "", false)}, ""},
		{"comment-only block is an event", ": ping\n\n", []Event{sev(": ping\n\n", "", false)}, ""},
		{"comment before first event", ": OPENROUTER PROCESSING\n\ndata: x\n\n",
			[]Event{sev(": OPENROUTER PROCESSING\n\n", "", false), sev("data: x\n\n", "x", true)}, ""},
		{"comment inside event", "data: a\n: note\ndata: b\n\n", []Event{sev("data: a\n: note\ndata: b\n\n", "a\nb", true)}, ""},
		{"event-only block", "event: ping\n\n", []Event{withType(sev("event: ping\n\n", "", false), "ping", "")}, ""},
		{"leading blank lines fold into the next event", "\n\r\n\rdata: x\n\n",
			[]Event{sev("\n\r\n\rdata: x\n\n", "x", true)}, ""},
		{"trailing blank lines stay in rest", "data: a\n\n\n\r\n", []Event{sev("data: a\n\n", "a", true)}, "\n\r\n"},
		{"BOM at stream start", "\xEF\xBB\xBFdata: x\n\n", []Event{sev("\xEF\xBB\xBFdata: x\n\n", "x", true)}, ""},
		{"BOM-only first line is blank", "\xEF\xBB\xBF\ndata: x\n\n", []Event{sev("\xEF\xBB\xBF\ndata: x\n\n", "x", true)}, ""},
		{"BOM alone is not an event", "\xEF\xBB\xBF", nil, "\xEF\xBB\xBF"},
		{"BOM then an unterminated line", "\xEF\xBB\xBFdata: x", []Event{unterminated(sev("\xEF\xBB\xBFdata: x", "x", true))}, ""},
		{"BOM later is not stripped", "data: a\n\n\xEF\xBB\xBFdata: b\n\n",
			[]Event{sev("data: a\n\n", "a", true), sev("\xEF\xBB\xBFdata: b\n\n", "", false)}, ""},
		{"last event without blank line", "data: a\n\ndata: b\n",
			[]Event{sev("data: a\n\n", "a", true), unterminated(sev("data: b\n", "b", true))}, ""},
		{"last line without newline", "data: [DONE]", []Event{unterminated(sev("data: [DONE]", "[DONE]", true))}, ""},
		{"last event ends with CR", "data: a\r\r", []Event{sev("data: a\r\r", "a", true)}, ""},
		{"stream of only blank lines", "\n\n\r\n", nil, "\n\n\r\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkAllSplits(t, []byte(c.input), 0, framed{events: c.want, rest: []byte(c.rest)})
		})
	}
}

func TestSSEFramerCRAtFeedBoundary(t *testing.T) {
	// Hand-made: a "\r" ends one feed and its "\n" starts the next.
	t.Run("inside an event: no spurious blank line", func(t *testing.T) {
		var f SSEFramer
		var ev Event
		f.Feed([]byte("data: a\r"))
		if ok, err := f.Next(&ev); ok || err != nil {
			t.Fatalf("Next = %v, %v; want nothing yet", ok, err)
		}
		f.Feed([]byte("\ndata: b\r"))
		if ok, err := f.Next(&ev); ok || err != nil {
			t.Fatalf("Next = %v, %v (%v); the \\n after \\r must not end the event", ok, err, evString(ev))
		}
		f.Feed([]byte("\n\r\n"))
		ok, err := f.Next(&ev)
		if !ok || err != nil || string(ev.Data) != "a\nb" || string(ev.Raw) != "data: a\r\ndata: b\r\n\r\n" {
			t.Fatalf("Next = %v, %v, %v; want one event a\\nb", ok, err, evString(ev))
		}
	})
	t.Run("ending an event: the LF is held for the Raw", func(t *testing.T) {
		var f SSEFramer
		var ev Event
		f.Feed([]byte("data: a\r\n\r"))
		if ok, err := f.Next(&ev); ok || err != nil {
			t.Fatalf("Next = %v, %v; want the event held until the next byte", ok, err)
		}
		f.Feed([]byte("\ndata: b\r\n\r\n"))
		ok, _ := f.Next(&ev)
		if !ok || string(ev.Raw) != "data: a\r\n\r\n" || !ev.Early {
			t.Fatalf("first event = %v, %v, early %v; want it early (complete with the feed before)", ok, evString(ev), ev.Early)
		}
		ok, _ = f.Next(&ev)
		if !ok || string(ev.Raw) != "data: b\r\n\r\n" || string(ev.Data) != "b" || ev.Early {
			t.Fatalf("second event = %v, %v, early %v", ok, evString(ev), ev.Early)
		}
		if ok, _ := f.Next(&ev); ok {
			t.Fatalf("unexpected third event %v", evString(ev))
		}
	})
	t.Run("ending an event: any other byte releases it", func(t *testing.T) {
		var f SSEFramer
		var ev Event
		f.Feed([]byte("data: a\r\r"))
		if ok, _ := f.Next(&ev); ok {
			t.Fatal("event returned before the byte after its final CR was known")
		}
		f.Feed([]byte("d"))
		if ok, _ := f.Next(&ev); !ok || string(ev.Raw) != "data: a\r\r" || !ev.Early {
			t.Fatalf("Next = %v, %v, early %v", ok, evString(ev), ev.Early)
		}
		if string(f.Rest()) != "d" {
			t.Fatalf("Rest = %q", f.Rest())
		}
	})
	t.Run("held at the end of the input: early at Flush", func(t *testing.T) {
		var f SSEFramer
		var ev Event
		f.Feed([]byte("data: a\n\ndata: b\r\r"))
		if ok, _ := f.Next(&ev); !ok || string(ev.Raw) != "data: a\n\n" || ev.Early {
			t.Fatalf("Next = %v, %v, early %v", ok, evString(ev), ev.Early)
		}
		if ok, _ := f.Next(&ev); ok {
			t.Fatalf("event returned before the byte after its final CR was known: %v", evString(ev))
		}
		if ok, _ := f.Flush(&ev); !ok || string(ev.Raw) != "data: b\r\r" || !ev.Early || ev.Unterminated {
			t.Fatalf("Flush = %v, %v, early %v", ok, evString(ev), ev.Early)
		}
		// Not held (no Next saw its CR last): read at Flush.
		f.Reset()
		f.Feed([]byte("data: c\r\r"))
		if ok, _ := f.Flush(&ev); !ok || string(ev.Raw) != "data: c\r\r" || ev.Early {
			t.Fatalf("Flush = %v, %v, early %v", ok, evString(ev), ev.Early)
		}
	})
	want := framed{events: []Event{
		sev("data: a\r\ndata: b\r\n\r\n", "a\nb", true),
		sev("data: c\r\n\r\n", "c", true),
	}}
	checkAllSplits(t, []byte("data: a\r\ndata: b\r\n\r\ndata: c\r\n\r\n"), 0, want)
}

func TestSSEFramerMaxEventSize(t *testing.T) {
	// Hand-made: an event over the maximum size.
	small := "data: a\n\n"              // 9 bytes
	big := "data: 0123456789abcdef\n\n" // 24 bytes
	input := []byte(small + big + small)
	t.Run("error after the events before it", func(t *testing.T) {
		checkAllSplits(t, input, 16, framed{events: []Event{sev(small, "a", true)}, err: ErrEventTooLarge})
	})
	t.Run("exactly the maximum is accepted", func(t *testing.T) {
		checkAllSplits(t, input, 24, framed{events: []Event{sev(small, "a", true), sev(big, "0123456789abcdef", true), sev(small, "a", true)}})
	})
	t.Run("negative means no limit", func(t *testing.T) {
		huge := "data: " + strings.Repeat("x", DefaultMaxEventSize) + "\n\n"
		fr := frameSSE([]byte(huge), nil, -1)
		if fr.err != nil || len(fr.events) != 1 || len(fr.events[0].Data) != DefaultMaxEventSize {
			t.Fatalf("got %d events, err %v", len(fr.events), fr.err)
		}
	})
	t.Run("zero means the default", func(t *testing.T) {
		huge := "data: " + strings.Repeat("x", DefaultMaxEventSize) + "\n\n"
		if fr := frameSSE([]byte(huge), []int{1000}, 0); !errors.Is(fr.err, ErrEventTooLarge) {
			t.Fatalf("err = %v, want ErrEventTooLarge", fr.err)
		}
		ok := "data: " + strings.Repeat("x", DefaultMaxEventSize-8) + "\n\n"
		if fr := frameSSE([]byte(ok), []int{1000}, 0); fr.err != nil || len(fr.events) != 1 {
			t.Fatalf("an event of exactly DefaultMaxEventSize bytes: err %v, %d events", fr.err, len(fr.events))
		}
	})
	t.Run("sticky, rest holds the oversized bytes, later input is dropped", func(t *testing.T) {
		f := SSEFramer{MaxEventSize: 16}
		var ev Event
		f.Feed([]byte(small + "data: 0123456789"))
		if ok, err := f.Next(&ev); !ok || err != nil {
			t.Fatalf("first Next = %v, %v", ok, err)
		}
		if ok, err := f.Next(&ev); ok || err != nil {
			t.Fatalf("second Next = %v, %v; 16 bytes pending is not over the limit", ok, err)
		}
		f.Feed([]byte("abcdef"))
		if _, err := f.Next(&ev); !errors.Is(err, ErrEventTooLarge) {
			t.Fatalf("err = %v", err)
		}
		if string(f.Rest()) != "data: 0123456789abcdef" {
			t.Fatalf("Rest = %q", f.Rest())
		}
		f.Feed([]byte("more"))
		if _, err := f.Next(&ev); !errors.Is(err, ErrEventTooLarge) {
			t.Fatalf("err after more input = %v", err)
		}
		if _, err := f.Flush(&ev); !errors.Is(err, ErrEventTooLarge) {
			t.Fatalf("Flush err = %v", err)
		}
		if string(f.Rest()) != "data: 0123456789abcdef" {
			t.Fatalf("Rest after more input = %q", f.Rest())
		}
		f.Reset()
		f.Feed([]byte(small))
		if ok, err := f.Next(&ev); !ok || err != nil || string(ev.Data) != "a" {
			t.Fatalf("after Reset: %v, %v, %v", ok, err, evString(ev))
		}
	})
}

func TestSSEFramerSlicesValidUntilFeed(t *testing.T) {
	// Raw and Data of every event returned since the last Feed stay valid,
	// multi-line Data included.
	var f SSEFramer
	f.Feed([]byte("data: a\ndata: b\n\ndata: c\ndata: d\n\ndata: e\n\n"))
	var evs [3]Event
	for i := range evs {
		if ok, err := f.Next(&evs[i]); !ok || err != nil {
			t.Fatalf("Next %d = %v, %v", i, ok, err)
		}
	}
	for i, want := range []string{"a\nb", "c\nd", "e"} {
		if string(evs[i].Data) != want {
			t.Errorf("event %d Data = %q, want %q", i, evs[i].Data, want)
		}
	}
	if string(evs[0].Raw) != "data: a\ndata: b\n\n" {
		t.Errorf("event 0 Raw = %q", evs[0].Raw)
	}
}

func TestSSEFramerFillFrom(t *testing.T) {
	input := readFixture(t, "openai-compat-other/lcgo-perplexity-chat-stream-crlf.txt")
	want := frameSSE(input, nil, 0)
	for name, r := range map[string]io.Reader{
		"bulk":     bytes.NewReader(input),
		"one byte": oneByteReader{bytes.NewReader(input)},
	} {
		var f SSEFramer
		var got framed
		var ev Event
		for {
			_, rerr := f.FillFrom(r)
			for {
				ok, err := f.Next(&ev)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				got.events = append(got.events, cloneEvent(&ev))
			}
			if rerr == io.EOF {
				break
			}
			if rerr != nil {
				t.Fatal(rerr)
			}
		}
		flushInto(&f, &got)
		if d := diffFramed(got, want); d != "" {
			t.Errorf("%s: %s", name, d)
		}
	}
}

// TestSSEFramerFixtures frames every recorded SSE stream (all APIs), whole,
// split in two at every byte position, one byte at a time and at random
// positions: the events must be identical and Raw+Rest must be the input.
func TestSSEFramerFixtures(t *testing.T) {
	kinds := provenance(t)
	n := 0
	for file, kind := range kinds {
		if strings.HasSuffix(file, ".ndjson") || strings.HasPrefix(kind, "error-http") {
			continue
		}
		n++
		t.Run(file, func(t *testing.T) {
			input := readFixture(t, file)
			whole := frameSSE(input, nil, 0)
			if whole.err != nil {
				t.Fatal(whole.err)
			}
			if !bytes.Equal(whole.concat(), input) {
				t.Fatal("Raw+Rest differs from the input")
			}
			if len(whole.events) == 0 {
				t.Fatal("no events")
			}
			// Every 2-part split for the OpenAI-shaped streams (the ones the
			// gateway meters today); the others get the cheaper splits below.
			// Under -race, large files are cut at every 13th byte only.
			if ok, _ := openAISSEKind(kind); ok {
				step := 1
				if raceEnabled && len(input) > 16<<10 {
					step = 13
				}
				var f SSEFramer
				for i := 0; i <= len(input); i += step {
					if d := splitDiffers(&f, input, i, whole); d != "" {
						t.Fatalf("cut at %d: %s", i, d)
					}
				}
			}
			if d := diffFramed(frameSSE(input, everyByte(len(input)), 0), whole); d != "" {
				t.Fatalf("one byte at a time: %s", d)
			}
			rng := rand.New(rand.NewPCG(7, uint64(len(input))))
			for k := 0; k < 10; k++ {
				cuts := randomCuts(rng, len(input))
				if d := diffFramed(frameSSE(input, cuts, 0), whole); d != "" {
					t.Fatalf("cuts %v: %s", cuts, d)
				}
			}
		})
	}
	if n < 30 {
		t.Fatalf("only %d SSE fixtures found in PROVENANCE.tsv", n)
	}
}

func TestIndexLineEnd(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	alphabet := []byte("ab\r\n")
	for _, n := range []int{0, 1, 2, 511, 512, 513, 1500, 5000} {
		for k := 0; k < 200; k++ {
			b := bytes.Repeat([]byte("x"), n)
			// a few line-end bytes at random places, often none
			for j := rng.IntN(3); j > 0 && n > 0; j-- {
				b[rng.IntN(n)] = alphabet[rng.IntN(len(alphabet))]
			}
			if got, want := indexLineEnd(b), bytes.IndexAny(b, "\r\n"); got != want {
				t.Fatalf("indexLineEnd(%q) = %d, want %d", b, got, want)
			}
		}
	}
}

func TestFillFromAfterStop(t *testing.T) {
	f := SSEFramer{MaxEventSize: 8}
	if _, err := f.FillFrom(strings.NewReader("data: 0123456789")); err != nil {
		t.Fatal(err)
	}
	var ev Event
	if _, err := f.Next(&ev); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("Next err = %v", err)
	}
	if n, err := f.FillFrom(strings.NewReader("more")); n != 0 || !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("FillFrom after the error = %d, %v", n, err)
	}
	g := SSEFramer{NDJSON: true}
	for {
		if ok, _ := g.Flush(&ev); !ok {
			break
		}
	}
	if n, err := g.FillFrom(strings.NewReader("{}\n")); n != 0 || err == nil {
		t.Fatalf("FillFrom after Flush = %d, %v", n, err)
	}
}

// cutReader returns input in reads that end at the given (increasing)
// positions, then io.EOF.
type cutReader struct {
	input []byte
	cuts  []int
	off   int
}

func (r *cutReader) Read(p []byte) (int, error) {
	if r.off == len(r.input) {
		return 0, io.EOF
	}
	end := len(r.input)
	for len(r.cuts) > 0 && r.cuts[0] <= r.off {
		r.cuts = r.cuts[1:]
	}
	if len(r.cuts) > 0 {
		end = r.cuts[0]
	}
	n := copy(p, r.input[r.off:end])
	r.off += n
	return n, nil
}

// frameLending frames input read through FillFrom with the given cuts, as
// a caller that lends buffers does: after each read's events, the buffer
// is taken back when the framer allows it, scribbled over (as the next
// stream to borrow it would), and given again before the next read. It
// also counts the reads after which the buffer was taken.
func frameLending(input []byte, cuts []int) (out framed, taken int) {
	var f SSEFramer
	var ev Event
	var pool [][]byte
	r := &cutReader{input: input, cuts: cuts}
	for {
		if f.BufferCap() == 0 && len(pool) > 0 {
			f.GiveBuffer(pool[len(pool)-1])
			pool = pool[:len(pool)-1]
		}
		_, rerr := f.FillFrom(r)
		for {
			ok, err := f.Next(&ev)
			if err != nil {
				out.err = err
				return out, taken
			}
			if !ok {
				break
			}
			out.events = append(out.events, cloneEvent(&ev))
		}
		if rerr != nil {
			break
		}
		if b := f.TakeBuffer(); b != nil {
			if f.BufferCap() > 0 || len(b) != 0 {
				panic("TakeBuffer left the framer a buffer, or gave a non-empty one")
			}
			b = b[:cap(b)]
			for i := range b {
				b[i] = 'x'
			}
			pool = append(pool, b)
			taken++
		}
	}
	flushInto(&f, &out)
	return out, taken
}

// TestSSEFramerLentBuffer frames every recorded SSE stream with its read
// buffer taken away and scribbled over whenever the framer allows it: one
// byte at a time (a CRLF split between reads included) and at random
// cuts, the events must be those of the stream framed whole. A buffer
// taken while an event's bytes were pending would lose them.
func TestSSEFramerLentBuffer(t *testing.T) {
	kinds := provenance(t)
	for file, kind := range kinds {
		if strings.HasSuffix(file, ".ndjson") || strings.HasPrefix(kind, "error-http") {
			continue
		}
		input := readFixture(t, file)
		whole := frameSSE(input, nil, 0)
		rng := rand.New(rand.NewPCG(3, uint64(len(input))))
		for k := 0; k < 6; k++ {
			cuts := randomCuts(rng, len(input))
			if k == 0 {
				cuts = everyByte(len(input))
			}
			got, taken := frameLending(input, cuts)
			if d := diffFramed(got, whole); d != "" {
				t.Fatalf("%s, cuts %d: %s", file, k, d)
			}
			if taken == 0 && len(whole.events) > 1 {
				t.Fatalf("%s, cuts %d: the buffer was never taken", file, k)
			}
		}
	}
}

// TestSSEFramerTakeBufferKeepsPending: a buffer holding part of an event
// is not handed out; once the event is complete and returned, it is.
func TestSSEFramerTakeBufferKeepsPending(t *testing.T) {
	var f SSEFramer
	var ev Event
	if f.TakeBuffer() != nil {
		t.Fatal("a framer with no buffer gave one")
	}
	f.FillFrom(strings.NewReader("data: {\"a\":1}\n"))
	if ok, _ := f.Next(&ev); ok {
		t.Fatal("an event before its blank line")
	}
	if f.TakeBuffer() != nil || f.BufferCap() == 0 {
		t.Fatal("the buffer was taken with an event pending")
	}
	f.FillFrom(strings.NewReader("\n"))
	if ok, _ := f.Next(&ev); !ok || string(ev.Data) != `{"a":1}` {
		t.Fatalf("Next = %v, %q", ok, ev.Data)
	}
	b := f.TakeBuffer()
	if b == nil || f.BufferCap() > 0 {
		t.Fatal("the buffer was not taken after the event")
	}
	b = append(b, "garbage"...) // the next borrower's bytes
	f.GiveBuffer(b)
	f.FillFrom(strings.NewReader("data: 2\n\n"))
	if ok, _ := f.Next(&ev); !ok || string(ev.Data) != "2" || string(ev.Raw) != "data: 2\n\n" {
		t.Fatalf("Next = %v, %q %q", ok, ev.Data, ev.Raw)
	}
	f.Flush(&ev)
	if f.TakeBuffer() != nil {
		t.Fatal("a flushed framer gave its buffer")
	}
}

// With SkipLarge, an event over the maximum is returned in unparsed pieces
// as its bytes come in, and every other event is framed exactly as in the
// same stream without it, however the input is cut; the pieces and events
// together are the input, byte for byte. Every line ending, a BOM, and a
// large event whose first line, last line or every line is long.
func TestSSESkipLarge(t *testing.T) {
	big := func(nl string, lines ...string) string { return strings.Join(lines, nl) + nl + nl }
	long := strings.Repeat("x", 90)
	for _, nl := range []string{"\n", "\r\n", "\r"} {
		small := "event: a" + nl + "data: {\"n\":1}" + nl + nl + ": keep-alive" + nl + nl
		after := "data: {\"n\":2}" + nl + "data: two" + nl + nl + "data: [DONE]" + nl + nl
		for _, b := range []string{
			big(nl, "event: response.completed", "data: "+long),
			big(nl, "data: "+long+long, "id: 7"),
			big(nl, "data: "+long, "data: "+long, "data: "+long),
		} {
			for _, prefix := range []string{"", "\xEF\xBB\xBF"} {
				input := []byte(prefix + small + b + after)
				want := frameSSE([]byte(prefix+small+after), nil, 0)
				if want.err != nil {
					t.Fatal(want.err)
				}
				for c := 0; c <= len(input); c++ {
					cuts := []int{c}
					if c == 0 {
						cuts = everyByte(len(input))
					}
					got := frameWith(&SSEFramer{MaxEventSize: 64, SkipLarge: true}, input, cuts)
					if got.err != nil {
						t.Fatalf("%q cut at %d: %v", input, c, got.err)
					}
					if !bytes.Equal(got.concat(), input) {
						t.Fatalf("%q cut at %d: the pieces and events are %q", input, c, got.concat())
					}
					var normal []Event
					var skipped []byte
					for _, ev := range got.events {
						if ev.Skipped {
							if ev.SkipFirst != (len(skipped) == 0) {
								t.Fatalf("%q cut at %d: a piece at %d of the large event has SkipFirst %v", input, c, len(skipped), ev.SkipFirst)
							}
							skipped = append(skipped, ev.Raw...)
							if c == 0 && len(ev.Raw) > 66 {
								t.Fatalf("%q fed byte by byte: a piece of %d bytes; the framer held more of the large event than the maximum", input, len(ev.Raw))
							}
							if ev.HasData || ev.Type != nil {
								t.Fatalf("%q cut at %d: a skipped piece was parsed: %+v", input, c, ev)
							}
						} else {
							normal = append(normal, ev)
						}
					}
					if string(skipped) != b {
						t.Fatalf("%q cut at %d: skipped %q, want the large event %q", input, c, skipped, b)
					}
					if len(normal) != len(want.events) {
						t.Fatalf("%q cut at %d: %d events, want %d", input, c, len(normal), len(want.events))
					}
					for k := range normal {
						w := want.events[k]
						if !bytes.Equal(normal[k].Data, w.Data) || !bytes.Equal(normal[k].Type, w.Type) || normal[k].HasData != w.HasData ||
							!bytes.Equal(normal[k].Raw, w.Raw) {
							t.Fatalf("%q cut at %d: event %d is %s, want %s", input, c, k, evString(normal[k]), evString(w))
						}
					}
				}
			}
		}
	}
}

func TestSkippedFailure(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want bool
	}{
		{"event: error\ndata: {\"message\":\"x", true},
		{"event:error\r\ndata: {", true},
		{"\n\nevent: response.failed\ndata: {", true},
		{"id: 3\ndata: {\"type\":\"error\",\"message\":\"x", true},
		{"data: {\"type\" : \"response.failed\",", true},
		{"event: response.completed\ndata: {\"type\":\"error\"", false}, // the event: line decides
		{"data: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"error\"", false},
		{"data: {\"item\":{\"text\":\"\\\"type\\\":\\\"error\\\"", false},
		{"data: {\"type\":\"err", false},
		{"error: {\"code\":500,\"message\":\"x", true}, // llama.cpp's error field
		{": c\nerror:{", true},
		{"errors: {\n", false},
		{": a comment\n", false},
		{"", false},
	} {
		if got := SkippedFailure([]byte(c.raw)); got != c.want {
			t.Errorf("SkippedFailure(%q) = %v, want %v", c.raw, got, c.want)
		}
	}
}
