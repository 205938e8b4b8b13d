package proxy

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
	"github.com/valyala/fasthttp"
)

// A request refused whatever its body holds (no valid key, or an announced
// length over the limit) is answered once its headers are read: its body
// is neither awaited nor allocated (fasthttp allocates the announced
// length before reading), and an Expect: 100-continue gets the answer, not
// an invitation to upload (found by an HTTP-level probe: headers alone
// announcing 16 MiB held 16 MiB per connection until read_body, without a
// key). A valid key's request is still invited and served.
func TestRefusedBeforeTheBody(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{})
	keys, _ := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	g := startGateway(t, Config{Upstream: up.URL(), Keys: keys, MaxBodyBytes: 1 << 20})
	// firstLine sends a head and no body, and returns the first line the
	// gateway answers (an interim 100, or the final status).
	firstLine := func(hdr string) (string, *bufio.Reader, net.Conn) {
		t.Helper()
		conn, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+hdr+"\r\n")
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(conn)
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("%q: no answer before the body: %v", hdr, err)
		}
		return strings.TrimSpace(line), br, conn
	}
	for _, c := range []struct {
		hdr     string
		status  string
		outcome meter.Outcome
	}{
		{"Content-Length: 1048576\r\n", " 401 ", meter.OutcomeUnauthorized},
		{"Content-Length: 1048576\r\nAuthorization: Bearer gp-not-a-key\r\n", " 401 ", meter.OutcomeUnauthorized},
		{"Content-Length: 1048576\r\nExpect: 100-continue\r\n", " 401 ", meter.OutcomeUnauthorized},
		{"Content-Length: 1048577\r\nExpect: 100-continue\r\nAuthorization: Bearer " + key + "\r\n", " 413 ", meter.OutcomeRejected},
		{"Content-Length: 1048577\r\nAuthorization: Bearer " + key + "\r\n", " 413 ", meter.OutcomeRejected},
		// Chunked, its length unknown: refused before a chunk is read
		// (found by a review: it was read up to max_body_bytes first).
		{"Transfer-Encoding: chunked\r\n", " 401 ", meter.OutcomeUnauthorized},
		{"Transfer-Encoding: chunked\r\nExpect: 100-continue\r\nX-Api-Key: gp-not-a-key\r\n", " 401 ", meter.OutcomeUnauthorized},
	} {
		line, _, _ := firstLine(c.hdr)
		if !strings.Contains(line, c.status) {
			t.Fatalf("%q: answered %q before the body, want%s", c.hdr, line, c.status)
		}
		rec := g.record(t)
		if rec.Outcome != c.outcome || (c.outcome == meter.OutcomeRejected) != (rec.Tenant == "acme") {
			t.Fatalf("%q: record %+v", c.hdr, rec)
		}
	}
	// A valid key's request within the limit is invited, then served.
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	line, br, conn := firstLine("Content-Length: " + strconv.Itoa(len(body)) + "\r\nExpect: 100-continue\r\nConnection: close\r\nAuthorization: Bearer " + key + "\r\n")
	if !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("a valid key's request got %q, want 100 Continue", line)
	}
	io.WriteString(conn, body)
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("no final answer: %v", err)
		}
		if strings.HasPrefix(l, "HTTP/1.1 ") {
			if !strings.Contains(l, " 200 ") {
				t.Fatalf("final answer %q", l)
			}
			break
		}
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.Tenant != "acme" {
		t.Fatalf("record %+v", rec)
	}
	if n := up.accepts.Load(); n != 1 {
		t.Fatalf("the engine was contacted %d times, want once", n)
	}
}

// A request refused for its key once its headers were read gets 401 even
// if a reload made its key valid before its refusal was written (found by
// a review: it got 413 for a body far under the limit). The refusal's
// second half is run here on a request marked by the first, whose key is
// valid.
func TestRefusedForItsKeyStaysUnauthorized(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{})
	keys, _ := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	var got []meter.Record
	p, err := New(Config{Upstream: up.URL(), Keys: keys, Sink: RecordFunc(func(r *meter.Record) { got = append(got, *r) })})
	if err != nil {
		t.Fatal(err)
	}
	// A request as a read leaves it (errorHandler tells one whose headers
	// were read by its raw headers), marked by headerReceived.
	var req fasthttp.Request
	raw := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key + "\r\nContent-Length: 200\r\n\r\n"
	if err := req.Header.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatal(err)
	}
	req.Header.SetBytesKV(hdrNoKey, strTrue)
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, nil, nil)
	p.errorHandler(&ctx, fasthttp.ErrBodyTooLarge)
	p.Wait()
	if st := ctx.Response.StatusCode(); st != 401 {
		t.Fatalf("status %d, want 401", st)
	}
	if len(got) != 1 || got[0].Outcome != meter.OutcomeUnauthorized || got[0].Tenant != "" {
		t.Fatalf("records %+v", got)
	}
}
