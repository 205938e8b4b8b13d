package meter

import (
	"math"
	"time"
	"unicode/utf8"
)

// maxErrorMessage bounds the error message a Meter keeps (bytes).
const maxErrorMessage = 512

// Meter accumulates the measures of one request from its parsed events
// (docs/MEASURES.md). Use one per request in flight: Start, then Observe each
// event of a stream (or ObserveBody once for a non-streamed response), then
// Finish. A Meter is reusable: Start clears it and keeps its buffers, so
// that steady state allocates nothing. The zero value is ready to use. A
// Meter is not safe for concurrent use.
type Meter struct {
	t0 time.Time

	tokenEvents   int
	contentEvents int
	firstTok      time.Time
	lastTok       time.Time
	ttftContent   time.Duration
	bodyE2E       time.Duration
	// itl holds the first MaxKeptGaps gaps in whole microseconds (rounded):
	// half the memory of time.Duration for a stream in flight, and the
	// precision the log and the metrics use. Finish converts them back.
	// The gaps after them go to rest. Pooled (arrays.go).
	itl  []uint32
	rest GapSummary
	// restGap is the latest token event's gap plus 1 ns when that gap
	// went to rest, else 0 (gaps are whole microseconds, so the nanosecond
	// tells; and the zero value says none, with no flag of its own).
	restGap time.Duration
	maxITL  time.Duration

	// The engine's counts: int32, as a count is believed only up to
	// 2^31 − 1 (maxCount), which keeps a stream's memory in its size class.
	prompt     int32
	completion int32
	tpe        []int // tokens of the first MaxKeptGaps+1 token events (every one, while tpeOK); pooled
	errMsg     []byte
	// open: the outputs of a stream whose events each count their own
	// output (EventInfo.OwnOutput: SGLang's of several) that had an event
	// and no finishing one yet, bit i for the output of index i; bit 63
	// for every index from 63 on, never cleared (such outputs are not
	// told apart). Of a chat or completions stream, the choices the
	// request asked for (SetStreamChoices) that have not ended yet
	// (EventInfo.ChoicesEnded), bit i for the choice of index i, the
	// first 64 alone. Either way, the outputs still to end.
	open uint64

	// The flags, together (no padding between them).
	started    bool
	body       bool // ObserveBody was called
	hasUsage   bool
	usageFinal bool // the latest usage came from a usage-only or finish chunk, or a body
	usageOnly  bool // the latest usage came from a usage-only chunk, or a body
	tpeOK      bool // every token event so far carried a completion count
	done       bool
	finished   bool // a finish_reason (or another API's stop) was observed
	multi      bool // a chunk carried a choice other than the first (EventInfo.OtherChoice)
	errSeen    bool
	// perChoice: how the usage of a stream of several choices came
	// (sumPerChoice), with the request's choices per prompt
	// (SetChoicesPerPrompt) in its low bits. After the flags, in their
	// padding, so that a pooled stream keeps its size class.
	perChoice uint8
	// trailEmpty counts the token events since the last one whose count
	// grew (while tpeOK): the events after the stream's last token,
	// saturating at MaxUint8 (Finish then passes the last event over).
	// With the flags, in their padding.
	trailEmpty uint8
	// prevTokens is the completion count of the previous token event (a
	// count, so at most maxCount): after the flags, in their padding.
	prevTokens int32
}

// Meter.perChoice: its low six bits hold the request's choices per prompt
// less one (0: one, the default; perPromptUnknown: 64 or more, or not
// known), the flags above them how the usage came.
const (
	perPromptMask    = 1<<6 - 1
	perPromptUnknown = perPromptMask
	// usageMidChoice: a usage came on a chunk that neither ended a choice
	// nor was usage-only (a running count, vLLM's continuous usage).
	usageMidChoice = 1 << 6
	// finishNoUsage: a chunk ended a choice without a usage, or an error
	// came (the choices still running ended without theirs).
	finishNoUsage = 1 << 7
)

