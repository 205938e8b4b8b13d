package meter

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

// llamaCppPrompt is a prompt long enough to make llama.cpp's last event
// pass a small maximum, with what a JSON string escapes.
var llamaCppPrompt = strings.Repeat(`<|start_header_id|>user<|end_header_id|>\n\nSay \"caf\u00e9\" {not a member}, [1,2] and \\ then: `, 24)

// llamaCppSettings is the generation_settings of llama.cpp's last event
// (task_params::to_json, cut to a few of its members; its stop, a nested
// member of a name the meter reads at the top level, included).
const llamaCppSettings = `{"seed":4294967295,"temperature":0.800000011920929,"top_k":40,"top_p":0.949999988079071,"stop":["</s>","\n\n"],"max_tokens":-1,"n_predict":-1,"stream":true,"logit_bias":[],"grammar":"","samplers":["penalties","dry","top_k","typ_p","top_p","min_p","xtc","temperature"],"lora":[]}`

// llamaCppFinal is the last event's JSON of llama.cpp's native /completion
// stream, as server_task_result_cmpl_final::to_json_non_oaicompat writes
// it (ordered_json: its members in that order; in a stream content and
// tokens are emptied by send_final_response, the text having come before),
// with tokens as builds before that sent them; and its lean reading.
func llamaCppFinal(tokens string) (whole, lean string) {
	head := `{"index":0,"content":"","tokens":`
	mid := `,"id_slot":0,"stop":true,"model":"gpt-3.5-turbo","tokens_predicted":6,"tokens_evaluated":12,"generation_settings":`
	tail := `,"has_new_line":false,"truncated":false,"stop_type":"eos","stopping_word":"","tokens_cached":17,"timings":{"cache_n":0,"prompt_n":12,"prompt_ms":41.2,"prompt_per_token_ms":3.43,"prompt_per_second":291.2,"predicted_n":6,"predicted_ms":92.8,"predicted_per_token_ms":15.47,"predicted_per_second":64.66}}`
	whole = head + tokens + mid + llamaCppSettings + `,"prompt":"` + llamaCppPrompt + `"` + tail
	lean = head + `null` + mid + `null,"prompt":null` + tail
	return whole, lean
}

// joinSSEPieces folds the pieces of each event over the maximum (Skipped)
// into one event, as the event would be had it not been over: its Raw is
// the pieces' bytes, its Data, HasData, Type and Unterminated the last
// piece's. A piece marked SkipFirst begins an event; a piece but the last
// must have neither Data nor Type.
func joinSSEPieces(t *testing.T, evs []Event) []Event {
	t.Helper()
	var out []Event
	in := false
	for k, ev := range evs {
		if !ev.Skipped {
			out = append(out, ev)
			in = false
			continue
		}
		if ev.SkipFirst || !in {
			if !ev.SkipFirst {
				t.Fatalf("piece %q: the first of an event without SkipFirst", ev.Raw)
			}
			out = append(out, Event{Raw: []byte{}})
			in = true
		}
		j := &out[len(out)-1]
		j.Raw = append(j.Raw, ev.Raw...)
		lastPiece := k == len(evs)-1 || !evs[k+1].Skipped || evs[k+1].SkipFirst
		if !lastPiece && (ev.HasData || ev.Type != nil) {
			t.Fatalf("piece %q: Data or Type on a piece but the last", ev.Raw)
		}
		j.Data, j.HasData, j.Type, j.Unterminated = ev.Data, ev.HasData, ev.Type, ev.Unterminated
	}
	return out
}

// checkSSELeanSplits frames input with Lean at max, whole, cut at every
// place and byte by byte, and checks the events, pieces joined, against
// want (and that their bytes are the input).
func checkSSELeanSplits(t *testing.T, input string, max int, want framed) {
	t.Helper()
	b := []byte(input)
	cutsList := [][]int{nil, everyByte(len(b))}
	for i := 0; i <= len(b); i++ {
		cutsList = append(cutsList, []int{i})
	}
	for _, cuts := range cutsList {
		got := frameWith(&SSEFramer{SkipLarge: true, Lean: true, MaxEventSize: max}, b, cuts)
		if !errors.Is(got.err, want.err) {
			t.Fatalf("input %q cuts %v: err %v, want %v", input, cuts, got.err, want.err)
		}
		if want.err != nil {
			// The failing event's pieces read before the lean reading
			// failed passed on: the events before it are what is checked.
			got.events = unskipped(got).events
		}
		got.events = joinSSEPieces(t, got.events)
		if d := diffFramed(got, want); d != "" {
			t.Fatalf("input %q cuts %v: %s", input, cuts, d)
		}
		if want.err == nil && !bytes.Equal(got.concat(), b) {
			t.Fatalf("input %q cuts %v: Raw+Rest %q", input, cuts, got.concat())
		}
	}
}

