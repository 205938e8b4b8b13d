package meter

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/bits"

	"github.com/valyala/fastjson"
)

// ErrMalformed is wrapped by the error a parser returns for an event (or a
// response body) that is not a JSON object: a malformed stream (outcome
// upstream_error; docs/MEASURES.md, Outcomes).
var ErrMalformed = errors.New("meter: malformed event")

var errNotObject = errors.New("JSON value is not an object")

func malformed(err error) error { return fmt.Errorf("%w: %v", ErrMalformed, err) }

// StreamParser turns the events of a response stream of a metered API into
// EventInfos. It keeps a little state across the events of one response,
// so use one per request and Reset it before reusing it: the proxy keeps one
// per stream in flight, whatever the route. The zero value is ready to use;
// Parse does not allocate once its internal buffers have grown.
//
// For an OpenAI chat stream (/v1/chat/completions, and the many servers
// that copy it: vLLM, SGLang, TGI's OpenAI route, llama.cpp server,
// DeepSeek, Groq, OpenRouter, Perplexity, ...), Parse sets:
//   - Token when the chunk's choices array is non-empty (vLLM's benchmark
//     rule: the role-only first chunk and an empty finish chunk count),
//     except for a chunk after the end of its choices: one with no
//     content and no finish_reason whose choices all had a finish_reason
//     in earlier chunks carries no output (a usage trailer, below;
//     SGLang's hidden-states chunk, which return_hidden_states adds after
//     the finish chunk);
//   - Content when a choice's delta has a non-empty content (string or
//     array), reasoning_content (DeepSeek, vLLM, llama.cpp), reasoning
//     (OpenRouter, Groq), refusal (OpenAI: a refusal is generated text), a
//     non-empty tool_calls array or a function_call object. A choice
//     without a delta is read from its message instead;
//   - Finish when a choice has a non-null finish_reason, and then
//     ChoicesEnded: how many choices from index 0 on have had theirs (64,
//     every one, for a finish_reason of "", which names no end); but not,
//     nor the chunk's usage, in a stream whose choices end with their
//     usage (a chunk with a finish_reason other than "" carried one), for
//     a chunk whose choices with a finish_reason each had one in an
//     earlier chunk: it repeats their ends, whose counts came with the
//     first (repeatedEnd; while no choice but index 0's has come, only
//     such a chunk without a usage);
//   - HasUsage, PromptTokens and CompletionTokens from a non-null usage
//     object, wherever it is: on a final choices:[] chunk, on the finish
//     chunk (DeepSeek), on every chunk (Perplexity, vLLM
//     continuous_usage_stats); "usage":null is no usage;
//   - UsageOnly when usage is present and choices is empty or absent, or for
//     a usage trailer: a chunk with usage, non-empty choices, no content and
//     no finish_reason, whose choices all had a finish_reason in earlier
//     chunks (OpenRouter sends its usage that way). A trailer is not a token
//     event, so it does not extend E2E, and the proxy can strip it like any
//     usage chunk;
//   - OtherChoice when a choice's index is not 0: the stream interleaves
//     several choices (n > 1, several prompts), and a running usage count on
//     its chunks is that choice's, not the response's (vLLM, SGLang);
//   - Done for the `[DONE]` marker;
//   - Error and ErrorMessage for a non-null top-level `error` (an object
//     with a message, or a string; OpenRouter puts it in a normal chunk),
//     for an `event: error` event (Groq; its data need not be JSON, and
//     then ErrorMessage is the data), and for vLLM's {"object":"error",
//     "message":...} error body.
//
// An OpenAI completions stream (/v1/completions) follows the chat rules,
// except that Content is a choice's non-empty text; an event of it in
// llama.cpp's native shape (no choices, a boolean stop: llama.cpp serves
// its native API on /completions too) is read as llama.cpp's. The
// Responses API, the Messages API, Ollama's native API and llama.cpp's
// have rules of their own: see parseResponsesEvent, parseMessagesEvent,
// parseOllamaLine and parseLlamaCppEvent.
//
// An event without data (comments, keep-alives) or with empty data yields
// an EventInfo with nothing set (but Error, for an `event: error`).
type StreamParser struct{ st openAIState }

// Reset prepares the parser for a new response: it forgets everything of
// the previous one, its Echo included.
func (p *StreamParser) Reset() { p.st.reset() }

// Echo is what a request's echo option makes the engine send back of the
// request before its output, which is no output (StreamParser.SetEcho).
type Echo uint8

