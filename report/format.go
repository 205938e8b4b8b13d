package report

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// unknownText is how an unknown value is printed.
const unknownText = "unknown"

// fmtCount prints a count: whole numbers with thousands separators, other
// values (extrapolated counts) with one decimal.
func fmtCount(n Num) string {
	if !Known(n) {
		return unknownText
	}
	v := float64(n)
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return group(strconv.FormatInt(int64(v), 10))
	}
	return group(strconv.FormatFloat(v, 'f', 1, 64))
}

// group inserts thousands separators into a decimal number.
func group(s string) string {
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	intPart, frac, hasFrac := strings.Cut(s, ".")
	var b strings.Builder
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	out := b.String()
	if hasFrac {
		out += "." + frac
	}
	if neg {
		out = "-" + out
	}
	return out
}

// fmtPct prints a fraction as a percentage with two decimals, more when
// rounding would show 100% (or 0%) for a value that is not exactly that.
func fmtPct(n Num) string {
	if !Known(n) {
		return unknownText
	}
	v := float64(n) * 100
	for d := 2; ; d++ {
		s := strconv.FormatFloat(v, 'f', d, 64)
		if d >= 6 || (v == 100 || v == 0) {
			return s + "%"
		}
		r, _ := strconv.ParseFloat(s, 64)
		if r != 100 && r != 0 && r != -100 {
			return s + "%"
		}
	}
}

// fmtNum prints a number with about four significant digits, without an
// exponent.
func fmtNum(n Num) string {
	if !Known(n) {
		return unknownText
	}
	v := float64(n)
	if v == 0 {
		return "0"
	}
	a := math.Abs(v)
	digits := int(math.Floor(math.Log10(a))) + 1
	dec := min(max(4-digits, 0), 6)
	s := strconv.FormatFloat(v, 'f', dec, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	if digits > 4 {
		return group(s)
	}
	return s
}

// fmtSeconds prints a latency: milliseconds below one second, else seconds.
func fmtSeconds(n Num) string {
	if !Known(n) {
		return unknownText
	}
	v := float64(n)
	if math.Abs(v) < 1 {
		return fmtNum(Num(v*1000)) + " ms"
	}
	return fmtNum(n) + " s"
}

// fmtRate prints a per-second rate with its unit.
func fmtRate(n Num, unit string) string {
	if !Known(n) {
		return unknownText
	}
	return fmtNum(n) + " " + unit + "/s"
}

// fmtTime prints a time in UTC to the second.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return unknownText
	}
	return stamp(t)
}

// fmtClock prints a time of day in UTC: "10:15 UTC", with seconds when
// they are not zero.
func fmtClock(t time.Time) string {
	t = t.UTC()
	if t.Second() != 0 {
		return t.Format("15:04:05") + " UTC"
	}
	return t.Format("15:04") + " UTC"
}

// fmtHour prints an hour's span compactly: "2026-01-05 10:00–11:00 UTC".
func fmtHour(h Hour) string {
	s, e := h.Start.UTC(), h.End.UTC()
	layout := "15:04"
	if s.Second() != 0 || e.Second() != 0 {
		layout = "15:04:05"
	}
	end := e.Format(layout)
	if e.YearDay() != s.YearDay() || e.Year() != s.Year() {
		if !(e.Hour() == 0 && e.Minute() == 0 && e.Second() == 0) {
			end = e.Format("2006-01-02 " + layout)
		}
	}
	return s.Format("2006-01-02 "+layout) + "–" + end + " UTC"
}

// fmtSpan prints a period's length: "1h" for an hour, "1m30s", and
// milliseconds below a minute ("1.5s", "420ms").
func fmtSpan(secs float64) string {
	d := time.Duration(secs * float64(time.Second))
	if d < time.Minute {
		return d.Round(time.Millisecond).String()
	}
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// classNames lists the SLO classes, or "unknown".
func classNames(cs []Class) string {
	if len(cs) == 0 {
		return unknownText
	}
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

// fmtMet prints whether the objective was met.
func fmtMet(m *bool) string {
	switch {
	case m == nil:
		return unknownText
	case *m:
		return "met"
	default:
		return "missed"
	}
}

// reasonsText prints the main miss reasons of an hour: up to three, with
// their counts.
func reasonsText(rs []ReasonCount) string {
	if len(rs) == 0 {
		return "none"
	}
	parts := make([]string, 0, 3)
	for i, r := range rs {
		if i == 3 {
			break
		}
		parts = append(parts, r.Reason+" ("+fmtCount(r.Count)+")")
	}
	return strings.Join(parts, ", ")
}

// shapeOrder is the order shapes are listed in.
var shapeOrder = []string{"chat", "rag", "longgen", "unknown"}