// With Lean (and SkipLarge), an event over the maximum passes in pieces as
// its bytes come, and its last piece has the event read lean: its data
// lines' values, joined with "\n", with the values of their top-level
// prompt, generation_settings and tokens (leanDropped) made null; Type
// "error" when its last event: line says so. Whatever the line endings,
// the data: lines (with or without a space, several, a bare "data"), the
// comments and other fields among them, a leading byte-order mark, and
// wherever the bytes are cut. The events around it are framed as ever;
// an event whose lean reading is over the maximum too is
// ErrEventTooLarge.
func TestSSELargeEventReadLean(t *testing.T) {
	final, finalLean := llamaCppFinal(`[12366,11,279,6864,13,2]`)
	cut := strings.Index(final, `,"generation_settings"`)
	inPrompt := strings.Index(final, `caf\u00e9`)
	for _, nl := range []string{"\n", "\r\n", "\r"} {
		ev := func(lines ...string) string { return strings.Join(lines, nl) + nl + nl }
		before := "data: " + `{"index":0,"content":".","tokens":[13],"stop":false,"id_slot":0,"tokens_predicted":5,"tokens_evaluated":12}` + nl + nl + ":" + nl + nl
		after := "data: {\"n\":2}" + nl + "data: two" + nl + nl
		for _, c := range []struct {
			raw, data string
			hasData   bool
			typ       string
		}{
			{ev("data: " + final), finalLean, true, ""},
			// Its data in several lines (the cut inside the prompt, whose
			// value is dropped, "\n" and all), a comment and an id among
			// them, data: without its space, a bare data line.
			{ev("data:"+final[:cut], ": keep-alive", "id: 7", "data: "+final[cut:inPrompt], "data", "data:"+final[inPrompt:]),
				finalLean[:strings.Index(finalLean, `,"generation_settings"`)] + "\n" + finalLean[strings.Index(finalLean, `,"generation_settings"`):], true, ""},
			// An event: line says error; a later one would say otherwise.
			{ev("event: error", `data: {"error":{"code":500,"message":"m"},"prompt":"`+llamaCppPrompt+`"}`), `{"error":{"code":500,"message":"m"},"prompt":null}`, true, "error"},
			{ev("event: error", `data: {"prompt":"`+llamaCppPrompt+`"}`, "event:errors"), `{"prompt":null}`, true, ""},
			{ev("event:error", `data: {"prompt":"`+llamaCppPrompt+`"}`, "datum: x"), `{"prompt":null}`, true, "error"},
			// llama.cpp's error: line (SSEFramer): a data line, and the
			// type error, unless a later event: line says otherwise; a
			// name that only begins as error's or event's is no field.
			{ev(`error: {"code":500,"message":"m","prompt":"` + llamaCppPrompt + `"}`), `{"code":500,"message":"m","prompt":null}`, true, "error"},
			{ev("event: x", `error:{"prompt":"`+llamaCppPrompt+`"}`, "error"), "{\"prompt\":null}\n", true, "error"},
			{ev(`error: {"prompt":"`+llamaCppPrompt+`"}`, "event: x"), `{"prompt":null}`, true, ""},
			{ev("errors: x", "evror: y", "eerror: z", `data: {"prompt":"`+llamaCppPrompt+`"}`, "err"), `{"prompt":null}`, true, ""},
			// No data line: only a long comment and other fields.
			{ev(": "+llamaCppPrompt, "event: x", "retry: 1"), "", false, ""},
		} {
			for _, prefix := range []string{"", "\xEF\xBB\xBF"} {
				// The large event first (after the byte-order mark), and
				// between others.
				for _, pos := range []int{0, 1} {
					input := prefix + c.raw + after
					if pos == 1 {
						input = prefix + before + c.raw + after
					}
					want := frameSSE([]byte(input), nil, -1)
					k := 0
					if pos == 1 {
						k = 2
					}
					w := &want.events[k]
					if !bytes.HasSuffix(w.Raw, []byte(c.raw)) {
						t.Fatalf("event %d is %q", k, w.Raw)
					}
					w.Data, w.HasData, w.Type, w.ID = nil, c.hasData, nil, nil
					if c.hasData {
						w.Data = []byte(c.data)
					}
					if c.typ != "" {
						w.Type = []byte(c.typ)
					}
					checkSSELeanSplits(t, input, 512, want)
				}
			}
		}
		// The last event of a stream that ends without its blank line:
		// read lean at Flush, unterminated.
		input := before + "data: " + final
		want := frameSSE([]byte(input), nil, -1)
		want.events[2] = Event{Raw: []byte("data: " + final), Data: []byte(finalLean), HasData: true, Unterminated: true}
		checkSSELeanSplits(t, input, 512, want)
		// An event large for what it says, not for what is dropped: too
		// large, the events before it framed.
		big := ev(`data: {"content":"` + strings.Repeat("x", 600) + `","stop":false,"prompt":"p"}`)
		want = frameSSE([]byte(before), nil, -1)
		want.err = ErrEventTooLarge
		checkSSELeanSplits(t, before+big+after, 512, want)
		checkSSELeanSplits(t, before+ev("data: "+strings.Repeat("[", 300)+strings.Repeat("]", 300)), 512, framed{events: want.events, err: ErrEventTooLarge})
	}
}

