package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// queues orders the requests that wait for capacity (max_queue_wait > 0):
// one first-come-first-served line per limit path (tenant, key, model), so
// that requests held by the same limits are served in arrival order. Every
// request takes its place in line before it asks the limiter, and only the
// head of a line asks: one that arrives while others wait does not take the
// capacity they wait for.
//
// Lines of different paths are not ordered between them: a request for a
// model with capacity left is not held behind one waiting for another
// model's. A release of concurrency (Reconcile) wakes the heads of the
// tenant's lines at once instead of at their next poll. Order holds within
// one replica; with Redis, the replicas' heads compete as any requests do.
type queues struct {
	waiting atomic.Int64 // requests in lines, for a lock-free check on release
	mu      sync.Mutex
	lines   map[string]map[lineKey]*line // by tenant, so a release looks at its tenant's lines only
}

type lineKey struct{ tenant, key, model string }

type line struct {
	waiters []*waiter // in arrival order; waiters[0] is the head
}

type waiter struct {
	key  lineKey
	turn chan struct{} // receives when the waiter becomes the head
	wake chan struct{} // receives when capacity may have been released
}

func newQueues() *queues { return &queues{lines: make(map[string]map[lineKey]*line)} }

// join puts a waiter for req at the end of its line, that of the
// configured model its model is matched to (model; "" for none); it is the
// head if the line was empty (its turn channel then already holds the
// turn).
func (q *queues) join(req *Request, model string) *waiter {
	k := lineKey{req.Tenant, req.KeyID, model}
	w := &waiter{key: k, turn: make(chan struct{}, 1), wake: make(chan struct{}, 1)}
	q.mu.Lock()
	defer q.mu.Unlock()
	tl := q.lines[k.tenant]
	if tl == nil {
		tl = make(map[lineKey]*line)
		q.lines[k.tenant] = tl
	}
	l := tl[k]
	if l == nil {
		l = &line{}
		tl[k] = l
	}
	l.waiters = append(l.waiters, w)
	if len(l.waiters) == 1 {
		w.turn <- struct{}{}
	}
	q.waiting.Add(1)
	return w
}

// leave takes w out of its line (admitted, rejected or gone) and, if it was
// the head, gives the turn to the next waiter.
func (q *queues) leave(w *waiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	tl := q.lines[w.key.tenant]
	l := tl[w.key]
	if l == nil {
		return
	}
	for i, x := range l.waiters {
		if x != w {
			continue
		}
		l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
		q.waiting.Add(-1)
		if i == 0 && len(l.waiters) > 0 {
			l.waiters[0].turn <- struct{}{}
		}
		break
	}
	if len(l.waiters) == 0 {
		delete(tl, w.key)
		if len(tl) == 0 {
			delete(q.lines, w.key.tenant)
		}
	}
}

// kick wakes the heads of tenant's lines: capacity may have been released.
func (q *queues) kick(tenant string) {
	if q.waiting.Load() == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, l := range q.lines[tenant] {
		if len(l.waiters) == 0 {
			continue
		}
		select {
		case l.waiters[0].wake <- struct{}{}:
		default:
		}
	}
}

// head takes the turn if w has it (it is the head of its line).
func (w *waiter) head() bool {
	select {
	case <-w.turn:
		return true
	default:
		return false
	}
}

// awaitTurn waits until w is the head of its line, ctx ends or d passes.
// It reports whether w has the turn, or ctx's error.
func awaitTurn(ctx context.Context, w *waiter, d time.Duration) (bool, error) {
	select {
	case <-w.turn:
		return true, nil
	default:
	}
	if d <= 0 {
		return false, nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.turn:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	case <-t.C:
		return false, nil
	}
}