// SetChoicesPerPrompt tells the Meter how many choices the request asked
// for each of its prompts (n; llama.cpp's n_cmpl before it): a stream of
// several choices whose usage comes on each choice's finish chunk
// (Observe) counts a prompt once, on its first choice. Values below 1 are
// 1; 64 and more leave the prompts' count unknown. Call it after Start.
func (m *Meter) SetChoicesPerPrompt(n int) {
	n = max(n, 1) - 1
	if n >= perPromptUnknown {
		n = perPromptUnknown
	}
	m.perChoice = m.perChoice&^perPromptMask | uint8(n)
}

// SetStreamChoices tells the Meter how many choices a chat or completions
// stream of the request carries, numbered from 0 (n for each prompt, one
// prompt after the other), or as few as any engine serving it would send.
// A stream of several choices has then ended (Finished) only once every
// one of them had its finish_reason, rather than at the first: one
// choice's end is not the others'. Below 2 (one choice, or not known),
// the first finish_reason ends the stream, as it ends any; of more than
// 64, the first 64 must end (the parser tells no later choice apart). Not
// for a stream whose events each count their own output
// (EventInfo.OwnOutput), whose outputs are waited for as they come. Call
// it after Start.
func (m *Meter) SetStreamChoices(n int) {
	m.open = 0
	if n > 1 {
		m.open = lowBits(min(n, 64))
	}
}

// lowBits returns the mask of the n lowest bits, n from 0 to 64.
func lowBits(n int) uint64 {
	if n >= 64 {
		return math.MaxUint64
	}
	return 1<<n - 1
}

// ChoicesPerPrompt returns the choices per prompt SetChoicesPerPrompt was
// given (1 when it was not called), or Unknown for 64 and more.
func (m *Meter) ChoicesPerPrompt() int {
	n := m.perChoice & perPromptMask
	if n == perPromptUnknown {
		return Unknown
	}
	return int(n) + 1
}

// firstOfPrompt reports whether the choice of index i is its prompt's
// first (known false when the choices per prompt are not known, but for
// the choice of index 0, the first prompt's first).
func (m *Meter) firstOfPrompt(i uint16) (first, known bool) {
	n := m.perChoice & perPromptMask
	if i == 0 {
		return true, true
	}
	if n == perPromptUnknown {
		return false, false
	}
	return int(i)%(int(n)+1) == 0, true
}

// Start begins a new request at t0 (the gateway has read the request
// headers; take it from time.Now() so that it carries the monotonic clock).
// It clears everything the Meter held (see Reset).
func (m *Meter) Start(t0 time.Time) {
	m.Reset()
	m.t0 = t0
	m.started = true
}

// Reset clears the Meter as a whole: nothing of an earlier request survives
// it. Its gap and token-count arrays go back to their pools (arrays.go), so
// a reset Meter holds none of a long stream's capacity. A reset Meter has
// not started: Finish then writes an empty measure.
func (m *Meter) Reset() {
	u32Arrays.put(m.itl)
	intArrays.put(m.tpe)
	errMsg := m.errMsg[:0]
	rest := m.rest
	rest.reset()
	*m = Meter{
		rest:        rest,
		ttftContent: Unknown,
		bodyE2E:     Unknown,
		maxITL:      Unknown,
		prompt:      Unknown,
		completion:  Unknown,
		tpeOK:       true,
		errMsg:      errMsg,
	}
}