// A stream that ends with a run of blank lines longer than the maximum
// (after its last event) has no event there: the run passes in pieces, as
// the leading blank lines of an event that never comes, and Flush returns
// no last piece for it, with Lean as without (it returned an empty,
// unterminated piece, an event of no line, against Flush's rule that an
// unterminated event has a non-blank line). Whatever the cuts and the
// line endings.
func TestSSELeanBlankRunAtEnd(t *testing.T) {
	for _, run := range []string{strings.Repeat("\n", 40), strings.Repeat("\r", 40), strings.Repeat("\r\n", 20)} {
		for _, input := range []string{run, "data: {\"n\":1}\n\n" + run} {
			for _, cuts := range [][]int{nil, everyByte(len(input))} {
				plain := frameWith(&SSEFramer{SkipLarge: true, MaxEventSize: 16}, []byte(input), cuts)
				lean := frameWith(&SSEFramer{SkipLarge: true, Lean: true, MaxEventSize: 16}, []byte(input), cuts)
				if d := diffFramed(lean, plain); d != "" {
					t.Fatalf("%q cut %v: with Lean %s", input, cuts, d)
				}
				for _, ev := range lean.events {
					if ev.Unterminated {
						t.Fatalf("%q cut %v: an unterminated event %s", input, cuts, evString(ev))
					}
				}
			}
		}
	}
}

// blankRun reports whether b, with a leading byte-order mark, is only
// line ends.
func blankRun(b []byte) bool {
	return len(bytes.Trim(bytes.TrimPrefix(b, utf8BOM), "\r\n")) == 0
}

// Without Lean, SkipLarge passes such an event unread, as before; without
// SkipLarge it is ErrEventTooLarge: the lean reading is Lean's alone.
func TestSSELeanOnlyWhenAsked(t *testing.T) {
	final, _ := llamaCppFinal(`[]`)
	input := []byte("data: " + final + "\n\n")
	for _, f := range []*SSEFramer{{SkipLarge: true, MaxEventSize: 512}, {Lean: true, MaxEventSize: 512}} {
		got := frameWith(f, input, nil)
		if f.SkipLarge {
			for _, ev := range got.events {
				if !ev.Skipped || ev.HasData || ev.Data != nil {
					t.Fatalf("SkipLarge alone: %s", evString(ev))
				}
			}
		} else if !errors.Is(got.err, ErrEventTooLarge) {
			t.Fatalf("Lean alone: err %v", got.err)
		}
	}
}

