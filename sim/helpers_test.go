package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// fasthttp refreshes its Date header from one process-wide goroutine.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	)
}

// harness is a simulator served on a loopback port with its own HTTP client.
type harness struct {
	t      *testing.T
	s      *Server
	base   string
	client *http.Client
}

func start(t *testing.T, cfg Config) *harness {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startOn(t, cfg, ln)
}

func startOn(t *testing.T, cfg Config, ln net.Listener) *harness {
	t.Helper()
	s := New(cfg)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	tr := &http.Transport{DisableCompression: true}
	h := &harness{t: t, s: s, base: "http://" + ln.Addr().String(), client: &http.Client{Transport: tr}}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		if err := s.Shutdown(); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return h
}

// do sends a request; hdr holds alternating header names and values.
func (h *harness) do(method, path, body string, hdr ...string) *http.Response {
	h.t.Helper()
	return h.doCtx(context.Background(), method, path, body, hdr...)
}

func (h *harness) doCtx(ctx context.Context, method, path, body string, hdr ...string) *http.Response {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.base+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// post sends a POST and returns the status, the whole body and the
// response (body already closed).
func (h *harness) post(path, body string, hdr ...string) (int, string, *http.Response) {
	h.t.Helper()
	resp := h.do("POST", path, body, hdr...)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("POST %s: reading body: %v", path, err)
	}
	return resp.StatusCode, string(b), resp
}

// waitTrace waits (up to 5 s) for the trace of id.
func (h *harness) waitTrace(id string) Trace {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tr, err := h.s.WaitTrace(ctx, id)
	if err != nil {
		h.t.Fatalf("WaitTrace(%q): %v", id, err)
	}
	return tr
}

// events splits an SSE body into its events (without the trailing blank
// line), failing if the body does not end with one.
func events(t *testing.T, body string) []string {
	t.Helper()
	if body == "" {
		return nil
	}
	if !strings.HasSuffix(body, "\n\n") {
		t.Fatalf("body does not end with a blank line: %q", tail(body))
	}
	return strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n")
}

func tail(s string) string {
	if len(s) > 120 {
		return "…" + s[len(s)-120:]
	}
	return s
}

// readEvents reads n SSE events from r.
func readEvents(t *testing.T, r *bufio.Reader, n int) []string {
	t.Helper()
	var out []string
	for len(out) < n {
		var ev bytes.Buffer
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("reading event %d: %v (have %q)", len(out)+1, err, ev.String())
			}
			if line == "\n" {
				break
			}
			ev.WriteString(line)
		}
		out = append(out, strings.TrimSuffix(ev.String(), "\n"))
	}
	return out
}

// dataJSON returns the JSON of a "data: " event, decoded.
func dataJSON(t *testing.T, ev string) map[string]any {
	t.Helper()
	js, ok := strings.CutPrefix(ev, "data: ")
	if !ok {
		t.Fatalf("event does not start with 'data: ': %q", ev)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(js), &m); err != nil {
		t.Fatalf("event is not valid JSON: %v: %q", err, ev)
	}
	return m
}

// keyPaths lists the object keys of a JSON document in document order, as
// dotted paths ("choices[].delta.content"), each path once.
func keyPaths(t *testing.T, js string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(js))
	var out []string
	seen := map[string]bool{}
	var walk func(prefix string) error
	walk = func(prefix string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		d, ok := tok.(json.Delim)
		if !ok {
			return nil
		}
		switch d {
		case '{':
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return err
				}
				k := kt.(string)
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				if !seen[p] {
					seen[p] = true
					out = append(out, p)
				}
				if err := walk(p); err != nil {
					return err
				}
			}
		case '[':
			for dec.More() {
				if err := walk(prefix + "[]"); err != nil {
					return err
				}
			}
		}
		_, err = dec.Token() // closing delimiter
		return err
	}
	if err := walk(""); err != nil {
		t.Fatalf("keyPaths: %v in %q", err, js)
	}
	return out
}

// fixture reads a recorded stream from the repository's testdata/streams.
func fixture(t *testing.T, rel string) string {
	t.Helper()
	dir := filepath.Join("..", "testdata", "streams")
	b, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		t.Fatalf("reading fixture: %v", err)
	}
	return string(b)
}

// isNetErr reports whether err is the kind of error a client gets from a
// connection that was reset or closed mid-body.
func isNetErr(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "reset") ||
		strings.Contains(err.Error(), "EOF")
}

// newReq builds a POST to /v1/chat/completions.
func newReq(h *harness, body string, hdr ...string) (*http.Request, error) {
	req, err := http.NewRequest("POST", h.base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return req, nil
}

// ChatPromptTokens is the tests' oracle of chatPrompt: the prompt token
// count (ISL) the simulator reports for a chat request whose messages carry
// the given texts, one argument per message: the sum over messages of
// MessageOverheadTokens + Words(text). A message whose content is an array
// of parts counts the words of all its text parts; a message without text
// (null content) counts the overhead only.
func ChatPromptTokens(texts ...string) int {
	n := 0
	for _, t := range texts {
		n += MessageOverheadTokens + Words(t)
	}
	return n
}

// OutputText is the tests' oracle of a response's text: the concatenated
// text of output tokens 1..n, the content of a complete response of n tokens.
func OutputText(seed int64, n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		b.WriteString(TokenText(seed, i))
	}
	return b.String()
}
