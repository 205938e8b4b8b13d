package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// num is a figure; NaN (not measured, or not applicable) is null in JSON
// and "–" in the table.
type num float64

func (n num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, math.Round(f*1000)/1000, 'f', -1, 64), nil
}

func (n num) fmt(prec int) string {
	if math.IsNaN(float64(n)) {
		return "–"
	}
	return strconv.FormatFloat(float64(n), 'f', prec, 64)
}

// summaryKeys are the figures summarized as medians of rounds.
var summaryKeys = []struct {
	key string
	get func(r roundResult) num
}{
	{"added_ttft_p50_ms", func(r roundResult) num { return r.AddedTTFTP50 }},
	{"added_ttft_p99_ms", func(r roundResult) num { return r.AddedTTFTP99 }},
	{"added_itl_p50_ms", func(r roundResult) num { return r.AddedITLP50 }},
	{"added_itl_p99_ms", func(r roundResult) num { return r.AddedITLP99 }},
	{"proxy_cpu_ms_per_1k_events", func(r roundResult) num { return r.CPUPer1kEvents }},
	{"rss_per_stream_kib", func(r roundResult) num { return r.RSSPerStreamKiB }},
	{"ttft_over_engine_p50_ms", func(r roundResult) num { return r.TTFTOverP50 }},
	{"ttft_over_engine_p99_ms", func(r roundResult) num { return r.TTFTOverP99 }},
	{"request_leg_p50_ms", func(r roundResult) num { return r.RequestLegP50 }},
	{"first_event_leg_p50_ms", func(r roundResult) num { return r.FirstEventLegP50 }},
	{"request_leg_p99_ms", func(r roundResult) num { return r.RequestLegP99 }},
	{"first_event_leg_p99_ms", func(r roundResult) num { return r.FirstEventLegP99 }},
	{"delivery_delay_p50_ms", func(r roundResult) num { return r.DelayP50 }},
	{"delivery_delay_p99_ms", func(r roundResult) num { return r.DelayP99 }},
	{"bench_cpu_ms", func(r roundResult) num { return r.BenchCPUms }},
	{"events_per_s", func(r roundResult) num { return num(float64(r.Events) / float64(r.WindowSeconds)) }},
	{"errors", func(r roundResult) num { return num(r.Errors) }},
}

func summarize(rounds []roundResult, streams []int, targets []target) []summaryRow {
	var out []summaryRow
	for _, n := range streams {
		for _, t := range targets {
			row := summaryRow{Streams: n, Target: t.name, Median: map[string]num{}}
			for _, k := range summaryKeys {
				var v []float64
				for _, r := range rounds {
					if r.Streams == n && r.Target == t.name {
						v = append(v, float64(k.get(r)))
					}
				}
				row.Median[k.key] = num(median(v))
			}
			out = append(out, row)
		}
	}
	return out
}

func find(rows []summaryRow, n int, target string) map[string]num {
	for _, r := range rows {
		if r.Streams == n && r.Target == target {
			return r.Median
		}
	}
	return nil
}

func printRound(w io.Writer, r roundResult) {
	fmt.Fprintf(w, "%5d streams  round %d  %-15s requests %6d  errors %d  events/s %7.0f  TTFT−engine p50 %s p99 %s ms (legs p50/p99: request %s/%s, first event %s/%s)  delay p50 %s p99 %s ms",
		r.Streams, r.Round, r.Target, r.Requests, r.Errors, float64(r.Events)/float64(r.WindowSeconds),
		r.TTFTOverP50.fmt(3), r.TTFTOverP99.fmt(3), r.RequestLegP50.fmt(3), r.RequestLegP99.fmt(3), r.FirstEventLegP50.fmt(3), r.FirstEventLegP99.fmt(3), r.DelayP50.fmt(3), r.DelayP99.fmt(3))
	if r.Target != "direct" {
		fmt.Fprintf(w, "  added TTFT %s/%s ITL %s/%s ms  CPU %s ms (%s per 1k events)  RSS idle %d peak %d (VmHWM %d) KiB (%s KiB/stream)",
			r.AddedTTFTP50.fmt(3), r.AddedTTFTP99.fmt(3), r.AddedITLP50.fmt(3), r.AddedITLP99.fmt(3),
			r.ProxyCPUms.fmt(0), r.CPUPer1kEvents.fmt(1), r.IdleRSSKiB, r.PeakRSSKiB, r.HWMKiB, r.RSSPerStreamKiB.fmt(1))
	}
	fmt.Fprintf(w, "  engine connections %d  bench CPU %s ms  load %s\n", r.UpstreamConns, r.BenchCPUms.fmt(0), r.LoadAvg)
	if r.FirstError != "" {
		fmt.Fprintf(w, "      first error: %s\n", r.FirstError)
	}
}