const (
	// EchoNone: nothing of the request comes back.
	EchoNone Echo = iota
	// EchoOnly: a completions request with echo and max_tokens 0: each
	// choice's one chunk carries the prompt back with its finish_reason,
	// and nothing is generated (vLLM, OpenAI's API). That chunk is not a
	// token event, nor content.
	EchoOnly
	// EchoChunk: a chat request with echo (vLLM's extension) whose last
	// message has the reply's role and some content: vLLM sends that
	// content back in a chunk of its own for each choice, right after the
	// choice's role chunk and before its first token (in the same write
	// as the first token's chunk). That chunk is not a token event.
	EchoChunk
)

// EchoText is the text a request's echo makes the engine send back (the
// prompt, or the chat's last message as vLLM joins its parts), kept as a
// digest rather than a copy (a prompt may be megabytes): a choice's first
// chunk with content is the echo only when its text is that text, so that
// behind an engine that ignores echo (SGLang, llama.cpp, TGI, Ollama,
// OpenAI's chat) the first token's chunk stays a token event. The zero
// value is the empty text; add its parts in order.
type EchoText struct {
	h       uint64 // the text's hash so far (echoStep)
	texts   bool   // a text was added
	others  bool   // a part that is not text (an image): vLLM puts a placeholder for it before the text
	unknown bool   // the text cannot be told from the request
	// With --interleave-mm-strings vLLM puts each placeholder where its
	// part is instead: the texts before the first other part (their hash,
	// and whether there are any) and after the last (echoInterleaved).
	before, after         uint64
	textBefore, textAfter bool
}

// AddText adds a text part: vLLM joins the non-empty ones with "\n" (an
// empty one adds nothing).
func (t *EchoText) AddText(s []byte) {
	if len(s) == 0 {
		return
	}
	if t.texts {
		t.h = echoStep(t.h, '\n')
	}
	if t.textAfter {
		t.after = echoStep(t.after, '\n')
	}
	t.texts = true
	t.textAfter = t.others
	t.MoreText(s)
}

// MoreText adds s to the end of the text part added last (AddText), as
// if it had come with it: a long part is added a piece at a time, rather
// than copied whole first. Call it only after AddText.
func (t *EchoText) MoreText(s []byte) {
	if t.others {
		for _, b := range s {
			t.after = echoStep(t.after, b)
		}
	}
	for _, b := range s {
		t.h = echoStep(t.h, b)
	}
}

// AddOther adds a part that is not text (an image, an audio clip): vLLM's
// echo then begins with the model's placeholders for such parts, a line
// each, and ends with the text; or, with --interleave-mm-strings, has each
// placeholder line in its part's place among the texts.
func (t *EchoText) AddOther() {
	if !t.others {
		t.before, t.textBefore = t.h, t.texts
	}
	t.others = true
	t.after, t.textAfter = 0, false
}

// SetUnknown says the text cannot be read from the request (a completions
// request with several prompts, or token ids): any text is taken for the
// echo where one is due.
func (t *EchoText) SetUnknown() { t.unknown = true }

// Empty reports whether the text is empty: vLLM then sends no echo chunk.
func (t *EchoText) Empty() bool { return !t.texts && !t.others && !t.unknown }

// The modes of matching an echo, kept in openAIState.echo's high bits.
const (
	echoExact    Echo = iota << 4 // the text is the echo
	echoTail                      // the echo is the text, or placeholders, "\n", then it
	echoAny                       // any text is the echo
	echoKindMask Echo = 0x0f
	// echoNative is no echo: the stream's state (see openAIState.echo).
	echoNative Echo = 0x80
)

// The echo's hash: polynomial over the bytes (each plus one, so that a
// leading zero byte counts), modulo 2^64. A suffix's hash is computed from
// the end (echoMatches) as a prefix's is from the start.
const echoBase = 0x100000001b3

func echoStep(h uint64, b byte) uint64 { return h*echoBase + uint64(b) + 1 }

// echoFold is the 32 bits of a hash the parser keeps.
func echoFold(h uint64) uint32 { return uint32(h>>32) ^ uint32(h) }

// SetEcho tells the parser what the request's echo option makes the
// engine send back before its output, and that text. Call it after Reset,
// before the response's first event.
func (p *StreamParser) SetEcho(e Echo, text EchoText) {
	mode := echoExact
	switch {
	case text.unknown || text.others && !text.texts:
		mode = echoAny
	case text.others:
		mode = echoTail
	}
	p.st.echo = p.st.echo&echoNative | e&echoKindMask | mode
	p.st.echoSum = echoFold(text.h)
	p.st.echoSides, p.st.echoBefore, p.st.echoAfter = 0, 0, 0
	if mode == echoTail {
		if text.textBefore {
			p.st.echoSides |= echoTextBefore
			p.st.echoBefore = echoFold(text.before)
		}
		if text.textAfter {
			p.st.echoSides |= echoTextAfter
			p.st.echoAfter = echoFold(text.after)
		}
	}
}

