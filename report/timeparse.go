package report

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseTime reads a report boundary: "now"; a time relative to now such as
// "-24h", "-90m", "-7d" or "-1d12h" (a minus sign, then an optional number of
// days "Nd" followed by an optional Go duration); an RFC 3339 time such as
// "2026-01-05T10:00:00Z"; or a date "2026-01-05" (midnight UTC).
func ParseTime(s string, now time.Time) (time.Time, error) {
	t, err := parseTime(strings.TrimSpace(s), now)
	if err == nil && t.Before(epoch) {
		// Go's zero time is 0001-01-01, which Query reads as unset: a
		// period from then was refused as having no start. No source
		// holds a sample from before 1970.
		return time.Time{}, fmt.Errorf("%q is before 1970-01-01, where no metrics begin", s)
	}
	return t, err
}

// epoch is the earliest time ParseTime reads: Unix time 0.
var epoch = time.Unix(0, 0)

func parseTime(s string, now time.Time) (time.Time, error) {
	switch {
	case s == "":
		return time.Time{}, fmt.Errorf("empty time (want now, -24h, -7d or an RFC 3339 time)")
	case s == "now":
		return now, nil
	case s[0] == '-':
		d, err := parseRelative(s[1:])
		if err != nil {
			return time.Time{}, fmt.Errorf("%q: %v", s, err)
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is not a time (want now, a relative time like -24h or -7d, an RFC 3339 time like 2026-01-05T10:00:00Z, or a date like 2026-01-05)", s)
}

// parseRelative reads "[Nd][go duration]", at least one of the two.
func parseRelative(s string) (time.Duration, error) {
	if s == "" {
		return 0, fmt.Errorf("missing duration after '-'")
	}
	var d time.Duration
	if i := strings.IndexByte(s, 'd'); i >= 0 {
		days, err := strconv.Atoi(s[:i])
		if err != nil || days < 0 || days > 100000 {
			return 0, fmt.Errorf("bad number of days %q", s[:i])
		}
		d = time.Duration(days) * 24 * time.Hour
		s = s[i+1:]
	}
	if s != "" {
		g, err := time.ParseDuration(s)
		if err != nil {
			return 0, err
		}
		if g < 0 {
			return 0, fmt.Errorf("negative duration %q", s)
		}
		d += g
	}
	if d <= 0 {
		return 0, fmt.Errorf("zero duration")
	}
	return d, nil
}
