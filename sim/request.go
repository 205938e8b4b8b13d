package sim

import (
	"fmt"

	"github.com/valyala/fastjson"
)

// genRequest holds what the simulator needs from a generation request body.
type genRequest struct {
	stream       bool
	includeUsage bool
	continuous   bool
	maxTokens    int // 0: not given
	ignoreEOS    bool
	prompt       int // prompt tokens
}

// httpError is a request the simulator refuses, with the status to answer.
type httpError struct {
	status int
	msg    string
}

func badRequest(format string, args ...any) *httpError {
	return &httpError{status: 400, msg: fmt.Sprintf(format, args...)}
}

// parseGen parses a generation request body of the given API the way vLLM
// validates it, as far as the simulator cares.
func (s *Server) parseGen(body []byte, api apiKind) (genRequest, *httpError) {
	var g genRequest
	p := s.parsers.Get()
	defer s.parsers.Put(p)
	v, err := p.ParseBytes(body)
	if err != nil {
		return g, badRequest("sim: request body is not valid JSON: %v", err)
	}
	if v.Type() != fastjson.TypeObject {
		return g, badRequest("sim: request body must be a JSON object")
	}
	if m := v.Get("model"); m != nil && m.Type() != fastjson.TypeNull {
		name, err := m.StringBytes()
		if err != nil {
			return g, badRequest("sim: model must be a string")
		}
		if string(name) != s.model {
			return g, &httpError{status: 404, msg: fmt.Sprintf("The model `%s` does not exist.", name)}
		}
	}
	var he *httpError
	if g.stream, _, he = getBool(v, "stream"); he != nil {
		return g, he
	}
	if g.ignoreEOS, _, he = getBool(v, "ignore_eos"); he != nil {
		return g, he
	}
	if api.events() {
		return parseEventsAPI(v, api, g)
	}
	if so := v.Get("stream_options"); so != nil && so.Type() != fastjson.TypeNull {
		if !g.stream {
			return g, badRequest("Stream options can only be defined when `stream=True`.")
		}
		if so.Type() != fastjson.TypeObject {
			return g, badRequest("sim: stream_options must be an object")
		}
		// vLLM's StreamOptions.include_usage defaults to true once
		// stream_options is given at all.
		inc, set, he := getBool(so, "include_usage")
		if he != nil {
			return g, he
		}
		if !set && so.Get("include_usage") == nil {
			inc = true
		}
		cont, _, he := getBool(so, "continuous_usage_stats")
		if he != nil {
			return g, he
		}
		g.includeUsage = inc
		g.continuous = inc && cont
	}
	if n, set, he := getInt(v, "n"); he != nil {
		return g, he
	} else if set && n != 1 {
		return g, badRequest("sim: only n=1 is supported, got n=%d", n)
	}
	keys := []string{"max_tokens"}
	if api == apiChat {
		keys = []string{"max_completion_tokens", "max_tokens"}
	}
	for _, k := range keys {
		n, set, he := getInt(v, k)
		if he != nil {
			return g, he
		}
		if set {
			if n < 1 {
				return g, badRequest("%s must be at least 1, got %d.", k, n)
			}
			g.maxTokens = n
			break
		}
	}
	if api == apiChat {
		g.prompt, he = chatPrompt(v.Get("messages"), "messages")
	} else {
		g.prompt, he = completionPrompt(v.Get("prompt"))
	}
	return g, he
}

// parseEventsAPI reads the fields of a Responses API or Messages API
// request after "stream" and "ignore_eos" (which every API reads): the
// output limit (max_output_tokens; max_tokens, which the Messages API
// requires) and the prompt. Both APIs always send their usage.
func parseEventsAPI(v *fastjson.Value, api apiKind, g genRequest) (genRequest, *httpError) {
	g.includeUsage = true
	key := "max_output_tokens"
	if api == apiMessages {
		key = "max_tokens"
	}
	n, set, he := getInt(v, key)
	switch {
	case he != nil:
		return g, he
	case set && n < 1:
		return g, badRequest("%s must be at least 1, got %d.", key, n)
	case set:
		g.maxTokens = n
	case api == apiMessages:
		return g, badRequest("max_tokens: Field required")
	}
	if api == apiResponses {
		g.prompt, he = responsesPrompt(v)
	} else {
		g.prompt, he = messagesPrompt(v)
	}
	return g, he
}