// openAIState.echoSides: texts come before the first part that is not
// text, after the last.
const (
	echoTextBefore = 1 << iota
	echoTextAfter
)

// Parse overwrites every field of info with what ev, an event of a stream
// of api, says (APIChat's rules for an API it does not know). It returns an
// error wrapping ErrMalformed when the event's data is not a JSON object
// (and is not the [DONE] marker). info.ErrorMessage is valid until the next
// Parse call.
func (p *StreamParser) Parse(api API, ev *Event, info *EventInfo) error {
	return p.st.parse(ev, info, api)
}

type openAIState struct {
	// The choices that had a finish_reason in an earlier chunk: bit i for
	// the choice of index i (below 64; see readStreamChoices). Of SGLang's
	// native stream, the outputs whose finishing event came (below 63;
	// outputEnd).
	finishedChoices uint64
	// buf holds copies: of the Responses API's previous reasoning delta
	// (buf[:reasonLen]), then of the last error message (parsers are
	// shared; valid until the next Parse, as ErrorMessage is); or of the
	// shape memo's chunk (below). One buffer for all, so that the echo's
	// digests fit in the size the state had: a pooled stream keeps its
	// size class.
	buf       []byte
	reasonLen uint32
	// The Responses API: the previous event's reasoning delta (its kind,
	// 0 when the previous event was none, and a copy of its text in buf),
	// to tell llama.cpp's second copy of it (see parseResponsesEvent).
	reasonKind uint8
	// Echo: what comes back of the request (SetEcho: its kind, with the
	// mode of matching its text in the high bits, and the text's digest;
	// with echoTail, also the digests of the texts before the first part
	// that is not text and after the last, echoSides saying which are
	// there, for vLLM's interleaved echo: echoInterleaved); echoSeen: the
	// choices whose first chunk with content came, bit i for the choice
	// of index i (below 16). echo's bit echoNative says an event of this
	// completions stream was in llama.cpp's native shape.
	echo      Echo
	echoSides uint8
	// endUsage: a chunk with a finish_reason (not "") carried a usage:
	// this stream's choices end with their counts (repeatedEnd). several:
	// a chunk had a choice of index other than 0. In the padding after
	// echoSides, so that the state keeps its size.
	endUsage   bool
	several    bool
	echoSeen   uint16
	echoSum    uint32
	echoBefore uint32
	echoAfter  uint32
	// The shape memo (memo.go): with memoStart > 0, buf holds the last
	// chunk, a plain token of api memoAPI, whose content string's text
	// lies in buf[memoStart:memoEnd].
	memoStart, memoEnd uint16
	memoAPI            API
}

// reset zeroes the state as a whole, keeping the buffer's capacity up to
// twice memoMax (the shape memo's copy of a chunk, as append grew it: the
// next response, of a stream that keeps its parser, needs no other); a
// buffer that a long error message or reasoning delta grew is let go.
func (s *openAIState) reset() {
	buf := s.buf[:0]
	if cap(buf) > 2*memoMax {
		buf = nil
	}
	*s = openAIState{buf: buf}
}

// jsonParsers lends a parser (and its value cache, about a kilobyte and a
// half for a chat chunk) for the length of one Parse call, rather than each
// stream keeping one between its events: a gateway holds many streams in
// flight, few of them parsing at any instant.
var jsonParsers fastjson.ParserPool

func (s *openAIState) parse(ev *Event, info *EventInfo, api API) error {
	if s.memoHit(ev, api) {
		*info = memoInfo
		return nil
	}
	jp := jsonParsers.Get()
	err := s.parseWith(jp, ev, info, api)
	s.memoStart = 0 // the buffer may be another's now
	if len(info.ErrorMessage) > 0 {
		// The message may point into the parser, which goes back to the
		// pool: keep a copy (errors are rare; the buffer is reused).
		s.buf = append(s.buf[:s.reasonLen], info.ErrorMessage...)
		info.ErrorMessage = s.buf[s.reasonLen:]
	}
	jsonParsers.Put(jp)
	if err == nil && !noMemo {
		s.memoKeep(ev, info, api)
	}
	return err
}

