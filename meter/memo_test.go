package meter

import (
	"bytes"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// memoRun parses events in order with one parser, the shape memo on or
// off, and returns what each read as (info, error text) and the
// parser's state after each, with what the memo keeps left out.
type memoStep struct {
	info  EventInfo
	err   string
	state openAIState
}

func memoRun(api API, events []Event, memo bool) []memoStep {
	defer func(v bool) { noMemo = v }(noMemo)
	noMemo = !memo
	var p StreamParser
	out := make([]memoStep, len(events))
	for i := range events {
		var info EventInfo
		err := p.Parse(api, &events[i], &info)
		st := &out[i]
		st.info = info
		st.info.ErrorMessage = cloneBytes(info.ErrorMessage)
		if err != nil {
			st.err = err.Error()
		}
		st.state = p.st
		st.state.buf = nil
		st.state.memoStart, st.state.memoEnd, st.state.memoAPI = 0, 0, 0
	}
	return out
}

// sameRuns fails t where the two runs of events differ.
func sameRuns(t *testing.T, what string, events []Event, memo, parsed []memoStep) bool {
	t.Helper()
	for i := range parsed {
		a, b := memo[i], parsed[i]
		if !sameInfo(a.info, b.info) || a.err != b.err || !reflect.DeepEqual(a.state, b.state) {
			t.Errorf("%s: event %d %q read with the memo as %+v (err %q, state %+v), parsed as %+v (err %q, state %+v)",
				what, i, events[i].Data, a.info, a.err, a.state, b.info, b.err, b.state)
			return false
		}
	}
	return true
}

// memoEdits are what TestShapeMemoReadsAsParsed writes into a chunk to
// make the next one: text, escapes that end or do not end a string, and
// text that changes the chunk's shape if written into its content.
var memoEdits = []string{
	"x", " ", `\"`, `\\`, `\`, `"`, `\\\"`, `\u0041`, `\n`, "\x00", "\xff",
	`","finish_reason":"stop`, `"},"finish_reason":"length","x":{"a":"`,
	`"}}],"usage":{"prompt_tokens":1,"completion_tokens":2},"x":[{"a":{"b":"`,
	`","content":"`, `","index":1,"text":"`, `"},{"index":1,"delta":{"content":"`,
	`"}],"error":{"message":"m"},"z":[{"a":{"b":"`,
}

// memoOverwrites are what TestShapeMemoReadsAsParsed writes over a
// chunk's bytes, its length kept, to make the next one: a chunk that
// differs from the memo's outside its string but not in its length (a
// finish_reason of null made "ab", an index 0 made 1, a quote moved).
var memoOverwrites = []string{"1", "x", `"`, `\`, " ", `"ab"`}

// memoFramings are the ways TestShapeMemoReadsAsParsed frames a recorded
// stream: whole, and a byte at a time.
var memoFramings = []struct {
	name  string
	frame func(input []byte) framed
}{
	{"whole", func(in []byte) framed { return frameSSE(in, nil, 0) }},
	{"a byte at a time", func(in []byte) framed {
		cuts := make([]int, 0, len(in))
		for i := 1; i < len(in); i++ {
			cuts = append(cuts, i)
		}
		return frameSSE(in, cuts, 0)
	}},
}

// The shape memo (memo.go) reads every chunk as parsing it does: the
// recorded OpenAI-shaped streams (framed whole and a byte at a time),
// and each of their chunks followed by copies of it edited at many
// places (text written into it, or over its bytes, within its strings
// and around them), read with the memo and without agree event by event,
// in what they read, the error, and the parser's state.
func TestShapeMemoReadsAsParsed(t *testing.T) {
	files := openAIFixtures(t)
	names := make([]string, 0, len(files))
	for f := range files {
		names = append(names, f)
	}
	sort.Strings(names)
	pairs := 0
	for _, file := range names {
		api := APIChat
		if files[file] {
			api = APICompletions
		}
		input := readFixture(t, file)
		for _, f := range memoFramings {
			fr := f.frame(input)
			sameRuns(t, file+", "+f.name, fr.events, memoRun(api, fr.events, true), memoRun(api, fr.events, false))
		}
		fr := frameSSE(input, nil, 0)
		// Each distinct plain chunk (up to two per stream), followed by
		// its edited copies, each read after it alone.
		tried := 0
		for _, ev := range fr.events {
			if tried == 2 {
				break
			}
			var info EventInfo
			var p StreamParser
			if p.Parse(api, &ev, &info) != nil || !plainToken(&info) {
				continue
			}
			tried++
			data := bytes.TrimSpace(ev.Data)
			for k := 0; k <= len(data); k++ {
				if !nearQuote(data, k) && k%13 != 0 {
					continue
				}
				var nexts []string
				for _, e := range memoEdits {
					nexts = append(nexts, string(data[:k])+e+string(data[k:]))
				}
				for _, e := range memoOverwrites {
					if k+len(e) <= len(data) {
						nexts = append(nexts, string(data[:k])+e+string(data[k+len(e):]))
					}
				}
				for _, next := range nexts {
					pair := []Event{ev, *dataEvent(next)}
					pairs++
					if !sameRuns(t, fmt.Sprintf("%s, %q", file, next), pair, memoRun(api, pair, true), memoRun(api, pair, false)) {
						return
					}
				}
			}
		}
	}
	t.Logf("%d edited pairs read alike", pairs)
}

// nearQuote reports whether data has a quote within 3 bytes of k.
func nearQuote(data []byte, k int) bool {
	for i := max(k-3, 0); i < min(k+3, len(data)); i++ {
		if data[i] == '"' {
			return true
		}
	}
	return false
}

// The memo is used: of the recorded streams of engines whose chunks
// differ only in their text (vLLM, SGLang, llama.cpp, DeepSeek's
// reasoning), most token chunks read without parsing. (A stream whose
// chunks all differ elsewhere, such as OpenAI's own with its per-chunk
// "obfuscation", parses every chunk.)
func TestShapeMemoHits(t *testing.T) {
	for _, c := range []struct {
		file    string
		api     API
		minRate float64
	}{
		{benchVLLM, APIChat, 0.8},
		{"openai-compat-other/pai-deepseek-chat-stream-reasoning-content.txt", APIChat, 0.9},
	} {
		fr := frameSSE(readFixture(t, c.file), nil, 0)
		var p StreamParser
		var info EventInfo
		hits, tokens := 0, 0
		for i := range fr.events {
			if p.st.memoHit(&fr.events[i], c.api) {
				hits++
			}
			if err := p.Parse(c.api, &fr.events[i], &info); err != nil {
				t.Fatal(err)
			}
			if info.Token {
				tokens++
			}
		}
		if rate := float64(hits) / float64(tokens); rate < c.minRate {
			t.Errorf("%s: %d of %d token chunks read by the memo (%.2f, want at least %.2f)", c.file, hits, tokens, rate, c.minRate)
		} else {
			t.Logf("%s: %d of %d token chunks read by the memo", c.file, hits, tokens)
		}
	}
}

// plainToken is true of memoInfo alone: a change to any one field of it,
// a field added later included, makes it false.
func TestPlainTokenIsMemoInfoAlone(t *testing.T) {
	base := memoInfo
	if !plainToken(&base) {
		t.Fatal("memoInfo is not a plain token")
	}
	typ := reflect.TypeOf(base)
	for i := 0; i < typ.NumField(); i++ {
		info := memoInfo
		f := reflect.ValueOf(&info).Elem().Field(i)
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(!f.Bool())
		case reflect.Int, reflect.Int64:
			f.SetInt(f.Int() + 1)
		case reflect.Uint8, reflect.Uint16:
			f.SetUint(f.Uint() + 1)
		case reflect.Slice:
			f.SetBytes([]byte("m"))
		default:
			t.Fatalf("field %s of a kind the test does not change (%s)", typ.Field(i).Name, f.Kind())
		}
		if plainToken(&info) {
			t.Errorf("plainToken is true with %s changed", typ.Field(i).Name)
		}
	}
}

// FuzzShapeMemo: any chunk read after any other reads with the memo as
// parsing reads it.
func FuzzShapeMemo(f *testing.F) {
	chunk := `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"%s"},"logprobs":null,"finish_reason":null}]}`
	f.Add(fmt.Sprintf(chunk, "a"), fmt.Sprintf(chunk, "b"), false)
	f.Add(fmt.Sprintf(chunk, "a"), fmt.Sprintf(chunk, `\\`), false)
	f.Add(fmt.Sprintf(chunk, "a"), fmt.Sprintf(chunk, `","finish_reason":"stop`), false)
	f.Add(`{"choices":[{"index":0,"text":"a","finish_reason":null}],"model":"m"}`, `{"choices":[{"index":0,"text":"\"","finish_reason":null}],"model":"m"}`, true)
	f.Add(`{"choices":[{"delta":{"content":null,"reasoning_content":"H"}}]}`, `{"choices":[{"delta":{"content":null,"reasoning_content":"mm"}}]}`, false)
	// Names that fastjson reads as another's (escaped, twice), and
	// choices of several.
	f.Add(`{"choices":[{"delta":{"con\u0074ent":"","content":"a"}}]}`, `{"choices":[{"delta":{"con\u0074ent":"","content":"b"}}]}`, false)
	f.Add(`{"choices":[{"delta":{"content":"a","content":""}}]}`, `{"choices":[{"delta":{"content":"b","content":""}}]}`, false)
	f.Add(`{"choices":[{"delta":{"content":"a"}}],"ch\u006fices":[{"index":1}]}`, `{"choices":[{"delta":{"content":"b"}}],"ch\u006fices":[{"index":1}]}`, false)
	f.Add(`{"choices":[{"delta":{"content":"a"}},{"index":1,"finish_reason":"stop"}]}`, `{"choices":[{"delta":{"content":"b"}},{"index":1,"finish_reason":"stop"}]}`, false)
	f.Add(`{"choices":[{"delta":{"content":"a"}}],"choices":[{"finish_reason":"stop"}]}`, `{"choices":[{"delta":{"content":"b"}}],"choices":[{"finish_reason":"stop"}]}`, false)
	// A chunk that differs after the string, in as many bytes.
	f.Add(`{"choices":[{"delta":{"content":"a"}}],"object":"xrror","message":"m"}`, `{"choices":[{"delta":{"content":"b"}}],"object":"error","message":"m"}`, false)
	f.Fuzz(func(t *testing.T, a, b string, completions bool) {
		api := APIChat
		if completions {
			api = APICompletions
		}
		events := []Event{*dataEvent(a), *dataEvent(b), *dataEvent(a)}
		sameRuns(t, "fuzz", events, memoRun(api, events, true), memoRun(api, events, false))
	})
}

// Reset keeps the parser's buffer for the next response when it holds no
// more than a memo's chunk, and lets it go when a long error message grew
// it: a pooled stream keeps its parser.
func TestResetKeepsASmallBuffer(t *testing.T) {
	var p StreamParser
	var info EventInfo
	chunk := `{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}`
	if err := p.Parse(APIChat, dataEvent(chunk), &info); err != nil || !plainToken(&info) {
		t.Fatalf("%+v, %v", info, err)
	}
	p.Reset()
	if cap(p.st.buf) == 0 {
		t.Fatal("Reset let the memo's buffer go")
	}
	long := `{"error":{"message":"` + strings.Repeat("m", 2*memoMax+1) + `"}}`
	if err := p.Parse(APIChat, dataEvent(long), &info); err != nil || !info.Error {
		t.Fatalf("%+v, %v", info, err)
	}
	p.Reset()
	if cap(p.st.buf) != 0 {
		t.Fatalf("Reset kept a buffer of %d bytes", cap(p.st.buf))
	}
}

// The memo reads as parsing does when the parser's state changes between
// two chunks: an echo set (SetEcho) after a chunk the memo keeps, whose
// text the next chunk sends back, and a Reset.
func TestShapeMemoAfterStateChanges(t *testing.T) {
	chunk := func(s string) *Event {
		return dataEvent(`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"` + s + `"},"finish_reason":null}]}`)
	}
	var echo EchoText
	echo.AddText([]byte("b"))
	for _, c := range []struct {
		name    string
		between func(p *StreamParser)
		want    bool // the second chunk is a token
	}{
		{"an echo set", func(p *StreamParser) { p.SetEcho(EchoChunk, echo) }, false},
		{"no echo set", func(p *StreamParser) { p.SetEcho(EchoNone, echo) }, true},
		{"a reset", func(p *StreamParser) { p.Reset() }, true},
	} {
		for _, memo := range []bool{true, false} {
			func() {
				defer func(v bool) { noMemo = v }(noMemo)
				noMemo = !memo
				var p StreamParser
				var info EventInfo
				if err := p.Parse(APIChat, chunk("a"), &info); err != nil || !plainToken(&info) {
					t.Fatalf("%+v, %v", info, err)
				}
				c.between(&p)
				if err := p.Parse(APIChat, chunk("b"), &info); err != nil || info.Token != c.want || info.Content != c.want {
					t.Errorf("%s, memo %v: the next chunk read as %+v (%v), want a token: %v", c.name, memo, info, err, c.want)
				}
			}()
		}
	}
}
