package meter

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// Reset prepares r for a new request: every duration and count becomes
// Unknown, strings are cleared, Stream, Status, Outcome (ok) and UsageSource
// (none) take their zero values, and the ITL and TokensPerEvent slices are
// emptied keeping their capacity.
func (r *Record) Reset() {
	*r = Record{
		ISL:            Unknown,
		OSL:            Unknown,
		TTFT:           Unknown,
		TTFTContent:    Unknown,
		E2E:            Unknown,
		TPOT:           Unknown,
		ITL:            r.ITL[:0],
		ITLRest:        GapSummary{Buckets: r.ITLRest.Buckets[:0]},
		MaxITL:         Unknown,
		Events:         Unknown,
		TokensPerEvent: r.TokensPerEvent[:0],
		Overhead:       Unknown,
		WriteDelay:     Unknown,
		QueueWait:      Unknown,
		MissReasons:    r.MissReasons[:0],
	}
}

// Recycle gives r's gap and token-count arrays (ITL, TokensPerEvent) back
// to the pools Meter.Finish takes them from, and leaves both nil: a record
// kept in a pool between requests then holds none of a long stream's
// arrays (Finish takes arrays of the right size when it needs them). Call
// it only when nothing uses those slices any more, not even a copy of r.
func (r *Record) Recycle() {
	durArrays.put(r.ITL)
	intArrays.put(r.TokensPerEvent)
	r.ITL, r.TokensPerEvent = nil, nil
}

// AppendJSON appends r to dst as one JSON Lines record (a JSON object and a
// "\n") and returns the extended buffer. It does not allocate beyond growing
// dst.
//
// Fields, in order: time (request start, RFC 3339 in UTC with microseconds;
// null when Start is zero), request_id, upstream_request_id (omitted when
// empty), client_request_id (omitted when empty), tenant, key_id (omitted when empty), model, route, stream, deferred (only when true),
// model_op (load or unload; omitted when neither), status, outcome,
// error (omitted when empty),
// isl, osl, usage_source, ttft_ms, ttft_content_ms, e2e_ms, tpot_ms, itl_ms
// (every gap in order, up to MaxKeptGaps; null when Events is Unknown, i.e.
// not a stream), itl_truncated (how many later gaps itl_ms leaves out;
// omitted when none), max_itl_ms, events, tokens_per_event (omitted when
// empty), overhead_ms,
// write_delay_ms, queue_ms (omitted when Unknown), upstream, and when the record was judged
// slo, good and miss_reasons (an array, empty when good).
//
// Durations are written in milliseconds with three decimals (microsecond
// precision, rounded to the nearest microsecond). A negative duration or
// count (Unknown) is written as null, never 0.
func (r *Record) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"time":`...)
	if r.Start.IsZero() {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '"')
		dst = r.Start.UTC().AppendFormat(dst, "2006-01-02T15:04:05.000000Z07:00")
		dst = append(dst, '"')
	}
	dst = appendStringField(dst, `,"request_id":`, r.RequestID)
	if r.UpstreamRequestID != "" {
		dst = appendStringField(dst, `,"upstream_request_id":`, r.UpstreamRequestID)
	}
	if r.ClientRequestID != "" {
		dst = appendStringField(dst, `,"client_request_id":`, r.ClientRequestID)
	}
	dst = appendStringField(dst, `,"tenant":`, r.Tenant)
	if r.KeyID != "" {
		dst = appendStringField(dst, `,"key_id":`, r.KeyID)
	}
	dst = appendStringField(dst, `,"model":`, r.Model)
	dst = appendStringField(dst, `,"route":`, r.Route)
	dst = append(dst, `,"stream":`...)
	dst = strconv.AppendBool(dst, r.Stream)
	if r.Deferred {
		dst = append(dst, `,"deferred":true`...)
	}
	if r.ModelOp != ModelOpNone {
		dst = appendStringField(dst, `,"model_op":`, r.ModelOp.String())
	}
	dst = append(dst, `,"status":`...)
	dst = strconv.AppendInt(dst, int64(r.Status), 10)
	dst = appendStringField(dst, `,"outcome":`, r.Outcome.String())
	if r.ErrorMessage != "" {
		dst = appendStringField(dst, `,"error":`, r.ErrorMessage)
	}
	dst = appendCount(append(dst, `,"isl":`...), r.ISL)
	dst = appendCount(append(dst, `,"osl":`...), r.OSL)
	dst = appendStringField(dst, `,"usage_source":`, r.UsageSource.String())
	dst = appendMillis(append(dst, `,"ttft_ms":`...), r.TTFT)
	dst = appendMillis(append(dst, `,"ttft_content_ms":`...), r.TTFTContent)
	dst = appendMillis(append(dst, `,"e2e_ms":`...), r.E2E)
	dst = appendMillis(append(dst, `,"tpot_ms":`...), r.TPOT)
	dst = append(dst, `,"itl_ms":`...)
	if r.Events < 0 {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i, d := range r.ITL {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendMillis(dst, d)
		}
		dst = append(dst, ']')
	}
	if r.ITLRest.Count > 0 {
		dst = appendCount(append(dst, `,"itl_truncated":`...), r.ITLRest.Count)
	}
	dst = appendMillis(append(dst, `,"max_itl_ms":`...), r.MaxITL)
	dst = appendCount(append(dst, `,"events":`...), r.Events)
	if len(r.TokensPerEvent) > 0 {
		dst = append(dst, `,"tokens_per_event":[`...)
		for i, n := range r.TokensPerEvent {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendCount(dst, n)
		}
		dst = append(dst, ']')
	}
	dst = appendMillis(append(dst, `,"overhead_ms":`...), r.Overhead)
	dst = appendMillis(append(dst, `,"write_delay_ms":`...), r.WriteDelay)
	if r.QueueWait >= 0 {
		dst = appendMillis(append(dst, `,"queue_ms":`...), r.QueueWait)
	}
	dst = appendStringField(dst, `,"upstream":`, r.Upstream)
	if r.Judged {
		dst = appendStringField(dst, `,"slo":`, r.SLO)
		dst = append(dst, `,"good":`...)
		dst = strconv.AppendBool(dst, r.Good)
		dst = append(dst, `,"miss_reasons":[`...)
		for i, m := range r.MissReasons {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, m)
		}
		dst = append(dst, ']')
	}
	return append(dst, "}\n"...)
}

func appendStringField(dst []byte, key, s string) []byte {
	return appendJSONString(append(dst, key...), s)
}

func appendCount(dst []byte, n int) []byte {
	if n < 0 {
		return append(dst, "null"...)
	}
	return strconv.AppendInt(dst, int64(n), 10)
}

// appendMillis writes d in milliseconds with three decimals, or null when d
// is negative (Unknown).
func appendMillis(dst []byte, d time.Duration) []byte {
	if d < 0 {
		return append(dst, "null"...)
	}
	us := int64(d) / 1000
	if int64(d)%1000 >= 500 {
		us++
	}
	dst = strconv.AppendInt(dst, us/1000, 10)
	frac := us % 1000
	return append(dst, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, invalid UTF-8 replaced by U+FFFD, and U+2028
// and U+2029 escaped so that the line is also valid JavaScript. DEL and
// the C1 control characters (U+0080 to U+009F) are escaped too, though
// JSON allows them raw: the log is read on terminals (tail -f, or
// request_log "-" on the gateway's standard output), and a client's model
// holding U+009B (CSI) or U+009D (OSC) reached them as the escape
// sequence a terminal acts on, as ESC would have.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != 0x7f {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		if r < 0xa0 { // a C1 control character
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