func (s *openAIState) parseWith(jp *fastjson.Parser, ev *Event, info *EventInfo, api API) error {
	*info = EventInfo{PromptTokens: Unknown, CompletionTokens: Unknown}
	errEvent := string(ev.Type) == "error"
	info.Error = errEvent
	data := bytes.TrimSpace(ev.Data)
	if !ev.HasData || len(data) == 0 {
		return nil
	}
	if string(data) == "[DONE]" {
		info.Done = true
		return nil
	}
	v, at, err := parseLean(jp, data)
	if err == nil && v.Type() != fastjson.TypeObject {
		err = errNotObject
	}
	if err != nil {
		if errEvent {
			info.ErrorMessage = data
			return nil
		}
		return malformed(err)
	}
	if api == APIResponses || api == APIMessages {
		typ := stringField(v, "type")
		if len(typ) == 0 {
			typ = ev.Type
		}
		readError(v, info, errEvent || string(typ) == "error")
		if api == APIResponses {
			s.parseResponsesEvent(v, typ, info)
		} else {
			parseMessagesEvent(v, typ, info)
		}
		return nil
	}
	readError(v, info, errEvent)
	switch {
	case api == APIOllamaChat || api == APIOllamaGenerate:
		parseOllamaLine(v, info, api == APIOllamaGenerate)
		return nil
	case api == APITGI:
		parseTGIEvent(v, info)
		s.outputEnd(info) // SGLang's events on TGI's route
		return nil
	case api == APISGLang:
		parseSGLangEvent(v, info)
		s.outputEnd(info)
		return nil
	case api == APILlamaCpp, api == APICompletions && llamaCppNative(v):
		s.echo |= echoNative
		parseLlamaCppEvent(v, info)
		nativeEnded(info)
		return nil
	case api == APICompletions && s.echo&echoNative != 0 && v.Get("choices") == nil:
		// llama.cpp's native stream on /completions: its last event, cut
		// to the request's response_fields, has no "stop".
		parseLlamaCppEvent(v, info)
		nativeEnded(info)
		return nil
	}
	readUsage(v, info)
	n, content, finish, unnamed, other, allFinished, echoed, again, finishIndex := s.readStreamChoices(v, at, api == APICompletions)
	info.Content = content
	info.Finish = finish
	info.FinishIndex = finishIndex
	info.Token = n > 0
	info.OtherChoice = other
	switch {
	case unnamed:
		// A finish_reason of "" names no end: TGI's completions route
		// sends it on every chunk (router/src/server.rs, completions:
		// String::new() before the last; before 2.3 on the last too, and
		// before 2.2 no [DONE] after it), and reads no n. It says nothing
		// of which choices ended: it ends them all, as any finish did
		// before choices were counted.
		info.ChoicesEnded = 64
	case finish:
		// The choices from index 0 on that have ended (TrailingZeros64
		// of all ones is 64).
		info.ChoicesEnded = uint8(bits.TrailingZeros64(^s.finishedChoices))
	}
	switch {
	case echoed:
		// The request's own text, sent back: no output.
		info.Token, info.Content = false, false
		info.UsageOnly = info.HasUsage && n == 0
	case allFinished && !content && !finish:
		// A chunk after the end of every choice it carries: no output.
		// OpenRouter's usage trailer; SGLang's hidden-states chunk
		// (return_hidden_states), sent after the finish chunk, with
		// finish_reason null and no usage.
		info.Token = false
		info.UsageOnly = info.HasUsage
	case info.HasUsage && n == 0:
		info.UsageOnly = true
		info.Token = false
	}
	s.several = s.several || other
	if finish && !unnamed {
		if again && s.endUsage && (s.several || !info.HasUsage) {
			repeatedEnd(info)
		}
		s.endUsage = s.endUsage || info.HasUsage
	}
	return nil
}

// nativeEnded says, of a finishing event in llama.cpp's native shape on a
// completions route, that it ends every choice (EventInfo.ChoicesEnded):
// its last event, cut to the request's response_fields, need not name its
// choice ("index"), so one choice's end is not told from another's, and
// any finish ends the stream, as it did before choices were counted. (A
// native stream ends with no [DONE]: counting choices that cannot be told
// apart would judge a whole stream cut.)
func nativeEnded(info *EventInfo) {
	if info.Finish {
		info.ChoicesEnded = 64
	}
}

// outputEnd passes over a finishing event of an output, of a stream whose
// events each count their own output (EventInfo.OwnOutput: SGLang's of
// several prompts or samples), whose finishing event came before: its
// total was taken then, and the meter would add it again. Such an event
// is read as an event after its output's end: no output, no finish, no
// counts (an abort's error stays an error). SGLang sends one finishing
// event per output (tokenizer_manager.py: _wait_one_response yields the
// finished output and ends; _stream_batch_responses then drops that
// output's generator); a second one is an odd or hostile engine's, or a
// replay by something between. The outputs of index 63 and more are not
// told apart (the meter never takes their sum for the whole: Meter.open),
// nor are their ends.
func (s *openAIState) outputEnd(info *EventInfo) {
	if !info.OwnOutput || !info.Finish || info.FinishIndex >= 63 {
		return
	}
	bit := uint64(1) << info.FinishIndex
	if s.finishedChoices&bit == 0 {
		s.finishedChoices |= bit // SGLang's native stream has no choices to note them
		return
	}
	info.Token, info.Content, info.Finish, info.OwnOutput = false, false, false, false
	info.HasUsage, info.PromptTokens, info.CompletionTokens = false, Unknown, Unknown
	info.FinishIndex = 0
}