// The reading of an event by the framer with Lean, at any maximum, agrees
// with the framer's reading without one: the same bytes; the events not
// over the maximum the same, whatever the cuts; an event over it (its
// pieces joined) the same but for its Data, which, when the whole Data is
// a JSON object, parses to the same values but those of its top-level
// members of leanDropped (and its ID, not kept: Type only when it is
// error). A lean reading may fail only with ErrEventTooLarge.
func FuzzLeanSSE(f *testing.F) {
	final, _ := llamaCppFinal(`[12366,11]`)
	f.Add([]byte("data: "+final+"\n\ndata: [DONE]\n\n"), uint16(40), uint8(0))
	f.Add([]byte("event: error\r\ndata:{\"prompt\":\"a\nb\",\r\ndata\r\ndata: \"x\":1}\r\n\r\n"), uint16(7), uint8(1))
	f.Add([]byte("\xEF\xBB\xBF: c\rdata: {\"__verbose\":{\"prompt\":\"p\"},\"choices\":[]}\r\r"), uint16(3), uint8(2))
	f.Add([]byte(strings.Repeat("\r", 17)), uint16(1), uint8(0))
	addFixtureSeeds(f, func(b []byte) { f.Add(b, uint16(len(b)/3), uint8(0)) })
	f.Fuzz(func(t *testing.T, input []byte, cut uint16, maxSel uint8) {
		if len(input) > maxFuzzInput {
			t.Skip()
		}
		maxSize := []int{16, 64, 300}[maxSel%3]
		whole := frameSSE(input, nil, -1)
		frame := func(cuts []int) framed {
			return frameWith(&SSEFramer{SkipLarge: true, Lean: true, MaxEventSize: maxSize}, input, cuts)
		}
		lean := frame(nil)
		if lean.err != nil && !errors.Is(lean.err, ErrEventTooLarge) {
			t.Fatalf("err %v", lean.err)
		}
		c := int(cut) % (len(input) + 1)
		cuts := [][]int{{c}}
		if len(input) <= 512 {
			cuts = append(cuts, everyByte(len(input)))
		}
		// The pieces depend on the cuts, the events they make do not
		// (after an error, those before the failing event's pieces).
		joined := func(fr framed) framed {
			if fr.err != nil {
				fr = framed{events: unskipped(fr).events, err: fr.err}
			}
			fr.events = joinSSEPieces(t, fr.events)
			return fr
		}
		got := joined(lean)
		for _, cs := range cuts {
			split := frame(cs)
			if d := diffFramed(joined(split), got); d != "" {
				t.Fatalf("cuts %v: %s", cs, d)
			}
			if split.err == nil && !bytes.Equal(split.concat(), input) {
				t.Fatalf("cuts %v: Raw+Rest = %q", cs, split.concat())
			}
		}
		if lean.err != nil {
			return
		}
		if !bytes.Equal(lean.concat(), input) {
			t.Fatalf("Raw+Rest = %q", lean.concat())
		}
		if n := len(got.events); n == len(whole.events)+1 && !got.events[n-1].Unterminated && blankRun(got.events[n-1].Raw) && bytes.Equal(got.events[n-1].Raw, whole.rest) {
			// A run of blank lines at the end, longer than the maximum:
			// it passed in pieces, the leading blank lines of an event
			// that never came (no last piece); framed whole, it is Rest.
			got.events = got.events[:n-1]
		}
		if len(got.events) != len(whole.events) {
			t.Fatalf("%d events, want %d", len(got.events), len(whole.events))
		}
		for k := range got.events {
			g, w := &got.events[k], &whole.events[k]
			if len(w.Raw) <= maxSize {
				if !eventsEqual(g, w) {
					t.Fatalf("event %d: %s, want %s", k, evString(*g), evString(*w))
				}
				continue
			}
			if !bytes.Equal(g.Raw, w.Raw) || g.HasData != w.HasData || g.Unterminated != w.Unterminated ||
				(string(w.Type) == "error") != (g.Type != nil) || g.Type != nil && string(g.Type) != "error" {
				t.Fatalf("event %d: %s, want %s", k, evString(*g), evString(*w))
			}
			v, err := fastjson.ParseBytes(w.Data)
			if err != nil || v.Type() != fastjson.TypeObject {
				continue
			}
			lv, err := fastjson.ParseBytes(g.Data)
			if err != nil {
				t.Fatalf("event %d: %q read lean as %q: %v", k, w.Data, g.Data, err)
			}
			if a, b := leanCanon(lv), leanCanon(v); a != b {
				t.Fatalf("event %d: %q read lean as %q: %s, want %s", k, w.Data, g.Data, a, b)
			}
		}
	})
}