// chatPrompt counts the prompt tokens of a messages array (the request
// member field): per message, MessageOverheadTokens plus the words of its
// text (the tests' oracle is ChatPromptTokens).
func chatPrompt(msgs *fastjson.Value, field string) (int, *httpError) {
	if msgs == nil || msgs.Type() != fastjson.TypeArray {
		return 0, badRequest("sim: %s must be an array", field)
	}
	arr, _ := msgs.Array()
	n := 0
	for i, m := range arr {
		if m.Type() != fastjson.TypeObject {
			return 0, badRequest("sim: %s[%d] must be an object", field, i)
		}
		n += MessageOverheadTokens
		c := m.Get("content")
		if c == nil {
			continue
		}
		switch c.Type() {
		case fastjson.TypeNull:
		case fastjson.TypeString:
			b, _ := c.StringBytes()
			n += Words(b2s(b))
		case fastjson.TypeArray:
			n += partsWords(c)
		default:
			return 0, badRequest("sim: %s[%d].content must be a string, an array or null", field, i)
		}
	}
	return n, nil
}

// partsWords counts the words of the "text" members of an array of content
// parts (or blocks).
func partsWords(c *fastjson.Value) int {
	parts, _ := c.Array()
	n := 0
	for _, part := range parts {
		if t := part.Get("text"); t != nil && t.Type() == fastjson.TypeString {
			b, _ := t.StringBytes()
			n += Words(b2s(b))
		}
	}
	return n
}

// completionPrompt counts the prompt tokens of a completions prompt
// (CompletionPromptTokens for text, one per id for token ids).
func completionPrompt(p *fastjson.Value) (int, *httpError) {
	if p == nil {
		return 0, badRequest("sim: prompt is required")
	}
	switch p.Type() {
	case fastjson.TypeString:
		b, _ := p.StringBytes()
		return CompletionPromptTokens(b2s(b)), nil
	case fastjson.TypeArray:
		arr, _ := p.Array()
		if len(arr) == 0 {
			return 0, badRequest("sim: prompt must not be empty")
		}
		switch arr[0].Type() {
		case fastjson.TypeNumber: // one prompt of token ids
			return len(arr), nil
		case fastjson.TypeString, fastjson.TypeArray:
			if len(arr) != 1 {
				return 0, badRequest("sim: only one prompt per request is supported, got %d", len(arr))
			}
			return completionPrompt(arr[0])
		}
	}
	return 0, badRequest("sim: prompt must be a string, an array of token ids, or a one-element array of either")
}

// getBool reads an optional boolean field (null counts as absent).
func getBool(v *fastjson.Value, key string) (val, set bool, he *httpError) {
	f := v.Get(key)
	if f == nil {
		return false, false, nil
	}
	switch f.Type() {
	case fastjson.TypeTrue:
		return true, true, nil
	case fastjson.TypeFalse:
		return false, true, nil
	case fastjson.TypeNull:
		return false, false, nil
	}
	return false, false, badRequest("sim: %s must be a boolean", key)
}

// getInt reads an optional integer field (null counts as absent).
func getInt(v *fastjson.Value, key string) (val int, set bool, he *httpError) {
	f := v.Get(key)
	if f == nil || f.Type() == fastjson.TypeNull {
		return 0, false, nil
	}
	n, err := f.Int()
	if err != nil {
		return 0, false, badRequest("sim: %s must be an integer", key)
	}
	return n, true, nil
}