// Observe accounts for one parsed event of a stream, read completely at t.
//   - The first token event sets TTFT, the first event with content sets
//     TTFTContent; every later token event appends one gap t_k − t_{k−1} to
//     ITL; E2E is the time of the last token event (usage-only chunks,
//     [DONE] and errors do not extend it).
//   - A usage object replaces the counts held so far (a missing field keeps
//     the previous value). It is a final count (UsageUpstream) when it came
//     on a usage-only chunk or on a chunk with a finish_reason; otherwise
//     (usage on every chunk, cut short before the final one) it is a
//     continuous count (UsageContinuous).
//   - A stream of several choices (EventInfo.OtherChoice) that sends
//     several usage-only chunks, with no other usage between them, sends
//     one per choice (llama.cpp's chat with n > 1 runs a task per choice,
//     each ending with a usage chunk of its own; vLLM and SGLang send one,
//     the whole's): their completion counts are added, and the prompt,
//     the same one in each, is counted once (the largest count; Unknown
//     when one lacks a count).
//   - A stream of several choices whose usage comes on each choice's
//     finish chunk (llama.cpp's /v1/completions: a task per prompt, and
//     per choice of a prompt with n > 1, each ending with a finish chunk
//     that carries its usage; no usage-only chunk) has those usages
//     summed: the output counts all, the prompt counts once per prompt
//     (addFinishUsage). The sum is the response's count (Finish) when no
//     usage came on another chunk, every finish chunk had one, every
//     choice asked for had one (SetStreamChoices), no error came (it ends
//     the choices still running without theirs), and the stream's [DONE]
//     came (a choice's finish chunk sent again is no end: once another
//     choice came, StreamParser passes over its finish_reason and usage;
//     before, its usage replaces the first's: the choice's count is taken
//     once).
//   - A stream whose events each count their own output (SGLang's of
//     several prompts or samples: EventInfo.OwnOutput), a running count
//     and the total on its finishing event, has those totals summed: the
//     output counts all, the prompt counts once per prompt
//     (addFinishUsage); its running counts are each output's, not the
//     response's, and are taken only while one output has come
//     (continuous usage). The sum is the response's count (Finish) when
//     every output that had an event had its finishing one, with its
//     counts, no error came, and the stream's [DONE] came (observeOutput;
//     an output's second finishing event is none: StreamParser passes it
//     over, its total taken once).
//   - When every token event carries a completion count, the number of
//     tokens of each is the difference with the previous count: that list
//     becomes the record's TokensPerEvent.
//   - The first error message is kept (see UpstreamError).
//   - Nothing after the stream's end marker ([DONE], response.completed,
//     message_stop: EventInfo.Done) counts: the response has ended, and
//     an engine that sends more (a second final event, deltas) does not
//     change what it said.
func (m *Meter) Observe(info *EventInfo, t time.Time) {
	if m.done {
		m.restGap = 0 // no gap of this event to summarise
		return
	}
	if info.Error && !m.errSeen {
		m.keepError(info.ErrorMessage)
	}
	if info.Done {
		m.done = true
	}
	if info.Finish {
		m.finished = true
		if !info.OwnOutput {
			// The choices asked for that have ended (SetStreamChoices).
			m.open &^= lowBits(int(info.ChoicesEnded))
		}
	}
	if info.OtherChoice {
		m.multi = true
	}
	if info.Finish && !info.HasUsage || info.Error {
		// An error ends the choices still running without their usage
		// (llama.cpp's, then [DONE]; SGLang's ends its batch).
		m.perChoice |= finishNoUsage
	}
	switch {
	case info.OwnOutput:
		m.observeOutput(info)
	case info.HasUsage:
		switch {
		case info.UsageOnly && m.usageOnly && m.hasUsage && m.multi:
			// One usage chunk per choice (llama.cpp's chat): their sum.
			m.addUsage(info)
		case info.Finish && !info.UsageOnly && m.perChoice&usageMidChoice == 0:
			// Each choice's usage on its finish chunk (llama.cpp's
			// /v1/completions of several prompts): their sum.
			m.addFinishUsage(info)
		default:
			m.takeUsage(info)
		}
		if !info.UsageOnly && !info.Finish {
			m.perChoice |= usageMidChoice
		}
		m.usageFinal = info.UsageOnly || info.Finish
		m.usageOnly = info.UsageOnly
	}
	if info.Token {
		m.restGap = 0
		if m.tokenEvents == 0 {
			m.firstTok = t
		} else {
			us := gapMicros(t.Sub(m.lastTok))
			gap := time.Duration(us) * time.Microsecond
			if len(m.itl) < MaxKeptGaps {
				m.itl = appendArray(&u32Arrays, m.itl, us)
			} else {
				m.rest.add(gap)
				m.restGap = gap + 1
			}
			if gap > m.maxITL {
				m.maxITL = gap
			}
		}
		m.lastTok = t
		m.tokenEvents++
		if m.tpeOK {
			// A stream of several choices counts each apart: its counts
			// say nothing of one event's tokens.
			if info.HasUsage && !m.multi && info.CompletionTokens >= int(m.prevTokens) {
				if len(m.tpe) <= MaxKeptGaps {
					m.tpe = appendArray(&intArrays, m.tpe, info.CompletionTokens-int(m.prevTokens))
				}
				if info.CompletionTokens > int(m.prevTokens) {
					m.trailEmpty = 0
				} else if m.trailEmpty < math.MaxUint8 {
					m.trailEmpty++
				}
				m.prevTokens = int32(info.CompletionTokens)
			} else {
				m.tpeOK = false
			}
		}
	}
	if info.Content {
		if info.Token {
			m.contentEvents++
		}
		if m.ttftContent == Unknown {
			m.ttftContent = t.Sub(m.t0)
		}
	}
}

