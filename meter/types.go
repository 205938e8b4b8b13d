// Package meter turns an inference response into a per-request record.
//
// The data flow is: the proxy reads upstream bytes, feeds them to a Framer
// (SSE or NDJSON), stamps each complete event with the monotonic time it was
// read, hands the event to the API's Parser, which fills an EventInfo, and
// then to the request's Meter, which accumulates TTFT, every inter-token gap,
// usage and the rest of the Record (see docs/MEASURES.md).
//
// Nothing on the per-event path allocates once the buffers have grown.
package meter

import "time"

// Unknown marks a duration or count that does not apply to a record (no
// token was seen, the response was not streamed, ...). The JSON record
// writes it as null.
const Unknown = -1

// API names the wire format of a metered route.
type API uint8

const (
	APIOther          API = iota // not metered: bytes pass through, no parsing
	APIChat                      // OpenAI /v1/chat/completions
	APICompletions               // OpenAI /v1/completions
	APIResponses                 // OpenAI Responses API, /v1/responses
	APIMessages                  // Anthropic Messages API, /v1/messages
	APIOllamaChat                // Ollama's native /api/chat (NDJSON)
	APIOllamaGenerate            // Ollama's native /api/generate (NDJSON)
	APILlamaCpp                  // llama.cpp server's native /completion
	APITGI                       // Hugging Face TGI's native /generate, /generate_stream and /
	APISGLang                    // SGLang's native /generate
	APIChatBatch                 // vLLM's /v1/chat/completions/batch: several conversations, one chat.completion answer
)

// String returns the route label used in logs and metrics.
func (a API) String() string {
	switch a {
	case APIChat:
		return "chat"
	case APICompletions:
		return "completions"
	case APIResponses:
		return "responses"
	case APIMessages:
		return "messages"
	case APIOllamaChat:
		return "ollama_chat"
	case APIOllamaGenerate:
		return "ollama_generate"
	case APILlamaCpp:
		return "llamacpp_completion"
	case APITGI:
		return "tgi_generate"
	case APISGLang:
		return "sglang_generate"
	case APIChatBatch:
		return "chat_batch"
	default:
		return apiOtherName
	}
}

// EndsWithEvent reports whether the API ends a response with an event of
// its own, which its clients wait for (the Responses API's
// response.completed, incomplete or failed; the Messages API's
// message_stop; Ollama's line with "done": true; TGI's event with its
// generated_text): a stream of it that
// stops before that event, however cleanly, was cut short. Chat and
// completions streams end with [DONE] by convention only, which is not
// counted on: one of them was cut short when it ended with neither [DONE]
// nor a finish_reason (Meter.Finished); so was a llama.cpp native stream
// that ended without an event with "stop": true (EndsWithFinish).
func (a API) EndsWithEvent() bool {
	return a == APIResponses || a == APIMessages || a == APIOllamaChat || a == APIOllamaGenerate || a == APITGI
}

// EndsWithFinish reports whether a stream of the API that had token events
// was cut short when it ended with neither [DONE] nor an event saying why
// its output stopped (Meter.Finished): chat, completions, llama.cpp's
// native completion and SGLang's /generate (a request of several prompts
// or samples has one such event per output: only every output's that had
// an event ends it; of a chat or completions request of several choices,
// every choice's it asked for: Meter.Finished).
func (a API) EndsWithFinish() bool {
	return a == APIChat || a == APICompletions || a == APILlamaCpp || a == APISGLang
}

// WellKnownAnswer reports whether a success of the API is always JSON or an
// event stream of a shape every engine keeps: chat, completions, the
// Responses and the Messages APIs (an engine's native routes answer in
// their own ways: llama.cpp's /completions picks its fields by the
// request's response_fields, TGI's / is also a load balancer's).
func (a API) WellKnownAnswer() bool {
	return a == APIChat || a == APICompletions || a == APIResponses || a == APIMessages
}

