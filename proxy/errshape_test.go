package proxy

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
)

// errorShapeRoutes are the routes whose clients read the gateway's own
// errors in different shapes: Anthropic's SDKs on the Messages API,
// OpenAI's elsewhere.
var errorShapeRoutes = []struct {
	path, body string
	anthropic  bool
}{
	{"/v1/messages", `{"model":"m","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`, true},
	{"/v1/chat/completions", chatBody, false},
}

// gatewayError is an error body decoded in the shape its route's clients
// read: Anthropic's {"type":"error","error":{"type","message"}}, or
// OpenAI's {"error":{"message","type","code"}}. A member of the other
// shape fails the decode.
type gatewayError struct {
	Type, Message, Code string
}

func decodeGatewayError(t *testing.T, anthropic bool, h http.Header, body string) gatewayError {
	t.Helper()
	if ct := h.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json", ct)
	}
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if anthropic {
		var e struct {
			Type  *string `json:"type"`
			Error *struct {
				Type    *string `json:"type"`
				Message *string `json:"message"`
			} `json:"error"`
		}
		if err := dec.Decode(&e); err != nil || e.Type == nil || *e.Type != "error" || e.Error == nil || e.Error.Type == nil || e.Error.Message == nil {
			t.Fatalf("not in Anthropic's error shape (%v): %s", err, body)
		}
		return gatewayError{Type: *e.Error.Type, Message: *e.Error.Message}
	}
	var e struct {
		Error *struct {
			Message *string `json:"message"`
			Type    *string `json:"type"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if err := dec.Decode(&e); err != nil || e.Error == nil || e.Error.Message == nil || e.Error.Type == nil || e.Error.Code == nil {
		t.Fatalf("not in OpenAI's error shape (%v): %s", err, body)
	}
	return gatewayError{Type: *e.Error.Type, Message: *e.Error.Message, Code: *e.Error.Code}
}

// The gateway's own answers on the Messages API route are in Anthropic's
// error shape, with the type Anthropic gives their status; on the other
// routes in OpenAI's, as before. Status, headers and the record are the
// same on both. In OpenAI's shape on every route, a Node SDK probe found
// @ai-sdk/anthropic showing only "Unauthorized" or "Gateway Timeout", and
// the Anthropic SDK typing a bad key invalid_request_error.
func TestOwnErrorsInTheRouteShape(t *testing.T) {
	t.Run("missing key", func(t *testing.T) {
		up := startRawUpstream(t, vllmUpstream(0))
		tc, _ := tenantWithKey(t, "acme", ratelimit.Limits{})
		store, _ := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
		g := startGateway(t, Config{Upstream: up.URL(), Keys: store})
		for _, r := range errorShapeRoutes {
			status, h, body, err := post(t, g.URL()+r.path, r.body, nil)
			if err != nil || status != 401 {
				t.Fatalf("%s: status %d err %v", r.path, status, err)
			}
			e := decodeGatewayError(t, r.anthropic, h, body)
			want := gatewayError{"invalid_request_error", e.Message, "invalid_api_key"}
			if r.anthropic {
				want = gatewayError{"authentication_error", e.Message, ""}
			}
			if e != want || !strings.HasPrefix(e.Message, "missing gateway key") {
				t.Fatalf("%s: %+v, want %+v", r.path, e, want)
			}
			if rec := g.record(t); rec.Outcome != meter.OutcomeUnauthorized || rec.Status != 401 || rec.ErrorMessage != e.Message {
				t.Fatalf("%s: record %+v", r.path, rec)
			}
		}
	})

	t.Run("rate limited", func(t *testing.T) {
		up := startRawUpstream(t, vllmUpstream(0))
		// One request, then one every 30 s: the rest are refused.
		tc, key := tenantWithKey(t, "acme", ratelimit.Limits{RPM: 2, Burst: 1})
		store, gate := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
		g := startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate})
		auth := map[string]string{"X-Api-Key": key}
		if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, auth); err != nil || status != 200 {
			t.Fatalf("first request: %d %v", status, err)
		}
		g.record(t)
		for _, r := range errorShapeRoutes {
			status, h, body, err := post(t, g.URL()+r.path, r.body, auth)
			if err != nil || status != 429 {
				t.Fatalf("%s: status %d err %v", r.path, status, err)
			}
			e := decodeGatewayError(t, r.anthropic, h, body)
			want := gatewayError{"requests", e.Message, "rate_limit_exceeded"}
			if r.anthropic {
				want = gatewayError{"rate_limit_error", e.Message, ""}
			}
			if e != want || !strings.HasPrefix(e.Message, "Rate limit reached for tenant acme on requests per minute") {
				t.Fatalf("%s: %+v, want %+v", r.path, e, want)
			}
			if ra, _ := strconv.Atoi(h.Get("Retry-After")); ra < 1 || h.Get("x-ratelimit-limit-requests") != "2" || h.Get("x-ratelimit-remaining-requests") != "0" {
				t.Fatalf("%s: 429 headers %v", r.path, h)
			}
			if strings.Contains(body, key) || strings.Contains(body, strings.TrimPrefix(key, "gp-")) {
				t.Fatalf("%s: the key is in the answer: %s", r.path, body)
			}
			if rec := g.record(t); rec.Outcome != meter.OutcomeRateLimited || rec.Status != 429 || rec.ErrorMessage != e.Message {
				t.Fatalf("%s: record %+v", r.path, rec)
			}
		}
	})

	t.Run("engine timeout", func(t *testing.T) {
		release := make(chan struct{})
		up := startRawUpstream(t, func(c *scriptConn) { <-release })
		defer close(release)
		g := startGateway(t, Config{Upstream: up.URL(), FirstByteTimeout: 100 * time.Millisecond})
		for _, r := range errorShapeRoutes {
			status, h, body, err := post(t, g.URL()+r.path, r.body, nil)
			if err != nil || status != 504 {
				t.Fatalf("%s: status %d err %v", r.path, status, err)
			}
			e := decodeGatewayError(t, r.anthropic, h, body)
			want := gatewayError{"timeout", "upstream did not answer in time", "upstream_timeout"}
			if r.anthropic {
				want = gatewayError{"timeout_error", "upstream did not answer in time", ""}
			}
			if e != want {
				t.Fatalf("%s: %+v, want %+v", r.path, e, want)
			}
			if got := h.Get("X-Should-Retry"); got != "false" {
				t.Fatalf("%s: X-Should-Retry %q, want false", r.path, got)
			}
			// The record keeps what failed, not the client's message.
			route := "chat"
			if r.anthropic {
				route = "messages"
			}
			if rec := g.record(t); rec.Outcome != meter.OutcomeTimeout || rec.Status != 504 || rec.Route != route || rec.ErrorMessage == e.Message {
				t.Fatalf("%s: record %+v", r.path, rec)
			}
		}
	})

	t.Run("body too large", func(t *testing.T) {
		// Refused while fasthttp reads the body (errorHandler), after the
		// head: the route is known, and so is the shape.
		up := startRawUpstream(t, vllmUpstream(0))
		g := startGateway(t, Config{Upstream: up.URL(), MaxBodyBytes: 1000})
		for _, r := range errorShapeRoutes {
			big := strings.Replace(r.body, `"hi"`, `"`+strings.Repeat("a", 2000)+`"`, 1)
			status, h, body, err := post(t, g.URL()+r.path, big, nil)
			if err != nil || status != 413 {
				t.Fatalf("%s: status %d err %v", r.path, status, err)
			}
			e := decodeGatewayError(t, r.anthropic, h, body)
			want := gatewayError{"invalid_request_error", e.Message, "request_too_large"}
			if r.anthropic {
				want = gatewayError{"request_too_large", e.Message, ""}
			}
			if e != want || e.Message != "request body exceeds the gateway's limit of 1000 bytes" {
				t.Fatalf("%s: %+v, want %+v", r.path, e, want)
			}
			if rec := g.record(t); rec.Outcome != meter.OutcomeRejected || rec.Status != 413 {
				t.Fatalf("%s: record %+v", r.path, rec)
			}
		}
	})
}

// A request fasthttp could not parse has no route the gateway can trust:
// its answer stays in OpenAI's shape, whatever path its request line named.
func TestUnreadableRequestErrorShape(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g := startGateway(t, Config{Upstream: up.URL()})
	raw := "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: x1\r\n\r\n"
	status, h, body := rawAnswer(t, g.addr, raw)
	if status != 400 {
		t.Fatalf("status %d: %s", status, body)
	}
	if e := decodeGatewayError(t, false, h, body); e.Type != "invalid_request_error" || e.Code != "bad_request" {
		t.Fatalf("%+v", e)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeRejected || rec.Route != "other" {
		t.Fatalf("record %+v", rec)
	}
}

// rawAnswer sends raw bytes as a request and reads the answer with
// net/http's parser.
func rawAnswer(t *testing.T, addr, raw string) (int, http.Header, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

func TestAnthropicErrorType(t *testing.T) {
	for status, want := range map[int]string{
		400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
		404: "not_found_error", 405: "invalid_request_error", 408: "invalid_request_error",
		413: "request_too_large", 429: "rate_limit_error", 431: "invalid_request_error",
		500: "api_error", 502: "api_error", 503: "overloaded_error", 504: "timeout_error",
		505: "api_error", 529: "overloaded_error",
	} {
		if got := anthropicErrorType(status); got != want {
			t.Errorf("%d: %s, want %s", status, got, want)
		}
	}
}