// The lean event says what the whole says: llama.cpp's last event and
// token events over the maximum, from its native API (on /completion and
// /completions) and its OpenAI-compatible one with __verbose (a server
// started verbose), meter as the whole stream does, with no limit.
func TestLlamaCppLargeEventsMetered(t *testing.T) {
	fixture := string(readFixture(t, "llamacpp/llamacpp-src-completion-stream-native.txt"))
	final, _ := llamaCppFinal(`[]`)
	last := strings.LastIndex(strings.TrimSuffix(fixture, "\n\n"), "\n\n") + 2
	native := fixture[:last] + "data: " + final + "\n\n"
	// A token event with n_probs: its completion_probabilities.
	var probs strings.Builder
	probs.WriteString(`[{"id":12366,"token":" Paris","bytes":[32,80,97,114,105,115],"logprob":-0.01,"top_logprobs":[`)
	for i := range 40 {
		if i > 0 {
			probs.WriteByte(',')
		}
		probs.WriteString(`{"id":` + strconv.Itoa(1000+i) + `,"token":"t","bytes":[116],"logprob":-` + strconv.Itoa(i) + `.5}`)
	}
	probs.WriteString(`]}]`)
	withProbs := strings.Replace(native, `"tokens":[12366],"tokens_evaluated":12,"tokens_predicted":1}`,
		`"tokens":[12366],"tokens_evaluated":12,"tokens_predicted":1,"completion_probabilities":`+probs.String()+`}`, 1)
	if withProbs == native {
		t.Fatal("the fixture's first token event was not found")
	}
	// server_task_result_cmpl_partial/_final::to_json_oaicompat with
	// verbose: __verbose is the native result, the last's with the prompt.
	verbose := func(obj, native string) string { return strings.TrimSuffix(obj, "}") + `,"__verbose":` + native + "}" }
	cmpl := func(text, finish, extra string) string {
		return `{"choices":[{"text":"` + text + `","index":0,"logprobs":null,"finish_reason":` + finish + `}],"created":1764000000,"model":"gpt-3.5-turbo","system_fingerprint":"b7300-0a1b2c3d","object":"text_completion"` + extra + `,"id":"chatcmpl-x"}`
	}
	usage := `,"usage":{"completion_tokens":2,"prompt_tokens":12,"total_tokens":14}`
	completions := "data: " + verbose(cmpl(" Paris", "null", ""), `{"index":0,"content":" Paris","tokens":[12366],"stop":false,"id_slot":0,"tokens_predicted":1,"tokens_evaluated":12}`) + "\n\n" +
		"data: " + verbose(cmpl(".", "null", ""), `{"index":0,"content":".","tokens":[13],"stop":false,"id_slot":0,"tokens_predicted":2,"tokens_evaluated":12}`) + "\n\n" +
		"data: " + verbose(cmpl("", `"stop"`, usage), final) + "\n\n" + "data: [DONE]\n\n"
	// to_json_oaicompat_chat_stream: __verbose on the first of the last
	// chunks (the finish chunk, here), the usage chunk after it.
	chunk := func(delta, finish, extra string) string {
		return `{"choices":[{"finish_reason":` + finish + `,"index":0,"delta":` + delta + `}],"created":1764000000,"id":"chatcmpl-x","model":"gpt-3.5-turbo","system_fingerprint":"b7300-0a1b2c3d","object":"chat.completion.chunk"` + extra + `}`
	}
	chat := "data: " + chunk(`{"role":"assistant","content":null}`, "null", "") + "\n\n" +
		"data: " + chunk(`{"content":" Paris"}`, "null", "") + "\n\n" +
		"data: " + chunk(`{"content":"."}`, "null", "") + "\n\n" +
		"data: " + verbose(chunk(`{}`, `"stop"`, ""), final) + "\n\n" +
		"data: " + `{"choices":[],"created":1764000000,"id":"chatcmpl-x","model":"gpt-3.5-turbo","system_fingerprint":"b7300-0a1b2c3d","object":"chat.completion.chunk"` + usage + "}\n\n" + "data: [DONE]\n\n"
	for _, c := range []struct {
		name     string
		input    string
		apis     []API
		isl, osl int
	}{
		{"native", native, []API{APILlamaCpp, APICompletions}, 12, 6},
		{"native with probabilities", withProbs, []API{APILlamaCpp, APICompletions}, 12, 6},
		{"completions, verbose", completions, []API{APICompletions}, 12, 2},
		{"chat, verbose", chat, []API{APIChat}, 12, 2},
	} {
		for _, api := range c.apis {
			input := []byte(c.input)
			whole := runMeterWith(&SSEFramer{MaxEventSize: -1}, input, nil, newParser(api))
			if r := whole.rec; r.ISL != c.isl || r.OSL != c.osl || r.UsageSource != UsageUpstream || whole.parseErrs != 0 {
				t.Fatalf("%s on %v, whole: isl %d osl %d (%v), parse errors %d", c.name, api, r.ISL, r.OSL, r.UsageSource, whole.parseErrs)
			}
			for _, cuts := range [][]int{nil, everyByte(len(input)), {len(input) / 2}} {
				got := runMeterWith(&SSEFramer{MaxEventSize: 1024, SkipLarge: true, Lean: true}, input, cuts, newParser(api))
				if !runsEqual(&got, &whole) {
					t.Fatalf("%s on %v, read lean (cuts %d): %+v, want %+v", c.name, api, len(cuts), got.rec, whole.rec)
				}
			}
		}
	}
}
