package meter

import (
	"fmt"
	"testing"
)

// choicesRun feeds the chunks (each an event's data) of a stream of api
// through a parser and a Meter told the request's choices
// (SetStreamChoices), and reports what the Meter says of its end.
func choicesRun(t *testing.T, api API, choices int, chunks []string) (finished, partly bool) {
	t.Helper()
	p := newParser(api)
	var (
		m    Meter
		info EventInfo
	)
	m.Start(testT0)
	m.SetStreamChoices(choices)
	for k, c := range chunks {
		if err := p.Parse(dataEvent(c), &info); err != nil {
			t.Fatalf("chunk %d %s: %v", k, c, err)
		}
		m.Observe(&info, stamp(k))
	}
	return m.Finished(), m.PartlyFinished()
}

// chat is a chat chunk of one choice, i, with content, or with the
// finish_reason when fin is true.
func chat(i int, fin bool) string {
	if fin {
		return fmt.Sprintf(`{"choices":[{"index":%d,"delta":{},"finish_reason":"stop"}]}`, i)
	}
	return fmt.Sprintf(`{"choices":[{"index":%d,"delta":{"content":"x"},"finish_reason":null}]}`, i)
}

// A chat or completions stream of several choices has ended only once
// every choice the request asked for had its finish_reason: one choice's
// end is not the others'. A stream cut between them (the engine's
// connection closed without [DONE]) is not finished, but partly; a second
// finish_reason of one choice does not stand for another's; choices from
// index 64 on are not told apart, so of more than 64 the first 64 must
// end, and one the request did not ask for ends nothing. A stream whose
// chunks all carried the first choice (an engine that reads no n) ends at
// its finish_reason, and so does one whose count is one or not known, as
// before.
func TestStreamOfSeveralChoicesFinished(t *testing.T) {
	seq := func(parts ...[]string) []string { return concatStrings(parts...) }
	first := []string{chat(0, false), chat(1, false), chat(0, false), chat(1, false)}
	upTo := func(n int, fin bool) []string {
		var out []string
		for i := range n {
			out = append(out, chat(i, fin))
		}
		return out
	}
	for _, c := range []struct {
		name             string
		api              API
		choices          int
		chunks           []string
		finished, partly bool
	}{
		{"n 2, cut after choice 0's finish", APIChat, 2, seq(first, []string{chat(0, true), chat(1, false)}), false, true},
		{"n 2, both finished", APIChat, 2, seq(first, []string{chat(0, true), chat(1, false), chat(1, true)}), true, false},
		{"n 2, choice 1 first", APIChat, 2, seq(first, []string{chat(1, true), chat(0, true)}), true, false},
		{"n 2, both in one chunk", APIChat, 2, seq(first, []string{`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"},{"index":1,"delta":{},"finish_reason":"length"}]}`}), true, false},
		{"n 2, choice 0's finish twice", APIChat, 2, seq(first, []string{chat(0, true), chat(0, true)}), false, true},
		{"n 2, choice 1's finish twice", APIChat, 2, seq(first, []string{chat(1, true), chat(1, true)}), false, true},
		{"n 2, no finish at all", APIChat, 2, first, false, false},
		{"n 2, a choice not asked for ends", APIChat, 2, seq(first, []string{chat(0, true), chat(64, true), chat(100, true), chat(2, true)}), false, true},
		{"n 2 asked, one choice streamed", APIChat, 2, []string{chat(0, false), chat(0, true)}, true, false},
		{"n 3, two finished", APIChat, 3, seq(upTo(3, false), upTo(2, true)), false, true},
		{"n 64, every one finished", APIChat, 64, seq(upTo(64, false), upTo(64, true)), true, false},
		{"n 64, choice 63 running", APIChat, 64, seq(upTo(64, false), upTo(63, true)), false, true},
		{"n 70, the first 64 finished", APIChat, 70, seq(upTo(70, false), upTo(64, true)), true, false},
		{"n 70, all but choice 0 finished", APIChat, 70, seq(upTo(70, false), upTo(70, true)[1:]), false, true},
		{"count not known (0)", APIChat, 0, seq(first, []string{chat(0, true)}), true, false},
		{"one choice asked", APIChat, 1, seq(first, []string{chat(0, true)}), true, false},
		// 2 prompts, n 2: choices 0 to 3, a prompt's one after the other
		{"2 prompts of n 2, three finished", APICompletions, 4, []string{
			`{"choices":[{"index":0,"text":"a","finish_reason":null}]}`,
			`{"choices":[{"index":3,"text":"b","finish_reason":null}]}`,
			`{"choices":[{"index":0,"text":"","finish_reason":"stop"}]}`,
			`{"choices":[{"index":1,"text":"c","finish_reason":"length"}]}`,
			`{"choices":[{"index":2,"text":"d","finish_reason":"stop"}]}`,
		}, false, true},
		{"2 prompts of n 2, all finished", APICompletions, 4, []string{
			`{"choices":[{"index":0,"text":"a","finish_reason":null}]}`,
			`{"choices":[{"index":3,"text":"b","finish_reason":"stop"}]}`,
			`{"choices":[{"index":0,"text":"","finish_reason":"stop"}]}`,
			`{"choices":[{"index":1,"text":"c","finish_reason":"length"}]}`,
			`{"choices":[{"index":2,"text":"d","finish_reason":"stop"}]}`,
		}, true, false},
		// TGI's completions before 2.2 (router/src/server.rs, completions):
		// no [DONE], every chunk's finish_reason "" (the last one's too,
		// before 2.3), one choice a prompt (it reads no n): a finish_reason
		// that names no reason does not say which choices ended, so any
		// ends the stream, as before choices were counted
		{"TGI's completions, 2 prompts, n 2 not read", APICompletions, 4, []string{
			`{"object":"text_completion","id":"","created":1,"choices":[{"index":0,"text":"A","logprobs":null,"finish_reason":""}],"model":"m","system_fingerprint":"2.1.1-native"}`,
			`{"object":"text_completion","id":"","created":1,"choices":[{"index":1,"text":"B","logprobs":null,"finish_reason":""}],"model":"m","system_fingerprint":"2.1.1-native"}`,
			`{"object":"text_completion","id":"","created":1,"choices":[{"index":1,"text":".","logprobs":null,"finish_reason":""}],"model":"m","system_fingerprint":"2.1.1-native"}`,
		}, true, false},
		// llama.cpp's native stream on /completions, no [DONE]: its last
		// events, cut to response_fields, name no choice: any end ends it
		{"llama.cpp native, 2 prompts", APICompletions, 2, []string{
			`{"index":0,"content":"A","stop":false,"tokens_predicted":1,"tokens_evaluated":3}`,
			`{"index":1,"content":"B","stop":false,"tokens_predicted":1,"tokens_evaluated":3}`,
			`{"content":"A.","tokens_predicted":2}`,
		}, true, false},
	} {
		finished, partly := choicesRun(t, c.api, c.choices, c.chunks)
		if finished != c.finished || partly != c.partly {
			t.Errorf("%s: finished %v, partly %v; want %v, %v", c.name, finished, partly, c.finished, c.partly)
		}
	}
}

