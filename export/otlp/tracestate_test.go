package otlp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/goodput/goodput/export/otlp"
	"github.com/goodput/goodput/identity"
	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/proxy"
	"github.com/goodput/goodput/ratelimit"
)

// A client's tracestate is copied into the gateway's span, which goes to
// the collector: one that holds a credential the request carries, or a
// key's shape, is not read (an operator probe found a gp- key in the
// exported span's traceState). A plain one is kept. The engine gets the
// span's tracestate, or none: the client's went to it as it came when
// the span had none (every member dropped, over 512 characters, or after
// a traceparent that could not be read, beside a new trace's), key and
// all, for the engine's own spans to export.
func TestTraceStateWithAKeyIsNotExported(t *testing.T) {
	key, hash, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	store, err := identity.NewStore([]ratelimit.TenantConfig{{Name: "acme", Keys: []ratelimit.KeyConfig{{ID: "acme-1", SHA256: hash}}}})
	if err != nil {
		t.Fatal(err)
	}
	const credential = "sk-engine-credential-0123456789"
	var members []string
	for i := range 32 {
		members = append(members, fmt.Sprintf("v%d=x%d", i, i))
	}
	manyMembers := strings.Join(members, ",")
	type tcase struct{ tracestate, want, traceparent string }
	for _, mode := range []struct {
		name  string
		keys  *identity.Store
		auth  string
		cases []tcase
	}{
		{"without gateway keys", nil, credential, []tcase{
			{"rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", ""},
			{"vendor=" + credential, "", ""},                                                   // the engine's credential the request carries
			{"vendor=" + key + ",rojo=1", "rojo=1", ""},                                        // a whole key's shape: its member goes
			{manyMembers, manyMembers, ""},                                                     // W3C's 32 members, no key: kept whole
			{"rojo=" + strings.Repeat("x", 520), "", ""},                                       // over 512 characters: not read
			{tracestate: "rojo=00f067aa0ba902b7", traceparent: "00-" + clientTrace + "-zz-01"}, // the traceparent not read: a new trace, without it
		}},
		{"with gateway keys", store, key, []tcase{
			{"rojo=00f067aa0ba902b7", "rojo=00f067aa0ba902b7", ""},
			{"vendor=" + key, "", ""},
			{"vendor=x" + key[3:19], "", ""}, // 16 characters of the key the request presents
		}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			rcv := startReceiver(t)
			ctx := context.Background()
			tel, err := otlp.New(ctx, otlp.Config{Traces: true, Endpoint: rcv.srv.URL, ServiceName: "gw-test"}, noEnv)
			if err != nil {
				t.Fatal(err)
			}
			eng := &engine{}
			up := httptest.NewServer(eng)
			defer up.Close()
			p, err := proxy.New(proxy.Config{Upstream: up.URL, Keys: mode.keys, Trace: tel.Tracer, IOLoop: testenv.IOLoop()})
			if err != nil {
				t.Fatal(err)
			}
			addr := serveGateway(t, p)
			for _, c := range mode.cases {
				req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
				req.Header.Set("Authorization", "Bearer "+mode.auth)
				tp := c.traceparent
				if tp == "" {
					tp = "00-" + clientTrace + "-" + clientParent + "-01"
				}
				req.Header.Set("traceparent", tp)
				req.Header.Set("tracestate", c.tracestate)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("status %d", resp.StatusCode)
				}
			}
			p.Wait()
			if err := tel.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			spans := rcv.allSpans()
			if len(spans) != len(mode.cases) {
				t.Fatalf("%d spans, want %d", len(spans), len(mode.cases))
			}
			eng.mu.Lock()
			defer eng.mu.Unlock()
			for i, s := range spans {
				if s.TraceState != mode.cases[i].want {
					t.Errorf("tracestate %q: the span's is %q, want %q", mode.cases[i].tracestate, s.TraceState, mode.cases[i].want)
				}
				if got := eng.tracestate[i]; got != mode.cases[i].want {
					t.Errorf("tracestate %.60q: the engine got %.60q, want %q", mode.cases[i].tracestate, got, mode.cases[i].want)
				}
			}
		})
	}
}