// NDJSON reports whether the API streams newline-delimited JSON (Ollama's
// native API) rather than an event stream.
func (a API) NDJSON() bool { return a == APIOllamaChat || a == APIOllamaGenerate }

// OpenAIShape returns the API whose rules read an answer in OpenAI's shape
// (chat chunks in an event stream, a chat.completion body) on a's route:
// chat for Ollama's /api/chat, which llama.cpp's server also serves, as an
// alias of its /v1/chat/completions, and for vLLM's chat batch, answered
// with one chat.completion (a choice a conversation); completions for
// /api/generate; a itself for every other API.
func (a API) OpenAIShape() API {
	switch a {
	case APIOllamaChat, APIChatBatch:
		return APIChat
	case APIOllamaGenerate:
		return APICompletions
	}
	return a
}

// StatusClientClosed is the status recorded for a client that went away
// before the upstream sent anything: there was no response to send. It is
// nginx's 499, which Caddy logs too, and is never written to a client.
const StatusClientClosed = 499

// Outcome is the single way a request ended (docs/MEASURES.md, Outcomes).
type Outcome uint8

const (
	OutcomeOK            Outcome = iota
	OutcomeUpstreamError         // upstream 5xx, reset, malformed stream, error object mid-stream
	OutcomeClientError           // upstream 4xx
	OutcomeClientAbort           // the client went away
	OutcomeTimeout               // connect, first byte, idle or total timeout
	OutcomeRateLimited           // rejected or timed out in the gateway's queue by a limit
	OutcomeUnauthorized          // missing or unknown gateway key
	OutcomeRejected              // bad request at the gateway (body too large, bad JSON)
	numOutcomes
)

var outcomeNames = [numOutcomes]string{
	"ok", "upstream_error", "client_error", "client_abort", "timeout",
	"rate_limited", "unauthorized", "rejected",
}

// String returns the outcome's label value.
func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return "unknown"
}

// Outcomes lists every outcome, in order; useful to pre-create metric children.
func Outcomes() []Outcome {
	out := make([]Outcome, numOutcomes)
	for i := range out {
		out[i] = Outcome(i)
	}
	return out
}

// ModelOp names an answer that loaded or unloaded a model instead of
// generating: Ollama answers a request whose prompt (/api/generate) or
// messages (/api/chat) are empty by loading the model, and with keep_alive
// 0 too by unloading it, with one JSON object (never a stream) that is done,
// empty and without counts, its done_reason saying which.
type ModelOp uint8

const (
	ModelOpNone   ModelOp = iota
	ModelOpLoad           // done_reason "load"
	ModelOpUnload         // done_reason "unload"
)

// String returns the model_op value written to the request log ("" for
// none).
func (o ModelOp) String() string {
	switch o {
	case ModelOpLoad:
		return "load"
	case ModelOpUnload:
		return "unload"
	}
	return ""
}

// UsageSource says where ISL and OSL came from.
type UsageSource uint8

const (
	UsageNone       UsageSource = iota // no count at all (and nothing to estimate from)
	UsageUpstream                      // the upstream's final usage object
	UsageContinuous                    // the last continuous usage (vLLM continuous_usage_stats, per-chunk usage)
	UsageEstimate                      // estimated by the gateway: one token per token event with content (see Meter.Finish)
)

// String returns the usage_source value written to the request log.
func (u UsageSource) String() string {
	switch u {
	case UsageUpstream:
		return "usage"
	case UsageContinuous:
		return "continuous_usage"
	case UsageEstimate:
		return "estimate"
	default:
		return "none"
	}
}

