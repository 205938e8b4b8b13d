package slo

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// other is the label value for any tenant or model that is not in the
// configuration, and for series beyond a Tracker's or Profile's
// limit.
const other = "other"

// Key names one series of the live view and the counters. Every field must
// be a bounded label value (see JudgerOptions.Labels).
type Key struct {
	Tenant string
	Model  string
	SLO    string // the class name the request was judged against
}

// Window is one rolling window of the live view and the profile.
type Window struct {
	// Name is the window's name in JSON and query strings: 5m, 1h or 24h.
	Name string
	// Length is the window's nominal length.
	Length time.Duration
	// Slot is the granularity: the window is the current (partial) slot and
	// the slots before it, Length/Slot in all, so it covers between
	// Length−Slot and Length.
	Slot time.Duration
}

// windows lists the rolling windows: 5m and 1h from per-minute slots, 24h
// from per-hour slots.
var windows = []Window{
	{Name: "5m", Length: 5 * time.Minute, Slot: time.Minute},
	{Name: "1h", Length: time.Hour, Slot: time.Minute},
	{Name: "24h", Length: 24 * time.Hour, Slot: time.Hour},
}

// Windows returns the rolling windows of the live view and the profile, in
// order: 5m and 1h (per-minute slots) and 24h (per-hour slots).
func Windows() []Window { return append([]Window(nil), windows...) }

// windowByName returns the window called name.
func windowByName(name string) (Window, error) {
	for _, w := range windows {
		if w.Name == name {
			return w, nil
		}
	}
	names := make([]string, len(windows))
	for i, w := range windows {
		names[i] = w.Name
	}
	return Window{}, fmt.Errorf("unknown window %q (want %s)", name, strings.Join(names, ", "))
}

// Ring lengths: the minute ring serves 5m and 1h, the hour ring 24h.
const (
	minuteSlots = 60
	hourSlots   = 24
)

// slotter is a ring slot: reset empties it for reuse, keeping storage.
type slotter[S any] interface {
	*S
	reset()
}

// ring is a circular buffer of time slots of equal length. A slot is reused
// (reset) when time has moved a whole ring past it, so memory is fixed.
//
// Slots are of the wall clock, which can step back (NTP, a VM's clock
// set): see sync.
type ring[S any, P slotter[S]] struct {
	slot  int64 // slot length in ns
	ids   []int64
	slots []S
	head  int64 // the newest slot written; math.MinInt64 when none
}

func newRing[S any, P slotter[S]](slot time.Duration, n int) ring[S, P] {
	r := ring[S, P]{slot: int64(slot), ids: make([]int64, n), slots: make([]S, n)}
	r.clear()
	return r
}

// clear empties the ring: each slot is reset when next used.
func (r *ring[S, P]) clear() {
	for i := range r.ids {
		r.ids[i] = math.MinInt64
	}
	r.head = math.MinInt64
}

// stale reports whether the wall clock, now in slot cur, has gone back
// more than a slot behind the newest slot written (a step back: times
// taken before a lock arrive a little late, never a whole slot).
func (r *ring[S, P]) stale(cur int64) bool { return r.head > cur+1 }

// sync tells the ring that the current time is in slot cur. When the wall
// clock has stepped back (stale), the ring's slots hold times now ahead of
// the clock, which would be dropped from every window and, worse, hold
// their places so that each later observation of the same place was
// dropped as older than the ring (until the clock caught up: a day after
// a clock set a day ahead was corrected), and times the clock will read
// again, counted before the step; the two cannot be told apart, so the
// ring is emptied and counts from the step on, as after a restart. Only
// callers that pass the current time call it (not a request's arrival,
// which can be long past when it is counted). It reports whether it
// emptied the ring.
func (r *ring[S, P]) sync(cur int64) bool {
	if !r.stale(cur) {
		return false
	}
	r.clear()
	return true
}

// id returns the number of the slot holding t.
func (r *ring[S, P]) id(t time.Time) int64 {
	ns := t.UnixNano()
	id := ns / r.slot
	if ns%r.slot < 0 {
		id--
	}
	return id
}

// get returns slot id for writing, resetting it if it held an older slot;
// nil when it already holds a newer one (id is older than the ring).
func (r *ring[S, P]) get(id int64) P {
	n := int64(len(r.slots))
	i := id % n
	if i < 0 {
		i += n
	}
	switch {
	case r.ids[i] == id:
	case r.ids[i] > id:
		return nil
	default:
		P(&r.slots[i]).reset()
		r.ids[i] = id
	}
	r.head = max(r.head, id)
	return P(&r.slots[i])
}

// find returns slot id when the ring holds it, else nil; it writes
// nothing.
func (r *ring[S, P]) find(id int64) P {
	n := int64(len(r.slots))
	i := id % n
	if i < 0 {
		i += n
	}
	if r.ids[i] != id {
		return nil
	}
	return P(&r.slots[i])
}

// each calls fn for every slot of the n slots ending with slot cur; for
// none when the wall clock has stepped back since the newest was written
// (see sync), which the next observation empties.
func (r *ring[S, P]) each(cur int64, n int, fn func(P)) {
	if r.stale(cur) {
		return
	}
	for i := range r.slots {
		if id := r.ids[i]; id <= cur && id > cur-int64(n) {
			fn(P(&r.slots[i]))
		}
	}
}

// windowSlots returns the number of slots of w.
func windowSlots(w Window) int { return int(w.Length / w.Slot) }

// windowStart returns the start of w's first slot for a window ending at
// now.
func windowStart(w Window, now time.Time) time.Time {
	slot := int64(w.Slot)
	ns := now.UnixNano()
	cur := ns / slot
	if ns%slot < 0 {
		cur--
	}
	return time.Unix(0, (cur-int64(windowSlots(w))+1)*slot)
}

// span returns the seconds a window ending at now covers, from the later of
// its first slot's start and begin (when tracking began).
func span(windowStart, begin, now time.Time) float64 {
	from := windowStart
	if begin.After(from) {
		from = begin
	}
	return now.Sub(from).Seconds()
}

// Num is a float64 that encodes as JSON null when it is NaN or infinite
// (an undefined ratio, such as the attainment of zero requests).
type Num float64

// MarshalJSON writes the number, or null when undefined.
func (n Num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

// UnmarshalJSON reads a number; null reads as NaN.
func (n *Num) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = Num(math.NaN())
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("want a number or null: %w", err)
	}
	*n = Num(f)
	return nil
}

// ratio returns a/b, NaN when b is 0.
func ratio(a, b float64) Num {
	if b == 0 {
		return Num(math.NaN())
	}
	return Num(a / b)
}