// repeatedEnd passes over the finish_reason and the usage of a chunk of a
// chat or completions stream each of whose choices with a finish_reason
// had one in an earlier chunk, in a stream whose choices end with their
// counts (a chunk with a finish_reason and a usage came before). Each
// choice's usage came with its end, and the meter sums those of a stream
// of several choices (Meter.Observe: llama.cpp's /v1/completions of
// several prompts or choices), so a choice's second end would add its
// count again, and a second end without a count would leave the sum
// unknown. The count was taken at the first end, and the repeat ends
// nothing new: no Finish, no counts. Whether the chunk is a token event,
// or has content, is left as the rules say (a finish chunk with an empty
// delta is one, the first time or the second). llama.cpp sends one
// finish chunk per choice; a second one is an odd or hostile engine's, or
// a replay by something between (OpenRouter has sent a choice's finish
// chunk twice, without usage). Before any end came with a count, an end
// is read as it comes: a repeat that brings the count its first end
// lacked is, of one choice, the count; of several, the sum is unknown
// already (a choice ended without its count). So is a repeat with a count
// while the stream has shown no choice but index 0's: nothing is summed
// yet (the meter takes a count of one choice as its latest), and of one
// choice the later end's count is the latest (an end with an early count,
// more output, then the end with the whole: the whole counts). A
// choice of index 64 or more is not told apart (readStreamChoices), nor
// is its end's repeat. An error on the chunk stays (readError).
func repeatedEnd(info *EventInfo) {
	info.Finish, info.FinishIndex, info.ChoicesEnded = false, 0, 0
	info.HasUsage, info.PromptTokens, info.CompletionTokens = false, Unknown, Unknown
}

// readStreamChoices is readChoices for a stream's chunk ("delta"), in the
// same pass over its choices: it also reads the index of each (a missing
// one is 0, the only choice of most streams) and notes those with a
// finish_reason. It reports whether a choice is not the first (other: a
// stream of several choices, n > 1 or several prompts) and whether every
// choice of the chunk had finished in an earlier chunk (allFinished: a
// chunk after its choices' end carries no output, only, if any, the
// usage). A stream of several choices interleaves them, so one choice's
// finish_reason says nothing of the others'.
//
// It also reports whether every choice of the chunk is the request's echo
// (SetEcho, echoChoice), and the index of its first choice with a
// finish_reason (EventInfo.FinishIndex), and whether one of those is the
// empty string (unnamed: TGI's completions, on every chunk), and whether
// every choice with a finish_reason had one in an earlier chunk (again:
// the chunk repeats their ends; never for a choice of index 64 or more,
// whose ends are not noted). at is parseLean's (see readChoices).
func (s *openAIState) readStreamChoices(v *fastjson.Value, at leanText, completions bool) (n int, content, finish, unnamed, other, allFinished, echoed, again bool, finishIndex uint16) {
	choices := v.Get("choices")
	if choices == nil || choices.Type() != fastjson.TypeArray {
		return 0, false, false, false, false, false, false, false, 0
	}
	var finishing uint64
	far := false // a choice of index 64 or more has a finish_reason
	seen := false
	allFinished = true
	echo := s.echo&echoKindMask != EchoNone
	echoed = echo
	n = elements(choices, at, func(c *fastjson.Value, _ leanText) {
		if c.Type() != fastjson.TypeObject {
			return
		}
		seen = true
		i := 0
		if x := c.Get("index"); x != nil && x.Type() == fastjson.TypeNumber {
			i = max(x.GetInt(), 0)
		}
		other = other || i != 0
		// A choice of index 64 or more is never taken as finished: its
		// chunks stay token events (a usage trailer among them would count
		// as one), rather than one choice's end hiding another's output.
		allFinished = allFinished && i < 64 && s.finishedChoices&(1<<i) != 0
		fin := false
		if fr := c.Get("finish_reason"); fr != nil && fr.Type() != fastjson.TypeNull {
			fin = true
			if !finish {
				finishIndex = uint16(min(i, 0xffff))
			}
			finish = true
			unnamed = unnamed || fr.Type() == fastjson.TypeString && len(fr.GetStringBytes()) == 0
			if i < 64 {
				finishing |= 1 << i
			} else {
				far = true
			}
		}
		if !content || echo {
			cc := choiceContent(c, completions, "delta")
			content = content || cc
			if echo {
				echoed = s.echoChoice(c, i, cc, fin, completions) && echoed // noted for every choice
			}
		}
	})
	again = finish && !far && finishing&^s.finishedChoices == 0
	s.finishedChoices |= finishing
	return n, content, finish, unnamed, other, allFinished && seen, echoed && seen, again, finishIndex
}

