package meter

import (
	"strings"
	"testing"
	"time"
)

// echoParser is the chat or completions parser of a request whose echo
// option makes the engine send back e, text (StreamParser.SetEcho).
type echoParser struct {
	apiParser
	e    Echo
	text EchoText
}

func (p *echoParser) Reset() { p.p.Reset(); p.p.SetEcho(p.e, p.text) }

// echoOfTexts is the EchoText of the given text parts, then others parts
// that are not text.
func echoOfTexts(others int, texts ...string) EchoText {
	var t EchoText
	for _, s := range texts {
		t.AddText([]byte(s))
	}
	for range others {
		t.AddOther()
	}
	return t
}

// echoOther stands, in echoOfParts, for a part that is not text.
const echoOther = "\x00other"

// echoOfParts is the EchoText of the given parts, in order.
func echoOfParts(parts ...string) EchoText {
	var t EchoText
	for _, s := range parts {
		if s == echoOther {
			t.AddOther()
		} else {
			t.AddText([]byte(s))
		}
	}
	return t
}

// The last message, and the prompt, of the requests the vLLM fixtures
// answer.
const fixtureEcho = "The capital of France is"

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
			p := &echoParser{apiParser{api: c.api}, c.echo, echoOfTexts(0, fixtureEcho)}
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

// TestEchoIgnored: an engine that ignores echo (SGLang, llama.cpp, TGI,
// Ollama's OpenAI API, OpenAI's chat) sends its output as it would without
// it: every recorded OpenAI-shaped stream, metered for a request that
// asked for echo (chat: a last assistant message; completions: max_tokens
// 0), gives the record it gives without, whole and one byte at a time. The
// echo is recognised by its text, not its place: behind these engines the
// choice's second chunk (the first token's, after a role chunk) was taken
// for the echo, and TTFT measured on the second token, OSL by events one
// short; with max_tokens 0 every chunk was.
func TestEchoIgnored(t *testing.T) {
	for file, completions := range openAIFixtures(t) {
		if strings.Contains(file, "echo") {
			continue
		}
		t.Run(file, func(t *testing.T) {
			input := readFixture(t, file)
			plain := parserFor(completions)
			echo := &echoParser{apiParser{api: APIChat}, EchoChunk, echoOfTexts(0, fixtureEcho)}
			if completions {
				echo = &echoParser{apiParser{api: APICompletions}, EchoOnly, echoOfTexts(0, fixtureEcho)}
			}
			want := runMeter(input, nil, plain)
			for _, cuts := range [][]int{nil, everyByte(len(input))} {
				if got := runMeter(input, cuts, echo); !runsEqual(&got, &want) {
					g, w := &got.rec, &want.rec
					t.Errorf("with echo asked (cut at %d places): events %d, TTFT %v, TTFTContent %v, OSL %d; want %d, %v, %v, %d",
						len(cuts), g.Events, g.TTFT, g.TTFTContent, g.OSL, w.Events, w.TTFT, w.TTFTContent, w.OSL)
				}
			}
		})
	}
}

