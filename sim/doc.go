// Package sim is an OpenAI-compatible engine simulator. It writes the bytes
// vLLM's OpenAI server writes (and its Responses and Anthropic Messages
// routes), on a schedule the caller controls, injects
// faults on request, and records when it flushed every event so that tests
// can compare what a gateway measured with what was really sent. Tests,
// benchmarks and the zero-config demo (`goodput serve` without an upstream)
// use it.
//
// # Routes
//
//   - POST /v1/chat/completions and POST /v1/completions: generation,
//     streamed (SSE) or not.
//   - POST /v1/responses (OpenAI's Responses API) and POST /v1/messages
//     (Anthropic's Messages API): the same generation, in those APIs'
//     formats as vLLM serves them (see "Responses and Messages APIs").
//   - GET /v1/models: the one served model (Config.Model).
//   - GET /health: 200 with an empty body, as vLLM.
//   - GET /metrics: vLLM's metrics under vLLM's names and buckets: running
//     and waiting requests, KV cache usage, preemptions, token and request
//     counters, and TTFT, inter-token, end-to-end and queue-time histograms
//     (metrics.go).
//
// Anything else is a 404, a wrong method a 405, both with the OpenAI error
// body {"error":{"message":…,"type":"NotFoundError","param":null,"code":404}}.
// A body that is not JSON, or a field of the wrong type, is a 400 with the
// same body; a "model" other than the served one is vLLM's 404 ("The model
// `x` does not exist."). Also as vLLM: stream_options without "stream":true
// is a 400, max_tokens below 1 is a 400. The simulator adds: n other than 1
// and more than one completions prompt are 400s.
//
// # Request fields honoured
//
// max_completion_tokens (chat; wins over max_tokens, as in vLLM),
// max_tokens, ignore_eos, stream, stream_options.include_usage and
// stream_options.continuous_usage_stats. As in vLLM, include_usage defaults
// to true as soon as stream_options is present, and continuous usage needs
// include_usage. Everything else (temperature, tools, ...) is ignored.
//
// # Token counts
//
// A request generates min(limit, Config.NaturalLength) tokens, where limit
// is max_completion_tokens, else max_tokens, else Config.DefaultMaxTokens;
// finish_reason is "stop" when NaturalLength ended it, "length" otherwise.
// With ignore_eos, or NaturalLength ≤ 0, it always runs to the limit.
// A request whose prompt and limit exceed Config.MaxModelLen (131072 by
// default) is refused, 400, as vLLM refuses it.
// The prompt length is a documented function of the prompt text: for a
// chat request, MessageOverheadTokens plus Words(text) per message (the
// words of all text parts of an array content; the overhead alone for a
// message without text); for a completion, CompletionPromptTokens. The
// output text is a function of the seed and the token position (TokenText;
// a response of n tokens is tokens 1 to n, concatenated).
//
// # Stream format
//
// Every event is "data: <json>\n\n" flushed on its own; chat chunks look
// like vLLM's (keys in this order):
//
//	{"id":"chatcmpl-<id>","object":"chat.completion.chunk","created":T,"model":M,
//	 "choices":[{"index":0,"delta":{…},"logprobs":null,"finish_reason":null}]}
//
// The events, in order:
//
//  1. the role chunk, delta {"role":"assistant","content":""};
//  2. one chunk per token, delta {"content":"<token text>"};
//  3. the finish chunk, delta {}, "finish_reason":"stop"|"length","stop_reason":null;
//  4. with include_usage, a chunk with "choices":[] and
//     "usage":{"prompt_tokens":P,"total_tokens":P+C,"completion_tokens":C};
//  5. data: [DONE].
//
// Chat chunks before the usage chunk have no "usage" key (vLLM serialises
// chat chunks with exclude_unset); with continuous_usage_stats each carries
// the running usage instead (completion_tokens 0 on the role chunk, k on token k, C on the
// finish chunk). Completions chunks have "object":"text_completion",
// choices [{"index":0,"text":…,"logprobs":null,"finish_reason":…,
// "stop_reason":null}] and, as vLLM's completions stream, always a "usage"
// key (null unless continuous); there is no role chunk. The <id> is the
// X-Request-Id header when given, else 32 generated hex digits; the response
// always echoes it in X-Request-Id. Streams are sent with
// "Content-Type: text/event-stream; charset=utf-8", chunked, headers flushed
// before the first token.
//
// Where vLLM versions differ the simulator picks one: it does not send the
// newer null fields prompt_token_ids, prompt_text and token_ids; like vLLM
// 0.24 it leaves "usage" out of chat chunks (some older versions and other
// simulators send "usage":null once include_usage is set); and it always
// sends the finish_reason in its own chunk after the last token (vLLM puts
// a "length" finish on the last token's chunk, and its "stop" chunk is the
// end-of-sequence token, counted in completion_tokens; here
// completion_tokens is exactly the number of token chunks). /v1/models
// returns an empty "permission" list.
//
// Non-streaming requests get vLLM's full chat.completion / text_completion
// JSON, with usage, once the last token is due.
//
// # Responses and Messages APIs
//
// Requests: the Responses API reads "input" (a string: one user message;
// or a list of messages, counted as chat messages), "instructions" (one
// system message), "max_output_tokens" and "stream"; the Messages API reads
// "messages", "system" (a string or text blocks: one system message),
// "max_tokens" (required, as Anthropic's API requires it: without it a
// 400) and "stream". Both honour ignore_eos as chat does, and always send
// their usage (there is no stream_options). Prompt tokens are counted as a
// chat request's. Every error answer of /v1/messages has Anthropic's shape,
// {"type":"error","error":{"type":"invalid_request_error","message":…}}
// (not_found_error for 404, overloaded_error for 503 and 529, api_error
// for other 5xx); /v1/responses answers errors as the OpenAI routes do.
//
// Streams are events with an `event:` line naming their JSON's "type".
// The Responses API's (keys in the order of vLLM's pydantic models, every
// event with its sequence_number, response id resp_<id>, item id
// msg_<id>):
//
//  1. response.created and response.in_progress (the response object,
//     status in_progress, usage null), at once, before TTFT, as vLLM
//     announces a response before its first output;
//  2. response.output_item.added and response.content_part.added, at token
//     1's time, just before it;
//  3. one response.output_text.delta per token;
//  4. response.output_text.done, response.content_part.done,
//     response.output_item.done (each with the whole text) and
//     response.completed, whose response has the output and usage
//     {input_tokens, input_tokens_details, output_tokens,
//     output_tokens_details, total_tokens}; its status is "completed", or
//     "incomplete" with incomplete_details {"reason":"max_output_tokens"}
//     when the limit ended it (vLLM sends response.completed either way).
//     No [DONE].
//
// The Messages API's (as vLLM's converter writes them, without unset
// members; the message id is the chat completion's, chatcmpl-<id>):
//
//  1. message_start, with usage {"input_tokens":P,"output_tokens":0}, and
//     content_block_start (a text block), at token 1's time, just before
//     it;
//  2. one content_block_delta (text_delta) per token;
//  3. content_block_stop, message_delta with stop_reason ("end_turn", or
//     "max_tokens" when the limit ended it) and usage
//     {"input_tokens":P,"output_tokens":C}, and message_stop.
//
// The events after the last token follow it at once. Non-streaming
// requests get the final response object (Responses) or the message
// (Messages: id, type, role, content, model, stop_reason, usage). A
// Responses event that carries no output is traced as EventFrame, its
// response.completed as EventUsage; a Messages message_delta is
// EventUsage and message_stop EventDone. Faults apply as to chat (the
// opening events go with token 1, except the Responses API's first two);
// error-at's event is the API's error event (the Responses API's
// {"code":…,"message":…,"param":null,"sequence_number":…,"type":"error"};
// the Messages API's {"type":"error","error":{"type":"internal_error",
// "message":…}}), and ends the stream.
//
// # Timeline
//
// Token i (1-based) is written and flushed at the absolute time the
// Schedule gives; with the default Linear scheduler that is
// start + TTFT + (i−1)·ITL, where start is when the request had been read
// (see "Batching mode" for the engine model).
// The simulator sleeps until each absolute deadline, so sleep overshoot does
// not accumulate. The role chunk goes out at token 1's time just before it;
// the finish chunk, the usage chunk and [DONE] follow the last token at
// once. Per-request overrides, so that one simulator serves many schedules:
//
//	X-Sim-TTFT: 250ms   replaces the whole TTFT (fixed and per-prompt-token parts)
//	X-Sim-ITL: 20ms     replaces Config.ITL
//
// (Go durations; a bad value is a 400.)
//
// # Batching mode
//
// With Config.Scheduler set to a Batching (NewBatching; `goodput sim
// --preset NAME`), the simulator models vLLM's continuous-batching engine
// instead of treating every request alone. One engine loop steps in real
// time; each step, as vLLM's scheduler:
//
//  1. running requests, in admission order, take their tokens from the
//     step's budget (BatchConfig.MaxNumBatchedTokens): one each for a
//     decode, the rest of its prompt (up to the budget left) for a request
//     still prefilling — chunked prefill;
//  2. waiting requests are admitted first come, first served, while fewer
//     than MaxNumSeqs run, budget is left and the KV cache has the blocks
//     for their chunk (a request that does not fit stops the admissions
//     behind it; none are admitted in a step that preempted);
//  3. the step lasts StepBase + PrefillPerToken·P + DecodePerSeq·D (P:
//     prompt tokens computed, D: requests decoding), ± Jitter, seeded;
//  4. a request whose prompt is complete produces its first token at the
//     end of the step, and every decoding request one more token.
//
// That is, with a = PrefillPerToken and b = DecodePerSeq:
//
//	step = base + a·P + b·D
//
// The KV cache holds, per running request, its computed prompt and output
// tokens in blocks of BlockSize (16) tokens. When a request cannot get the
// block its next token needs, the most recently admitted running request is
// preempted (vLLM's recompute preemption): its blocks are freed, it goes
// back to the front of the waiting queue, and once readmitted it prefills
// its prompt and output so far again before its next token
// (vllm:num_preemptions_total counts them). A request that does not fit
// the cache even alone runs alone, overcommitting it. A finished request
// frees its blocks at once, and so does Release (the client went away): its
// slot goes to the next waiting request at the next step.
//
// Token i of a request is due when the step producing it ends; the
// simulator waits for the engine to schedule that step (noticing a client
// that went away or a shutdown meanwhile) and then writes at that time. The
// engine is a discrete-event core in virtual time, so the same arrivals and
// seed give the same schedule; the tests drive it without a clock. The
// X-Sim-TTFT and X-Sim-ITL headers do not apply.
//
// Presets (Presets; assumptions in its doc): small-gpu (an 8B model on a
// 24 GB GPU), a100-8b (an 8B model on an A100 80 GB), h100-70b-tp4 (a 70B
// model on four H100s).
//
// # Capacity
//
// BatchConfig.Capacity(I, O) predicts, for a workload of prompts of I
// tokens and outputs of O tokens, where the step model saturates. With B
// requests running at steady state, each runs O steps (the prefill step,
// then O−1 decodes), so B/O finish per step, and a step computes on average
// B·I/O prompt tokens and B·(O−1)/O decodes:
//
//	s(B)    = base + a·B·I/O + b·B·(O−1)/O      (a = PrefillPerToken, b = DecodePerSeq)
//	rate(B) = B/(O·s(B)) = B / (O·base + B·(a·I + b·(O−1)))   requests/s
//
// rate(B) grows with B, so the engine's maximum sustainable rate (MaxRate)
// is rate(Bmax), with the largest batch it can run (MaxConcurrency):
//
//	Bmax = min(max_num_seqs,
//	           KV capacity / (I + O in whole blocks)   (a request's peak footprint),
//	           max_num_batched_tokens·O / (I + O − 1)) (every step's budget full)
//
// Below MaxRate the waiting queue stays bounded; above it, it grows without
// bound and TTFT with it. A closed loop of more than MaxConcurrency clients
// queues the excess. The tests check the prediction against the engine
// itself with Poisson arrivals at ×0.5, ×0.7, ×1, ×1.4 and ×2 of MaxRate:
// bounded up to ×0.7, growing from ×1.4; measured, the knee lies between
// ×0.9 and ×1.1 when max_num_seqs or the token budget binds. When the KV
// cache binds, the engine still admits more requests than fit at their
// peak (it admits on the prompt's blocks) and preempts them as they grow;
// each preemption recomputes a prompt and an output so far, and the
// measured knee is lower, about ×0.9. `goodput sim --capacity ISL,OSL`
// prints the figures.
//
// # Faults
//
// The X-Sim-Fault request header injects failures; items are separated by
// commas (at most one of reset-after, close-after and stall-after). N
// counts output tokens; the role chunk goes with token 1.
//
//	status=503        answer at once with that status (400..599) and an OpenAI error body
//	reset-after=N     once N token events are flushed, close the TCP connection with
//	                  an RST (SO_LINGER 0): no finish chunk, no terminating HTTP chunk.
//	                  N=0: right after the headers. Over a real network the RST may
//	                  discard bytes still in flight; on loopback they arrive.
//	close-after=N     the same with an orderly close (FIN): the client sees EOF mid-body
//	stall-after=N     after N tokens, send nothing more, keeping the connection open,
//	                  until the client goes away, the server shuts down, or
//	                  Config.MaxStall passes (then the connection is closed)
//	malformed-at=N    token N's event is cut in half (invalid JSON, still ending in a
//	                  blank line); the stream then goes on normally
//	error-at=N        at token N's time, instead of token N, an error event as vLLM
//	                  writes it: data: {"error": {"message": …, "type":
//	                  "InternalServerError", "param": null, "code": 500}}, then [DONE]
//	                  (no finish or usage chunk); N=1: not even the role chunk
//
// A position beyond the last token never fires. For a non-streaming request,
// reset/close/stall fire when the body would have been sent (N ignored),
// error-at turns the answer into a 500 with an error body, and malformed-at
// cuts the body in half.
//
// # Traces
//
// For every generation request the simulator records a Trace keyed by its
// X-Request-Id: the flush time of each event and its kind (which are token
// events), the prompt and completion token counts, and, if the client went
// away, when the simulator noticed. It notices at the next write that fails
// (TCP usually accepts one write after the peer closed, so that may be the
// write after next), and, on Unix with a TCP connection, within
// pollInterval (50 ms) while it waits for a long deadline or stalls: it
// peeks at the socket (MSG_PEEK, nothing consumed) to see EOF or a reset.
// Server.Trace returns a trace, Server.WaitTrace waits for a request to end.
// A request that reuses an X-Request-Id replaces the earlier trace.
// Rejected requests (400, 404, status faults, ...) are traced too, with one
// EventBody. Config.MaxTraces bounds how many are kept (oldest dropped
// first); each event costs 8 bytes.
//
// # Lifecycle
//
// New, then Serve (or ListenAndServe) on a listener; or mount Handler in
// another fasthttp.Server. Shutdown stops every running response at once
// (even one whose next event is already due), closes the listeners, and
// waits for the connections; generation requests that still reach Handler
// afterwards get a 503.
package sim
