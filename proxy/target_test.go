package proxy

import (
	"fmt"
	"sync"
	"testing"

	"github.com/goodput/goodput/meter"
)

// The engine gets the path the gateway metered by: fasthttp's normal form
// of the client's target (dot segments resolved, repeated slashes joined,
// percent-escapes decoded, an absolute target's scheme and host dropped),
// with the query as the client wrote it. Were the engine sent the target
// as written, a request the gateway metered and limited as chat would
// reach the engine as some other path (a 404 at best), and one it passed
// as unmetered could reach a generation route of an engine that reads
// paths differently.
func TestEngineGetsTheMeteredPath(t *testing.T) {
	var mu sync.Mutex
	var got string
	up := startRawUpstream(t, func(c *scriptConn) {
		mu.Lock()
		got = string(c.Req.Header.RequestURI())
		mu.Unlock()
		writeSSEHead(c)
		for _, e := range vllmEvents {
			writeChunk(c, e)
		}
		writeChunk(c, done)
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`
	for _, c := range []struct{ target, engine, route string }{
		{"/v1/chat/completions", "/v1/chat/completions", "chat"},
		{"/v1/x/../chat/completions", "/v1/chat/completions", "chat"},
		{"/v1/./chat/completions", "/v1/chat/completions", "chat"},
		{"//v1/chat/completions", "/v1/chat/completions", "chat"},
		{"/v1//chat/completions", "/v1/chat/completions", "chat"},
		{"/v1/chat/%63ompletions", "/v1/chat/completions", "chat"},
		{"/v1/chat%2Fcompletions", "/v1/chat/completions", "chat"},
		{"http://elsewhere/v1/chat/completions", "/v1/chat/completions", "chat"},
		{"/v1/chat/completions?a=b%20c&d", "/v1/chat/completions?a=b%20c&d", "chat"},
		{"/v1/x/../completions", "/v1/completions", "completions"},
		{"/v1/chat/completions/", "/v1/chat/completions/", "other"},
		{"/v1/models/a%20b/../c", "/v1/models/c", "other"},
	} {
		req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", c.target, len(body), body)
		if st := rawExchange(t, g.addr, req); st != "HTTP/1.1 200 OK" {
			t.Fatalf("%s: %s", c.target, st)
		}
		rec := g.record(t)
		mu.Lock()
		engine := got
		mu.Unlock()
		if engine != c.engine || rec.Route != c.route || rec.Outcome != meter.OutcomeOK {
			t.Fatalf("%s: the engine got %q, metered as %s (%s); want %q, %s", c.target, engine, rec.Route, rec.Outcome, c.engine, c.route)
		}
	}
}
