package meter

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fixturesDir is where the recorded streams live, relative to this package
// (testdata/streams at the repository's root; provenance in its README).
const fixturesDir = "../testdata/streams"

func readFixture(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(fixturesDir, filepath.FromSlash(name)))
	if err != nil {
		tb.Fatalf("cannot read fixture %s: %v (the recorded streams must be at %s, relative to the meter package)", name, err, fixturesDir)
	}
	return b
}

// provenance returns file -> kind from PROVENANCE.tsv.
func provenance(tb testing.TB) map[string]string {
	tb.Helper()
	b := readFixture(tb, "PROVENANCE.tsv")
	r := csv.NewReader(bytes.NewReader(b))
	r.Comma = '\t'
	r.LazyQuotes = true
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil {
		tb.Fatalf("PROVENANCE.tsv: %v", err)
	}
	if len(rows) < 2 || rows[0][0] != "file" || rows[0][1] != "kind" {
		tb.Fatalf("PROVENANCE.tsv: unexpected header %q", rows[0])
	}
	kinds := make(map[string]string)
	for _, row := range rows[1:] {
		if len(row) >= 2 {
			kinds[row[0]] = row[1]
		}
	}
	return kinds
}

// openAISSEKind reports whether a PROVENANCE kind is an OpenAI chat or
// completions shaped SSE stream, and whether it is completions.
func openAISSEKind(kind string) (ok, completions bool) {
	switch {
	case strings.HasPrefix(kind, "openai-responses"):
		return false, false
	case strings.HasPrefix(kind, "openai-chat-stream"),
		strings.HasPrefix(kind, "openai-compat-chat-stream"),
		strings.HasPrefix(kind, "vllm-chat-stream"),
		strings.HasPrefix(kind, "llamacpp-chat-stream"),
		strings.HasPrefix(kind, "sglang-chat-stream"),
		kind == "tgi-openai-chat-stream",
		kind == "error-midstream-event",
		kind == "error-midstream-field",
		kind == "error-midstream-chunk":
		return true, false
	case strings.HasPrefix(kind, "openai-completions-stream"),
		strings.HasPrefix(kind, "vllm-completions-stream"),
		strings.HasPrefix(kind, "sglang-completions-stream"):
		return true, true
	}
	return false, false
}

// cloneBytes copies b, keeping nil as nil.
func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

func cloneEvent(ev *Event) Event {
	return Event{
		Raw:          cloneBytes(ev.Raw),
		Data:         cloneBytes(ev.Data),
		Type:         cloneBytes(ev.Type),
		ID:           cloneBytes(ev.ID),
		HasData:      ev.HasData,
		Unterminated: ev.Unterminated,
		Skipped:      ev.Skipped,
		SkipFirst:    ev.SkipFirst,
	}
}

func evString(ev Event) string {
	return fmt.Sprintf("{Raw:%q Data:%q Type:%q ID:%q HasData:%v Unterminated:%v}",
		ev.Raw, ev.Data, ev.Type, ev.ID, ev.HasData, ev.Unterminated)
}

// framed is everything a framer produced for one input.
type framed struct {
	events []Event
	rest   []byte
	err    error
}

// frameWith feeds input to f cut at the given (increasing) positions,
// draining Next after each feed, then Flush.
func frameWith(f Framer, input []byte, cuts []int) framed {
	var out framed
	var ev Event
	f.Reset()
	prev := 0
	drain := func() bool {
		for {
			ok, err := f.Next(&ev)
			if err != nil {
				out.err = err
				return false
			}
			if !ok {
				return true
			}
			out.events = append(out.events, cloneEvent(&ev))
		}
	}
	for _, c := range append(cuts, len(input)) {
		f.Feed(input[prev:c])
		prev = c
		if !drain() {
			out.rest = cloneBytes(f.Rest())
			return out
		}
	}
	flushInto(f, &out)
	return out
}

// flushInto appends the events f.Flush returns to out, then sets out.rest
// (and out.err when Flush fails).
func flushInto(f Framer, out *framed) {
	var ev Event
	for {
		ok, err := f.Flush(&ev)
		if err != nil {
			out.err = err
			break
		}
		if !ok {
			break
		}
		out.events = append(out.events, cloneEvent(&ev))
	}
	out.rest = cloneBytes(f.Rest())
}

func frameSSE(input []byte, cuts []int, max int) framed {
	return frameWith(&SSEFramer{MaxEventSize: max}, input, cuts)
}

// concat joins the Raw of every event and the rest.
func (fr framed) concat() []byte {
	var b []byte
	for _, ev := range fr.events {
		b = append(b, ev.Raw...)
	}
	return append(b, fr.rest...)
}

func diffFramed(a, b framed) string {
	if (a.err == nil) != (b.err == nil) {
		return fmt.Sprintf("error %v vs %v", a.err, b.err)
	}
	n := min(len(a.events), len(b.events))
	for i := 0; i < n; i++ {
		if !eventsEqual(&a.events[i], &b.events[i]) {
			return fmt.Sprintf("event %d:\n  %s\nvs\n  %s", i, evString(a.events[i]), evString(b.events[i]))
		}
	}
	if len(a.events) != len(b.events) {
		return fmt.Sprintf("%d events vs %d", len(a.events), len(b.events))
	}
	// After an error, Rest holds whatever had been fed: it depends on the
	// cuts by nature.
	if a.err == nil && !bytes.Equal(a.rest, b.rest) {
		return fmt.Sprintf("rest %q vs %q", a.rest, b.rest)
	}
	return ""
}

