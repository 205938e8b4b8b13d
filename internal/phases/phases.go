// Package phases times the steps of a request's way in and of its first
// event, in a build made for it (go build -tags phases): the yardstick
// (internal/overhead, --phases) reads the figures to tell where the
// gateway's added time to first token goes, step by step, under its load.
//
// In every other build (the gateway's, the tests') a Clock is an empty
// struct and its methods do nothing: the marks in the request path compile
// to nothing, and Now is never called.
//
// With -tags phases and GOODPUT_PHASES naming a file, the process writes
// that file at start ({"seq":0}), and at each SIGUSR1 replaces it with the
// figures of the durations recorded since the signal before (their count
// and p10, p50 and p90 in µs), seq one higher, and starts again: the
// yardstick signals at its window's two edges.
package phases

// Phase is a step whose duration is recorded: each runs from the mark
// before it (the request's t0 for the first) to its own mark.
type Phase uint8

// The steps of a request's way in, one after the other from t0 (its head
// read) to the request written upstream; then the first event's, from its
// read to its write to the client (with the response head). The first
// event's are those of a metered event stream whose head goes out with its
// first bytes: a stream whose head went out alone (held past its due time,
// or ahead of a large first read), or whose client lagged from the start,
// has neither.
const (
	HeadToHandler Phase = iota // t0 → the handler runs: the head's hook, the body's read (fasthttp)
	Start                      // the record: request id, route
	Identify                   // identify, method, header names, the body taken
	RewriteParse               // the body's JSON parse
	RewriteBody                // the body's checks and reads (duplicate keys, model, outputs, adapters, echo)
	Admit                      // admission (limits, queue)
	Connection                 // an upstream connection taken (the pool, its peek) and its deadline set
	Serialise                  // the upstream request's head written in one pass (hop-by-hop dropped, X-Forwarded-For), the body after it
	Write                      // the request's write(2)
	Written                    // t0 → written, whole
	FirstMetered               // the first event: the read that completed it → ready to write (framed, queued; parsed and observed too unless written before it is metered)
	FirstWritten               // the first event: ready → written to the client, with the response head
	count
)

var names = [count]string{
	"head→handler", "start", "identify", "rewrite: parse", "rewrite: body",
	"admit", "connection", "serialise", "write", "t0→written", "first event: metered", "first event: written",
}

// String is the phase's name, as the yardstick prints it.
func (p Phase) String() string {
	if p < count {
		return names[p]
	}
	return "?"
}
