package proxy

import "github.com/goodput/goodput/meter"

// A stream that outgrows the tokens it was charged at admission is charged as
// it goes (ratelimit.Gate.Progress), or cut under the tenant's
// on_overrun: cut.

// overrunMessage ends the record of a stream cut by its tenant's token limit.
const overrunMessage = "cut mid-stream: the tenant's tokens per minute are spent (on_overrun: cut)"

// overrunEvent is the last event a client of a cut stream receives, in the
// shape of OpenAI's error body, which the openai SDKs raise for a chat,
// completions or Responses API stream alike; the response then ends
// without its final chunk, so that it cannot pass for a complete one.
var overrunEvent = []byte(`data: {"error":{"message":"Rate limit reached on tokens per minute: this stream ran past its token allowance and was cut.","type":"tokens","code":"rate_limit_exceeded"}}` + "\n\n")

// overrunEventMessages is overrunEvent for a Messages API stream: the
// Anthropic SDKs raise an `error` event and skip an event they do not
// know, so the cut takes Anthropic's shape.
var overrunEventMessages = []byte("event: error\ndata: " + `{"type":"error","error":{"type":"rate_limit_error","message":"Rate limit reached on tokens per minute: this stream ran past its token allowance and was cut."}}` + "\n\n")

// overrunEventOllama is overrunEvent for Ollama's native stream: one JSON
// line in Ollama's error shape, which its clients raise.
var overrunEventOllama = []byte(`{"error":"Rate limit reached on tokens per minute: this stream ran past its token allowance and was cut."}` + "\n")

// overrunEventTGI is overrunEvent for TGI's native stream: TGI's own error
// event, whose error is a string.
var overrunEventTGI = []byte(`data: {"error":"Rate limit reached on tokens per minute: this stream ran past its token allowance and was cut.","error_type":"overloaded"}` + "\n\n")

// overrunEventFor returns the last event a cut stream of api gets.
func overrunEventFor(api meter.API) []byte {
	switch {
	case api == meter.APITGI:
		return overrunEventTGI
	case api == meter.APIMessages:
		return overrunEventMessages
	case api.NDJSON():
		return overrunEventOllama
	}
	return overrunEvent
}

// progress tells the limiter how far an admitted stream has got, once per
// event: a comparison, until the stream passes what it was charged. It
// returns false when the stream must be cut; the reader then ends it.
func (s *stream) progress() bool {
	if !s.adm.admitted {
		return true
	}
	if s.p.cfg.Limits.Progress(&s.adm.ticket, s.adm.promptEst+int64(s.meter.OutputTokens())) {
		return true
	}
	s.setEnd(endLimit, overrunMessage)
	s.queue(overrunEventFor(s.api))
	s.hangUp() // the engine stops generating
	return false
}