// observeOutput accounts for the counts of an event of one output of
// several, each counted apart (EventInfo.OwnOutput), whose index is
// info.FinishIndex: a running count is taken, as any, while no other
// output has come (a request of one prompt and sample, sent as a batch,
// is metered as one output: continuous usage, tokens per event), and
// passed over once one has (it is its output's alone); a finishing event's
// total is its output's whole count: taken while no other output has
// come, added to the others' once one has (addFinishUsage: the prompt once
// per prompt, on its first output). Which outputs had an event and not
// yet their finishing one is kept (open): the sum is the response's only
// once none is left.
func (m *Meter) observeOutput(info *EventInfo) {
	i := min(int(info.FinishIndex), 63)
	if i == 63 {
		m.open |= 1 << 63 // from here on outputs are not told apart
	}
	if !info.Finish {
		m.open |= 1 << i
		if info.HasUsage && !m.multi {
			m.takeUsage(info)
			m.usageFinal, m.usageOnly = false, false
		}
		return
	}
	if i < 63 {
		m.open &^= 1 << i
	}
	if !info.HasUsage {
		return // finishNoUsage: the sum is not known
	}
	if m.multi {
		m.addFinishUsage(info)
	} else {
		m.takeUsage(info)
	}
	m.usageFinal, m.usageOnly = true, false
}

// keepError copies the first error message, cut to maxErrorMessage bytes at
// a UTF-8 boundary.
func (m *Meter) keepError(msg []byte) {
	m.errSeen = true
	if len(msg) > maxErrorMessage {
		n := maxErrorMessage
		for n > 0 && !utf8.RuneStart(msg[n]) {
			n--
		}
		msg = msg[:n]
	}
	m.errMsg = append(m.errMsg[:0], msg...)
}

func (m *Meter) takeUsage(info *EventInfo) {
	m.hasUsage = true
	if info.PromptTokens != Unknown {
		m.prompt = int32(info.PromptTokens)
	}
	if info.CompletionTokens != Unknown {
		m.completion = int32(info.CompletionTokens)
	}
}

// addUsage adds a usage-only chunk's completion count to those of the
// usage-only chunks before it, one per choice, and keeps the largest of
// their prompt counts: the choices share the prompt (Observe).
func (m *Meter) addUsage(info *EventInfo) {
	prompt := int(m.prompt)
	switch {
	case info.PromptTokens == Unknown:
		prompt = Unknown
	case prompt != Unknown && info.PromptTokens > prompt:
		prompt = info.PromptTokens
	}
	m.prompt = int32(prompt)
	m.completion = int32(addCount(int(m.completion), info.CompletionTokens))
}

// addFinishUsage adds the usage on a choice's finish chunk to those on the
// finish chunks before it, in a stream of several choices whose latest
// usage came on one (else it is the first, taken as it is): one per
// choice, each counting its output and its prompt. A prompt is counted
// once, on its first choice (the first of the request's choices per
// prompt, SetChoicesPerPrompt: llama.cpp numbers the choices of its
// prompts one prompt after the other); Unknown when the choices per prompt
// are not known. In a stream of one choice this is the usage as it came
// (a second such usage replaces the first, as any usage does).
func (m *Meter) addFinishUsage(info *EventInfo) {
	prompt := info.PromptTokens
	if first, known := m.firstOfPrompt(info.FinishIndex); !known {
		prompt = Unknown
	} else if !first {
		prompt = 0 // its prompt's first choice counts it
	}
	if !(m.hasUsage && m.usageFinal && !m.usageOnly && m.multi) {
		m.hasUsage = true
		m.prompt, m.completion = int32(prompt), int32(info.CompletionTokens)
		return
	}
	m.prompt = int32(addCount(int(m.prompt), prompt))
	m.completion = int32(addCount(int(m.completion), info.CompletionTokens))
}

