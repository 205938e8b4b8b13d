package cfgtypes

import (
	"errors"
	"fmt"
)

// MaxErrors is the most errors a configuration's check reports: past it,
// one more says how many were left out. Each error is a line or two, and a
// file can hold one mistake per few bytes (an alias repeated 600,000 times
// in a 1.2 MB tenants file made 71 MB of errors), or one whose error lists
// its fellows (5,000 models saying default: true, 119 KB, made 220 MB): a
// reload logs its error as one line, and such a file ran a gateway that
// reloaded it past 1.8 GB.
const MaxErrors = 100

// Errors collects a check's errors, keeping the first MaxErrors and
// counting the rest: Add costs nothing once the list is full, so a file
// of millions of mistakes does not make millions of messages.
type Errors struct {
	errs []error
	more int
}

// full reports whether another error would only be counted.
func (e *Errors) full() bool { return len(e.errs) >= MaxErrors }

// Add adds err (nil is none), or counts it when the list is full.
func (e *Errors) Add(err error) {
	if err == nil {
		return
	}
	for _, one := range Flatten(nil, err) {
		var m moreErrors
		if errors.As(one, &m) {
			e.more += m.n // another list's count, added to this one's
			continue
		}
		if e.full() {
			e.more++
			continue
		}
		e.errs = append(e.errs, one)
	}
}

// Addf adds the error "path: format...", formatted only when kept.
func (e *Errors) Addf(path, format string, a ...any) {
	if e.full() {
		e.more++
		return
	}
	e.errs = append(e.errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, a...)))
}

// Err joins the errors kept, and a last one that counts those left out;
// nil when there are none.
func (e *Errors) Err() error {
	if e.more == 0 {
		return errors.Join(e.errs...)
	}
	return errors.Join(append(e.errs[:len(e.errs):len(e.errs)], moreErrors{n: e.more, shown: len(e.errs)})...)
}

// moreErrors is the last error of a list that left some out: it counts
// them, so that a list that takes in another adds them to its own count.
type moreErrors struct{ n, shown int }

func (m moreErrors) Error() string {
	return fmt.Sprintf("and %d more errors, not shown (the first %d are)", m.n, m.shown)
}

// flattenJoined appends the errors joined in err (errors.Join, nested) to
// out.
func Flatten(out []error, err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = Flatten(out, e)
		}
		return out
	}
	if err != nil {
		out = append(out, err)
	}
	return out
}
