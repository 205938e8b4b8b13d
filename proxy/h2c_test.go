package proxy

import (
	"strings"
	"testing"

	"github.com/goodput/goodput/meter"
)

// An engine that speaks only HTTP/2 (h2c, prior knowledge: a gRPC-style
// server, an Envoy or nghttpx listener set to HTTP/2) answers an HTTP/1.1
// request with its SETTINGS frame, then a GOAWAY, and closes. The record
// said "upstream closed the connection before a complete response head
// (error when reading response headers: EOF ...)" and the client "upstream
// failed before responding", nothing about the protocol: now both say an
// invalid head, and the record that it was HTTP/2.
func TestUpstreamSpeaksOnlyHTTP2(t *testing.T) {
	settings := []byte{0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100}
	goaway := append([]byte{0, 0, 35, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, "Client preface not received"...)
	up := startRawUpstream(t, func(c *scriptConn) {
		c.BW.Write(settings)
		c.BW.Write(goaway)
		c.BW.Flush()
		c.Conn.Close()
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	status, _, body, err := post(t, g.URL()+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[]}`, nil)
	if err != nil || status != 502 || !strings.Contains(body, "upstream sent an invalid response head") {
		t.Fatalf("client got %d %v %q", status, err, body)
	}
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeUpstreamError || !strings.Contains(rec.ErrorMessage, "HTTP/2") {
		t.Fatalf("record: outcome %s, error %q; want upstream_error saying HTTP/2", rec.Outcome, rec.ErrorMessage)
	}
}
