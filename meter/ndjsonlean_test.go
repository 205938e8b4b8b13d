package meter

import (
	"bytes"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

// joinPieces folds the pieces of each line over the maximum (Skipped) into
// one event, as the line would be had it not been over: its Raw is the
// pieces' bytes, its Data and Unterminated the last piece's. It fails when
// a line's first piece is not marked SkipFirst, or another one is, or a
// piece but the last has Data.
func joinPieces(t *testing.T, evs []Event) []Event {
	t.Helper()
	var out []Event
	in := false
	for _, ev := range evs {
		if !ev.Skipped {
			if in {
				t.Fatalf("an event %q inside a line's pieces", ev.Raw)
			}
			out = append(out, ev)
			continue
		}
		if ev.SkipFirst == in {
			t.Fatalf("piece %q: SkipFirst %v", ev.Raw, ev.SkipFirst)
		}
		if !in {
			out = append(out, Event{Raw: []byte{}})
			in = true
		}
		j := &out[len(out)-1]
		j.Raw = append(j.Raw, ev.Raw...)
		if ev.HasData {
			j.Data, j.HasData, j.Unterminated = ev.Data, true, ev.Unterminated
			in = false
		}
	}
	if in {
		t.Fatal("a line's pieces end without a last piece")
	}
	return out
}

// checkLeanSplits frames input with SkipLarge at max cut at every place
// (once, and byte by byte) and checks the lines, pieces joined, against
// want.
func checkLeanSplits(t *testing.T, input string, max int, want framed) {
	t.Helper()
	b := []byte(input)
	cutsList := [][]int{nil, everyByte(len(b))}
	for i := 0; i <= len(b); i++ {
		cutsList = append(cutsList, []int{i})
	}
	for _, cuts := range cutsList {
		got := frameWith(&SSEFramer{NDJSON: true, SkipLarge: true, MaxEventSize: max}, b, cuts)
		if !errors.Is(got.err, want.err) {
			t.Fatalf("input %q cuts %v: err %v, want %v", input, cuts, got.err, want.err)
		}
		got.events = joinPieces(t, got.events)
		if d := diffFramed(got, want); d != "" {
			t.Fatalf("input %q cuts %v: %s", input, cuts, d)
		}
		if want.err == nil {
			var all []byte
			for _, ev := range got.events {
				all = append(all, ev.Raw...)
			}
			if all = append(all, got.rest...); !bytes.Equal(all, b) {
				t.Fatalf("input %q cuts %v: Raw+Rest %q", input, cuts, all)
			}
		}
	}
}

// With SkipLarge, an NDJSON line over the maximum passes in pieces as its
// bytes come, and its last piece has the line read lean: the values of its
// top-level context and logprobs made null, everything else as it came
// (nested members of those names, keys that only look like them). The
// lines around it are framed as ever; a line whose lean reading is over
// the maximum too is ErrEventTooLarge.
func TestNDJSONLargeLineReadLean(t *testing.T) {
	line := func(raw, data string) Event {
		return Event{Raw: []byte(raw), Data: []byte(data), HasData: true}
	}
	ids := strings.Repeat("128006,882,", 20)
	for _, c := range []struct{ raw, lean string }{
		{`{"model":"m","response":"","done":true,"context":[` + ids + `1],"eval_count":5}` + "\n",
			`{"model":"m","response":"","done":true,"context":null,"eval_count":5}`},
		{`{"context":[` + ids + `[2,{"a":"]}\",x"}],"x]\"y"],"done":true}` + "\r\n",
			`{"context":null,"done":true}`},
		{"\n \r\n" + `{"done":true,"context":[` + ids + `3]}` + "\n",
			`{"done":true,"context":null}`},
		{`{ "context" : [` + ids + `1] , "done" : true , "logprobs":[{"token":"a","logprob":-0.5,"top_logprobs":[]}]}` + "\n",
			`{ "context" :null, "done" : true , "logprobs":null}`},
		{`{"message":{"context":"kept","logprobs":[1]},"con\u0074ext":[1],"contexts":[2],"contex":[3],"":0,"x":"context","done":true,"context":"` + ids + `"}` + "\n",
			`{"message":{"context":"kept","logprobs":[1]},"con\u0074ext":[1],"contexts":[2],"contex":[3],"":0,"x":"context","done":true,"context":null}`},
	} {
		input := "{\"a\":1}\n" + c.raw + "{\"b\":2}\n{\"done\":true,\"context\":[" + ids + "4]}"
		last := line("{\"done\":true,\"context\":["+ids+"4]}", `{"done":true,"context":null}`)
		last.Unterminated = true
		checkLeanSplits(t, input, 160, framed{events: []Event{
			line("{\"a\":1}\n", "{\"a\":1}"),
			line(c.raw, c.lean),
			line("{\"b\":2}\n", "{\"b\":2}"),
			last,
		}})
	}
	// A line large for what it says, not for context: too large.
	big := `{"response":"` + strings.Repeat("x", 100) + `","done":false,"context":[1]}`
	checkLeanSplits(t, "{\"a\":1}\n"+big+"\n{\"b\":2}\n", 64, framed{
		events: []Event{line("{\"a\":1}\n", "{\"a\":1}")}, err: ErrEventTooLarge})
	checkLeanSplits(t, strings.Repeat("[", 300)+strings.Repeat("]", 300)+"\n", 64, framed{err: ErrEventTooLarge})
}

// Ollama's last line of /api/generate, read lean, says what the whole line
// says: its counts, that it is done, no token.
func TestOllamaLastLineReadLean(t *testing.T) {
	fixture := readFixture(t, "ollama/oll-api-generate-stream-llama3-2024.ndjson")
	i := bytes.LastIndex(fixture[:len(fixture)-1], []byte("\n")) + 1
	whole := fixture[i : len(fixture)-1]
	var f SSEFramer
	f.NDJSON, f.SkipLarge, f.MaxEventSize = true, true, 300
	f.Feed(fixture[i:])
	var ev Event
	var lean []byte
	for {
		ok, err := f.Next(&ev)
		if err != nil || !ok {
			t.Fatalf("ok %v err %v before the line's last piece", ok, err)
		}
		if ev.HasData {
			lean = ev.Data
			break
		}
	}
	if bytes.Contains(lean, []byte("128006")) || len(lean) >= len(whole) {
		t.Fatalf("lean line %s", lean)
	}
	var p StreamParser
	var a, b EventInfo
	if err := p.Parse(APIOllamaGenerate, &ev, &a); err != nil {
		t.Fatal(err)
	}
	if err := p.Parse(APIOllamaGenerate, &Event{Raw: whole, Data: whole, HasData: true}, &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) || !a.Done || !a.HasUsage || a.PromptTokens != 17 || a.CompletionTokens != 71 {
		t.Fatalf("lean %+v, whole %+v", a, b)
	}
	if _, err := fastjson.ParseBytes(lean); err != nil {
		t.Fatal(err)
	}
}

// Ollama's non-streamed answer on /api/generate (stream false) carries
// context too, the whole conversation's token ids: a long conversation's
// answer is read without building them, and reads the same.
func TestOllamaContextBodyParsedLean(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"model":"llama3","created_at":"2024-05-24T20:48:38.483408Z","response":"A joke.","done":true,"done_reason":"stop","context":[`)
	for i := range 200_000 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(100000 + i%28000))
	}
	b.WriteString(`],"total_duration":4218611084,"prompt_eval_count":17,"eval_count":71}`)
	body := []byte(b.String())
	info, full := parseLeanAndWhole(t, APIOllamaGenerate, body)
	if !sameInfo(info, full) || !info.HasUsage || info.PromptTokens != 17 || info.CompletionTokens != 71 || !info.Token || !info.Finish {
		t.Fatalf("lean %+v, full %+v", info, full)
	}
}

// The lean reading of a line agrees with the line: it parses as the line
// does, to the same values but those of the top-level members it drops
// (context, logprobs), whatever the reads.
func FuzzLeanLine(f *testing.F) {
	f.Add(`{"model":"m","response":"","done":true,"context":[1,2,3],"eval_count":5}`, uint8(7))
	f.Add(`{"context":[[2,{"a":"]}\",x"}],"x]\"y"],"done":true}`, uint8(1))
	f.Add(`{ "context" : "a\\\"" , "logprobs" : {"x":[1]}, "con\u0074ext":[1], "message":{"context":[2]} }`, uint8(3))
	f.Fuzz(func(t *testing.T, line string, read uint8) {
		whole, err := fastjson.Parse(line)
		if err != nil || whole.Type() != fastjson.TypeObject || strings.ContainsAny(line, "\r\n") {
			return
		}
		var l leanLine
		var lean []byte
		for b := []byte(line); len(b) > 0; {
			n := min(len(b), int(read)+1)
			if !l.read(&lean, b[:n], 0) {
				t.Fatalf("%q: the lean reading failed", line)
			}
			b = b[n:]
		}
		got, err := fastjson.ParseBytes(lean)
		if err != nil {
			t.Fatalf("%q read lean as %q: %v", line, lean, err)
		}
		if g, w := leanCanon(got), leanCanon(whole); g != w {
			t.Fatalf("%q read lean as %q: %s, want %s", line, lean, g, w)
		}
	})
}

// leanCanon writes a parsed line with its keys unescaped, and the values
// of its top-level members named in leanDropped left out.
func leanCanon(v *fastjson.Value) string {
	var b strings.Builder
	v.GetObject().Visit(func(k []byte, m *fastjson.Value) {
		b.WriteString(strconv.Quote(string(k)) + ":")
		for _, name := range leanDropped {
			if string(k) == name {
				b.WriteString("-,")
				return
			}
		}
		canonValue(&b, m)
		b.WriteByte(',')
	})
	return b.String()
}

func canonValue(b *strings.Builder, v *fastjson.Value) {
	switch v.Type() {
	case fastjson.TypeObject:
		b.WriteByte('{')
		v.GetObject().Visit(func(k []byte, m *fastjson.Value) {
			b.WriteString(strconv.Quote(string(k)) + ":")
			canonValue(b, m)
			b.WriteByte(',')
		})
		b.WriteByte('}')
	case fastjson.TypeArray:
		b.WriteByte('[')
		for _, e := range v.GetArray() {
			canonValue(b, e)
			b.WriteByte(',')
		}
		b.WriteByte(']')
	case fastjson.TypeString:
		b.WriteString(strconv.Quote(string(v.GetStringBytes())))
	default:
		b.WriteString(v.String())
	}
}