// echoChoice reports whether the choice c (of index i; content: it has
// some) of a chunk is the request's echo: the choice's first chunk with
// content (for the choices of index below 16; n is rarely larger, and a
// later choice's chunks are each looked at), whose text is the echo's
// (echoMatches) and whose finish_reason is as vLLM sends it: set with
// EchoOnly (the prompt alone, its length reached), null with EchoChunk.
func (s *openAIState) echoChoice(c *fastjson.Value, i int, content, finish, completions bool) bool {
	if !content {
		return false
	}
	if i < 16 {
		bit := uint16(1) << i
		if s.echoSeen&bit != 0 {
			return false
		}
		s.echoSeen |= bit
	}
	var text []byte
	if s.echo&echoKindMask == EchoOnly {
		if !finish || !completions {
			return false
		}
		text = stringField(c, "text")
	} else {
		d := c.Get("delta")
		if finish || d == nil || d.Type() != fastjson.TypeObject {
			return false
		}
		text = stringField(d, "content")
	}
	return s.echoMatches(text)
}

// echoMatches reports whether text is the echo's text (SetEcho): the
// text, or with echoTail also placeholder lines and then the text; with
// echoAny any text but none.
func (s *openAIState) echoMatches(text []byte) bool {
	if len(text) == 0 {
		return false
	}
	mode := s.echo &^ (echoKindMask | echoNative)
	if mode == echoAny {
		return true
	}
	// The hash of text[j:], from the end: the same sum echoStep makes
	// from the start.
	var h uint64
	pow := uint64(1)
	for j := len(text) - 1; j >= 0; j-- {
		h += (uint64(text[j]) + 1) * pow
		pow *= echoBase
		if mode == echoTail && j > 0 && text[j-1] == '\n' && echoFold(h) == s.echoSum {
			return true
		}
	}
	// With echoTail the text may also come alone: vLLM adds no placeholder
	// line for an image whose placeholder the text already holds, nor for
	// a model that has none.
	if echoFold(h) == s.echoSum {
		return true
	}
	return mode == echoTail && s.echoInterleaved(text)
}

// echoInterleaved reports whether text is the echo vLLM makes with
// --interleave-mm-strings (chat_utils' interleave_strings): every part in
// its place, a placeholder line for each part that is not text (or, for a
// model that has none, the generic one: "<##IMAGE##>"), joined with "\n".
// Its texts before the first such part and after the last are known
// (echoBefore, echoAfter), what lies between is not: the text is those
// before, "\n", at least a byte, "\n", those after, either side with its
// "\n" absent when no text comes there. A message with no text on either
// side (an image first and last) is not told: its echo is not matched.
func (s *openAIState) echoInterleaved(text []byte) bool {
	if s.echoSides == 0 {
		return false
	}
	start := 0 // where the part not known begins
	if s.echoSides&echoTextBefore != 0 {
		start = -1
		var h uint64
		for j, b := range text {
			if b == '\n' && echoFold(h) == s.echoBefore {
				start = j + 1
				break
			}
			h = echoStep(h, b)
		}
		if start < 0 {
			return false
		}
	}
	end := len(text) // and where it ends
	if s.echoSides&echoTextAfter != 0 {
		end = -1
		var h uint64
		pow := uint64(1)
		for j := len(text) - 1; j > start+1; j-- {
			h += (uint64(text[j]) + 1) * pow
			pow *= echoBase
			if text[j-1] == '\n' && echoFold(h) == s.echoAfter {
				end = j - 1
				break
			}
		}
		if end < 0 {
			return false
		}
	}
	return end > start
}

// readChoices looks at every choice of v: it returns how many there are,
// whether one has content (read from the member named field: "delta" in a
// stream, "message" in a response body) and whether one has a finish_reason.
// at is parseLean's: the choices are read one at a time (elements).
func readChoices(v *fastjson.Value, at leanText, completions bool, field string) (n int, content, finish bool) {
	choices := v.Get("choices")
	if choices == nil || choices.Type() != fastjson.TypeArray {
		return 0, false, false
	}
	n = elements(choices, at, func(c *fastjson.Value, _ leanText) {
		if c.Type() != fastjson.TypeObject {
			return
		}
		if fr := c.Get("finish_reason"); fr != nil && fr.Type() != fastjson.TypeNull {
			finish = true
		}
		if !content {
			content = choiceContent(c, completions, field)
		}
	})
	return n, content, finish
}

