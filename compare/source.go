package compare

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/goodput/goodput/internal/remote"
	"github.com/goodput/goodput/internal/urlredact"
)

// RealOptions says how to read the real side.
type RealOptions struct {
	Filter
	// Window is the span of traffic to read from Prometheus or a live
	// profile (0: a profile URL's own ?window=, else 1h; a profile serves
	// 5m, 1h and 24h).
	Window time.Duration
	// Step is Prometheus's sampling step (PromOptions.Step).
	Step   time.Duration
	Now    time.Time
	Client *http.Client
}

// maxDoc bounds a profile document or a benchmark result read whole.
const maxDoc = 256 << 20

// ReadReal reads the real side from src, whose kind it tells from the
// argument itself: an http(s) URL whose path ends in /admin/api/profile
// is a gateway's live profile; any other URL is a Prometheus server; a
// file is a profile when it is one JSON document of format
// goodput.profile, and a request log when its first line is a request
// record.
func ReadReal(ctx context.Context, src string, o RealOptions) (*Side, error) {
	if o.Client == nil {
		o.Client = &http.Client{Timeout: time.Minute}
	}
	isURL := strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://")
	if o.RequestIDPrefix != "" && isURL {
		return nil, inputErr("%s: only a request log has request ids to select (--request-id-prefix)", src)
	}
	if u, err := url.Parse(src); isURL && err == nil && o.Window <= 0 && strings.HasSuffix(strings.TrimRight(u.Path, "/"), "/admin/api/profile") {
		// A profile URL's own ?window= holds unless --window is given.
		if w := u.Query().Get("window"); w != "" {
			for d, name := range profileWindows {
				if name == w {
					o.Window = d
				}
			}
			if o.Window <= 0 {
				return nil, inputErr("%s: a gateway's profile serves 5m, 1h or 24h windows, not window=%s", urlredact.String(src), w)
			}
		}
	}
	if o.Window <= 0 {
		o.Window = time.Hour
	}
	if isURL {
		u, err := url.Parse(src)
		if err != nil || u.Host == "" {
			return nil, inputErr("%q is not a URL", urlredact.String(src))
		}
		if strings.HasSuffix(strings.TrimRight(u.Path, "/"), "/admin/api/profile") {
			return readProfileURL(ctx, u, o)
		}
		if u.RawQuery != "" || u.Fragment != "" {
			return nil, inputErr("%s: give a Prometheus server's base URL without a query (or a gateway's …/admin/api/profile)", urlredact.String(src))
		}
		return ReadPrometheus(ctx, src, PromOptions{Filter: o.Filter, Window: o.Window, Step: o.Step, Now: o.Now, Client: o.Client})
	}
	f, err := os.Open(src)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, inputErr("%s: no such file (the real side is a request log or profile file, a Prometheus URL, or a gateway's …/admin/api/profile URL)", src)
		}
		return nil, inputErr("%v", err)
	}
	defer f.Close()
	// The first line that is not blank, whole (up to maxLogLine: a record
	// whose model a client made a megabyte long is one line), tells a
	// request log from a profile; what is read is read again after it.
	fr := bufio.NewReaderSize(f, 1<<20)
	var read, t []byte
	for len(read) <= maxLogLine {
		chunk, err := fr.ReadSlice('\n')
		read = append(read, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil && err != io.EOF {
			// A directory (read: is a directory), a device that fails:
			// not an empty file, as it was called.
			return nil, inputErr("%s: %v", src, err)
		}
		if err != nil || len(bytes.Trim(read, "\xef\xbb\xbf \t\r\n")) > 0 {
			break
		}
	}
	read = bytes.TrimPrefix(read, []byte("\xef\xbb\xbf")) // a UTF-8 BOM (an editor's) is no part of the JSON
	t = bytes.TrimSpace(read)
	br := bufio.NewReader(io.MultiReader(bytes.NewReader(read), fr))
	if len(t) == 0 {
		return nil, inputErr("%s: empty file", src)
	}
	if t[0] != '{' {
		return nil, inputErr("%s: not JSON: a request log (JSON Lines) or a goodput profile starts with '{'", src)
	}
	line := t
	var first map[string]json.RawMessage
	if json.Unmarshal(line, &first) == nil {
		_, hasFormat := first["format"]
		_, hasRoute := first["route"]
		_, hasOutcome := first["outcome"]
		switch {
		case hasFormat:
			if o.RequestIDPrefix != "" {
				return nil, inputErr("%s: a profile has no request ids to select (--request-id-prefix needs a request log)", src)
			}
			data, err := readAll(src, br)
			if err != nil {
				return nil, err
			}
			return ReadProfile(src, data, o.Filter)
		case hasRoute || hasOutcome:
			return ReadRequestLog(src, br, o.Filter)
		}
		if _, ok := first["completed"]; ok {
			return nil, inputErr("%s: a benchmark result, not real traffic (give it as --bench)", src)
		}
		return nil, inputErr("%s: neither a request log record nor a goodput profile on line 1", src)
	}
	// A document over several lines: a (pretty-printed) profile.
	data, err := readAll(src, br)
	if err != nil {
		return nil, err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, inputErr("%s: %s", src, jsonErr(err, data, 0))
	}
	if _, ok := doc["format"]; ok {
		return ReadProfile(src, data, o.Filter)
	}
	if _, ok := doc["completed"]; ok {
		return nil, inputErr("%s: a benchmark result, not real traffic (give it as --bench)", src)
	}
	return nil, inputErr("%s: a JSON document that is not a goodput profile (no \"format\")", src)
}

func readAll(name string, r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxDoc+1))
	if err != nil {
		return nil, inputErr("%s: %v", name, err)
	}
	if len(data) > maxDoc {
		return nil, inputErr("%s: larger than %d MiB", name, maxDoc>>20)
	}
	return data, nil
}

// profileWindows are the windows a live profile serves.
var profileWindows = map[time.Duration]string{5 * time.Minute: "5m", time.Hour: "1h", 24 * time.Hour: "24h"}

func readProfileURL(ctx context.Context, u *url.URL, o RealOptions) (*Side, error) {
	w, ok := profileWindows[o.Window]
	if !ok {
		return nil, inputErr("a gateway's profile serves 5m, 1h or 24h windows, not --window %s", o.Window)
	}
	q := u.Query()
	q.Set("window", w)
	if o.Tenant != "" {
		q.Set("tenant", o.Tenant)
	}
	u2 := *u
	u2.RawQuery = q.Encode()
	shown := u2.Redacted()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u2.String(), nil)
	if err != nil {
		return nil, inputErr("%s: %v", shown, err)
	}
	resp, err := o.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, inputErr("cannot reach the gateway at %s: %v", shown, err)
	}
	defer resp.Body.Close()
	data, err := readAll(shown, resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, inputErr("%s answered HTTP %d: %s", shown, resp.StatusCode, remote.Snippet(data))
	}
	return ReadProfile(shown, data, o.Filter)
}

// ReadBenchFile reads a benchmark result file (see ReadBench).
func ReadBenchFile(name string, o BenchOptions) (*Side, error) {
	f, err := os.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, inputErr("%s: no such file", name)
		}
		return nil, inputErr("%v", err)
	}
	defer f.Close()
	data, err := readAll(name, f)
	if err != nil {
		return nil, err
	}
	return ReadBench(name, data, o)
}
