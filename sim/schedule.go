package sim

import "time"

// A Scheduler decides when each output token of a request is due. The
// simulator asks it once per generation request and then writes token i at
// the time the returned Schedule gives, sleeping until that absolute
// deadline (so sleep errors never accumulate).
//
// Linear, the default, treats every request alone. Batching models
// continuous batching: it slows every running request down as more are
// admitted, queues requests and preempts them; Admit and Release bracket
// each request's life, and its TokenTime blocks until the engine step
// producing the token has been scheduled.
type Scheduler interface {
	// Admit is called once per generation request, before its response
	// starts, and returns the request's schedule. It may be called from
	// many goroutines at once.
	Admit(j Job) Schedule
}

// A Schedule gives the due time of each output token of one request.
type Schedule interface {
	// TokenTime returns the absolute time token i (1-based) is due. The
	// simulator calls it with i = 1, 2, ... in order from one goroutine and
	// may call it more than once for the same i.
	TokenTime(i int) time.Time
	// Release tells the scheduler the request has ended (completed, failed
	// or abandoned by the client). It is called exactly once.
	Release()
}

// Job describes one generation request to a Scheduler.
type Job struct {
	// ID is the request id (the X-Request-Id header, or a generated one).
	ID string
	// Start is when the simulator began handling the request (the whole
	// request had been read).
	Start time.Time
	// PromptTokens is the prompt length (ISL) the simulator reports.
	PromptTokens int
	// CompletionTokens is the number of tokens the request will generate.
	CompletionTokens int
	// TTFT is the request's time to first token: the X-Sim-TTFT header when
	// present, else Config.TTFT + PromptTokens·Config.TTFTPerPromptToken.
	TTFT time.Duration
	// ITL is the request's inter-token gap: the X-Sim-ITL header when
	// present, else Config.ITL.
	ITL time.Duration
}

// Linear is the default Scheduler: token i of a job is due at
// Start + TTFT + (i−1)·ITL, whatever else the simulator is serving.
type Linear struct{}

// Admit returns the job's linear schedule.
func (Linear) Admit(j Job) Schedule {
	return &linearSchedule{first: j.Start.Add(j.TTFT), itl: j.ITL, n: j.CompletionTokens}
}

type linearSchedule struct {
	first time.Time
	itl   time.Duration
	n     int
}

func (l *linearSchedule) TokenTime(i int) time.Time {
	if i <= 1 {
		return l.first
	}
	return l.first.Add(time.Duration(i-1) * l.itl)
}

func (l *linearSchedule) Release() {}

func (l *linearSchedule) observeTokens(start time.Time, m *engineStats) {
	m.ttft.Observe(l.first.Sub(start).Seconds())
	if l.n > 1 {
		gap := l.itl.Seconds()
		for i := 1; i < l.n; i++ {
			m.itl.Observe(gap)
		}
	}
}

// A pendingSchedule is a Schedule whose token times become known only as
// an engine runs (Batching). The simulator waits for them itself, so that
// it notices a client that went away or a shutdown meanwhile.
type pendingSchedule interface {
	// tokenReady returns token i's time and true once it is known; until
	// then false and a channel that receives when it may be.
	tokenReady(i int) (time.Time, bool, <-chan struct{})
}