// TestEchoText: vLLM's echo chunk is recognised by its text as vLLM makes
// it from the request (EchoText), in streams built from vLLM's source: the
// last message's text parts joined with "\n"; after the model's
// placeholder lines when the message has an image; any text when the
// request does not tell it; each choice's own echo for n = 2. A first
// token whose text is not the echo's is a token event.
func TestEchoText(t *testing.T) {
	base := string(readFixture(t, "vllm/vllm-src-chat-stream-echo.txt"))
	withEcho := func(content string) []byte {
		return []byte(strings.Replace(base, `"content":"The capital of France is"`, `"content":"`+content+`"`, 1))
	}
	role := func(i int) string {
		return `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":` + string(rune('0'+i)) + `,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n"
	}
	chunk := func(i int, content, finish string) string {
		return `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":` + string(rune('0'+i)) + `,"delta":{"content":"` + content + `"},"logprobs":null,"finish_reason":` + finish + `}]}` + "\n\n"
	}
	twoChoices := role(0) + role(1) + chunk(0, "Hi", "null") + chunk(1, "Hi", "null") +
		chunk(0, " a", "null") + chunk(1, " b", "null") + chunk(0, "", `"stop"`) + chunk(1, "", `"stop"`) + "data: [DONE]\n\n"
	for _, c := range []struct {
		name   string
		input  []byte
		text   EchoText
		events int
	}{
		{"the text", withEcho(fixtureEcho), echoOfTexts(0, fixtureEcho), 6},
		{"another text: a first token", withEcho(fixtureEcho), echoOfTexts(0, "The capital of Spain is"), 7},
		{"a prefix of it: a first token", withEcho(fixtureEcho), echoOfTexts(0, "The capital"), 7},
		{"text parts, the empty one left out", withEcho(`The capital\nof France is`), echoOfTexts(0, "The capital", "", "of France is"), 6},
		{"an image, then the text", withEcho(`<image>\nThe capital of France is`), echoOfTexts(1, fixtureEcho), 6},
		{"two images, then the text", withEcho(`<image>\n<image>\nThe capital of France is`), echoOfTexts(2, fixtureEcho), 6},
		{"an image, and another text", withEcho(`<image>\nThe capital of France is`), echoOfTexts(1, "of France is"), 7},
		{"an image alone", withEcho(`<image>`), echoOfTexts(1), 6},
		// The text holds the image's placeholder itself (or the model has
		// none): vLLM adds no line before it, and echoes the text alone.
		{"an image whose placeholder the text holds", withEcho(`<image>\nThe capital of France is`), echoOfTexts(1, "<image>\nThe capital of France is"), 6},
		{"an image without a placeholder", withEcho(fixtureEcho), echoOfTexts(1, fixtureEcho), 6},
		// vLLM with --interleave-mm-strings puts each placeholder where
		// its part is, joined with "\n" as the texts are (a model without
		// placeholders gets the generic one). The texts before the first
		// image and after the last are known, what is between is not.
		{"interleaved: a text, then an image", withEcho(`The capital of France is\n<image>`), echoOfParts(fixtureEcho, echoOther), 6},
		{"interleaved: a text, then an image without placeholder", withEcho(`The capital of France is\n<##IMAGE##>`), echoOfParts(fixtureEcho, echoOther), 6},
		{"interleaved: a text, then two images", withEcho(`The capital of France is\n<image>\n<image>`), echoOfParts(fixtureEcho, echoOther, echoOther), 6},
		{"interleaved: texts around an image", withEcho(`The capital\n<image>\nof France is`), echoOfParts("The capital", echoOther, "of France is"), 6},
		{"interleaved: texts around images and between", withEcho(`The capital\n<image>\nof\n<image>\nFrance is`), echoOfParts("The capital", echoOther, "of", echoOther, "France is"), 6},
		{"interleaved: an image, then texts", withEcho(`<image>\nThe capital\nof France is`), echoOfParts(echoOther, "The capital", "of France is"), 6},
		{"not interleaved: texts around an image", withEcho(`<image>\nThe capital\nof France is`), echoOfParts("The capital", echoOther, "of France is"), 6},
		{"not interleaved: a text, then an image", withEcho(`<image>\nThe capital of France is`), echoOfParts(fixtureEcho, echoOther), 6},
		{"interleaved: another text before the image", withEcho(`The capital of Spain is\n<image>`), echoOfParts(fixtureEcho, echoOther), 7},
		{"interleaved: another text after the image", withEcho(`The capital\n<image>\nof Spain is`), echoOfParts("The capital", echoOther, "of France is"), 7},
		{"interleaved: the text before, and no placeholder line", withEcho(`The capital of France is\n`), echoOfParts(fixtureEcho, echoOther), 7},
		{"interleaved: the texts around, and nothing between", withEcho(`The capital\nof France is`), echoOfParts("The capital", echoOther, "of France is"), 6}, // the texts joined: vLLM's echo without --interleave-mm-strings, for a model without placeholders
		{"interleaved: the texts around, and an empty line between", withEcho(`The capital\n\nof France is`), echoOfParts("The capital", echoOther, "of France is"), 7},
		// With an image first and last, no text is known at either end:
		// the interleaved echo is not told (a token event).
		{"interleaved: images around the text", withEcho(`<image>\nThe capital of France is\n<image>`), echoOfParts(echoOther, fixtureEcho, echoOther), 7},
		{"n = 2: each choice's echo", []byte(twoChoices), echoOfTexts(0, "Hi"), 6},
		{"n = 2: another text", []byte(twoChoices), echoOfTexts(0, "Ho"), 8},
	} {
		p := &echoParser{apiParser{api: APIChat}, EchoChunk, c.text}
		whole := runMeter(c.input, nil, p)
		if whole.rec.Events != c.events || whole.parseErrs != 0 || !whole.done {
			t.Errorf("%s: %d token events (parse errors %d, done %v), want %d", c.name, whole.rec.Events, whole.parseErrs, whole.done, c.events)
		}
		if got := runMeter(c.input, everyByte(len(c.input)), p); !runsEqual(&got, &whole) {
			t.Errorf("%s one byte at a time: %+v, want %+v", c.name, got.rec, whole.rec)
		}
	}
}