// EventInfo is what a Parser learned from one event. The proxy reuses one
// value per request; Parse overwrites every field.
type EventInfo struct {
	// Token: the event carries generated output (docs/MEASURES.md): for
	// chat and completions, a chunk whose choices array is non-empty. One
	// exception: a chunk whose choices had all finished in earlier chunks,
	// with no content and no finish_reason, carries none: a usage trailer
	// sent with non-empty choices (OpenRouter: after a finish_reason, a
	// chunk with usage, empty deltas and no finish_reason) is UsageOnly,
	// not Token; SGLang's hidden-states chunk (return_hidden_states) is
	// neither.
	Token bool
	// Content: the event has a non-empty text, reasoning or tool-call delta.
	Content bool
	// UsageOnly: choices is empty (or absent) and a usage object is present:
	// the chunk that stream_options.include_usage adds at the end (or the
	// OpenRouter-style trailer described under Token). The proxy strips it
	// when the gateway, not the client, asked for usage.
	UsageOnly bool
	// Finish: a choice of the chunk has a non-null finish_reason. A usage
	// object on such a chunk (DeepSeek, Perplexity) is a final count.
	Finish bool
	// Done: the event is the `[DONE]` end marker.
	Done bool
	// Pending: a non-streamed body that acknowledges work not done yet (a
	// Responses API background request answered "queued" or
	// "in_progress"): it carries no output and no usage.
	Pending bool
	// HasUsage: a non-null usage object was present; PromptTokens and
	// CompletionTokens hold its counts (Unknown when a field was missing).
	HasUsage bool
	// Error: the event carries an error (an `error` object, or `event: error`).
	Error bool
	// OtherChoice: a chunk of a stream of several choices (n > 1, several
	// prompts) carries a choice other than the first (index ≠ 0). Such a
	// stream's running usage counts are per choice (vLLM and SGLang count
	// each choice apart until the final usage chunk): not the response's.
	OtherChoice bool
	// OwnOutput: the event is of one output of a stream of several whose
	// events each count their own output (SGLang's native stream of
	// several prompts or samples, every event of which names its output,
	// "index"): its counts are that output's, a running count, and the
	// output's total on its finishing event (Finish); FinishIndex is the
	// output's index, on every such event. There is no count of the
	// whole: the meter sums the outputs' (Meter.Observe).
	OwnOutput bool
	// ModelOp: the answer loaded or unloaded a model and generated
	// nothing (Ollama's done_reason "load" or "unload"; see ModelOp).
	ModelOp ModelOp
	// ChoicesEnded: with Finish, on a chunk of a chat or completions
	// stream, how many of the stream's choices from index 0 on have all
	// had their finish_reason, in this chunk or an earlier one: choices 0
	// to ChoicesEnded − 1 have ended (at most 64: the parser tells no
	// later choice apart). A choice's second finish_reason counts once.
	// An event in llama.cpp's native shape (its /completion, or a
	// completions route it answers natively), whose last event need not
	// name its choice (response_fields), says 64: its end ends them all,
	// as any finish did before; so does a chunk with a finish_reason of
	// "" (TGI's completions send it on every chunk, naming no end).
	// Meter.Finished reads it
	// against the choices the request asked for (SetStreamChoices). 0 for
	// any other API's event, and without Finish.
	ChoicesEnded uint8
	// FinishIndex: with Finish, the index of the chunk's first choice
	// with a finish_reason (65535 for any index from there on), which
	// says whose counts a usage on that chunk are in a stream of several
	// choices (Meter.Observe); with OwnOutput, the event's output's index,
	// finishing or not; 0 otherwise.
	FinishIndex uint16
	// FirstChoiceUsage: a non-streamed chat or completions body of
	// several choices whose usage counts its first choice's task alone,
	// llama.cpp's (its timings object tells it): the number of its
	// choices (65535 for any number from there on); 0 for a body whose
	// usage is the whole answer's, and for every event. llama.cpp runs a
	// task per choice (several prompts, n > 1) and answers them, not
	// streamed, with the first task's object, the other tasks' choices
	// appended to its own (server_routes::handle_completions_impl): its
	// usage and timings stay the first task's. Meter.ObserveBody keeps
	// of it only what is the whole's.
	FirstChoiceUsage uint16
	PromptTokens     int
	CompletionTokens int
	// ErrorMessage is a copy-free view of the error message, valid until the
	// next Parse call; empty when none.
	ErrorMessage []byte
}