// ObserveHead takes the token counts an engine sent in the head of a
// non-streamed answer, as that answer's usage where its body gives none:
// Hugging Face TGI's x-prompt-tokens and x-generated-tokens (its router's
// generate_internal sets them for /generate and for / without "stream";
// its streamed handler does not), read with HeaderCount. A count the body
// gives (ObserveBody) wins over the head's, each count apart; Unknown is
// a count not given (or not believed: a count outside 0 to 2^31 − 1 is
// Unknown too). Call it after Start, before ObserveBody.
func (m *Meter) ObserveHead(prompt, completion int) {
	if prompt < 0 || prompt > maxCount {
		prompt = Unknown
	}
	if completion < 0 || completion > maxCount {
		completion = Unknown
	}
	if prompt == Unknown && completion == Unknown {
		return
	}
	m.hasUsage = true
	m.prompt, m.completion = int32(prompt), int32(completion)
	m.usageFinal, m.usageOnly = true, true
}

// BodyObserved reports whether ObserveBody was called: the answer was read
// as one body.
func (m *Meter) BodyObserved() bool { return m.body }

// HasUsage reports whether the meter holds counts of the engine's (a usage
// object, a native count, a head's).
func (m *Meter) HasUsage() bool { return m.hasUsage }

// Usage returns the prompt and output counts the meter holds, Unknown for
// each it has none of: of a non-streamed answer, those its record will
// have (Finish); before ObserveBody, or after ObserveBody(nil) (a body not
// read), those ObserveHead took.
func (m *Meter) Usage() (prompt, completion int) {
	if !m.hasUsage {
		return Unknown, Unknown
	}
	return int(m.prompt), int(m.completion)
}

// HeaderCount reads a token count from a response header's value (TGI's
// x-prompt-tokens, x-generated-tokens): a plain non-negative integer, ASCII
// digits alone, up to 2^31 − 1 (a count is believed no higher: count).
// Anything else (empty, a sign, a space, a fraction, an exponent, larger)
// is Unknown, never an error.
func HeaderCount(v []byte) int {
	if len(v) == 0 {
		return Unknown
	}
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' {
			return Unknown
		}
		n = n*10 + int(c-'0')
		if n > maxCount {
			return Unknown
		}
	}
	return n
}

// ObserveBody accounts for a non-streamed response whose body was read
// completely at t and parsed into info (ParseResponseBody): E2E is t − t0,
// ISL and OSL come from its usage (of a usage that counts its first choice
// alone, EventInfo.FirstChoiceUsage, only what is the whole's; a count it
// lacks stays the response head's, ObserveHead); TTFT, ITL and the event count do not
// apply (Unknown). A nil info is a body that could not be read (empty,
// malformed, too large): only its E2E is known.
func (m *Meter) ObserveBody(info *EventInfo, t time.Time) {
	m.body = true
	m.bodyE2E = t.Sub(m.t0)
	if info == nil {
		return
	}
	if info.Error && !m.errSeen {
		m.keepError(info.ErrorMessage)
	}
	if info.HasUsage {
		m.takeUsage(info)
		m.usageFinal, m.usageOnly = true, true
		if k := info.FirstChoiceUsage; k > 1 {
			m.keepWholeOfFirst(int(k))
		}
	}
}

// keepWholeOfFirst keeps, of a body's usage that counts only the first of
// its k choices (EventInfo.FirstChoiceUsage), what is the whole answer's:
// its prompt count when every choice is of the request's one prompt (k
// is no more than the choices per prompt, SetChoicesPerPrompt: llama.cpp
// runs a prompt's choices on that one prompt, counted once); the output
// count is that one choice's, not the answer's, so unknown, as is the
// prompt count of several prompts (the first prompt's alone).
func (m *Meter) keepWholeOfFirst(k int) {
	m.completion = Unknown
	if n := m.perChoice & perPromptMask; n == perPromptUnknown || k > int(n)+1 {
		m.prompt = Unknown
	}
}

