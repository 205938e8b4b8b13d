package sim

import (
	"strconv"

	"github.com/valyala/fastjson"
)

// apiKind is the API a generation request speaks: it decides the request
// fields read, the prompt count, and the wire format of the answer. The
// timing, faults, metrics and traces are the same for every kind.
type apiKind uint8

const (
	apiCompletions apiKind = iota // POST /v1/completions
	apiChat                       // POST /v1/chat/completions
	apiResponses                  // POST /v1/responses (OpenAI's Responses API)
	apiMessages                   // POST /v1/messages (Anthropic's Messages API)
)

// path is the route the kind is served on.
func (a apiKind) path() string {
	switch a {
	case apiChat:
		return "/v1/chat/completions"
	case apiResponses:
		return "/v1/responses"
	case apiMessages:
		return "/v1/messages"
	}
	return "/v1/completions"
}

// events reports whether the kind's stream is made of typed events (an
// `event:` line and a JSON "type") rather than OpenAI chunks.
func (a apiKind) events() bool { return a == apiResponses || a == apiMessages }

// responsesPrompt counts the prompt tokens of a Responses API request as a
// chat request's (ChatPromptTokens): instructions, when given, is one
// system message; input is a string (one user message) or a list of
// messages (input items), each counted as a chat message.
func responsesPrompt(v *fastjson.Value) (int, *httpError) {
	n := 0
	if ins := v.Get("instructions"); ins != nil && ins.Type() != fastjson.TypeNull {
		b, err := ins.StringBytes()
		if err != nil {
			return 0, badRequest("sim: instructions must be a string")
		}
		n += MessageOverheadTokens + Words(b2s(b))
	}
	in := v.Get("input")
	if in == nil {
		return 0, badRequest("sim: input is required")
	}
	switch in.Type() {
	case fastjson.TypeString:
		b, _ := in.StringBytes()
		return n + MessageOverheadTokens + Words(b2s(b)), nil
	case fastjson.TypeArray:
		m, he := chatPrompt(in, "input")
		return n + m, he
	}
	return 0, badRequest("sim: input must be a string or an array")
}

// messagesPrompt counts the prompt tokens of a Messages API request as a
// chat request's: system, when given (a string or text blocks), is one
// system message, then every message of messages.
func messagesPrompt(v *fastjson.Value) (int, *httpError) {
	n := 0
	if sys := v.Get("system"); sys != nil && sys.Type() != fastjson.TypeNull {
		switch sys.Type() {
		case fastjson.TypeString:
			b, _ := sys.StringBytes()
			n += MessageOverheadTokens + Words(b2s(b))
		case fastjson.TypeArray:
			n += MessageOverheadTokens + partsWords(sys)
		default:
			return 0, badRequest("sim: system must be a string or an array")
		}
	}
	m, he := chatPrompt(v.Get("messages"), "messages")
	return n + m, he
}

// Anthropic's error types by status, as its API names them.
func anthropicErrorType(status int) string {
	switch status {
	case 400:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 503, 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// appendAnthropicError appends Anthropic's error object,
// {"type":"error","error":{"type":…,"message":…}}: the body of a Messages
// API error response, and the data of its stream's error event.
func appendAnthropicError(dst []byte, typ, msg string) []byte {
	dst = append(dst, `{"type":"error","error":{"type":`...)
	dst = appendJSONString(dst, typ)
	dst = append(dst, `,"message":`...)
	dst = appendJSONString(dst, msg)
	return append(dst, "}}"...)
}

// appendResponsesError appends the Responses API's stream error event
// (OpenAI's ResponseErrorEvent, keys in its order).
func appendResponsesError(dst []byte, seq int, msg string) []byte {
	dst = append(dst, "event: error\ndata: {\"code\":\"InternalServerError\",\"message\":"...)
	dst = appendJSONString(dst, msg)
	dst = append(dst, `,"param":null,"sequence_number":`...)
	dst = strconv.AppendInt(dst, int64(seq), 10)
	return append(dst, ",\"type\":\"error\"}\n\n"...)
}

// appendEventLine appends `event: <typ>\ndata: `.
func appendEventLine(dst []byte, typ string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	return append(dst, "\ndata: "...)
}

// respInfo is what a Responses API response object is made of.
type respInfo struct {
	id, itemID string // resp_<id>, msg_<id>
	created    int64
	model      string
	maxOut     int // max_output_tokens (the limit applied)
	seed       int64
}

// appendResponse appends vLLM's response object (ResponsesResponse, keys in
// its order). With done, it is the final one: status completed (or
// incomplete, max_output_tokens reached: finish "length"), the message of n
// tokens in output, and usage; else status in_progress, no output, usage
// null.
func (r *respInfo) appendResponse(dst []byte, done bool, finish string, prompt, n int) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, r.id)
	dst = append(dst, `,"created_at":`...)
	dst = strconv.AppendInt(dst, r.created, 10)
	status := "in_progress"
	switch {
	case done && finish == "length":
		status = "incomplete"
		dst = append(dst, `,"incomplete_details":{"reason":"max_output_tokens"}`...)
	case done:
		status = "completed"
		fallthrough
	default:
		dst = append(dst, `,"incomplete_details":null`...)
	}
	dst = append(dst, `,"instructions":null,"metadata":null,"model":`...)
	dst = appendJSONString(dst, r.model)
	dst = append(dst, `,"object":"response","output":[`...)
	if done {
		dst = r.appendItem(dst, "completed", n)
	}
	dst = append(dst, `],"parallel_tool_calls":true,"temperature":1.0,"tool_choice":"auto","tools":[],"top_p":1.0,"background":false,"max_output_tokens":`...)
	dst = strconv.AppendInt(dst, int64(r.maxOut), 10)
	dst = append(dst, `,"max_tool_calls":null,"previous_response_id":null,"prompt":null,"reasoning":null,"service_tier":"auto","status":"`...)
	dst = append(dst, status...)
	dst = append(dst, `","text":null,"top_logprobs":null,"truncation":"disabled","usage":`...)
	if done {
		dst = append(dst, `{"input_tokens":`...)
		dst = strconv.AppendInt(dst, int64(prompt), 10)
		dst = append(dst, `,"input_tokens_details":{"cached_tokens":0},"output_tokens":`...)
		dst = strconv.AppendInt(dst, int64(n), 10)
		dst = append(dst, `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`...)
		dst = strconv.AppendInt(dst, int64(prompt+n), 10)
		dst = append(dst, '}')
	} else {
		dst = append(dst, "null"...)
	}
	return append(dst, `,"user":null}`...)
}