// Record is the per-request record: exactly one per request that reached the
// gateway, with exactly one Outcome. Durations are measured on the monotonic
// clock from t0 (the gateway has read the request headers); a duration or
// count that does not apply is Unknown (-1).
type Record struct {
	Start     time.Time // wall-clock t0, for the log's `time`
	RequestID string
	// UpstreamRequestID is the engine's own X-Request-Id, when it differs
	// from RequestID (an engine that names requests its own way), so that
	// the gateway's log can be joined with the engine's; empty otherwise.
	UpstreamRequestID string
	// ClientRequestID is the client's X-Request-Id when the gateway sent
	// another in its place because a request still in flight had it (an
	// engine takes the id it is sent as unique); empty otherwise.
	ClientRequestID string
	Tenant          string
	KeyID           string
	Model           string
	Route           string // an API's label (API.String), or other
	// ModelUnread: the request, on a metered route, ended before the
	// gateway read the model its body names (a body refused unread, or
	// that did not arrive in time; a key refused before the body), or its
	// body could not be read for it (without gateway keys such a body is
	// passed on to the engine), so
	// Model is empty without the request naming none. Its metric label is
	// "unread", not "none" (package export): judged by its tenant's class,
	// it would share the series of the requests that name none, judged by
	// the default model's. Not logged.
	ModelUnread bool
	Stream      bool
	// Deferred: the answer only acknowledged the request, whose output is
	// generated later and read back on another route (a Responses API
	// background request answered "queued"). Such a request is not an
	// inference request: it generated nothing within its own exchange.
	Deferred bool
	// Background: the request asked to be generated after its answer (a
	// Responses API request with "background": true). Only such a
	// request's acknowledgement is Deferred. Not logged.
	Background bool
	// ModelOp: the answer only loaded or unloaded a model (Ollama's
	// answer to a request with an empty prompt or messages). Such a
	// request is not an inference request: it generated nothing, and its
	// time is the model's load. Logged as model_op.
	ModelOp ModelOp
	Status  int // HTTP status sent to the client (0 when none was sent)
	// UpstreamStatus is the status the engine answered with; 0 when it
	// sent none (the gateway answered alone). Not logged.
	UpstreamStatus int
	Outcome        Outcome
	// ErrorMessage explains a non-ok outcome in a few words (never a key).
	ErrorMessage string

	ISL         int // prompt tokens (Unknown when no count exists)
	OSL         int // generated tokens (Unknown when no count exists)
	UsageSource UsageSource

	TTFT        time.Duration // first token event - t0
	TTFTContent time.Duration // first event with non-empty content - t0
	// LeadEvents is the number of token events before the first one with
	// content (a chat stream's role-only first chunk): they carry no token.
	// 0 when none came, or no content did. Not logged.
	LeadEvents int
	E2E        time.Duration // last token event - t0 (streams); response end - t0 otherwise
	TPOT       time.Duration // (E2E - TTFT) / (OSL - 1) when OSL > 1
	// ITL holds the gaps between consecutive token events, in order: the
	// first MaxKeptGaps of them. ITLRest summarises the rest (its Count is
	// how many gaps ITL does not list: the log's itl_truncated).
	ITL     []time.Duration
	ITLRest GapSummary
	MaxITL  time.Duration // the largest gap, over every gap
	Events  int           // token events seen (Unknown for non-streamed responses)
	// TokensPerEvent, when known (continuous usage), holds n for each token
	// event, in order (n may be 0, e.g. for the role-only first chunk), for
	// the first MaxKeptGaps+1 events; nil or empty when unknown.
	TokensPerEvent []int
	// TrailEmpty, when TokensPerEvent is known, is the number of token
	// events after the last one that carried a token (a separate finish
	// chunk, empty deltas): 0 when the last token event carried one. It
	// covers every event, kept or not, so that the last token of a stream
	// longer than the kept gaps can be placed (slo's deadline). Not logged.
	TrailEmpty int

	Overhead time.Duration // t_up - end of the body's upload: auth, limits, body rewrite (see docs/MEASURES.md)
	// WriteDelay is the gateway's own write latency: the longest time from
	// an event being read from the upstream to its bytes being written to
	// the client's connection (Unknown when nothing was written).
	WriteDelay time.Duration
	QueueWait  time.Duration // time spent waiting for a limit (Unknown when none)
	Upstream   string

	// MatchedModel is the tenant's configured model (its name under
	// models:) that the limits matched the request to: by name, alias or
	// as Ollama reads names, and for a request that names no model the
	// tenant's default model. Empty when none matched, or when no limits
	// were applied (no gateway keys; a request refused before admission).
	// The SLO judge finds a model's class by it when Model, the name the
	// request gave, has none. Not logged: the log and the metrics keep
	// Model.
	MatchedModel string
	// MatchedByAdapter says MatchedModel is the LoRA adapter the body
	// names (TGI's parameters.adapter_id, SGLang's lora_path or
	// "base:adapter" model), which the engine runs whatever Model says:
	// the SLO judge finds the class by MatchedModel first.
	MatchedByAdapter bool

	// The SLO verdict, set by the judge (package slo) before the record is
	// logged. Judged is false when no class applies (no SLO configured, or
	// no valid key: only requests with a valid key are judged).
	SLO         string
	Judged      bool
	Good        bool
	MissReasons []string // every reason of a miss, in a fixed order; nil when good

	// Live and Labels are the request's metric label values, chosen once by
	// the sinks (package export's Labeler) and used by every metric of the
	// request; never written to the log.
	Live   Live
	Labels Labels
}

// Inference reports whether the record is of an inference request: one on a
// metered generation route. Only those are judged against an SLO and enter
// latency figures and the workload profile; every request is still
// logged and counted.
func (r *Record) Inference() bool {
	return r.Route != "" && r.Route != apiOtherName && !r.Deferred && r.ModelOp == ModelOpNone
}

const apiOtherName = "other"

// ClientMistake reports a request refused for the client's own mistake: a
// 4xx other than 408 and 429, from the engine (outcome client_error: an
// unknown model, bad JSON, a wrong method) or from the gateway (outcome
// rejected: a bad body, a body too large). A 408 or a 429 is the service's
// doing, and a client that went away was not refused.
func (r *Record) ClientMistake() bool {
	if r.Outcome != OutcomeClientError && r.Outcome != OutcomeRejected {
		return false
	}
	return r.Status >= 400 && r.Status < 500 && r.Status != 408 && r.Status != 429
}

// Labels are the metric label values of one request: bounded (a value
// without a label slot is "other") and valid UTF-8.
type Labels struct{ Tenant, Model string }

// Live is what counted a request in flight when it began. The sinks set it
// in Begin and undo exactly that when the request ends, so that a reload or
// a label value admitted in between cannot move the count.
type Live struct {
	// Labels are the values chosen when the request began.
	Labels
	// TentativeTenant, TentativeModel: that value holds no label slot yet;
	// it takes one only if the engine accepts a request with it (2xx).
	TentativeTenant, TentativeModel bool
	// TentativePair: the pair of the two holds no series yet (the labels'
	// bound on tenant-and-model pairs); it takes them only with a request
	// accepted.
	TentativePair bool
	// Gauge is the in-flight gauge child the request was counted in.
	Gauge interface{ Dec() }
	// Profile is the request's place in the workload profile (package slo).
	Profile any
	// Classes is the request's tenant's SLO classes in the configuration
	// it began under (package slo): it is judged by them, so that a reload
	// while it runs (its tenant removed, its class changed) does not leave
	// it unjudged or judge it by another class.
	Classes any
	// Span is the request's trace span, between the proxy's Tracer's Start
	// and End (package export/otlp).
	Span any
}
