package sim

import "time"

// Config configures a simulator. The zero value is usable: a model named
// "sim-llama" that answers every request at once with 256 tokens.
type Config struct {
	// Model is the served model name, listed by /v1/models and checked
	// against a request's "model" (a different name gets vLLM's 404).
	// Zero: "sim-llama".
	Model string
	// TTFT is the fixed part of the time to first token, counted from when
	// the request was read. Zero: no fixed delay.
	TTFT time.Duration
	// TTFTPerPromptToken is added to TTFT once per prompt token, so TTFT
	// grows with the prompt (a prefill cost). Zero: TTFT does not depend on
	// the prompt.
	TTFTPerPromptToken time.Duration
	// ITL is the gap between consecutive output tokens. Zero: all tokens
	// are written back to back.
	ITL time.Duration
	// DefaultMaxTokens is the token limit of a request that sets neither
	// max_tokens nor max_completion_tokens. Zero: 256.
	DefaultMaxTokens int
	// MaxModelLen is the model's context, in tokens: a request whose prompt
	// and output limit (its own, else DefaultMaxTokens) exceed it is
	// refused, 400, as vLLM refuses it (and a request's answer is never
	// larger than it allows). Zero: 131072 (Llama 3.1's).
	MaxModelLen int
	// NaturalLength is how many tokens a request generates before it stops
	// on its own (finish_reason "stop") when ignore_eos is false and its
	// token limit is at least that large. Zero or negative: output never
	// ends on its own, every request runs to its limit (finish_reason
	// "length").
	NaturalLength int
	// Seed chooses the output words (see TokenText) and the generated
	// request ids. Zero is a seed like any other.
	Seed int64
	// MaxTraces caps the number of request traces kept; the oldest is
	// dropped first. Zero: 10000. Negative: no tracing at all.
	MaxTraces int
	// MaxStall bounds an X-Sim-Fault stall-after stall: after that long the
	// simulator closes the connection. Zero: 10 minutes.
	MaxStall time.Duration
	// Scheduler decides when each token is due. Nil: Linear.
	Scheduler Scheduler
}

const (
	defaultModel     = "sim-llama"
	defaultMaxTokens = 256
	defaultModelLen  = 131072
	defaultMaxTraces = 10000
	defaultMaxStall  = 10 * time.Minute
	shutdownWait     = 5 * time.Second
)
