package sim

import (
	"fmt"
	"strconv"
	"strings"
)

// fault is a parsed X-Sim-Fault header. Positions are token indexes; -1
// means the fault is not set.
type fault struct {
	status      int // status=N: answer with this HTTP status at once
	after       int // reset-after / close-after / stall-after: after this many tokens
	afterAct    action
	malformedAt int // malformed-at=N: token N's event is invalid JSON
	errorAt     int // error-at=N: an error event replaces token N, then [DONE]
}

var noFault = fault{after: -1, malformedAt: -1, errorAt: -1}

// parseFault parses the X-Sim-Fault header: a comma-separated list of
// key=value items (see the package documentation).
func parseFault(h string) (fault, error) {
	f := noFault
	h = strings.TrimSpace(h)
	if h == "" {
		return f, nil
	}
	for item := range strings.SplitSeq(h, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, val, ok := strings.Cut(item, "=")
		if !ok {
			return f, fmt.Errorf("X-Sim-Fault item %q: want key=value", item)
		}
		key = strings.ToLower(strings.TrimSpace(key))
		n, err := strconv.Atoi(strings.TrimSpace(val))
		if err != nil || n < 0 {
			return f, fmt.Errorf("X-Sim-Fault item %q: value must be a non-negative integer", item)
		}
		switch key {
		case "status":
			if n < 400 || n > 599 {
				return f, fmt.Errorf("X-Sim-Fault item %q: status must be 400..599", item)
			}
			if f.status != 0 {
				return f, fmt.Errorf("X-Sim-Fault: status given twice")
			}
			f.status = n
		case "reset-after", "close-after", "stall-after":
			if f.after >= 0 {
				return f, fmt.Errorf("X-Sim-Fault: at most one of reset-after, close-after and stall-after")
			}
			f.after = n
			switch key {
			case "reset-after":
				f.afterAct = actReset
			case "close-after":
				f.afterAct = actClose
			default:
				f.afterAct = actStall
			}
		case "malformed-at", "error-at":
			if n < 1 {
				return f, fmt.Errorf("X-Sim-Fault item %q: token positions start at 1", item)
			}
			if key == "malformed-at" {
				if f.malformedAt >= 0 {
					return f, fmt.Errorf("X-Sim-Fault: malformed-at given twice")
				}
				f.malformedAt = n
			} else {
				if f.errorAt >= 0 {
					return f, fmt.Errorf("X-Sim-Fault: error-at given twice")
				}
				f.errorAt = n
			}
		default:
			return f, fmt.Errorf("X-Sim-Fault item %q: unknown fault %q (want status, reset-after, close-after, stall-after, malformed-at or error-at)", item, key)
		}
	}
	return f, nil
}

// afterAction returns the connection fault to fire once k tokens have been
// written, or actNone.
func (f *fault) afterAction(k int) action {
	if f.after == k {
		return f.afterAct
	}
	return actNone
}
