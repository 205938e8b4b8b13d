package report

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/goodput/goodput/internal/remote"
	"github.com/goodput/goodput/internal/urlredact"
)

// DefaultWorst is the number of worst hours a report lists by default.
const DefaultWorst = 5

// Query says what a report is about.
type Query struct {
	// Tenant is the tenant's name, as the gateway labels it. Required.
	Tenant string
	// From and To bound the period. Required; From before To.
	From, To time.Time
	// Now is the current time, which relative boundaries were resolved
	// against. Zero: time.Now().
	Now time.Time
	// Worst is how many worst hours to list. Zero or negative: DefaultWorst.
	Worst int
	// Client makes the HTTP requests. Nil: a client with a 30 s timeout.
	Client *http.Client
}

// normalise checks q and fills its defaults.
func (q *Query) normalise() error {
	if q.Tenant == "" {
		return errors.New("no tenant given")
	}
	if q.From.IsZero() || q.To.IsZero() {
		return errors.New("the period needs both a start (from) and an end (to)")
	}
	if !q.From.Before(q.To) {
		return fmt.Errorf("the period's start %s is not before its end %s", stamp(q.From), stamp(q.To))
	}
	if q.Now.IsZero() {
		q.Now = time.Now()
	}
	// A little clock skew between this machine and the source is fine.
	if q.To.After(q.Now.Add(time.Minute)) {
		return fmt.Errorf("the period's end %s is in the future (now is %s)", stamp(q.To), stamp(q.Now))
	}
	if q.Worst <= 0 {
		q.Worst = DefaultWorst
	}
	if q.Client == nil {
		q.Client = &http.Client{Timeout: 30 * time.Second}
	}
	return nil
}

// BaseURL checks and normalises a source's base URL: "host:port" gets
// "http://", a trailing slash is removed, and the scheme must be http or
// https.
func BaseURL(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", errors.New("empty URL")
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", errors.New("not a URL (a password in it is not quoted)") // url's error quotes it whole
	}
	shown := urlredact.String(s) // a password in it is not quoted, however url.Parse split it
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%q: the scheme must be http or https", shown)
	}
	if u.Host == "" {
		return "", fmt.Errorf("%q has no host", shown)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q: give the base URL only, without a query or fragment", shown)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// maxBody bounds the response bodies read from a source (a variable so
// that a test need not send 64 MiB).
var maxBody = remote.MaxBody

// fetch does req and returns the body of a 2xx response. what names the
// source in errors.
func fetch(ctx context.Context, c *http.Client, req *http.Request, what string) ([]byte, int, error) {
	req = req.WithContext(ctx)
	resp, err := c.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("cannot reach %s at %s: %w", what, req.URL.Redacted(), unwrapURLError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(maxBody)+1))
	if err != nil {
		return nil, resp.StatusCode, fmt.Errorf("reading %s's answer to %s: %w", what, req.URL.Redacted(), err)
	}
	if len(body) > maxBody {
		return nil, resp.StatusCode, fmt.Errorf("%s's answer to %s is larger than %d MiB", what, req.URL.Redacted(), maxBody>>20)
	}
	return body, resp.StatusCode, nil
}

// unwrapURLError drops the *url.Error wrapper, whose message repeats the
// method and URL.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// snippet returns the start of a body for an error message, with what a
// terminal would act on escaped (remote.Snippet): the body is the server's.
func snippet(b []byte) string { return remote.Snippet(b) }

// stamp formats a time for messages and reports: UTC, to the second.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }
