package bench

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goodput/goodput/internal/peek"
	"github.com/goodput/goodput/internal/remote"
	"github.com/goodput/goodput/meter"
	"github.com/valyala/fasthttp"
)

// client sends the benchmark's requests and meters their streams with the
// gateway's own framer, parsers and Meter, so that a figure here means
// what the gateway's does (docs/MEASURES.md), from the client's side.
//
// It keeps its own keep-alive connections (HTTP/1.1, as the gateway and
// engines serve), rather than a client library's pool, for two reasons:
// the clock point t_send is the moment the request is written to its
// connection, and nothing is left running after the run (no pool cleaner).
type client struct {
	addr    string      // host:port
	tls     *tls.Config // nil for http
	host    string      // Host header
	path    string      // path of the endpoint (with the base URL's prefix)
	model   string
	api     meter.API // the endpoint's API
	headers []Header
	auth    string   // "Bearer KEY", or empty
	secrets []string // the key and credential headers' values, redacted from error texts
	timeout time.Duration

	states sync.Pool // *streamState

	mu     sync.Mutex
	idle   []*conn // a stack: the warmest on top
	all    map[*conn]struct{}
	closed bool
}

// conn is one keep-alive connection to the server.
type conn struct {
	nc       net.Conn
	br       *bufio.Reader
	bw       *bufio.Writer
	usable   func() bool // peek: the server has not closed it (nil: unknown)
	lastUsed time.Time
}

// idleTTL: an idle connection older than this is closed rather than reused.
// uvicorn (vLLM, SGLang) closes idle keep-alive connections after 5 s; a
// request written on one it is closing would fail.
const idleTTL = 4 * time.Second

// streamState is what metering one stream needs; it is reused from request
// to request so that the per-event path allocates nothing.
type streamState struct {
	framer meter.SSEFramer
	parser meter.StreamParser
	m      meter.Meter
	info   meter.EventInfo
	ev     meter.Event
	rec    meter.Record
	req    fasthttp.Request
	resp   fasthttp.Response
	extra  []time.Duration // gaps past meter.MaxKeptGaps
	errBuf []byte
}

func newClient(o *Options) (*client, error) {
	u, err := url.Parse(o.BaseURL + o.Endpoint)
	if err != nil {
		return nil, err
	}
	c := &client{
		addr:    fasthttp.AddMissingPort(u.Host, u.Scheme == "https"),
		host:    u.Host,
		path:    u.EscapedPath(),
		model:   o.Model,
		api:     endpointAPI(o.Endpoint),
		headers: o.Headers,
		timeout: o.Timeout,
		all:     map[*conn]struct{}{},
	}
	if u.Scheme == "https" {
		c.tls = &tls.Config{ServerName: u.Hostname(), NextProtos: []string{"http/1.1"}}
	}
	if o.APIKey != "" {
		c.auth = "Bearer " + string(o.APIKey)
	}
	c.secrets = secretsOf(o)
	c.states.New = func() any { return new(streamState) }
	return c, nil
}

// get returns an idle connection the server has not closed, or dials one
// (dialed true).
func (c *client) get() (cn *conn, dialed bool, err error) {
	now := time.Now()
	c.mu.Lock()
	for n := len(c.idle); n > 0; n = len(c.idle) {
		cn = c.idle[n-1]
		c.idle[n-1] = nil
		c.idle = c.idle[:n-1]
		if now.Sub(cn.lastUsed) < idleTTL && cn.br.Buffered() == 0 && (cn.usable == nil || cn.usable()) {
			c.mu.Unlock()
			return cn, false, nil
		}
		c.mu.Unlock()
		c.discard(cn)
		c.mu.Lock()
	}
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, false, errStopped
	}
	cn, err = c.dial()
	return cn, err == nil, err
}

var errStopped = errors.New("the run was stopped")