// UpstreamError reports whether an observed event or body carried an error
// (an error object, `event: error`) and its first message, cut to 512 bytes.
// The message is owned by the Meter: valid until the next Start.
func (m *Meter) UpstreamError() (bool, []byte) { return m.errSeen, m.errMsg }

// Done reports whether the stream's end marker was observed ([DONE], a
// Responses API final event, message_stop: EventInfo.Done).
func (m *Meter) Done() bool { return m.done }

// Finished reports whether an observed event said why the output stopped
// (EventInfo.Finish: a chat or completions choice's finish_reason, a
// Responses API final event, a Messages API stop_reason), before the
// stream's end marker; of a stream whose outputs are counted apart
// (EventInfo.OwnOutput: SGLang's of several), whether every output that
// had an event had its finishing one; of a chat or completions stream of
// several choices (SetStreamChoices), whether every choice asked for had
// its finish_reason (one output's end is not the others'). A chat or
// completions stream whose chunks all carried the first choice alone ends
// at its finish_reason, whatever was asked for: an engine that reads no n
// (Ollama's OpenAI-compatible routes) streams one choice, and a
// stream cut before its second choice's first chunk is not told from it.
// (Of a stream of outputs counted apart, that one output is then the
// only one open, bit 0: nothing changes.)
func (m *Meter) Finished() bool {
	open := m.open
	if !m.multi {
		open &= 1
	}
	return m.finished && open == 0
}

// PartlyFinished reports whether a stream of several outputs had an
// output's end (an event with Finish) but not every one's it waits for
// (Finished false): it was cut between them.
func (m *Meter) PartlyFinished() bool { return m.finished && !m.Finished() }

// TokenEvents returns the number of token events observed so far.
func (m *Meter) TokenEvents() int { return m.tokenEvents }

// ContentEvents returns the number of token events with content so far.
func (m *Meter) ContentEvents() int { return m.contentEvents }

// OutputTokens is the output of a stream so far, as Finish would estimate
// it: the engine's running completion count when its chunks carry usage,
// else the number of token events with content, whichever is larger (a
// count sent only at the end is not known yet). The rate limiter charges a
// stream that runs past its reservation from it. It does not allocate.
func (m *Meter) OutputTokens() int { return max(int(m.completion), m.contentEvents) }

// SummarisedGap returns the gap of the latest token event when the record
// will not keep it one by one (it came after the first MaxKeptGaps), and
// ok false otherwise: a caller that keeps a histogram of every gap observes
// these as they come, and the kept ones from Record.ITL.
func (m *Meter) SummarisedGap() (gap time.Duration, ok bool) {
	if m.restGap == 0 {
		return 0, false
	}
	return m.restGap - 1, true
}