// appendItem appends the output message item holding n tokens of text
// (none while in progress).
func (r *respInfo) appendItem(dst []byte, status string, n int) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, r.itemID)
	dst = append(dst, `,"content":[`...)
	if status == "completed" {
		dst = r.appendPart(dst, n)
	}
	dst = append(dst, `],"role":"assistant","status":"`...)
	dst = append(dst, status...)
	return append(dst, `","type":"message"}`...)
}

// appendPart appends an output_text content part holding n tokens of text.
func (r *respInfo) appendPart(dst []byte, n int) []byte {
	dst = append(dst, `{"annotations":[],"text":"`...)
	dst = appendText(dst, r.seed, n)
	return append(dst, `","type":"output_text","logprobs":null}`...)
}

// appendText appends the text of tokens 1 to n (plain ASCII words: no JSON
// escaping needed).
func appendText(dst []byte, seed int64, n int) []byte {
	for i := 1; i <= n; i++ {
		dst = append(dst, TokenText(seed, i)...)
	}
	return dst
}

// appendSeq appends `,"sequence_number":N,"type":"<typ>"}\n\n`, the end of
// every Responses API event.
func appendSeq(dst []byte, seq int, typ string) []byte {
	dst = append(dst, `,"sequence_number":`...)
	dst = strconv.AppendInt(dst, int64(seq), 10)
	dst = append(dst, `,"type":"`...)
	dst = append(dst, typ...)
	return append(dst, "\"}\n\n"...)
}

// anthropicStop maps a finish_reason to the Messages API's stop_reason, as
// vLLM does.
func anthropicStop(finish string) string {
	if finish == "length" {
		return "max_tokens"
	}
	return "end_turn"
}

// appendMessagesUsage appends {"input_tokens":P,"output_tokens":C}.
func appendMessagesUsage(dst []byte, prompt, completion int) []byte {
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(prompt), 10)
	dst = append(dst, `,"output_tokens":`...)
	dst = strconv.AppendInt(dst, int64(completion), 10)
	return append(dst, '}')
}

// responsesBody builds vLLM's non-streaming Responses API answer: the
// final response object.
func (s *Server) responsesBody(r *respInfo, n int, finish string, prompt int) []byte {
	return r.appendResponse(make([]byte, 0, 1024+8*n), true, finish, prompt, n)
}

// messagesBody builds vLLM's non-streaming Messages API answer (its
// message, serialised without null members).
func (s *Server) messagesBody(id string, n int, finish string, prompt int) []byte {
	b := make([]byte, 0, 256+8*n)
	b = append(b, `{"id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"type":"message","role":"assistant","content":[{"type":"text","text":"`...)
	b = appendText(b, s.cfg.Seed, n)
	b = append(b, `"}],"model":`...)
	b = appendJSONString(b, s.model)
	b = append(b, `,"stop_reason":"`...)
	b = append(b, anthropicStop(finish)...)
	b = append(b, `","usage":`...)
	b = appendMessagesUsage(b, prompt, n)
	return append(b, '}')
}
