package sim

import (
	"context"
	"sync"
	"time"
)

// EventKind says what one written event of a response was.
type EventKind uint8

const (
	// EventRole is the chat role chunk (delta {"role":"assistant","content":""}).
	EventRole EventKind = iota + 1
	// EventToken is a chunk carrying one output token.
	EventToken
	// EventFinish is the chunk with the finish_reason and an empty delta (or text).
	EventFinish
	// EventUsage is the final usage chunk ("choices":[]).
	EventUsage
	// EventDone is "data: [DONE]".
	EventDone
	// EventError is a mid-stream error event (X-Sim-Fault error-at).
	EventError
	// EventMalformed is a token's event sent as invalid JSON (X-Sim-Fault malformed-at).
	EventMalformed
	// EventBody is the whole body of a non-streaming or error response.
	EventBody
	// EventFrame is an event of a Responses or Messages API stream that
	// carries no output and no usage: response.created, in_progress,
	// output_item.added, content_part.added and their *.done events;
	// message_start, content_block_start and content_block_stop. (Their
	// usage events, response.completed and message_delta, are EventUsage;
	// message_stop is EventDone.)
	EventFrame
)

var eventKindNames = [...]string{"", "role", "token", "finish", "usage", "done", "error", "malformed", "body", "frame"}

// String returns a short lower-case name ("role", "token", ...).
func (k EventKind) String() string {
	if int(k) < len(eventKindNames) && k != 0 {
		return eventKindNames[k]
	}
	return "unknown"
}

// IsToken reports whether events of this kind are token events in the sense
// of docs/MEASURES.md (an OpenAI chunk with non-empty choices: the role
// chunk, token chunks and the finish chunk; a response.output_text.delta;
// a content_block_delta). A malformed event is not one: no parser can
// read it.
func (k EventKind) IsToken() bool {
	return k == EventRole || k == EventToken || k == EventFinish
}

// Event is one event the simulator wrote.
type Event struct {
	// At is time.Now() taken right after the event was flushed to the
	// connection (it carries the monotonic clock reading). For a
	// non-streaming body it is when the body was handed to the server's
	// buffered writer, which flushes it immediately afterwards.
	At time.Time
	// Kind says what the event was.
	Kind EventKind
}

// Ending says how a traced response ended.
type Ending uint8

const (
	// EndPending: the response is still being written.
	EndPending Ending = iota
	// EndComplete: the whole response was written.
	EndComplete
	// EndClientGone: the client went away (a write failed, or a poll of the
	// idle connection saw it closed); Trace.DisconnectedAt says when.
	EndClientGone
	// EndReset: the reset-after fault closed the connection with a TCP RST.
	EndReset
	// EndClosed: the close-after fault closed the connection (FIN).
	EndClosed
	// EndStallTimeout: a stall-after stall lasted Config.MaxStall and the
	// simulator closed the connection.
	EndStallTimeout
	// EndShutdown: the server shut down while the response was running.
	EndShutdown
	// EndAborted: the server dropped the response before the simulator could
	// write its body (for example, writing the headers failed).
	EndAborted
)

var endingNames = [...]string{"pending", "complete", "client_gone", "reset", "closed", "stall_timeout", "shutdown", "aborted"}

// String returns the ending's name ("complete", "client_gone", ...).
func (e Ending) String() string {
	if int(e) < len(endingNames) {
		return endingNames[e]
	}
	return "unknown"
}

// Trace is what the simulator recorded for one generation request.
type Trace struct {
	// RequestID is the X-Request-Id header (or the generated id the
	// response's X-Request-Id header returned).
	RequestID string
	// Path is the request path ("/v1/chat/completions", "/v1/completions",
	// "/v1/responses" or "/v1/messages").
	Path string
	// Stream reports whether the response was streamed.
	Stream bool
	// Status is the HTTP status sent.
	Status int
	// Fault is the X-Sim-Fault header as received.
	Fault string
	// Start is when the simulator began handling the request; the schedule
	// counts from here.
	Start time.Time
	// HeadersAt is when the simulator started writing the body: for a
	// stream, the headers had just been flushed. Zero if it never started.
	HeadersAt time.Time
	// Events lists every event written, in order.
	Events []Event
	// PromptTokens is the prompt length reported in usage (0 when the request
	// was rejected before it was parsed).
	PromptTokens int
	// CompletionTokens is the completion length the response reports in usage
	// (planned: a fault may end the stream before all were sent).
	CompletionTokens int
	// FinishReason is "stop" or "length" ("" for rejected requests).
	FinishReason string
	// TTFT and ITL are the request's effective schedule parameters (after
	// X-Sim-TTFT / X-Sim-ITL overrides) given to the Scheduler.
	TTFT, ITL time.Duration
	// DisconnectedAt is when the simulator detected that the client had gone
	// (a failed write or poll); zero if it did not.
	DisconnectedAt time.Time
	// End is when the response ended; zero while it runs.
	End time.Time
	// Ending says how it ended.
	Ending Ending
	// Done reports whether the response has ended.
	Done bool
}

