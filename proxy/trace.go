package proxy

import (
	"github.com/goodput/goodput/meter"
	"github.com/valyala/fasthttp"
)

// headers is the HeaderCarrier of a fasthttp request header.
type headers struct{ h *fasthttp.RequestHeader }

func (c headers) Get(key string) string { return string(c.h.Peek(key)) }
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
	p.cfg.Trace.Start(rec, headers{h})
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
