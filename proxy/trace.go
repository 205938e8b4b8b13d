package proxy

import (
	"bytes"
	"strings"

	"github.com/goodput/goodput/meter"
	"github.com/valyala/fasthttp"
)

// headers is the HeaderCarrier of a client's request header. The trace
// context it gives (W3C traceparent, tracestate, baggage) goes into the
// gateway's span, which the exporter sends out (a tracestate is copied into
// every span of the trace): a tracestate or baggage that holds a key, as a
// request id would (Proxy.idKept), is not read.
type headers struct {
	p *Proxy
	h *fasthttp.RequestHeader
}

func (c headers) Get(key string) string {
	v := c.h.Peek(key)
	if len(v) == 0 || !(strings.EqualFold(key, "tracestate") || strings.EqualFold(key, "baggage")) {
		return string(v)
	}
	if len(v) > maxTraceList {
		return "" // longer than W3C asks to be carried: not read
	}
	// Each member on its own (a list member may be dropped): one that
	// holds a key goes, the others stay (the whole value, looked up at
	// once, was too many words for the store's lookups past 21 members).
	var kept []byte
	dropped := false
	for m := range bytes.SplitSeq(v, []byte(",")) {
		t := bytes.TrimSpace(m)
		if len(t) == 0 || c.p.idCarriesKey(t, c.h) || c.p.holdsAnyKey(t) {
			dropped = dropped || len(t) > 0
			continue
		}
		if len(kept) > 0 {
			kept = append(kept, ',')
		}
		kept = append(kept, t...)
	}
	if !dropped {
		return string(v)
	}
	return string(kept)
}

// maxTraceList bounds the tracestate or baggage read from a client: W3C
// asks that 512 characters of a tracestate be carried; longer lists are
// not read, so that looking through them for keys costs a bounded time.
const maxTraceList = 512

func (c headers) Set(key, value string) { c.h.Set(key, value) }
func (c headers) Keys() []string {
	var keys []string
	for k := range c.h.All() {
		keys = append(keys, string(k))
	}
	return keys
}

// traceStart starts rec's span from the client's headers, when tracing.
func (p *Proxy) traceStart(rec *meter.Record, h *fasthttp.RequestHeader) {
	if p.cfg.Trace == nil {
		return
	}
	defer p.containSinkPanic(rec, "Trace.Start")
	p.cfg.Trace.Start(rec, headers{p, h})
}

// traceUpstream writes rec's trace context into the engine's request.
// Its fields are written into the head as it goes (appendUpHead).
func (p *Proxy) traceUpstream(r *request) {
	if p.cfg.Trace == nil {
		return
	}
	defer p.containSinkPanic(r.rec, "Trace.Upstream")
	p.cfg.Trace.Upstream(r.rec, r.ri.maxTokens, upTrace{r})
}

// traceEnd ends rec's span.
func (p *Proxy) traceEnd(rec *meter.Record) {
	if p.cfg.Trace == nil {
		return
	}
	defer p.containSinkPanic(rec, "Trace.End")
	p.cfg.Trace.End(rec)
}
