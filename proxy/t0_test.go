package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// t0 is when the gateway read the request's headers: a client that sends
// its headers, then its body 300 ms later, waited those 300 ms for its first
// token, and TTFT says so (t0 was taken after the whole body was read). The
// gateway's overhead does not include the upload. The stamp is not
// forwarded.
func TestT0AtHeaders(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g := startGateway(t, Config{Upstream: up.URL()})
	conn, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	read := make(chan struct{}, 1)
	testHookHeaders = func() { read <- struct{}{} }
	defer func() { testHookHeaders = nil }()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(chatBody))
	<-read // t0 is stamped: the upload's time is counted from here on, however late the gateway read
	const upload = 300 * time.Millisecond
	time.Sleep(upload) // the client's slow upload
	sent := time.Now()
	io.WriteString(conn, chatBody)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != strings.Join(vllmEvents, "")+done {
		t.Fatalf("err %v body %q", err, body)
	}
	afterBody := time.Since(sent)
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeOK || rec.TTFT < upload || rec.E2E < upload {
		t.Fatalf("TTFT %v, E2E %v: the %v upload is missing (record %+v)", rec.TTFT, rec.E2E, upload, rec)
	}
	if rec.Overhead >= afterBody {
		t.Fatalf("overhead %v includes the upload", rec.Overhead)
	}
	if h := up.lastHeaders(); strings.Contains(strings.ToLower(h), "goodput-t0") {
		t.Fatalf("the t0 stamp was forwarded: %s", h)
	}
	t.Logf("TTFT %v with a %v upload; overhead %v", rec.TTFT, upload, rec.Overhead)
}
