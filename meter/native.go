package meter

import (
	"bytes"

	"github.com/valyala/fastjson"
)

// The engines' native APIs: Ollama's /api/chat and /api/generate
// (newline-delimited JSON, SSEFramer's NDJSON mode) and llama.cpp server's
// /completion (and /completions, which serves the same; SSE without [DONE]).
// Each event is one JSON object; its error (Ollama's {"error":"..."},
// llama.cpp's {"error":{...}}) has been read (readError).

// parseOllamaLine parses, for StreamParser.Parse, one line of an Ollama
// /api/chat or /api/generate stream (generate: the text is the line's
// "response"; chat: its message's "content"). It sets:
//   - Token for every line with "done": false (one per decoded piece; a
//     line that carries only logprobs, while a tool-call parser holds the
//     text back, counts too), and for the last line ("done": true) only
//     when it carries output (Ollama flushes a tool parser's held text
//     there; usually its text is empty);
//   - Content when the line's text, thinking or tool_calls is non-empty;
//   - Finish and Done for the last line ("done": true), which ends the
//     stream; HasUsage, PromptTokens (prompt_eval_count) and
//     CompletionTokens (eval_count) from its counts. Ollama leaves out a
//     count of 0 (omitempty): a missing count is Unknown. UsageOnly is
//     never set: nothing of this stream is the gateway's to remove.
//
// A line without "done" (not Ollama's) and an error line yield no token.
func parseOllamaLine(v *fastjson.Value, info *EventInfo, generate bool) {
	if info.Error {
		return
	}
	done := v.Get("done")
	if done == nil {
		return
	}
	content := ollamaOutput(v, generate)
	if done.Type() != fastjson.TypeTrue {
		info.Token = true
		info.Content = content
		return
	}
	info.Token, info.Content = content, content
	info.Finish, info.Done = true, true
	readOllamaCounts(v, info)
}

// readOllamaBody reads a non-streamed Ollama answer (stream: false): one
// object, the stream's last line with the whole text. Its counts, Token and
// Content when it has output, Finish when it is done; ModelOp when it is
// the answer to a load or an unload (which Ollama sends so whether the
// request asked for a stream or not): done, done_reason "load" or
// "unload", no output, no count.
func readOllamaBody(v *fastjson.Value, info *EventInfo, generate bool) {
	readOllamaCounts(v, info)
	info.Token = ollamaOutput(v, generate)
	info.Content = info.Token
	info.Finish = v.Get("done") != nil && v.Get("done").Type() == fastjson.TypeTrue
	if info.Finish && !info.Token && !info.HasUsage && !info.Error {
		switch string(v.GetStringBytes("done_reason")) {
		case "load":
			info.ModelOp = ModelOpLoad
		case "unload":
			info.ModelOp = ModelOpUnload
		}
	}
}

func readOllamaCounts(v *fastjson.Value, info *EventInfo) {
	p, c := count(v.Get("prompt_eval_count")), count(v.Get("eval_count"))
	if p != Unknown || c != Unknown {
		info.HasUsage = true
		info.PromptTokens, info.CompletionTokens = p, c
	}
}

// ollamaOutput reports whether an Ollama line or body carries output: a
// non-empty text ("response" for generate, message.content for chat),
// thinking or tool_calls.
func ollamaOutput(v *fastjson.Value, generate bool) bool {
	m := v
	text := "response"
	if !generate {
		m = v.Get("message")
		text = "content"
		if m == nil || m.Type() != fastjson.TypeObject {
			return false
		}
	}
	return nonEmpty(m.Get(text)) || nonEmpty(m.Get("thinking")) || nonEmpty(m.Get("tool_calls"))
}

// llamaCppNative reports whether v, an event of a completions stream (or a
// completions body), is llama.cpp's native shape, which its server answers
// on /completions as on /completion: no "choices", a boolean "stop".
func llamaCppNative(v *fastjson.Value) bool {
	if v.Get("choices") != nil {
		return false
	}
	st := v.Get("stop")
	return st != nil && (st.Type() == fastjson.TypeTrue || st.Type() == fastjson.TypeFalse)
}