// The sum of each choice's usage on its finish chunk (llama.cpp's
// /v1/completions of several prompts) is the whole answer's only once
// every choice asked for had its own, [DONE] or not.
func TestFinishUsageSumWaitsForEveryChoice(t *testing.T) {
	fin := func(i, completion int) string {
		return fmt.Sprintf(`data: {"choices":[{"index":%d,"text":"","finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":%d}}`+"\n\n", i, completion)
	}
	text := func(i int) string {
		return fmt.Sprintf(`data: {"choices":[{"index":%d,"text":"x","finish_reason":null}]}`+"\n\n", i)
	}
	for _, c := range []struct {
		name     string
		choices  int
		stream   string
		isl, osl int
		source   UsageSource
	}{
		{"3 prompts, every one ended", 3, text(0) + text(1) + text(2) + fin(0, 2) + fin(1, 3) + fin(2, 4) + "data: [DONE]\n\n", 15, 9, UsageUpstream},
		{"3 prompts, one never ended", 3, text(0) + text(1) + text(2) + fin(0, 2) + fin(1, 3) + "data: [DONE]\n\n", Unknown, 3, UsageEstimate},
		{"count not known", 0, text(0) + text(1) + text(2) + fin(0, 2) + fin(1, 3) + "data: [DONE]\n\n", 10, 5, UsageUpstream},
	} {
		var (
			m    Meter
			f    SSEFramer
			ev   Event
			info EventInfo
			rec  Record
		)
		p := newParser(APICompletions)
		m.Start(testT0)
		m.SetStreamChoices(c.choices)
		f.Feed([]byte(c.stream))
		for k := 0; ; k++ {
			ok, err := f.Next(&ev)
			if err != nil || !ok {
				break
			}
			if err := p.Parse(&ev, &info); err != nil {
				t.Fatal(err)
			}
			m.Observe(&info, stamp(k))
		}
		rec.Reset()
		m.Finish(&rec)
		if rec.ISL != c.isl || rec.OSL != c.osl || rec.UsageSource != c.source {
			t.Errorf("%s: isl %d osl %d (%v); want %d %d (%v)", c.name, rec.ISL, rec.OSL, rec.UsageSource, c.isl, c.osl, c.source)
		}
	}
}

func concatStrings(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
