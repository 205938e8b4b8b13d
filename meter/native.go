package meter

import (
	"bytes"
	"math"

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
	sumResults(v, at, info, APILlamaCpp, looked, 1)
	return true, looked
}

// nativeResult reports whether r, an element of an answer that is an
// array, is one of llama.cpp's native results (readLlamaCppBodies).
func nativeResult(r *fastjson.Value) bool {
	return r.Type() == fastjson.TypeObject && (llamaCppNative(r) || r.Get("choices") == nil && r.Get("stop") == nil)
}

// sumResults reads into info an answer made of several results (v, an
// array; at is parseLean's), each read into an EventInfo of its own as an
// answer of api alone: llama.cpp's native result (readLlamaCppBody), TGI's
// (readTGIBody), SGLang's (readSGLangBody) or, for completions, a
// text_completion object (readCompletionsResult; direct calls, so that the
// EventInfo stays on the stack): the counts are the sums of the results' (Unknown
// when any result lacks one, or when either sum is Unknown at the end for
// both); Token and Content when any result has them; Finish when every
// result does; Error, with the first message, when any result holds an
// error.
//
// perPrompt is the results of each prompt, one after the other, each with
// its prompt's count (SGLang's outputs: readOutputsBody): a prompt is
// counted once, on its first result (those of index 0, perPrompt,
// 2·perPrompt, ...); the prompt count is Unknown when the results are not
// a whole number of prompts', or when perPrompt is not known (below 1)
// and there are several. 1 for results each of a prompt of its own.
//
// Of an answer parsed lean each result is parsed again: the looks that
// chose how to read it are made again (nativeResult on the first native
// results, completionsResult on all for a text_completion's), so that it
// reads as the one parsed whole, in which a look up of a name fastjson
// finds only unescaped leaves the object's names unescaped for the next.
func sumResults(v *fastjson.Value, at leanText, info *EventInfo, api API, looked, perPrompt int) {
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
		if api == APICompletions {
			completionsResult(r)
		}
		readError(r, &one, false)
		if one.Error && !info.Error {
			info.Error = true
			info.ErrorMessage = bytes.Clone(one.ErrorMessage)
		}
		switch api {
		case APILlamaCpp:
			readLlamaCppBody(r, &one)
		case APITGI:
			readTGIBody(r, at, &one)
		case APISGLang:
			readSGLangBody(r, &one)
		default:
			readCompletionsResult(r, at, &one)
		}
		p := one.PromptTokens
		switch idx := k - 1; {
		case perPrompt < 1 && idx > 0:
			p = Unknown // which results are a prompt's first is not known
		case perPrompt > 1 && idx%perPrompt != 0:
			p = 0 // its prompt's first result counted it
		}
		prompt = addCount(prompt, p)
		completion = addCount(completion, one.CompletionTokens)
		info.Token = info.Token || one.Token
		info.Content = info.Content || one.Content
		finish = finish && one.Finish
	})
	info.Finish = finish
	if perPrompt > 1 && k%perPrompt != 0 {
		prompt = Unknown // not the answer the request asked for
	}
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

// parseTGIEvent parses, for StreamParser.Parse, one event of Hugging Face
// TGI's native stream (/generate_stream, and / with "stream": true), as its
// router's server.rs writes it: one StreamResponse a token,
// data:{"index":n,"token":{"id","text","logprob","special"},
// "generated_text":null,"details":null}, the last with the whole
// generated_text and, with parameters.details, a details object
// (finish_reason, generated_tokens, seed, input_length); no [DONE]. It
// sets:
//   - Token for every event with a token object, the last one included
//     (it carries the last token, often the end-of-sequence one);
//   - Content when the token's text is non-empty and it is not special
//     (the end-of-sequence token's "</s>" is not output);
//   - Finish and Done for the event whose generated_text is not null:
//     TGI sends nothing after it (a stream that ends without it was cut,
//     and TGI then sends its own error event);
//   - HasUsage, PromptTokens (details.input_length) and CompletionTokens
//     (details.generated_tokens) from the last event's details, when the
//     request asked for them.
//
// An error event ({"error":"...","error_type":"..."}) has been read
// (readError) and yields no token.
func parseTGIEvent(v *fastjson.Value, info *EventInfo) {
	if info.Error {
		return
	}
	tok := v.Get("token")
	if tok == nil || tok.Type() != fastjson.TypeObject {
		if sglangShape(v) {
			parseSGLangEvent(v, info)
		}
		return
	}
	info.Token = true
	sp := tok.Get("special")
	info.Content = nonEmpty(tok.Get("text")) && (sp == nil || sp.Type() != fastjson.TypeTrue)
	if g := v.Get("generated_text"); g == nil || g.Type() == fastjson.TypeNull {
		return
	}
	info.Finish, info.Done = true, true
	readTGIDetails(v.Get("details"), leanText{}, info)
}

// sglangShape reports whether v, an answer or event on TGI's route without
// TGI's members, is SGLang's (a meta_info object): a body that names both
// engines' inputs is metered as TGI's (the gateway cannot tell which
// engine it goes to: proxy's generateAPI), and SGLang, which does not read
// TGI's inputs, runs it and answers in its own shape.
func sglangShape(v *fastjson.Value) bool {
	m := v.Get("meta_info")
	return m != nil && m.Type() == fastjson.TypeObject
}