func eventsEqual(a, b *Event) bool {
	return bytes.Equal(a.Raw, b.Raw) && bytes.Equal(a.Data, b.Data) &&
		bytes.Equal(a.Type, b.Type) && bytes.Equal(a.ID, b.ID) &&
		(a.Data == nil) == (b.Data == nil) && (a.Type == nil) == (b.Type == nil) &&
		(a.ID == nil) == (b.ID == nil) &&
		a.HasData == b.HasData && a.Unterminated == b.Unterminated
}

// splitDiffers feeds input to f in two parts cut at c and compares each
// event, as it comes, with want (which must have no error), without
// copying: the cheap check used for every cut position of a large input.
func splitDiffers(f *SSEFramer, input []byte, c int, want framed) string {
	var ev Event
	k := 0
	f.Reset()
	check := func(next func(*Event) (bool, error)) string {
		for {
			ok, err := next(&ev)
			if err != nil {
				return err.Error()
			}
			if !ok {
				return ""
			}
			if k >= len(want.events) {
				return fmt.Sprintf("extra event %s", evString(ev))
			}
			if !eventsEqual(&ev, &want.events[k]) {
				return fmt.Sprintf("event %d:\n  %s\nvs\n  %s", k, evString(ev), evString(want.events[k]))
			}
			k++
		}
	}
	f.Feed(input[:c])
	if d := check(f.Next); d != "" {
		return d
	}
	f.Feed(input[c:])
	if d := check(f.Next); d != "" {
		return d
	}
	if d := check(f.Flush); d != "" {
		return d
	}
	if k != len(want.events) {
		return fmt.Sprintf("%d events, want %d", k, len(want.events))
	}
	if !bytes.Equal(f.Rest(), want.rest) {
		return fmt.Sprintf("rest %q, want %q", f.Rest(), want.rest)
	}
	return ""
}

// everyByte returns cuts after every byte.
func everyByte(n int) []int {
	cuts := make([]int, 0, n)
	for i := 1; i < n; i++ {
		cuts = append(cuts, i)
	}
	return cuts
}

// meterRun frames, parses and meters a whole stream fed with the given cuts.
// Event k (counting every event, comments and [DONE] included) is stamped
// t0 + (k+1) ms, so that the result does not depend on the cuts.
type meterRun struct {
	rec       Record
	infos     []EventInfo
	events    int
	parseErrs int
	done      bool
	errSeen   bool
	errMsg    string
}

var testT0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func stamp(k int) time.Time { return testT0.Add(time.Duration(k+1) * time.Millisecond) }

func runMeter(input []byte, cuts []int, p Parser) meterRun {
	return runMeterFramed(input, cuts, p, false)
}

// runMeterFramed is runMeter with the framer in NDJSON mode when ndjson is
// true (Ollama's native API).
func runMeterFramed(input []byte, cuts []int, p Parser, ndjson bool) meterRun {
	return runMeterWith(&SSEFramer{NDJSON: ndjson}, input, cuts, p)
}

// runMeterWith is runMeter with the framer f. A piece of an event over
// the maximum without data (SkipLarge: every piece but a lean event's
// last) is passed over, as the proxy passes it on unparsed: it is no event
// of the count.
func runMeterWith(f *SSEFramer, input []byte, cuts []int, p Parser) meterRun {
	return runMeterPerPrompt(f, input, cuts, p, 1)
}

// runMeterPerPrompt is runMeterWith for a request of perPrompt choices per
// prompt (Meter.SetChoicesPerPrompt).
func runMeterPerPrompt(f *SSEFramer, input []byte, cuts []int, p Parser, perPrompt int) meterRun {
	var (
		out  meterRun
		m    Meter
		ev   Event
		info EventInfo
	)
	p.Reset()
	f.Reset()
	m.Start(testT0)
	m.SetChoicesPerPrompt(perPrompt)
	out.rec.Reset()
	handle := func() {
		if ev.Skipped && !ev.HasData && ev.Type == nil {
			return
		}
		if err := p.Parse(&ev, &info); err != nil {
			out.parseErrs++
		} else {
			m.Observe(&info, stamp(out.events))
			cp := info
			cp.ErrorMessage = cloneBytes(info.ErrorMessage)
			out.infos = append(out.infos, cp)
		}
		out.events++
	}
	prev := 0
	for _, c := range append(cuts, len(input)) {
		f.Feed(input[prev:c])
		prev = c
		for {
			ok, err := f.Next(&ev)
			if err != nil || !ok {
				break
			}
			handle()
		}
	}
	for {
		ok, err := f.Flush(&ev)
		if err != nil || !ok {
			break
		}
		handle()
	}
	m.Finish(&out.rec)
	out.done = m.Done()
	var msg []byte
	out.errSeen, msg = m.UpstreamError()
	out.errMsg = string(msg)
	return out
}

// oneByteReader returns at most one byte per Read.
type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return o.r.Read(p)
}

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