// parseLlamaCppEvent parses, for StreamParser.Parse, one event of
// llama.cpp server's native completion stream (data: {"content":...,
// "stop":false,...}; the last {"stop":true,...}; no [DONE]). It sets:
//   - Token for every event with "stop": false but prompt-progress ones
//     (return_progress: "prompt_progress", before the first token); the
//     last event ("stop": true) is not one: in a stream its content is
//     empty (the text came in the events before; builds before that
//     repeated the whole text there);
//   - Content when the event's content is non-empty;
//   - HasUsage, PromptTokens (tokens_evaluated) and CompletionTokens
//     (tokens_predicted) on every event that has them: llama.cpp sends its
//     running output count on each event and the total on the last, so
//     tokens per event are known;
//   - Finish for the last event ("stop": true). Done is not set: a request
//     of several prompts streams one such event per prompt ("index");
//   - OtherChoice when "index" is not 0 (several prompts): the counts are
//     then each prompt's.
//
// An event without a boolean "stop" (and without an error) is the last
// event of a request with response_fields: llama.cpp then sends, of its
// last result only, the members the request named (keyed by their paths,
// "timings/predicted_n"), and every event before it whole, "stop": false
// included. It is read as the last event: Finish, and the counts it kept
// (tokens_evaluated, tokens_predicted); without them the record keeps the
// running counts of the events before (continuous usage).
func parseLlamaCppEvent(v *fastjson.Value, info *EventInfo) {
	if info.Error {
		return
	}
	p, c := count(v.Get("tokens_evaluated")), count(v.Get("tokens_predicted"))
	if p != Unknown || c != Unknown {
		info.HasUsage = true
		info.PromptTokens, info.CompletionTokens = p, c
	}
	if x := v.Get("index"); x != nil && x.Type() == fastjson.TypeNumber && x.GetInt() != 0 {
		info.OtherChoice = true
	}
	switch st := v.Get("stop"); {
	case st == nil || st.Type() != fastjson.TypeFalse && st.Type() != fastjson.TypeTrue:
		// The last event, cut to the request's response_fields.
		info.Finish = true
		return
	case st.Type() == fastjson.TypeTrue:
		info.Finish = true
		return
	}
	if v.Get("prompt_progress") != nil {
		return
	}
	info.Token = true
	info.Content = nonEmpty(v.Get("content"))
}

// readLlamaCppBody reads a non-streamed llama.cpp native answer: its counts,
// Token and Content when its content is non-empty, Finish when it stopped.
func readLlamaCppBody(v *fastjson.Value, info *EventInfo) {
	parseLlamaCppEvent(v, info)
	info.OtherChoice = false
	info.Token = nonEmpty(v.Get("content"))
	info.Content = info.Token
}

// readLlamaCppBodies reads llama.cpp's non-streamed answer to a request of
// several prompts (or n_cmpl), a JSON array of its native results, one per
// prompt (a single result comes as the object alone). It reports false,
// leaving info empty, when v is not such an array (empty, or any element
// not an object in llama.cpp's native shape), and how many elements it
// looked at (nativeResult). The counts are the sums of the results'
// (Unknown when any result lacks one), as a usage object sums the
// prompts'; Token and Content when any result has text; Finish when every
// result stopped; Error, with the first message, when any result holds an
// error. at is parseLean's.
//
// A result without "stop" (nor "choices") counts too: the request's
// response_fields cut every result to the members it named. So on
// /completions as on /completion: llama.cpp serves the same API on both.
func readLlamaCppBodies(v *fastjson.Value, at leanText, info *EventInfo) (ok bool, looked int) {
	ok = true
	n := elements(v, at, func(r *fastjson.Value, _ leanText) {
		if ok {
			looked++
			ok = nativeResult(r)
		}
	})
	if n == 0 || !ok {
		return false, looked
	}
	sumResults(v, at, info, true, looked)
	return true, looked
}

// nativeResult reports whether r, an element of an answer that is an
// array, is one of llama.cpp's native results (readLlamaCppBodies).
func nativeResult(r *fastjson.Value) bool {
	return r.Type() == fastjson.TypeObject && (llamaCppNative(r) || r.Get("choices") == nil && r.Get("stop") == nil)
}

// sumResults reads into info an answer made of several results (v, an
// array; at is parseLean's), each read into an EventInfo of its own, as
// llama.cpp's native result (readLlamaCppBody) or as a text_completion
// object (readCompletionsResult; a direct call, so that the EventInfo
// stays on the stack): the counts are the sums of the results' (Unknown
// when any result lacks one, or when either sum is Unknown at the end for
// both); Token and Content when any result has them; Finish when every
// result does; Error, with the first message, when any result holds an
// error.
//
// Of an answer parsed lean each result is parsed again: the looks that
// chose how to read it are made again (nativeResult on the first native
// results, completionsResult on all for a text_completion's), so that it
// reads as the one parsed whole, in which a look up of a name fastjson
// finds only unescaped leaves the object's names unescaped for the next.
func sumResults(v *fastjson.Value, at leanText, info *EventInfo, native bool, looked int) {
	prompt, completion := 0, 0
	finish := true
	var one EventInfo
	k := 0
	elements(v, at, func(r *fastjson.Value, at leanText) {
		if k < looked {
			nativeResult(r)
		}
		k++
		one = EventInfo{PromptTokens: Unknown, CompletionTokens: Unknown}
		if !native {
			completionsResult(r)
		}
		readError(r, &one, false)
		if one.Error && !info.Error {
			info.Error = true
			info.ErrorMessage = bytes.Clone(one.ErrorMessage)
		}
		if native {
			readLlamaCppBody(r, &one)
		} else {
			readCompletionsResult(r, at, &one)
		}
		prompt = addCount(prompt, one.PromptTokens)
		completion = addCount(completion, one.CompletionTokens)
		info.Token = info.Token || one.Token
		info.Content = info.Content || one.Content
		finish = finish && one.Finish
	})
	info.Finish = finish
	if prompt != Unknown || completion != Unknown {
		info.HasUsage = true
		info.PromptTokens, info.CompletionTokens = prompt, completion
	}
}

// addCount adds a count to a sum of counts: Unknown when either is, or when
// the sum passes maxCount.
func addCount(sum, n int) int {
	if sum == Unknown || n == Unknown || sum+n > maxCount {
		return Unknown
	}
	return sum + n
}