// readTGIDetails reads the counts of a TGI details object (at is
// parseLean's): generated_tokens (output), and input_length (the prompt;
// a stream's details only). With best_of, TGI generated best_of sequences
// and answers the best; details.best_of_sequences holds the others, each
// with its generated_tokens (router/src/server.rs, infer's
// generate_best_of): the output is the sum of all (Unknown when one lacks
// its count).
func readTGIDetails(d *fastjson.Value, at leanText, info *EventInfo) {
	if d == nil || d.Type() != fastjson.TypeObject {
		return
	}
	p, c := count(d.Get("input_length")), count(d.Get("generated_tokens"))
	if seqs := d.Get("best_of_sequences"); seqs != nil && seqs.Type() == fastjson.TypeArray {
		elements(seqs, at, func(e *fastjson.Value, _ leanText) {
			n := Unknown
			if e.Type() == fastjson.TypeObject {
				n = count(e.Get("generated_tokens"))
			}
			c = addCount(c, n)
		})
	}
	if p != Unknown || c != Unknown {
		info.HasUsage = true
		info.PromptTokens, info.CompletionTokens = p, c
	}
}

// readTGIBody reads a non-streamed TGI answer (/generate, or / without
// "stream"), {"generated_text":"...","details":{...}} (at is parseLean's):
// Token and Content when its text is non-empty, Finish (TGI answers only a
// generation that ended), and the output count of its details
// (generated_tokens, and best_of's other sequences': readTGIDetails), when
// the request asked for them; its prompt count is not in the body. An
// answer in SGLang's shape (sglangShape) is read as SGLang's.
func readTGIBody(v *fastjson.Value, at leanText, info *EventInfo) {
	g := v.Get("generated_text")
	if g == nil || g.Type() != fastjson.TypeString {
		if sglangShape(v) {
			readSGLangBody(v, info)
		}
		return
	}
	info.Token = nonEmpty(g)
	info.Content = info.Token
	info.Finish = true
	readTGIDetails(v.Get("details"), at, info)
}

// parseSGLangEvent parses, for StreamParser.Parse, one event of SGLang's
// native stream (/generate with "stream": true), as its http_server.py and
// tokenizer manager write it: data:{"text":...,"output_ids":[...],
// "meta_info":{"id","finish_reason","prompt_tokens","completion_tokens",
// "cached_tokens",...}} for each output the detokenizer sends (one every
// stream_interval tokens), then data: [DONE]. The text and output_ids are
// the whole output so far (unless the server runs with
// incremental_streaming_output), and the counts are running ones. It sets:
//   - Token for every event with a meta_info object;
//   - Content when its text (or, without a tokenizer, its output_ids) is
//     non-empty: the first such event is the first with output; the
//     later ones of a cumulative text all have some;
//   - HasUsage, PromptTokens and CompletionTokens from meta_info's
//     prompt_tokens and completion_tokens, on every event;
//   - Finish when meta_info's finish_reason is not null; one of type
//     "abort" is an error (Error, with its message): the engine stopped
//     the request;
//   - OtherChoice when "index" is not 0 (a request of several prompts,
//     or n > 1: SGLang numbers each output's place): the counts are then
//     each prompt's;
//   - OwnOutput, with the output's index in FinishIndex, for every event
//     with "index" (SGLang's _stream_batch_responses puts it on every
//     event of a request of several prompts or samples, and on none of a
//     request of one: the index of prompt i's sample j is i·n + j): its
//     counts are its output's own, and the output's total on its
//     finishing event, which the meter sums.
//
// Its error event, {"error":{"message":...}}, has been read (readError).
func parseSGLangEvent(v *fastjson.Value, info *EventInfo) {
	if info.Error {
		return
	}
	m := v.Get("meta_info")
	if m == nil || m.Type() != fastjson.TypeObject {
		return
	}
	p, c := count(m.Get("prompt_tokens")), count(m.Get("completion_tokens"))
	if p != Unknown || c != Unknown {
		info.HasUsage = true
		info.PromptTokens, info.CompletionTokens = p, c
	}
	if x := v.Get("index"); x != nil && x.Type() == fastjson.TypeNumber {
		i := x.GetInt()
		info.OtherChoice = i != 0
		info.OwnOutput = true
		info.FinishIndex = uint16(min(max(i, 0), math.MaxUint16))
	}
	if f := m.Get("finish_reason"); f != nil && f.Type() != fastjson.TypeNull {
		info.Finish = true
		if string(stringField(f, "type")) == "abort" {
			info.Error = true
			info.ErrorMessage = stringField(f, "message")
			return
		}
	}
	info.Token = true
	info.Content = nonEmpty(v.Get("text")) || nonEmpty(v.Get("output_ids"))
}

// readSGLangBody reads a non-streamed SGLang answer, one output object
// (parseSGLangEvent): its counts, Token and Content when its text is
// non-empty, Finish when it has a finish_reason.
func readSGLangBody(v *fastjson.Value, info *EventInfo) {
	parseSGLangEvent(v, info)
	info.OtherChoice, info.OwnOutput, info.FinishIndex = false, false, 0
	info.Token = info.Content
}

// readOutputsBody reads an answer of TGI or SGLang that is a JSON array of
// outputs: TGI's / without "stream" (its one answer in an array), SGLang's
// to several prompts or n > 1 (one output each). It reports false, leaving
// info empty, when v is not such an array (empty, or an element not an
// object). The counts are the sums of the outputs' (sumResults), a prompt
// counted once: SGLang answers k prompts of n samples each (the request's
// sampling_params.n, perPrompt) with k·n outputs, each prompt's n one
// after the other (tokenizer_manager's _handle_batch_request sends, for
// each prompt in turn, its n copies, and gathers their outputs in that
// order), each carrying its prompt's prompt_tokens: their sum was n times
// the prompts'.
func readOutputsBody(api API, v *fastjson.Value, at leanText, perPrompt int, info *EventInfo) bool {
	ok := true
	n := elements(v, at, func(r *fastjson.Value, _ leanText) {
		ok = ok && r.Type() == fastjson.TypeObject
	})
	if n == 0 || !ok {
		return false
	}
	sumResults(v, at, info, api, 0, perPrompt)
	return true
}
