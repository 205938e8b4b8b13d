package meter

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// An answer made large by values the meter never reads (an unknown
// member's array of numbers, many small members, anywhere) is read without
// building them: 1 MiB of them cost 17 to 240 times its size (a read as
// whole: FuzzLeanAnswer).
func TestWideAnswerParsedLean(t *testing.T) {
	var wide strings.Builder
	for i := range 100_000 {
		fmt.Fprintf(&wide, `"a%d":0,`, i)
	}
	nums := strings.Repeat("0,", 500_000) + "0"
	for _, c := range []struct {
		name string
		api  API
		body string
	}{
		{"top members", APIChat, `{"id":"c",` + wide.String() + `"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":7}}`},
		{"unknown array", APIChat, `{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop","hidden_states":[` + nums + `]}],"usage":{"prompt_tokens":5,"completion_tokens":7}}`},
		{"message members", APIChat, `{"choices":[{"index":0,"message":{"role":"assistant",` + wide.String() + `"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":7}}`},
		{"usage members", APIResponses, `{"status":"completed","output":[{"type":"message","content":[` + nums + `]}],"usage":{` + wide.String() + `"input_tokens":5,"output_tokens":7}}`},
		{"ollama", APIOllamaChat, `{"model":"m","message":{"role":"assistant","content":"hi","images":[` + nums + `]},"done":true,` + wide.String() + `"prompt_eval_count":5,"eval_count":7}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := []byte(c.body)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			var info EventInfo
			err := ParseResponseBody(c.api, body, 1, &info)
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d-byte answer: %d bytes allocated (%.2f times its size), %v", len(body), alloc, float64(alloc)/float64(len(body)), took)
			if alloc > 2*uint64(len(body)) {
				t.Errorf("reading a %d-byte answer allocated %d bytes (%.0f times its size)", len(body), alloc, float64(alloc)/float64(len(body)))
			}
			if !info.HasUsage || info.PromptTokens != 5 || info.CompletionTokens != 7 || !info.Token || !info.Content || !info.Finish || info.Error {
				t.Fatalf("read %+v", info)
			}
		})
	}
}

// wideArray returns head, n elements elem (each %d in it replaced by the
// element's place) separated by commas, and tail.
func wideArray(n int, elem, head, tail string) []byte {
	var b strings.Builder
	b.WriteString(head)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		if strings.Contains(elem, "%d") {
			fmt.Fprintf(&b, elem, i)
		} else {
			b.WriteString(elem)
		}
	}
	b.WriteString(tail)
	return []byte(b.String())
}

// An answer or a stream's chunk whose choices are many small elements (a
// broken or hostile engine's: 500,000 {}, or {"index":i}), or an answer
// that is an array of many small results, is read one element at a time:
// it costs the gateway a small part of its size (some 2 MB of them cost
// 40 to 167 times its size, as many values in one parse), and reads as it
// does parsed whole (checked at a size that parse can afford).
func TestWideChoicesParsedLean(t *testing.T) {
	const usage = `"usage":{"prompt_tokens":5,"completion_tokens":7}`
	for _, c := range []struct {
		name             string
		api              API
		elem, head, tail string
	}{
		{"empty choices", APIChat, `{}`, `{"choices":[`, `],` + usage + `}`},
		{"index 0", APIChat, `{"index":0}`, `{"choices":[`, `],` + usage + `}`},
		{"index i", APIChat, `{"index":%d}`, `{"choices":[`, `],` + usage + `}`},
		{"finished", APIChat, `{"index":%d,"finish_reason":"stop"}`, `{"choices":[`, `],` + usage + `}`},
		{"mixed", APICompletions, `1,[],{"index":%d,"text":""}`, `{"choices":[`, `,{"text":"x"}],` + usage + `}`},
		{"results", APILlamaCpp, `{}`, `[`, `]`},
		{"completions results", APICompletions, `{"choices":[{}]}`, `[`, `]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Read whole and lean alike at 100 KB, without allocating more
			// than twice the size.
			small := wideArray(100<<10/len(c.elem), c.elem, c.head, c.tail)
			info, full := parseLeanAndWhole(t, c.api, small)
			if !sameInfo(info, full) {
				t.Errorf("%d bytes: lean %+v, whole %+v", len(small), info, full)
			}
			ev, fullEv := parseEventLeanAndWhole(t, c.api, small)
			if !sameInfo(ev, fullEv) {
				t.Errorf("%d bytes as an event: lean %+v, whole %+v", len(small), ev, fullEv)
			}

			body := wideArray(1500<<10/len(c.elem), c.elem, c.head, c.tail)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			var large EventInfo
			err := ParseResponseBody(c.api, body, 1, &large)
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d-byte answer: %d bytes allocated (%.2f times its size), %v", len(body), alloc, float64(alloc)/float64(len(body)), took)
			if alloc > 2*uint64(len(body)) {
				t.Errorf("reading a %d-byte answer allocated %d bytes (%.0f times its size)", len(body), alloc, float64(alloc)/float64(len(body)))
			}
			if err != nil || !sameInfo(large, info) {
				t.Errorf("%d bytes read %+v %v, %d bytes %+v", len(body), large, err, len(small), info)
			}

			var p StreamParser
			runtime.GC()
			runtime.ReadMemStats(&before)
			start = time.Now()
			err = p.Parse(c.api, &Event{Data: body, HasData: true}, &large)
			took = time.Since(start)
			runtime.ReadMemStats(&after)
			alloc = after.TotalAlloc - before.TotalAlloc
			t.Logf("%d-byte event: %d bytes allocated (%.2f times its size), %v", len(body), alloc, float64(alloc)/float64(len(body)), took)
			if alloc > 2*uint64(len(body)) {
				t.Errorf("reading a %d-byte event allocated %d bytes (%.0f times its size)", len(body), alloc, float64(alloc)/float64(len(body)))
			}
			if err != nil && c.head != "[" || !sameInfo(large, ev) {
				t.Errorf("%d bytes as an event read %+v %v, %d bytes %+v", len(body), large, err, len(small), ev)
			}
		})
	}
}

// parseEventLeanAndWhole parses data, an event of api larger than
// leanFrom, whole (full) and as the gateway does (info), and fails t when
// the latter allocated more than twice its size.
func parseEventLeanAndWhole(t *testing.T, api API, data []byte) (info, full EventInfo) {
	t.Helper()
	defer func(n int) { leanFrom = n }(leanFrom)
	leanFrom = 1 << 30
	var p StreamParser
	ferr := p.Parse(api, &Event{Data: data, HasData: true}, &full)
	full.ErrorMessage = bytes.Clone(full.ErrorMessage)
	leanFrom = testLeanFrom
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p.Reset()
	err := p.Parse(api, &Event{Data: data, HasData: true}, &info)
	runtime.ReadMemStats(&after)
	if !sameErr(err, ferr) {
		t.Fatalf("lean %v, whole %v", err, ferr)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 2*uint64(len(data)) {
		t.Errorf("reading a %d-byte event allocated %d bytes (%.0f times its size)", len(data), alloc, float64(alloc)/float64(len(data)))
	}
	return info, full
}