func printTable(w io.Writer, rep report, targets []target, o options) {
	var proxies []target
	for _, t := range targets {
		if t.name != "direct" {
			proxies = append(proxies, t)
		}
	}
	labels := make([]string, len(proxies))
	for i, t := range proxies {
		labels[i] = t.label
	}
	who := strings.Join(labels, " / ")
	fmt.Fprintf(w, "\n%d CPUs; load average %s at start, %s at the end; %d round(s) of %v (after %v of warm-up) per stream count and target; figures are medians of rounds.\n\n",
		rep.CPUs, rep.LoadStart, rep.LoadEnd, o.rounds, o.duration, o.warmup)
	if len(proxies) > 0 {
		fmt.Fprintf(w, "| streams | added TTFT p50/p99 ms: %s | added ITL p50/p99 ms: %s | CPU ms per 1,000 events: %s | RSS KiB per stream: %s |\n", who, who, who, who)
		fmt.Fprintln(w, "| ---: | --- | --- | --- | --- |")
		for _, n := range o.streams {
			var ttft, itl, cpu, rss []string
			for _, t := range proxies {
				m := find(rep.Summary, n, t.name)
				ttft = append(ttft, m["added_ttft_p50_ms"].fmt(2)+"/"+m["added_ttft_p99_ms"].fmt(2))
				itl = append(itl, m["added_itl_p50_ms"].fmt(2)+"/"+m["added_itl_p99_ms"].fmt(2))
				cpu = append(cpu, m["proxy_cpu_ms_per_1k_events"].fmt(1))
				rss = append(rss, m["rss_per_stream_kib"].fmt(1))
			}
			fmt.Fprintf(w, "| %d | %s | %s | %s | %s |\n", n, strings.Join(ttft, " / "), strings.Join(itl, " / "), strings.Join(cpu, " / "), strings.Join(rss, " / "))
		}
	}
	fmt.Fprintln(w, "\nThe baseline and the load (medians of rounds): client TTFT − engine TTFT p50/p99 and its two legs' p50/p99 (the request: the engine's receipt − the client's send; the first event: its receipt − the engine's write), per-event delivery delay p50/p99, in ms; events/s received, errors.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| streams | target | TTFT − engine p50/p99 | legs p50/p99: request / first event | delivery delay p50/p99 | events/s | errors |")
	fmt.Fprintln(w, "| ---: | --- | --- | --- | --- | ---: | ---: |")
	for _, n := range o.streams {
		for _, t := range targets {
			m := find(rep.Summary, n, t.name)
			fmt.Fprintf(w, "| %d | %s | %s/%s | %s / %s | %s/%s | %s | %s |\n", n, t.label,
				m["ttft_over_engine_p50_ms"].fmt(2), m["ttft_over_engine_p99_ms"].fmt(2),
				m["request_leg_p50_ms"].fmt(2)+"/"+m["request_leg_p99_ms"].fmt(2), m["first_event_leg_p50_ms"].fmt(2)+"/"+m["first_event_leg_p99_ms"].fmt(2),
				m["delivery_delay_p50_ms"].fmt(2), m["delivery_delay_p99_ms"].fmt(2),
				m["events_per_s"].fmt(0), m["errors"].fmt(0))
		}
	}
}
