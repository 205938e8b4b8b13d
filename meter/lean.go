package meter

import (
	"unsafe"

	"github.com/goodput/goodput/internal/jsonwalk"
	"github.com/valyala/fastjson"
)

// leanFrom is the size from which an answer (a non-streamed body, or one
// event) is parsed lean: fastjson builds every value, some 140 bytes per
// byte of small values, and the meter never reads the values that make an
// answer large. A memory probe of `goodput serve`: an engine's non-streamed
// answer of 8 MB of small values cost the gateway 8 CPU-seconds and a
// 1.8 GB peak RSS after the client had it; a client asks for as much with
// logprobs and top_logprobs on a long answer, and for token ids
// (return_token_ids) too. A variable for tests.
var leanFrom = 64 << 10

// unread reports whether the meter never reads an answer's member of this
// (raw) name: per-token logprobs and token ids, an answer's bulk when they
// are asked for, and Ollama's context, as long as the conversation.
func unread(key string) bool {
	switch key {
	case "logprobs", "top_logprobs", "prompt_logprobs", "token_ids", "prompt_token_ids":
		return true
	case "context": // Ollama's /api/generate: the whole conversation's token ids
		return true
	}
	return false
}

// parseLean parses an answer with p: one larger than leanFrom without the
// values of its members the meter never reads (unread), made null at any
// depth (jsonwalk.Without), so it reads the same. Text fastjson would not
// parse is parsed whole, for fastjson's own error.
func parseLean(p *fastjson.Parser, data []byte) (*fastjson.Value, error) {
	if len(data) > leanFrom {
		lean, err := jsonwalk.Without(make([]byte, 0, 4<<10), unsafe.String(unsafe.SliceData(data), len(data)), unread)
		if err == nil {
			return p.ParseBytes(lean)
		}
	}
	return p.ParseBytes(data)
}
