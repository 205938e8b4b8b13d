package sweep

import (
	"math"
	"strconv"
)

// fmtLoad prints a load with its unit: "8 req/s", "inf", "32".
func fmtLoad(k Kind, l Load) string {
	if math.IsInf(float64(l), 1) {
		return "inf"
	}
	if k == RequestRate {
		return l.String() + " req/s"
	}
	return l.String()
}

// fmtRate prints a rate (requests or tokens per second) with 3 significant
// digits at least and no exponent.
func fmtRate(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "unknown"
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// fmtNum prints a known Num as fmtRate does, and "-" when unknown.
func fmtNum(n Num) string {
	if !n.Known() {
		return "-"
	}
	return fmtRate(float64(n))
}

// fmtMs prints milliseconds: "12.3", "1520", or "-" when unknown.
func fmtMs(n Num) string { return fmtNum(n) }

// fmtPct prints a fraction as a percentage: "99.2%", or "unknown".
func fmtPct(n Num) string {
	if !n.Known() {
		return "unknown"
	}
	v := float64(n) * 100
	if v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64) + "%"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + "%"
}
