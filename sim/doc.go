// Package sim is an OpenAI-compatible engine simulator. It writes the bytes
// vLLM's OpenAI server writes, on a schedule the caller controls, injects
// faults on request, and records when it flushed every event so that tests
// can compare what a gateway measured with what was really sent. Tests,
// benchmarks and the zero-config demo (`goodput serve` without an upstream)
// use it.
//
// # Routes
//
//   - POST /v1/chat/completions and POST /v1/completions: generation,
//     streamed (SSE) or not.
//   - GET /v1/models: the one served model (Config.Model).
//   - GET /health: 200 with an empty body, as vLLM.
//   - GET /metrics: vLLM's engine-health metrics (running and waiting
//     requests, KV cache usage, preemptions) under vLLM's names, read from
//     the requests in flight (metrics.go).
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
// # Timeline
//
// Token i (1-based) is written and flushed at the absolute time the
// Schedule gives; with the default Linear scheduler that is
// start + TTFT + (i−1)·ITL, where start is when the request had been read.
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