// choiceContent reports whether the choice c has content: its text
// (completions), else its field ("delta" in a stream, "message" in a
// body; a stream's chunk with a message instead is read too).
func choiceContent(c *fastjson.Value, completions bool, field string) bool {
	if completions {
		return nonEmpty(c.Get("text"))
	}
	d := c.Get(field)
	if d == nil && field == "delta" {
		d = c.Get("message")
	}
	return messageHasContent(d)
}

func messageHasContent(d *fastjson.Value) bool {
	if d == nil || d.Type() != fastjson.TypeObject {
		return false
	}
	if nonEmpty(d.Get("content")) || nonEmpty(d.Get("reasoning_content")) ||
		nonEmpty(d.Get("reasoning")) || nonEmpty(d.Get("refusal")) ||
		nonEmpty(d.Get("tool_calls")) {
		return true
	}
	fc := d.Get("function_call")
	return fc != nil && fc.Type() == fastjson.TypeObject
}

// nonEmpty reports whether v is a non-empty string or array.
func nonEmpty(v *fastjson.Value) bool {
	if v == nil {
		return false
	}
	switch v.Type() {
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		return len(b) > 0
	case fastjson.TypeArray:
		a, _ := v.Array()
		return len(a) > 0
	}
	return false
}

func readError(v *fastjson.Value, info *EventInfo, errEvent bool) {
	if e := v.Get("error"); e != nil && e.Type() != fastjson.TypeNull {
		info.Error = true
		switch e.Type() {
		case fastjson.TypeString:
			info.ErrorMessage, _ = e.StringBytes()
		case fastjson.TypeObject:
			info.ErrorMessage = stringField(e, "message")
		}
		return
	}
	if errEvent || string(stringField(v, "object")) == "error" {
		info.Error = true
		info.ErrorMessage = stringField(v, "message")
	}
}

func stringField(v *fastjson.Value, key string) []byte {
	f := v.Get(key)
	if f == nil || f.Type() != fastjson.TypeString {
		return nil
	}
	b, _ := f.StringBytes()
	return b
}

func readUsage(v *fastjson.Value, info *EventInfo) {
	u := v.Get("usage")
	if u == nil || u.Type() != fastjson.TypeObject {
		return
	}
	info.HasUsage = true
	info.PromptTokens = count(u.Get("prompt_tokens"))
	info.CompletionTokens = count(u.Get("completion_tokens"))
}

// maxCount is the largest token count believed (2^31 − 1, about two
// billion: a thousand times the longest context any model takes). A larger
// count is a broken or hostile engine's, and would flow into the limits'
// charges, the goodput in tokens per second and every sum over requests.
const maxCount = 1<<31 - 1

// count reads a token count; Unknown when missing, or not a whole number
// from 0 to maxCount (1.5 tokens is not a count, and 1e300 not a real one).
func count(v *fastjson.Value) int {
	if v == nil || v.Type() != fastjson.TypeNumber {
		return Unknown
	}
	f := v.GetFloat64()
	if !(f >= 0 && f <= maxCount) || f != math.Trunc(f) {
		return Unknown
	}
	return int(f)
}

var bodyParsers fastjson.ParserPool