// Finish writes the request's measures into rec: ISL, OSL, UsageSource,
// TTFT, TTFTContent, E2E, TPOT, ITL, ITLRest, MaxITL, Events and
// TokensPerEvent. It
// leaves every other field (identity, status, outcome, overhead, ...) to the
// caller.
//
// ISL and OSL are the upstream's counts when it sent usage (UsageUpstream
// for a final count, UsageContinuous when the last count seen was a running
// one). When there is no completion count but the stream had token events,
// OSL is estimated as the number of token events that had content (so the
// role-only first chunk and an empty finish chunk count for nothing, and a
// chunk is taken to carry one token) and UsageSource is UsageEstimate (so
// too, 0, for a stream that finished with no token event); ISL
// stays the upstream's count if one exists, else Unknown. A stream of
// several choices (EventInfo.OtherChoice) believes only a usage-only final
// count, or the sum of its choices' finish chunks' usage (Observe): its
// running counts are each choice's (and each prompt's), so without such a
// count OSL is estimated and ISL is Unknown. With no count and
// nothing to estimate from, both are Unknown and UsageSource is UsageNone.
//
// TPOT is (E2E − TTFT) / (OSL − 1) when OSL > 1 (whatever its source) and
// both are known, else Unknown. MaxITL is Unknown when there is no gap. For a
// non-streamed response, TTFT, TTFTContent, TPOT, MaxITL and Events are
// Unknown and ITL is empty.
//
// ITL holds the first MaxKeptGaps gaps and ITLRest summarises the others
// (exact count, sum, min and max; MaxITL is over every gap). TokensPerEvent,
// when known, holds the counts of the first MaxKeptGaps+1 token events.
//
// Ownership: ITL, ITLRest and TokensPerEvent are copied into rec, reusing
// its capacity (or, when it has too little, in arrays from the pools of
// arrays.go, which Record.Recycle gives back), so the record stays valid
// after the Meter is reused; TokensPerEvent is left empty when unknown.
func (m *Meter) Finish(rec *Record) {
	rec.ITL = fit(&durArrays, rec.ITL, len(m.itl))
	for _, us := range m.itl {
		rec.ITL = append(rec.ITL, time.Duration(us)*time.Microsecond)
	}
	m.rest.CopyTo(&rec.ITLRest)
	rec.TokensPerEvent = rec.TokensPerEvent[:0]
	rec.TrailEmpty = 0
	rec.TTFT, rec.TTFTContent, rec.E2E, rec.TPOT, rec.MaxITL = Unknown, Unknown, Unknown, Unknown, Unknown
	rec.Events = Unknown
	rec.ISL, rec.OSL, rec.UsageSource = Unknown, Unknown, UsageNone
	if !m.started {
		return
	}

	// A stream of several choices carries each choice's running count
	// (and, for several prompts, its prompt's) until the final usage
	// chunk: only that one, usage-only, is the response's count. Or each
	// choice's finish chunk carries its usage and nothing else does
	// (llama.cpp's /v1/completions), or each output's finishing event its
	// total (SGLang's, whose running counts are passed over): their sum,
	// once the stream's [DONE], no error before it, said every choice had
	// ended (and every output still to end had: of SGLang's, each that
	// came had its finishing event; of a chat or completions stream, each
	// choice asked for had its finish chunk, SetStreamChoices).
	final := m.usageOnly || (m.usageFinal && !m.multi) ||
		m.multi && m.done && m.usageFinal && m.perChoice&(usageMidChoice|finishNoUsage) == 0 && m.open == 0
	if m.hasUsage && (final || !m.multi) {
		rec.ISL = int(m.prompt)
		rec.OSL = int(m.completion)
		rec.UsageSource = UsageContinuous
		if final {
			rec.UsageSource = UsageUpstream
		}
	}
	if rec.OSL == Unknown && !m.body && (m.tokenEvents > 0 || m.finished) {
		// A stream that said why its output stopped without a token
		// event (a completions request with echo and max_tokens 0: only
		// the prompt comes back) generated nothing the client got.
		rec.OSL = m.contentEvents
		rec.UsageSource = UsageEstimate
	}
	if rec.OSL == Unknown && rec.ISL == Unknown {
		rec.UsageSource = UsageNone
	}

	if m.body {
		rec.E2E = m.bodyE2E
		return
	}
	rec.Events = m.tokenEvents
	rec.TTFTContent = m.ttftContent
	rec.MaxITL = m.maxITL
	if m.tokenEvents > 0 {
		rec.TTFT = m.firstTok.Sub(m.t0)
		rec.E2E = m.lastTok.Sub(m.t0)
		if rec.OSL > 1 {
			rec.TPOT = (rec.E2E - rec.TTFT) / time.Duration(rec.OSL-1)
		}
		if m.tpeOK { // every token event carried a count
			rec.TokensPerEvent = append(fit(&intArrays, rec.TokensPerEvent, len(m.tpe)), m.tpe...)
			rec.TrailEmpty = int(m.trailEmpty)
			if m.trailEmpty == math.MaxUint8 {
				rec.TrailEmpty = math.MaxInt // too many to place the last token by
			}
		}
	}
}

// fit returns b emptied, or a pooled array in its place when b cannot
// hold n entries (b's own array then goes back to the pool).
func fit[T any](p *arrayPool[T], b []T, n int) []T {
	if cap(b) >= n {
		return b[:0]
	}
	p.put(b)
	return p.get(n)
}

// gapMicros rounds a gap to whole microseconds, saturating at about 71
// minutes (a gap longer than that is far past any idle timeout).
func gapMicros(d time.Duration) uint32 {
	us := (d + 500*time.Nanosecond) / time.Microsecond
	switch {
	case us < 0:
		return 0
	case us > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(us)
}
