package proxy

import (
	"runtime"
	"strings"
	"testing"

	"github.com/goodput/goodput/meter"
)

// echoBenchBodies are request bodies of about size bytes with echo whose
// text echoText reads: a long prompt, plain or escaped, a last message of
// many small parts (the costliest shapes per byte of body, one with long
// escaped names), and many messages.
func echoBenchBodies(size int) []struct {
	name string
	api  meter.API
	body string
} {
	fill := func(unit string) string { return strings.Repeat(unit, size/len(unit)) }
	chat := func(parts string) string {
		return `{"model":"m","echo":true,"messages":[{"role":"assistant","content":[` + parts[:len(parts)-1] + `]}]}`
	}
	return []struct {
		name string
		api  meter.API
		body string
	}{
		{"prompt", meter.APICompletions, `{"model":"m","echo":true,"max_tokens":0,"prompt":"` + fill("The capital of France is ") + `"}`},
		{"escaped prompt", meter.APICompletions, `{"model":"m","echo":true,"max_tokens":0,"prompt":"` + fill(`\u00e9\n`) + `"}`},
		{"content string", meter.APIChat, `{"model":"m","echo":true,"messages":[{"role":"assistant","content":"` + fill("The capital of France is ") + `"}]}`},
		{"bare strings", meter.APIChat, chat(fill(`"a",`))},
		{"empty parts", meter.APIChat, chat(fill(`{},`))},
		{"numbers", meter.APIChat, chat(fill(`1,`))},
		{"text parts", meter.APIChat, chat(fill(`{"type":"text","text":"a"},`))},
		{"image parts", meter.APIChat, chat(fill(`{"type":"image_url","image_url":{"url":"u"}},`))},
		{"escaped names", meter.APIChat, chat(fill(`{"` + strings.Repeat(`\u0074`, 100) + `":1},`))},
		{"many messages", meter.APIChat, `{"model":"m","echo":true,"messages":[` + fill(`{"role":"user","content":"a"},`) + `{"role":"assistant","content":"b"}]}`},
	}
}

// BenchmarkEchoText: the cost of reading the echo's text from a 4 MiB
// body, per byte of body (ns/B, B/B: bytes allocated per byte).
func BenchmarkEchoText(b *testing.B) {
	for _, c := range echoBenchBodies(4 << 20) {
		b.Run(c.name, func(b *testing.B) {
			body := []byte(c.body)
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			for b.Loop() {
				echoText(c.api, body)
			}
			runtime.ReadMemStats(&ms1)
			n := float64(b.N) * float64(len(body))
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/B")
			b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/n, "B/B")
		})
	}
}
