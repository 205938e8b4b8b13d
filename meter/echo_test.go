package meter

import (
	"testing"
	"time"
)

// echoParser is the chat or completions parser of a request whose echo
// option makes the engine send back e (StreamParser.SetEcho).
type echoParser struct {
	apiParser
	e Echo
}

func (p *echoParser) Reset() { p.p.Reset(); p.p.SetEcho(p.e) }

// withoutUsageChunks drops the usage-only events of a stream: what an
// engine that sends no usage (OpenAI's API, without include_usage) sends.
func withoutUsageChunks(t *testing.T, input []byte, p Parser) []byte {
	t.Helper()
	var (
		f    SSEFramer
		ev   Event
		info EventInfo
		kept []byte
	)
	p.Reset()
	f.Feed(input)
	for {
		ok, err := f.Next(&ev)
		if err != nil || !ok {
			break
		}
		if err := p.Parse(&ev, &info); err != nil {
			t.Fatal(err)
		}
		if !info.UsageOnly {
			kept = append(kept, ev.Raw...)
		}
	}
	return append(kept, f.Rest()...)
}

// TestVLLMEcho: streams built from vLLM's source for requests with echo.
// Event k is stamped at (k+1) ms.
//   - completions, echo and max_tokens 0: the one chunk is the prompt: no
//     token event, no TTFT; OSL is vLLM's count (1: it runs max_tokens 1
//     and drops the token), or, without a count, 0 (it was 1: the prompt
//     passed for a token);
//   - completions, echo and max_tokens 3: the prompt comes with the first
//     token, in one chunk: that chunk is the first token event (nothing to
//     fix, and nothing must change);
//   - chat, echo: the echo chunk (the last message's content, sent back)
//     is no token event and no content: 6 token events, not 7; the
//     estimate is 4, not 5; TTFTContent is the first token's chunk.
func TestVLLMEcho(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, c := range []struct {
		file                       string
		api                        API
		echo                       Echo
		events                     int
		ttft, ttftContent, e2e     time.Duration
		isl, osl, oslWithoutUsage  int
		oslSource, estimatedSource UsageSource
	}{
		{"vllm/vllm-src-completions-stream-echo-max-tokens-0.txt", APICompletions, EchoOnly,
			0, Unknown, Unknown, Unknown, 6, 1, 0, UsageUpstream, UsageEstimate},
		{"vllm/vllm-src-completions-stream-echo.txt", APICompletions, EchoNone,
			3, ms(1), ms(1), ms(3), 6, 3, 3, UsageUpstream, UsageEstimate},
		{"vllm/vllm-src-chat-stream-echo.txt", APIChat, EchoChunk,
			6, ms(1), ms(3), ms(7), 18, 5, 4, UsageUpstream, UsageEstimate},
	} {
		t.Run(c.file, func(t *testing.T) {
			if provenance(t)[c.file] == "" {
				t.Fatalf("%s is not in PROVENANCE.tsv", c.file)
			}
			p := &echoParser{apiParser{api: c.api}, c.echo}
			input := readFixture(t, c.file)
			for _, variant := range []struct {
				name   string
				input  []byte
				isl    int
				osl    int
				source UsageSource
			}{
				{"as sent", input, c.isl, c.osl, c.oslSource},
				{"without its usage chunk", withoutUsageChunks(t, input, p), Unknown, c.oslWithoutUsage, c.estimatedSource},
			} {
				whole := runMeter(variant.input, nil, p)
				r := whole.rec
				if r.Events != c.events || r.TTFT != c.ttft || r.TTFTContent != c.ttftContent || r.E2E != c.e2e ||
					r.ISL != variant.isl || r.OSL != variant.osl || r.UsageSource != variant.source || whole.parseErrs != 0 || !whole.done {
					t.Errorf("%s: events %d, TTFT %v, TTFTContent %v, E2E %v, ISL %d, OSL %d (%v); want %d, %v, %v, %v, %d, %d (%v)",
						variant.name, r.Events, r.TTFT, r.TTFTContent, r.E2E, r.ISL, r.OSL, r.UsageSource,
						c.events, c.ttft, c.ttftContent, c.e2e, variant.isl, variant.osl, variant.source)
				}
				if got := runMeter(variant.input, everyByte(len(variant.input)), p); !runsEqual(&got, &whole) {
					t.Errorf("%s one byte at a time: %+v, want %+v", variant.name, got.rec, whole.rec)
				}
			}
		})
	}
}
