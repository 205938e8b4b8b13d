//go:build poolcheck

package meter

import "time"

// poolCheck: built with -tags poolcheck. An array given back to its pool
// (arrays.go) is first filled with all bits set (a gap of -1 ns, a count
// of -1, 0xffffffff µs), so that a record or a meter that still reads it
// after the put shows those values. A test build only: see
// poolcheck_off.go.
const poolCheck = true

// poisonArray fills b, to its capacity, with all bits set.
func poisonArray[T any](b []T) {
	b = b[:cap(b)]
	for i := range b {
		switch p := any(&b[i]).(type) {
		case *uint32:
			*p = ^uint32(0)
		case *int:
			*p = -1
		case *time.Duration:
			*p = -1
		}
	}
}