func (c *client) dial() (*conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	nc, err := d.Dial("tcp", c.addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	cn := &conn{nc: nc, usable: peek.Idle(nc)}
	if c.tls != nil {
		tc := tls.Client(nc, c.tls)
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			nc.Close()
			return nil, err
		}
		_ = tc.SetDeadline(time.Time{})
		cn.nc = tc
	}
	cn.br = bufio.NewReaderSize(cn.nc, 16<<10)
	cn.bw = bufio.NewWriterSize(cn.nc, 16<<10)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		cn.nc.Close()
		return nil, errStopped
	}
	c.all[cn] = struct{}{}
	c.mu.Unlock()
	return cn, nil
}

// put keeps a connection whose exchange ended cleanly for the next request.
func (c *client) put(cn *conn) {
	_ = cn.nc.SetDeadline(time.Time{})
	cn.lastUsed = time.Now()
	c.mu.Lock()
	if !c.closed {
		c.idle = append(c.idle, cn)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.discard(cn)
}

func (c *client) discard(cn *conn) {
	c.mu.Lock()
	delete(c.all, cn)
	c.mu.Unlock()
	cn.nc.Close()
}

// close closes every connection: requests in flight end with an error.
func (c *client) close() {
	c.mu.Lock()
	c.closed = true
	conns := make([]*conn, 0, len(c.all))
	for cn := range c.all {
		conns = append(conns, cn)
	}
	c.idle = nil
	c.mu.Unlock()
	for _, cn := range conns {
		c.discard(cn)
	}
}

// messagesMaxTokens is the max_tokens of a Messages API request whose
// Request has no MaxTokens: Anthropic's API requires the field.
const messagesMaxTokens = 4096

// body is the JSON body of one request: streamed, usage asked for (the
// Responses and Messages APIs always send it), and (with a MaxTokens)
// exactly that many output tokens. The prompt is one user message (chat,
// Messages), the input text (Responses) or the prompt (completions). The
// output limit is max_tokens (chat, completions, Messages: there
// messagesMaxTokens without a MaxTokens) or max_output_tokens
// (Responses), with vLLM's ignore_eos, except on the Messages API, whose
// schema (Anthropic's, and vLLM's model of it) has no such field.
func (c *client) body(r Request) []byte {
	var b bytes.Buffer
	b.Grow(len(r.Prompt) + 200)
	b.WriteString(`{"model":`)
	writeJSONString(&b, c.model)
	switch c.api {
	case meter.APIChat, meter.APIMessages:
		b.WriteString(`,"messages":[{"role":"user","content":`)
		writeJSONString(&b, r.Prompt)
		b.WriteString(`}]`)
	case meter.APIResponses:
		b.WriteString(`,"input":`)
		writeJSONString(&b, r.Prompt)
	default:
		b.WriteString(`,"prompt":`)
		writeJSONString(&b, r.Prompt)
	}
	switch {
	case c.api == meter.APIMessages:
		n := r.MaxTokens
		if n <= 0 {
			n = messagesMaxTokens
		}
		b.WriteString(`,"max_tokens":`)
		b.WriteString(strconv.Itoa(n))
	case r.MaxTokens > 0:
		if c.api == meter.APIResponses {
			b.WriteString(`,"max_output_tokens":`)
		} else {
			b.WriteString(`,"max_tokens":`)
		}
		b.WriteString(strconv.Itoa(r.MaxTokens))
		b.WriteString(`,"ignore_eos":true`)
	}
	if c.api == meter.APIChat || c.api == meter.APICompletions {
		b.WriteString(`,"stream":true,"stream_options":{"include_usage":true}}`)
	} else {
		b.WriteString(`,"stream":true}`)
	}
	return b.Bytes()
}

func writeJSONString(b *bytes.Buffer, s string) {
	enc, _ := json.Marshal(s) // a string always encodes
	b.Write(enc)
}

// outcome is what one request measured. Durations count from Send.
type outcome struct {
	id      string
	planned time.Duration // planned send, from the run's start
	queue   time.Duration // wait for a --max-concurrency slot
	connect time.Duration // time to open a new connection (dialed), part of the lateness
	dialed  bool
	send    time.Time // t_send (see send)
	end     time.Time // the stream ended (or failed)

	ok     bool
	err    string
	status int
	// unsent: the run stopped before the request was written (notSent);
	// cut: it stopped while the request was in flight.
	unsent, cut bool

	isl, osl    int // Unknown when unknown
	usageSource meter.UsageSource
	ttft, e2e   time.Duration // Unknown without a token event
	itl         []time.Duration
	events      int
}

// send sends one request and meters its response into out.
//
// The clock point t_send (out.send) is taken once the request has a
// connection (an idle keep-alive one, or one just dialed: a handshake is
// not part of the figures, as it is not part of the gateway's), just
// before its bytes are written. Every event of the response is stamped when
// the read that brought its last byte returned, as the gateway stamps t_k;
// TTFT is the first token event − t_send, E2E the last token event −
// t_send, every gap between token events one ITL.
func (c *client) send(id string, body []byte, out *outcome) {
	st := c.states.Get().(*streamState)
	defer c.states.Put(st)
	out.id = id
	out.isl, out.osl, out.ttft, out.e2e = meter.Unknown, meter.Unknown, meter.Unknown, meter.Unknown

	req := &st.req
	req.Reset()
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI(c.path)
	req.Header.SetHost(c.host)
	req.Header.SetContentType("application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("User-Agent", "goodput-bench")
	for _, h := range c.headers {
		req.Header.Set(h.Key, h.Value)
	}
	req.Header.Set("X-Request-Id", id)
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	req.SetBodyRaw(body)

	asked := time.Now()
	cn, dialed, err := c.get()
	if errors.Is(err, errStopped) {
		notSent(out) // the run stopped before it had a connection
		return
	}
	if err != nil {
		out.send = time.Now()
		out.end = out.send
		out.err = c.redact("cannot connect: " + describeErr(err))
		return
	}
	out.send = time.Now()
	if dialed {
		out.dialed, out.connect = true, out.send.Sub(asked)
	}
	keep := false
	defer func() {
		if keep {
			c.put(cn)
		} else {
			c.discard(cn)
		}
	}()
	_ = cn.nc.SetDeadline(out.send.Add(c.timeout))
	st.m.Start(out.send)
	if err := req.Write(cn.bw); err == nil {
		err = cn.bw.Flush()
	}
	resp := &st.resp
	resp.Reset()
	resp.StreamBody = true
	resp.Header.SetNoDefaultContentType(true) // none read as none, not fasthttp's text/plain
	if err == nil {
		err = resp.Read(cn.br)
	}
	if err != nil {
		out.end = time.Now()
		out.err = c.redact("request failed: " + describeErr(err))
		return
	}
	defer resp.CloseBodyStream()
	out.status = resp.StatusCode()
	bodyStream := resp.BodyStream()
	if out.status != fasthttp.StatusOK {
		out.err = c.redact(fmt.Sprintf("HTTP %d: %s", out.status, readErrorBody(bodyStream, &st.errBuf)))
		if out.status == fasthttp.StatusNotFound && strings.Contains(c.path, "/v1/v1/") {
			// --model given, so /v1/models never said it.
			out.err += " (the base URL ends in /v1, which the API paths bring themselves: give --base-url without it)"
		}
		out.end = time.Now()
		return
	}
	ct := resp.Header.ContentType()
	if !streamType(ct) {
		out.err = c.redact(fmt.Sprintf("the response is not a stream (Content-Type %q): %s", ct, readErrorBody(bodyStream, &st.errBuf)))
		out.end = time.Now()
		return
	}
	st.framer.Reset()
	st.parser.Reset()
	st.extra = st.extra[:0]
	failure, clean := c.meterStream(st, bodyStream)
	out.end = time.Now()
	keep = clean && !resp.ConnectionClose()
	st.m.Finish(&st.rec)
	r := &st.rec
	out.isl, out.osl, out.usageSource = r.ISL, r.OSL, r.UsageSource
	out.ttft, out.e2e, out.events = r.TTFT, r.E2E, r.Events
	if n := len(r.ITL) + len(st.extra); n > 0 {
		out.itl = make([]time.Duration, 0, n)
		out.itl = append(out.itl, r.ITL...)
		out.itl = append(out.itl, st.extra...)
	}
	if failure == "" && r.Events <= 0 {
		failure = "the stream carried no token event"
		switch {
		case len(ct) == 0:
			failure += " (no Content-Type)"
		case !bytes.EqualFold(mediaType(ct), []byte("text/event-stream")):
			failure += fmt.Sprintf(" (Content-Type %q)", ct)
		}
	}
	if failure != "" {
		out.err = c.redact(failure)
		return
	}
	out.ok = true
}

// streamType reports whether a 200 under Content-Type ct is read as a
// stream: an event stream, and, as the gateway reads a streamed request's
// answer and vLLM's client reads any, one under another type (text/plain,
// none) that engines put on their SSE. JSON and a web page are answers of
// another kind, failed with what they say.
func streamType(ct []byte) bool {
	mt := mediaType(ct)
	return !bytes.EqualFold(mt, []byte("application/json")) && !bytes.EqualFold(mt, []byte("text/html")) &&
		!(len(mt) > 5 && bytes.EqualFold(mt[len(mt)-5:], []byte("+json"))) // application/problem+json
}

// mediaType is ct without its parameters (media types are
// case-insensitive: compare with bytes.EqualFold).
func mediaType(ct []byte) []byte {
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return bytes.TrimSpace(ct)
}

// meterStream reads the stream to its end, stamping and metering each
// event; it returns why the request failed ("" when it did not) and
// whether the body was read to its clean end (the connection can be
// reused).
func (c *client) meterStream(st *streamState, body io.Reader) (failure string, clean bool) {
	fail := func(s string) {
		if failure == "" {
			failure = s
		}
	}
	var prev time.Time // the last read that brought bytes: an Early event's (meter.Event)
	for {
		n, rerr := st.framer.FillFrom(body)
		now := time.Now()
		if n > 0 || rerr == io.EOF {
			for {
				var ok bool
				var ferr error
				if rerr == io.EOF {
					ok, ferr = st.framer.Flush(&st.ev)
				} else {
					ok, ferr = st.framer.Next(&st.ev)
				}
				if ferr != nil {
					fail("an event over 1 MiB")
					return failure, false
				}
				if !ok {
					break
				}
				if perr := st.parser.Parse(c.api, &st.ev, &st.info); perr != nil {
					fail("malformed event in the stream")
					continue
				}
				t := now
				if st.ev.Early && !prev.IsZero() {
					t = prev
				}
				st.m.Observe(&st.info, t)
				if gap, ok := st.m.SummarisedGap(); ok && st.info.Token {
					st.extra = append(st.extra, gap)
				}
			}
		}
		if n > 0 {
			prev = now
		}
		if rerr == io.EOF {
			clean = true
			break
		}
		if rerr != nil {
			fail("stream broken: " + describeErr(rerr))
			break
		}
	}
	if bad, msg := st.m.UpstreamError(); bad {
		m := string(msg)
		if m == "" {
			m = "(no message)"
		}
		fail("error event in the stream: " + remote.Printable(m))
	}
	if clean && c.api.EndsWithEvent() && !st.m.Done() {
		fail("the stream ended without its final event")
	}
	if clean && (c.api == meter.APIChat || c.api == meter.APICompletions) && st.m.TokenEvents() > 0 && !st.m.Done() && !st.m.Finished() {
		fail("the stream ended without a finish_reason or [DONE]")
	}
	return failure, clean
}

// readErrorBody reads at most 512 bytes of an error response, on one line,
// with what a terminal would act on escaped (remote.Printable): bench
// prints it.
func readErrorBody(r io.Reader, buf *[]byte) string {
	if r == nil {
		return "(no body)"
	}
	b := (*buf)[:0]
	if cap(b) < 512 {
		b = make([]byte, 0, 512)
	}
	n, _ := io.ReadFull(r, b[:512])
	*buf = b
	s := strings.Join(strings.Fields(string(b[:n])), " ")
	if s == "" {
		return "(no body)"
	}
	return remote.Printable(s)
}

// credentialHeaders are the headers whose values are credentials.
var credentialHeaders = map[string]bool{
	"authorization": true, "proxy-authorization": true, "x-api-key": true, "api-key": true,
	"cookie": true,
}

// secretsOf lists what must never be printed: the API key, and the values
// of credential headers given with --header (whole, and without an
// authentication scheme such as "Bearer").
func secretsOf(o *Options) []string {
	var out []string
	add := func(v string) {
		if v = strings.TrimSpace(v); len(v) >= 4 {
			out = append(out, v)
		}
	}
	add(string(o.APIKey))
	for _, h := range o.Headers {
		if credentialHeaders[strings.ToLower(h.Key)] {
			add(h.Value)
			if _, cred, ok := strings.Cut(strings.TrimSpace(h.Value), " "); ok {
				add(cred)
			}
		}
	}
	// The longest first, so that a value containing another goes whole.
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// redact removes every secret from a text that may quote one (an error
// body echoing a header).
func (c *client) redact(s string) string {
	for _, k := range c.secrets {
		if strings.Contains(s, k) {
			s = strings.ReplaceAll(s, k, "[redacted]")
		}
	}
	return s
}

func describeErr(err error) string {
	var ne net.Error
	if errors.Is(err, fasthttp.ErrTimeout) || (errors.As(err, &ne) && ne.Timeout()) {
		return "timeout"
	}
	return err.Error()
}

// reachable opens (and closes) one TCP connection to the server, so that a
// wrong address is one clear error rather than every request failing.
func reachable(o *Options) error {
	u, err := url.Parse(o.BaseURL)
	if err != nil {
		return err
	}
	addr := fasthttp.AddMissingPort(u.Host, u.Scheme == "https")
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return fmt.Errorf("cannot reach the server at %s: %v", o.BaseURL, err)
	}
	nc.Close()
	return nil
}

// fetchModel asks /v1/models for the first model served.
func fetchModel(o *Options) (string, error) {
	modelsURL := o.BaseURL + "/v1/models"
	redact := (&client{secrets: secretsOf(o)}).redact
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	limit := 30 * time.Second
	if o.Timeout > 0 && o.Timeout < limit {
		limit = o.Timeout // a request's own limit, when shorter
	}
	hc := &http.Client{Transport: transport, Timeout: limit}
	req, err := http.NewRequest(http.MethodGet, modelsURL, nil)
	if err != nil {
		return "", err
	}
	for _, h := range o.Headers {
		req.Header.Set(h.Key, h.Value)
	}
	if o.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+string(o.APIKey))
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", fmt.Errorf("cannot reach %s: %s", modelsURL, redact(describeErr(err)))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return "", fmt.Errorf("%s: %s", modelsURL, redact(describeErr(err)))
	}
	if resp.StatusCode != http.StatusOK {
		var buf []byte
		return "", fmt.Errorf("%s answered HTTP %d: %s (%s)", modelsURL, resp.StatusCode,
			redact(readErrorBody(bytes.NewReader(body), &buf)), modelsHint(o, resp.StatusCode))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return "", fmt.Errorf("%s: not a model list (%v); %s", modelsURL, err, modelsHint(o, resp.StatusCode))
	}
	if len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", fmt.Errorf("%s lists no model; give --model", modelsURL)
	}
	return list.Data[0].ID, nil
}

// modelsHint says what to do when /v1/models did not give a model, by
// cause: a refused or missing key (401, 403), a base URL ending in /v1
// (the API paths bring their own), else --model.
func modelsHint(o *Options, status int) string {
	var hints []string
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		keyed := o.APIKey != ""
		for _, h := range o.Headers {
			keyed = keyed || credentialHeaders[strings.ToLower(h.Key)]
		}
		if !keyed {
			hints = append(hints, "the server wants a key: give --api-key KEY or set OPENAI_API_KEY, a goodput gateway's key too")
		} else {
			hints = append(hints, "the server refused the key given by --api-key, OPENAI_API_KEY or a --header")
		}
	}
	if u, err := url.Parse(o.BaseURL); err == nil && strings.HasSuffix(strings.TrimRight(u.Path, "/"), "/v1") {
		u.Path = strings.TrimSuffix(strings.TrimRight(u.Path, "/"), "/v1")
		hints = append(hints, "the base URL ends in /v1, which the API paths bring themselves: give --base-url "+u.String())
	}
	if hints == nil {
		return "give --model"
	}
	return strings.Join(hints, "; ")
}
