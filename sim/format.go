package sim

import (
	"strconv"
	"unicode/utf8"

	"github.com/valyala/fasthttp"
)

// Byte builders for every body the simulator sends. They append to a
// caller's buffer with strconv.Append* so that, once the buffer has grown,
// building a chunk never allocates. Key order follows vLLM's pydantic models
// (field declaration order): see the package documentation.

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string literal, quotes included.
// It is not meter's record encoder on purpose: the simulator writes what
// vLLM writes (U+2028 and U+2029 left as they are), while the request log
// escapes them so that each line is also valid JavaScript.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, s[start:i]...)
				dst = append(dst, `\ufffd`...)
				i++
				start = i
				continue
			}
			i += size
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"':
			dst = append(dst, `\"`...)
		case '\\':
			dst = append(dst, `\\`...)
		case '\n':
			dst = append(dst, `\n`...)
		case '\r':
			dst = append(dst, `\r`...)
		case '\t':
			dst = append(dst, `\t`...)
		default:
			dst = append(dst, `\u00`...)
			dst = append(dst, hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendUsage appends vLLM's UsageInfo object (prompt, total, completion, in
// that order).
func appendUsage(dst []byte, prompt, completion int) []byte {
	dst = append(dst, `{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(prompt), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(prompt+completion), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(completion), 10)
	return append(dst, '}')
}

// appendHead appends the start of a chunk event up to and including
// `"choices":[`: `data: {"id":…,"object":…,"created":…,"model":…,"choices":[`.
func appendHead(dst []byte, id, object string, created int64, model string) []byte {
	dst = append(dst, `data: {"id":`...)
	dst = appendJSONString(dst, id)
	dst = append(dst, `,"object":"`...)
	dst = append(dst, object...)
	dst = append(dst, `","created":`...)
	dst = strconv.AppendInt(dst, created, 10)
	dst = append(dst, `,"model":`...)
	dst = appendJSONString(dst, model)
	return append(dst, `,"choices":[`...)
}

// appendErrorJSON appends the compact OpenAI/vLLM error body used for HTTP
// error responses: {"error":{"message":…,"type":…,"param":null,"code":N}}.
func appendErrorJSON(dst []byte, status int, msg string) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = appendJSONString(dst, msg)
	dst = append(dst, `,"type":`...)
	dst = appendJSONString(dst, errorType(status))
	dst = append(dst, `,"param":null,"code":`...)
	dst = strconv.AppendInt(dst, int64(status), 10)
	return append(dst, "}}"...)
}

// appendStreamError appends a mid-stream error event the way vLLM writes it
// (json.dumps of its ErrorResponse, hence the spaces after ':' and ',').
func appendStreamError(dst []byte, status int, msg string) []byte {
	dst = append(dst, `data: {"error": {"message": `...)
	dst = appendJSONString(dst, msg)
	dst = append(dst, `, "type": `...)
	dst = appendJSONString(dst, errorType(status))
	dst = append(dst, `, "param": null, "code": `...)
	dst = strconv.AppendInt(dst, int64(status), 10)
	return append(dst, "}}\n\n"...)
}

// errorType names an error the way vLLM does: the status phrase without
// spaces, ending in "Error" ("BadRequestError", "NotFoundError",
// "InternalServerError", "ServiceUnavailableError").
func errorType(status int) string {
	switch status {
	case 400:
		return "BadRequestError"
	case 404:
		return "NotFoundError"
	case 500:
		return "InternalServerError"
	case 503:
		return "ServiceUnavailableError"
	}
	msg := fasthttp.StatusMessage(status)
	b := make([]byte, 0, len(msg)+5)
	for i := 0; i < len(msg); i++ {
		if c := msg[i]; c != ' ' && c != '-' && c != '\'' {
			b = append(b, c)
		}
	}
	s := string(b)
	if len(s) < 5 || s[len(s)-5:] != "Error" {
		s += "Error"
	}
	return s
}

const doneEvent = "data: [DONE]\n\n"
