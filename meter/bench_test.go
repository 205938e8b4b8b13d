package meter

import (
	"testing"
	"time"
)

// Benchmarks run over recorded streams. Each op is one whole stream; the
// ns/event metric divides by the number of SSE events in it.

const benchVLLM = "vllm/pai-crusoe-vllm0.24-chat-stream-include-usage.txt"

var benchStreams = []struct{ name, file string }{
	{"vllm", benchVLLM},
	{"deepseek", "openai-compat-other/pai-deepseek-chat-stream-reasoning-content.txt"},
	{"perplexity-crlf", "openai-compat-other/lcgo-perplexity-chat-stream-crlf.txt"},
}

// eventsOf frames input and returns copies of its events.
func eventsOf(b *testing.B, input []byte) []Event {
	fr := frameSSE(input, nil, 0)
	if fr.err != nil || len(fr.events) == 0 {
		b.Fatalf("framing: %v, %d events", fr.err, len(fr.events))
	}
	return fr.events
}

// BenchmarkChatStream: framer + ChatParser + Meter + Finish over a real vLLM
// stream, fed in reads of one event each (as a streaming server writes them)
// and in one read.
func BenchmarkChatStream(b *testing.B) {
	input := readFixture(b, benchVLLM)
	events := eventsOf(b, input)
	for _, mode := range []string{"read-per-event", "one-read"} {
		b.Run(mode, func(b *testing.B) {
			var (
				f    SSEFramer
				p    = newParser(APIChat)
				m    Meter
				rec  Record
				ev   Event
				info EventInfo
			)
			var reads [][]byte
			if mode == "one-read" {
				reads = [][]byte{input}
			} else {
				off := 0
				for _, e := range events {
					reads = append(reads, input[off:off+len(e.Raw)])
					off += len(e.Raw)
				}
			}
			t := time.Now()
			b.SetBytes(int64(len(input)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f.Reset()
				p.Reset()
				m.Start(t)
				for _, r := range reads {
					f.Feed(r)
					for {
						ok, err := f.Next(&ev)
						if err != nil || !ok {
							break
						}
						if err := p.Parse(&ev, &info); err != nil {
							b.Fatal(err)
						}
						m.Observe(&info, t)
					}
				}
				m.Finish(&rec)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/event")
		})
	}
}

// BenchmarkSSEFramer: framing only, the whole stream in one Feed.
func BenchmarkSSEFramer(b *testing.B) {
	for _, s := range benchStreams {
		b.Run(s.name, func(b *testing.B) {
			input := readFixture(b, s.file)
			n := len(eventsOf(b, input))
			var (
				f  SSEFramer
				ev Event
			)
			b.SetBytes(int64(len(input)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f.Reset()
				f.Feed(input)
				for {
					ok, err := f.Next(&ev)
					if err != nil || !ok {
						break
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
		})
	}
}

// BenchmarkChatParser: ChatParser.Parse only, over pre-framed events; with
// the shape memo (memo.go) and without it ("parse-every-chunk"), the
// baseline it is quoted against.
func BenchmarkChatParser(b *testing.B) {
	for _, s := range benchStreams {
		b.Run(s.name, func(b *testing.B) { benchChatParser(b, s.file) })
		b.Run(s.name+"/parse-every-chunk", func(b *testing.B) {
			defer func(v bool) { noMemo = v }(noMemo)
			noMemo = true
			benchChatParser(b, s.file)
		})
	}
}

func benchChatParser(b *testing.B, file string) {
	input := readFixture(b, file)
	events := eventsOf(b, input)
	var (
		p    = newParser(APIChat)
		info EventInfo
	)
	b.SetBytes(int64(len(input)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.Reset()
		for k := range events {
			if err := p.Parse(&events[k], &info); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/event")
}

// BenchmarkMeterObserve: one token event observed (steady state).
func BenchmarkMeterObserve(b *testing.B) {
	var m Meter
	info := EventInfo{Token: true, Content: true, PromptTokens: Unknown, CompletionTokens: Unknown}
	t := time.Now()
	m.Start(t)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if i%4096 == 0 {
			m.Start(t) // keep the ITL slice bounded
		}
		m.Observe(&info, t)
	}
}

// BenchmarkRecordAppendJSON: one record with 100 gaps, into a reused buffer.
func BenchmarkRecordAppendJSON(b *testing.B) {
	r := fullRecord()
	for i := 0; i < 96; i++ {
		r.ITL = append(r.ITL, time.Duration(i)*1234567)
	}
	var buf []byte
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = r.AppendJSON(buf[:0])
	}
	b.SetBytes(int64(len(buf)))
}
