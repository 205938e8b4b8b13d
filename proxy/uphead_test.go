package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/identity"
	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/meter"
	"github.com/valyala/fasthttp"
)

// upHeadRequest is a client's request, read as the gateway reads it (its
// header names scanned as headerNames scans them), made into the request
// whose head appendUpHead writes.
func upHeadRequest(t testing.TB, p *Proxy, raw string, api meter.API) *request {
	t.Helper()
	ctx := new(fasthttp.RequestCtx)
	var req fasthttp.Request
	if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatal(err)
	}
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5000}, nil)
	names, bad := scanHeadNames(ctx.Request.Header.RawHeaders(), p.cfg.TenantHeader)
	if bad {
		t.Fatalf("bad names in %q", raw)
	}
	rec := new(meter.Record)
	rec.RequestID = "rid-1"
	return &request{p: p, ctx: ctx, rec: rec, api: api, body: ctx.Request.Body(), names: names}
}

// upHeadProxy is a gateway without keys in front of an engine at 10.0.0.9.
func upHeadProxy(t testing.TB) *Proxy {
	t.Helper()
	p, err := New(Config{Upstream: "http://10.0.0.9:8000"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The engine's request head, field by field: what passes, what is dropped,
// what is replaced in place and what is added, for the heads a gateway
// meets (see the top of uphead.go).
func TestUpstreamHeadFields(t *testing.T) {
	plain := upHeadProxy(t)
	keyed, err := New(Config{Upstream: "http://10.0.0.9:8000", Keys: new(identity.Store)})
	if err != nil {
		t.Fatal(err)
	}
	keyedXFF, err := New(Config{Upstream: "http://10.0.0.9:8000", Keys: new(identity.Store), TenantHeader: "X-Forwarded-For"})
	if err != nil {
		t.Fatal(err)
	}
	const body = `{"model":"m","stream":true}`
	post := func(fields string) string {
		return "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: gw.example\r\n" + fields +
			"Content-Length: 27\r\n\r\n" + body
	}
	cases := []struct {
		name     string
		p        *Proxy
		api      meter.API
		upKey    string
		trace    []traceField
		raw      string
		want     string // the head, after the request line
		wantLine string // the request line; post's when empty
	}{{
		name: "a plain metered POST",
		p:    plain, api: meter.APIChat,
		raw: post("Content-Type: application/json\r\nUser-Agent: OpenAI/Python 1.0\r\nX-Custom: a\r\n"),
		want: "Host: 10.0.0.9:8000\r\nContent-Length: 27\r\nContent-Type: application/json\r\nUser-Agent: OpenAI/Python 1.0\r\n" +
			"X-Custom: a\r\nX-Forwarded-For: 192.0.2.1\r\nX-Request-Id: rid-1\r\nAccept-Encoding: identity\r\n\r\n",
	}, {
		name: "hop-by-hop fields and those Connection names are dropped",
		p:    plain, api: meter.APIOther,
		raw: post("Connection: keep-alive, X-Hop\r\nConnection: X-Hop2\r\nKeep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\n" +
			"Proxy-Authorization: Basic eA==\r\nTE: trailers\r\nUpgrade: h2c\r\nX-Hop: 1\r\nX-Hop2: 2\r\nX-Kept: 3\r\n"),
		want: "Host: 10.0.0.9:8000\r\nContent-Length: 27\r\nX-Kept: 3\r\nX-Forwarded-For: 192.0.2.1\r\nX-Request-Id: rid-1\r\n\r\n",
	}, {
		name: "earlier hops, the client's request id and encodings are replaced where they stood",
		p:    plain, api: meter.APIChat,
		raw: post("X-Forwarded-For: 198.51.100.7\r\nX-Request-Id: client-id\r\nAccept-Encoding: gzip\r\nX-Mid: m\r\n" +
			"X-Forwarded-For: 203.0.113.9, 203.0.113.10\r\nAccept-Encoding: br\r\n"),
		want: "Host: 10.0.0.9:8000\r\nContent-Length: 27\r\nX-Forwarded-For: 198.51.100.7, 203.0.113.9, 203.0.113.10, 192.0.2.1\r\n" +
			"X-Request-Id: rid-1\r\nAccept-Encoding: identity\r\nX-Mid: m\r\n\r\n",
	}, {
		name: "an unmetered route keeps the client's encodings; a Connection naming X-Forwarded-For drops the earlier hops",
		p:    plain, api: meter.APIOther,
		raw:  post("Connection: X-Forwarded-For\r\nX-Forwarded-For: 198.51.100.7\r\nAccept-Encoding: gzip\r\n"),
		want: "Host: 10.0.0.9:8000\r\nContent-Length: 27\r\nAccept-Encoding: gzip\r\nX-Forwarded-For: 192.0.2.1\r\nX-Request-Id: rid-1\r\n\r\n",
	}, {
		name: "without keys, the credentials and the tenant header pass",
		p:    plain, api: meter.APIChat,
		raw: post("Authorization: Bearer client\r\nX-Api-Key: k\r\nX-Tenant: acme\r\n"),
		want: "Host: 10.0.0.9:8000\r\nContent-Length: 27\r\nAuthorization: Bearer client\r\nX-Api-Key: k\r\nX-Tenant: acme\r\n" +
			"X-Forwarded-For: 192.0.2.1\r\nX-Request-Id: rid-1\r\nAccept-Encoding: identity\r\n\r\n",
	}, {
		name: "with keys, the gateway key and tenant header stay; the tenant's credential goes",
		p:    keyed, api: meter.APIChat, upKey: "sk-upstream",
		raw: post("Authorization: Bearer gateway-key\r\nX-Api-Key: gateway-key\r\nX-Tenant: acme\r\nX-Other: o\r\napi-key: gateway-key\r\n"),
		want: "Host: 10.0.0.9:8000\r\nContent-Length: 27\r\nX-Other: o\r\nX-Forwarded-For: 192.0.2.1\r\nX-Request-Id: rid-1\r\n" +
			"Authorization: Bearer sk-upstream\r\nAccept-Encoding: identity\r\n\r\n",
	}, {
		name: "with keys, an Api-Key that holds no key is the engine's: it passes",
		p:    keyed, api: meter.APIChat,
		raw:  post("Authorization: Bearer gateway-key\r\nApi-Key: 0123456789abcdef0123456789abcdef\r\n"),
		want: "Host: 10.0.0.9:8000\r\nContent-Length: 27\r\nApi-Key: 0123456789abcdef0123456789abcdef\r\nX-Forwarded-For: 192.0.2.1\r\nX-Request-Id: rid-1\r\nAccept-Encoding: identity\r\n\r\n",
	}, {
		name: "with keys and no upstream credential, none",
		p:    keyed, api: meter.APIChat,
		raw:  post("Authorization: Bearer gateway-key\r\n"),
		want: "Host: 10.0.0.9:8000\r\nContent-Length: 27\r\nX-Forwarded-For: 192.0.2.1\r\nX-Request-Id: rid-1\r\nAccept-Encoding: identity\r\n\r\n",
	}, {
		name: "the tracer's fields come last, the client's of their names dropped",
		p:    plain, api: meter.APIOther,
		trace: []traceField{{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, {"tracestate", "g=1"}},
		raw:   post("Traceparent: 00-client-01\r\nX-After: a\r\n"),
		want: "Host: 10.0.0.9:8000\r\nContent-Length: 27\r\nX-After: a\r\nX-Forwarded-For: 192.0.2.1\r\nX-Request-Id: rid-1\r\n" +
			"traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\ntracestate: g=1\r\n\r\n",
	}, {
		name: "the tracer's traceparent drops the client's tracestate, though the tracer set none",
		p:    plain, api: meter.APIOther,
		trace: []traceField{{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
		raw:   post("Traceparent: 00-not-a-trace-01\r\nTracestate: rojo=1\r\ntracestate: congo=2\r\nBaggage: b=1\r\n"),
		want: "Host: 10.0.0.9:8000\r\nContent-Length: 27\r\nBaggage: b=1\r\nX-Forwarded-For: 192.0.2.1\r\nX-Request-Id: rid-1\r\n" +
			"traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n\r\n",
	}, {
		name: "a GET without a body has no Content-Length; an HTTP/1.0 client's is asked in HTTP/1.1, without its close",
		p:    plain, api: meter.APIOther,
		raw:      "GET /v1/models HTTP/1.0\r\nHost: gw\r\nCookie: a=1\r\nCookie: b=2\r\n\r\n",
		want:     "Host: 10.0.0.9:8000\r\nCookie: a=1\r\nCookie: b=2\r\nX-Forwarded-For: 192.0.2.1\r\nX-Request-Id: rid-1\r\n\r\n",
		wantLine: "GET /v1/models HTTP/1.1",
	}, {
		name: "cookies pass as they came: quoted, with a backslash, folded",
		p:    plain, api: meter.APIOther,
		raw: "GET /v1/models HTTP/1.1\r\nHost: gw\r\nCookie: session=\"abc def\"; data={\"a\":1}; flag\r\nX-A: 1\r\n" +
			"cookie: x=a\\b;\r\n y=1\r\n\r\n",
		want: "Host: 10.0.0.9:8000\r\nCookie: session=\"abc def\"; data={\"a\":1}; flag\r\nCookie: x=a\\b; y=1\r\nX-A: 1\r\n" +
			"X-Forwarded-For: 192.0.2.1\r\nX-Request-Id: rid-1\r\n\r\n",
		wantLine: "GET /v1/models HTTP/1.1",
	}, {
		name: "a cookie whose value starts on a folded line",
		p:    plain, api: meter.APIOther,
		raw:      "GET /v1/models HTTP/1.1\r\nHost: gw\r\nCookie:\r\n a=1\r\nCookie:\r\n\tb=2\r\n c=3\r\n\r\n",
		want:     "Host: 10.0.0.9:8000\r\nCookie: a=1\r\nCookie: b=2 c=3\r\nX-Forwarded-For: 192.0.2.1\r\nX-Request-Id: rid-1\r\n\r\n",
		wantLine: "GET /v1/models HTTP/1.1",
	}, {
		name: "a field Connection names is dropped, Close too",
		p:    plain, api: meter.APIOther,
		raw:      "GET /v1/models HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nClose: 1\r\nCookie: a=1\r\nConnection: Cookie\r\n\r\n",
		want:     "Host: 10.0.0.9:8000\r\nX-Forwarded-For: 192.0.2.1\r\nX-Request-Id: rid-1\r\n\r\n",
		wantLine: "GET /v1/models HTTP/1.1",
	}, {
		name: "with keys, a tenant header named X-Forwarded-For keeps the client's lines from the engine",
		p:    keyedXFF, api: meter.APIChat,
		raw:  post("X-Forwarded-For: spoofed-tenant\r\n"),
		want: "Host: 10.0.0.9:8000\r\nContent-Length: 27\r\nX-Forwarded-For: 192.0.2.1\r\nX-Request-Id: rid-1\r\nAccept-Encoding: identity\r\n\r\n",
	}, {
		name: "an upstream credential that could not be a field's value is not written",
		p:    keyed, api: meter.APIChat, upKey: "sk-up\r\nX-Injected: 1",
		raw:  post(""),
		want: "Host: 10.0.0.9:8000\r\nContent-Length: 27\r\nX-Forwarded-For: 192.0.2.1\r\nX-Request-Id: rid-1\r\nAccept-Encoding: identity\r\n\r\n",
	}, {
		name: "a GET with Content-Length: 0 keeps it",
		p:    plain, api: meter.APIOther,
		raw:      "GET /health HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n",
		want:     "Host: 10.0.0.9:8000\r\nContent-Length: 0\r\nX-Forwarded-For: 192.0.2.1\r\nX-Request-Id: rid-1\r\n\r\n",
		wantLine: "GET /health HTTP/1.1",
	}, {
		name: "DELETE, and Expect dropped",
		p:    plain, api: meter.APIOther,
		raw:      "DELETE /v1/files/1 HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\n\r\n",
		want:     "Host: 10.0.0.9:8000\r\nContent-Length: 0\r\nX-Forwarded-For: 192.0.2.1\r\nX-Request-Id: rid-1\r\n\r\n",
		wantLine: "DELETE /v1/files/1 HTTP/1.1",
	}, {
		name: "a chunked body is sent with its length",
		p:    plain, api: meter.APIChat,
		raw:      "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n1b\r\n" + body + "\r\n0\r\n\r\n",
		want:     "Host: 10.0.0.9:8000\r\nContent-Length: 27\r\nX-Forwarded-For: 192.0.2.1\r\nX-Request-Id: rid-1\r\nAccept-Encoding: identity\r\n\r\n",
		wantLine: "POST /v1/completions HTTP/1.1",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := upHeadRequest(t, c.p, c.raw, c.api)
			r.key.Tenant = &identity.Tenant{UpstreamKey: c.upKey}
			r.trace = c.trace
			got := string(r.appendUpHead(nil))
			if c.wantLine == "" {
				c.wantLine = "POST /v1/chat/completions?x=1 HTTP/1.1" // post's
			}
			if want := c.wantLine + "\r\n" + c.want; got != want {
				t.Fatalf("head\n%q\nwant\n%q", got, want)
			}
			// The engine reads it as one request, of the body's length.
			hr, err := http.ReadRequest(bufio.NewReader(strings.NewReader(got + string(r.body))))
			if err != nil {
				t.Fatal(err)
			}
			if hr.ContentLength != int64(len(r.body)) && !(hr.ContentLength == -1 && len(r.body) == 0) {
				t.Fatalf("Content-Length %d for a body of %d", hr.ContentLength, len(r.body))
			}
		})
	}
}

// A Tracer's field that could not be written as it is (a line break, a
// name that is no token) is not kept: it would end the field, or the head;
// nor one the gateway writes or drops itself (a second Content-Length).
func TestUpstreamTraceFieldChecked(t *testing.T) {
	r := &request{p: upHeadProxy(t)} // its tenant header: X-Tenant
	c := upTrace{r}
	c.Set("traceparent", "00-a-b-01")
	c.Set("tracestate", "a=1\r\nX-Injected: 1")
	c.Set("bad name", "v")
	for _, k := range []string{"Content-Length", "transfer-encoding", "Host", "Connection", "Authorization", "X-Api-Key", "X-Tenant", "Cookie",
		"X-Forwarded-For", "X-Request-Id", "Accept-Encoding"} {
		c.Set(k, "1") // the gateway's own, or dropped
	}
	c.Set("Traceparent", "00-c-d-01") // the same field, in another case
	if len(r.trace) != 1 || r.trace[0].value != "00-c-d-01" || c.Get("TRACEPARENT") != "00-c-d-01" || c.Get("tracestate") != "" {
		t.Fatalf("fields %+v", r.trace)
	}
	if k := c.Keys(); len(k) != 1 || k[0] != "traceparent" {
		t.Fatalf("keys %q", k)
	}
}

// The head is written into a buffer of the caller's without allocating,
// once the client's header has collected its cookies.
func TestUpstreamHeadAllocatesNothing(t *testing.T) {
	r := upHeadRequest(t, upHeadProxy(t), "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"+
		"Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nX-Forwarded-For: 198.51.100.7\r\nCookie: a=1\r\nAccept-Encoding: gzip\r\n"+
		"Content-Length: 2\r\n\r\n{}", meter.APIChat)
	buf := make([]byte, 0, upstreamHeadBufSize)
	buf = r.appendUpHead(buf[:0])
	if !strings.Contains(string(buf), "X-Forwarded-For: 198.51.100.7, 192.0.2.1\r\n") || strings.Contains(string(buf), "X-Hop") {
		t.Fatalf("head %q", buf)
	}
	if n := testenv.AllocsPerRun(200, func() { buf = r.appendUpHead(buf[:0]) }); n != 0 {
		t.Fatalf("%v allocations per head", n)
	}
}

// BenchmarkUpstreamHead writes the yardstick's request head (a chat
// request with the openai SDK's fields), warm: in one pass, and, as the
// baseline, as it was written before, through a request of fasthttp's (the
// client's header copied into it, edited field by field, serialised).
//
//	go test -run '^$' -bench UpstreamHead -count 5 ./proxy
func BenchmarkUpstreamHead(b *testing.B) {
	p := upHeadProxy(b)
	r := upHeadRequest(b, p, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: OpenAI/Python 1.82.0\r\n"+
		"Accept: application/json\r\nAccept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\nContent-Type: application/json\r\n"+
		"X-Stainless-Lang: python\r\nX-Stainless-Retry-Count: 0\r\nContent-Length: 2\r\n\r\n{}", meter.APIChat)
	b.Run("one-pass", func(b *testing.B) {
		buf := make([]byte, 0, upstreamHeadBufSize)
		b.ReportAllocs()
		for b.Loop() {
			buf = r.appendUpHead(buf[:0])
		}
	})
	b.Run("fasthttp", func(b *testing.B) {
		var up fasthttp.Request
		bw := bufio.NewWriterSize(io.Discard, upstreamWriteBufSize)
		var xff [64]byte
		b.ReportAllocs()
		for b.Loop() {
			up.Reset()
			r.ctx.Request.Header.CopyTo(&up.Header)
			up.Header.SetNoDefaultContentType(true)
			up.Header.SetProtocolBytes(http11)
			up.Header.Del("Connection")
			up.Header.SetHost(p.upHost)
			up.UseHostHeader = false
			up.SetRequestURIBytes(r.ctx.Request.RequestURI())
			a, _ := netip.AddrFromSlice(r.ctx.RemoteIP())
			up.Header.AddBytesV("X-Forwarded-For", a.Unmap().AppendTo(xff[:0]))
			up.Header.SetBytesKV(hdrRequestID, []byte(r.rec.RequestID))
			up.Header.Set("Accept-Encoding", "identity")
			up.SetBodyRaw(r.body)
			if err := up.Write(bw); err != nil {
				b.Fatal(err)
			}
			bw.Reset(io.Discard)
		}
	})
}

// The engine's head is the gateway's own work before the upstream write,
// though it is written once the exchange has begun: its time is in the
// record's overhead (a hook inside the head's timing waits 30 ms, which a
// plain request's overhead is far under), and a retry's head is not.
func TestOverheadCountsTheUpstreamHead(t *testing.T) {
	const hold = 30 * time.Millisecond
	calls := 0
	testHookUpHead = func() { calls++; time.Sleep(hold) }
	t.Cleanup(func() { testHookUpHead = nil })
	up := startRawUpstream(t, vllmUpstream(0))
	g := startGateway(t, Config{Upstream: up.URL()})
	if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil); err != nil || status != 200 {
		t.Fatalf("status %d err %v", status, err)
	}
	rec := g.record(t)
	if rec.Overhead < hold || calls != 1 {
		t.Fatalf("overhead %v with the head held %v (%d heads timed)", rec.Overhead, hold, calls)
	}
}