// ParseResponseBody fills info from a non-streamed JSON response body of the
// given API (chat and completions responses, and the OpenAI-style error
// bodies that any API returns; for a Responses API or Messages API body,
// see readResponsesBody and readMessagesBody):
//   - HasUsage, PromptTokens and CompletionTokens from usage;
//   - Error and ErrorMessage from a non-null `error` (object or string) or a
//     vLLM {"object":"error"} body; ErrorMessage is a copy owned by info;
//   - Token when choices is non-empty, Content when a choice's message has
//     content, reasoning, a refusal or tool calls (chat) or a non-empty text
//     (completions), Finish when a choice has a finish_reason;
//   - FirstChoiceUsage when the body has several choices and llama.cpp's
//     timings: its usage is its first choice's alone.
//
// UsageOnly and Done are never set. A body that is not a JSON object (TGI's
// plain-text 422, an HTML error page) gives an error wrapping ErrMalformed
// and leaves info empty, but for llama.cpp's answer to several prompts: an
// array of its results, read as their sums, in its native shape
// (APILlamaCpp, APICompletions: readLlamaCppBodies) or OpenAI's
// (APICompletions: readCompletionsBodies), and TGI's and SGLang's arrays of
// outputs (readOutputsBody). perPrompt is the outputs the request asked of
// each of its prompts, SGLang's sampling_params.n (Meter.ChoicesPerPrompt;
// Unknown when not known): an SGLang answer of several outputs counts each
// prompt once, on its first output. Safe for concurrent use; it
// allocates only to copy an error message.
func ParseResponseBody(api API, body []byte, perPrompt int, info *EventInfo) error {
	*info = EventInfo{PromptTokens: Unknown, CompletionTokens: Unknown}
	p := bodyParsers.Get()
	defer bodyParsers.Put(p)
	v, at, err := parseLean(p, body)
	if err == nil && v.Type() == fastjson.TypeArray {
		// llama.cpp's answer to several prompts: one object each, in its
		// native shape or, on /v1/completions, OpenAI's.
		native := 0
		if api == APILlamaCpp || api == APICompletions {
			var ok bool
			if ok, native = readLlamaCppBodies(v, at, info); ok {
				return nil
			}
		}
		if api == APICompletions && readCompletionsBodies(v, at, native, info) {
			return nil
		}
		// TGI's answer on / (its one answer in an array), SGLang's to
		// several prompts.
		if (api == APITGI || api == APISGLang) && readOutputsBody(api, v, at, perPrompt, info) {
			return nil
		}
	}
	if err == nil && v.Type() != fastjson.TypeObject {
		err = errNotObject
	}
	if err != nil {
		return malformed(err)
	}
	readError(v, info, false)
	if info.ErrorMessage != nil {
		info.ErrorMessage = bytes.Clone(info.ErrorMessage)
	}
	switch api {
	case APIResponses:
		readResponsesBody(v, info)
		return nil
	case APIMessages:
		readMessagesBody(v, info)
		return nil
	case APIOllamaChat, APIOllamaGenerate:
		if v.Get("done") != nil || v.Get("choices") == nil {
			readOllamaBody(v, info, api == APIOllamaGenerate)
			return nil
		}
		// OpenAI's shape on Ollama's path (llama.cpp's server answers
		// /api/chat as its /v1/chat/completions): read as what it is.
		api = api.OpenAIShape()
	case APILlamaCpp:
		readLlamaCppBody(v, info)
		return nil
	case APITGI:
		readTGIBody(v, at, info)
		return nil
	case APISGLang:
		readSGLangBody(v, info)
		return nil
	case APICompletions:
		if llamaCppNative(v) {
			readLlamaCppBody(v, info)
			return nil
		}
	}
	readUsage(v, info)
	n, content, finish := readChoices(v, at, api == APICompletions, "message")
	info.Token = n > 0
	info.Content = content
	info.Finish = finish
	if n > 1 && info.HasUsage && llamaCppTimings(v) {
		info.FirstChoiceUsage = uint16(min(n, math.MaxUint16))
	}
	return nil
}

// llamaCppTimings reports whether the body v has llama.cpp's timings
// object, which its server adds to every chat and completions answer
// (server_task_result_cmpl_final::to_json_oaicompat and
// to_json_oaicompat_chat) and no other engine sends. Not streamed, an
// answer of several choices with it is llama.cpp's, whose usage is its
// first choice's alone (EventInfo.FirstChoiceUsage); another engine's
// usage counts them all.
func llamaCppTimings(v *fastjson.Value) bool {
	t := v.Get("timings")
	return t != nil && t.Type() == fastjson.TypeObject
}

// readCompletionsBodies reads llama.cpp's non-streamed answer on
// /v1/completions to a request of several prompts ("prompt": ["a","b"]): a
// JSON array of text_completion objects, one per prompt, each with its one
// choice (of index the prompt's) and its own usage. It reports false,
// leaving info empty, when v is not such an array (empty, or any element
// not an object with a choices array). As a usage object sums the prompts'
// (and as the usage chunks of such a stream are summed: Meter.Observe),
// the counts are the sums of the elements' (Unknown when any element lacks
// one, or has no usage); Token when any element has a choice, Content when
// any has text, Finish when every one has a finish_reason; Error, with the
// first message, when any element holds an error. The first native
// elements were looked at by readLlamaCppBodies (see sumResults); at is
// parseLean's.
func readCompletionsBodies(v *fastjson.Value, at leanText, native int, info *EventInfo) bool {
	ok := true
	n := elements(v, at, func(r *fastjson.Value, _ leanText) {
		ok = ok && completionsResult(r)
	})
	if n == 0 || !ok {
		return false
	}
	sumResults(v, at, info, APICompletions, native, 1)
	return true
}

// completionsResult reports whether r, an element of an answer that is
// an array, is a text_completion object: an object with a choices array.
func completionsResult(r *fastjson.Value) bool {
	if r.Type() != fastjson.TypeObject {
		return false
	}
	c := r.Get("choices")
	return c != nil && c.Type() == fastjson.TypeArray
}

// readCompletionsResult reads one text_completion object of such an
// array: its usage and its choice (at: see elements).
func readCompletionsResult(r *fastjson.Value, at leanText, one *EventInfo) {
	readUsage(r, one)
	n, content, fin := readChoices(r, at, true, "message")
	one.Token, one.Content, one.Finish = n > 0, content, fin
}
