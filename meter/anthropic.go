package meter

import "github.com/valyala/fastjson"

// parseMessagesEvent parses, for StreamParser.Parse, one event of an
// Anthropic Messages API stream (POST /v1/messages; Anthropic, and the
// engines that serve its API for its clients: vLLM, SGLang, llama.cpp
// server, LiteLLM, ...): v is the event's JSON object, typ its type, read
// from its JSON's "type" member, or from its `event:` line when the JSON
// has none. The error of an `error` event has been read (readError). It
// sets:
//   - Token for every `content_block_delta` of generated output: text,
//     thinking and tool-input JSON deltas, one per decoded chunk; not for a
//     signature_delta (a thinking block's signature, no token: vLLM makes
//     one up in the same write as the next block's first text);
//   - Content when the delta has a non-empty text, thinking or
//     partial_json;
//   - HasUsage and PromptTokens from `message_start`'s message.usage (the
//     prompt is input_tokens plus cache_creation_input_tokens and
//     cache_read_input_tokens, which input_tokens does not include);
//     CompletionTokens stays Unknown there, since the output_tokens the
//     message starts with is a placeholder (0 to 3), not a count, and so
//     does a prompt of 0 (SGLang's placeholder: it counts in message_delta);
//   - HasUsage, CompletionTokens (output_tokens, a running total: the last
//     is the final count) and PromptTokens when present, from
//     `message_delta`'s usage; Finish when that delta has a stop_reason;
//   - UsageOnly for those two events (they carry usage and no output);
//   - Done for `message_stop`;
//   - Error and ErrorMessage for an `error` event ({"type":"error","error":
//     {"type":...,"message":...}}).
//
// Other events (content_block_start, content_block_stop, ping) yield an
// EventInfo with nothing set.
func parseMessagesEvent(v *fastjson.Value, typ []byte, info *EventInfo) {
	switch string(typ) {
	case "content_block_delta":
		d := v.Get("delta")
		if d == nil || d.Type() != fastjson.TypeObject {
			info.Token = true
			return
		}
		if string(stringField(d, "type")) == "signature_delta" {
			// The signature of a thinking block: no generated token. vLLM
			// makes one up as the block closes, in the same write as the
			// first text; llama.cpp sends an empty one at the end.
			return
		}
		info.Token = true
		info.Content = nonEmpty(d.Get("text")) || nonEmpty(d.Get("thinking")) || nonEmpty(d.Get("partial_json"))
	case "message_start":
		if m := v.Get("message"); m != nil && m.Type() == fastjson.TypeObject {
			readInputOutputUsage(m.Get("usage"), info, true)
			info.CompletionTokens = Unknown
			if info.PromptTokens == 0 {
				// SGLang's placeholder (its count comes in
				// message_delta): a Messages request has a prompt.
				info.PromptTokens = Unknown
			}
			info.UsageOnly = info.HasUsage
		}
	case "message_delta":
		readInputOutputUsage(v.Get("usage"), info, true)
		info.UsageOnly = info.HasUsage
		if d := v.Get("delta"); d != nil && d.Type() == fastjson.TypeObject {
			if sr := d.Get("stop_reason"); sr != nil && sr.Type() != fastjson.TypeNull {
				info.Finish = true
			}
		}
	case "message_stop":
		info.Done = true
	}
}

// readMessagesBody reads a non-streamed Messages API body (a message
// object; an error body is read as any error body's): its usage, Token and
// Content when its content holds a block, and Finish when it has a
// stop_reason.
func readMessagesBody(v *fastjson.Value, info *EventInfo) {
	readBodyOutput(v, "content", info, true)
	if sr := v.Get("stop_reason"); sr != nil && sr.Type() != fastjson.TypeNull {
		info.Finish = true
	}
}
