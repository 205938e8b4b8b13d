package meter

import (
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
			err := ParseResponseBody(c.api, body, &info)
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