// TokenEvents returns the token events (role, token and finish chunks).
func (t *Trace) TokenEvents() []Event {
	var out []Event
	for _, e := range t.Events {
		if e.Kind.IsToken() {
			out = append(out, e)
		}
	}
	return out
}

// Count returns how many events of kind k the trace holds.
func (t *Trace) Count(k EventKind) int {
	n := 0
	for _, e := range t.Events {
		if e.Kind == k {
			n++
		}
	}
	return n
}

// traceRec is the live record of one request. Events are packed as
// kind<<56 | nanoseconds since start, 8 bytes each, to keep the store small.
type traceRec struct {
	store *traceStore
	mu    sync.Mutex
	t     Trace // Events unused; see ev
	ev    []uint64
}

const offsetMask = 1<<56 - 1

func (r *traceRec) headers(now time.Time) {
	if r == nil {
		return
	}
	r.mu.Lock()
	if r.t.HeadersAt.IsZero() {
		r.t.HeadersAt = now
	}
	r.mu.Unlock()
}

func (r *traceRec) event(now time.Time, k EventKind) {
	if r == nil {
		return
	}
	off := uint64(now.Sub(r.t.Start)) & offsetMask
	r.mu.Lock()
	r.ev = append(r.ev, uint64(k)<<56|off)
	r.mu.Unlock()
}

// end marks the response ended; only the first call counts.
func (r *traceRec) end(now time.Time, e Ending, disconnected bool) {
	if r == nil {
		return
	}
	r.mu.Lock()
	if r.t.Done {
		r.mu.Unlock()
		return
	}
	r.t.Done = true
	r.t.End = now
	r.t.Ending = e
	if disconnected {
		r.t.DisconnectedAt = now
	}
	r.mu.Unlock()
	r.store.notify()
}

func (r *traceRec) isDone() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.t.Done
}

func (r *traceRec) snapshot() Trace {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.t
	t.Events = make([]Event, len(r.ev))
	for i, p := range r.ev {
		t.Events[i] = Event{At: t.Start.Add(time.Duration(p & offsetMask)), Kind: EventKind(p >> 56)}
	}
	return t
}

// traceStore keeps the most recent traces, dropping the oldest beyond its
// capacity.
type traceStore struct {
	mu      sync.Mutex
	max     int
	m       map[string]*traceRec
	ring    []*traceRec // insertion order, ring buffer
	head    int         // index of the oldest record
	waiters int
	changed chan struct{}
}

func newTraceStore(max int) *traceStore {
	if max <= 0 {
		return nil
	}
	return &traceStore{max: max, m: make(map[string]*traceRec), changed: make(chan struct{})}
}

// start creates and stores a record, evicting the oldest one when full. A
// new request with the id of a stored one replaces it. A nil store (tracing
// off) returns nil, which every traceRec method accepts.
func (s *traceStore) start(t Trace, events int) *traceRec {
	if s == nil {
		return nil
	}
	r := &traceRec{store: s, t: t, ev: make([]uint64, 0, min(events, 4096))}
	s.mu.Lock()
	if len(s.ring) < s.max {
		s.ring = append(s.ring, r)
	} else {
		old := s.ring[s.head]
		if s.m[old.t.RequestID] == old {
			delete(s.m, old.t.RequestID)
		}
		s.ring[s.head] = r
		s.head = (s.head + 1) % s.max
	}
	s.m[t.RequestID] = r
	s.notifyLocked()
	s.mu.Unlock()
	return r
}

func (s *traceStore) notify() {
	s.mu.Lock()
	s.notifyLocked()
	s.mu.Unlock()
}

func (s *traceStore) notifyLocked() {
	if s.waiters > 0 {
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

func (s *traceStore) get(id string) *traceRec {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[id]
}

func (s *traceStore) len() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// wait blocks until the record for id exists and is done, or ctx ends.
func (s *traceStore) wait(ctx context.Context, id string) (Trace, error) {
	if s == nil {
		return Trace{}, errTracingOff
	}
	for {
		s.mu.Lock()
		r := s.m[id]
		ch := s.changed
		s.waiters++
		s.mu.Unlock()
		if r != nil && r.isDone() {
			s.unwait()
			return r.snapshot(), nil
		}
		select {
		case <-ch:
			s.unwait()
		case <-ctx.Done():
			s.unwait()
			return Trace{}, ctx.Err()
		}
	}
}

func (s *traceStore) unwait() {
	s.mu.Lock()
	s.waiters--
	s.mu.Unlock()
}
