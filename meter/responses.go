package meter

import (
	"bytes"

	"github.com/valyala/fastjson"
)

var (
	responsePrefix = []byte("response.")
	deltaSuffix    = []byte(".delta")
)

// parseResponsesEvent parses, for StreamParser.Parse, one event of an
// OpenAI Responses API stream (POST /v1/responses; OpenAI, vLLM, SGLang,
// Ollama and others serve it): v is the event's JSON object, typ its type.
// Each event names its type twice, in its `event:` line and in its JSON's
// "type" member; the JSON's is read, the `event:` line's when the JSON has
// none. The error of an `error` event has been read (readError). It sets:
//   - Token for every `response.*.delta` event: output text, reasoning text
//     or summary, refusal, function-call arguments, audio and the rest. It is
//     the one event type that carries generated output, and one is sent per
//     decoded chunk, as a chat stream sends a chunk;
//   - Content when that delta is non-empty;
//   - HasUsage, PromptTokens (input_tokens, cached ones included) and
//     CompletionTokens (output_tokens, reasoning included) from the usage of
//     the response a terminal event carries (`response.completed`,
//     `response.incomplete`, `response.failed`), with Finish and UsageOnly:
//     a final count. A response object in an earlier event carries
//     "usage":null;
//   - Done for those terminal events (the API has no [DONE] marker; a
//     server that sends one anyway gets Done for it too);
//   - Error and ErrorMessage for an `error` event (its message, top level,
//     or in an error object) and for `response.failed` (the response's
//     error.message).
//
// `response.incomplete` (max_output_tokens reached, a content filter) is
// not an error: the response ended as a chat stream ends with
// finish_reason "length". Other events (created, in_progress, queued,
// output_item.added, *.done, ...) yield an EventInfo with nothing set.
//
// llama.cpp sends each reasoning chunk twice, as a
// response.reasoning_summary_text.delta and a response.reasoning_text.delta
// with the same text, one after the other: the second of such a pair is
// not a token event (it would double the events and add a gap of 0).
func (s *openAIState) parseResponsesEvent(v *fastjson.Value, typ []byte, info *EventInfo) {
	kind := reasoningKind(typ)
	prevKind := s.reasonKind
	s.reasonKind = kind
	switch {
	case bytes.HasPrefix(typ, responsePrefix) && bytes.HasSuffix(typ, deltaSuffix):
		d := v.Get("delta")
		if kind != 0 {
			var text []byte
			if d != nil && d.Type() == fastjson.TypeString {
				text, _ = d.StringBytes()
			}
			dup := prevKind != 0 && prevKind != kind && bytes.Equal(text, s.buf[:s.reasonLen])
			s.buf = append(s.buf[:0], text...)
			s.reasonLen = uint32(len(text))
			if dup {
				s.reasonKind = 0 // a third in a row is a token again
				return
			}
		}
		info.Token = true
		info.Content = nonEmpty(d)
		return
	}
	switch string(typ) {
	case "response.completed", "response.incomplete", "response.failed":
	default:
		return
	}
	info.Done = true
	info.Finish = true
	r := v.Get("response")
	if r == nil || r.Type() != fastjson.TypeObject {
		return
	}
	if string(typ) == "response.failed" {
		info.Error = true
		if e := r.Get("error"); e != nil && e.Type() == fastjson.TypeObject {
			info.ErrorMessage = stringField(e, "message")
		}
	}
	readInputOutputUsage(r.Get("usage"), info, false)
	info.UsageOnly = info.HasUsage
}

// reasoningKind tells the Responses API's two reasoning deltas apart: 1
// for response.reasoning_text.delta, 2 for
// response.reasoning_summary_text.delta, 0 for any other event.
func reasoningKind(typ []byte) uint8 {
	switch string(typ) {
	case "response.reasoning_text.delta":
		return 1
	case "response.reasoning_summary_text.delta":
		return 2
	}
	return 0
}

// readInputOutputUsage reads a usage object counted as the Responses and
// Anthropic APIs count: input_tokens and output_tokens. With cache, the
// prompt is input_tokens plus Anthropic's cache_creation_input_tokens and
// cache_read_input_tokens (which its input_tokens does not include; the
// Responses API's input_tokens includes its cached tokens already). A
// missing count is Unknown; so is the prompt when input_tokens is missing.
func readInputOutputUsage(u *fastjson.Value, info *EventInfo, cache bool) {
	if u == nil || u.Type() != fastjson.TypeObject {
		return
	}
	info.HasUsage = true
	info.PromptTokens = count(u.Get("input_tokens"))
	info.CompletionTokens = count(u.Get("output_tokens"))
	if cache && info.PromptTokens != Unknown {
		for _, k := range [...]string{"cache_creation_input_tokens", "cache_read_input_tokens"} {
			if n := count(u.Get(k)); n != Unknown {
				info.PromptTokens += n
			}
		}
		if info.PromptTokens > maxCount {
			info.PromptTokens = Unknown // each believable, their sum not
		}
	}
}

// readResponsesBody reads a non-streamed Responses API body (a response
// object; its error, a failed response's, is read as any error body's):
// its usage, Token and Content when its output holds an item, Finish when
// it is complete, Pending when it is a background request's
// acknowledgement ("queued", or "in_progress"), whose output comes later,
// and Error when it failed.
func readResponsesBody(v *fastjson.Value, info *EventInfo) {
	readBodyOutput(v, "output", info, false)
	switch st := stringField(v, "status"); string(st) {
	case "completed", "incomplete":
		info.Finish = true
	case "queued", "in_progress":
		info.Pending = true // a background request, acknowledged
	case "failed":
		info.Error = true // its error, if any, read as any error body's
	}
}

// readBodyOutput reads what the Responses and Messages APIs' bodies share:
// the usage (cache: Anthropic's cache tokens, see readInputOutputUsage),
// and Token and Content when the array named member (their output, their
// content) holds an item.
func readBodyOutput(v *fastjson.Value, member string, info *EventInfo, cache bool) {
	readInputOutputUsage(v.Get("usage"), info, cache)
	if out := v.Get(member); out != nil && out.Type() == fastjson.TypeArray {
		items, _ := out.Array()
		info.Token = len(items) > 0
		info.Content = info.Token
	}
}
