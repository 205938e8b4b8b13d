package proxy

import (
	"bufio"
	"bytes"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"testing"

	"github.com/goodput/goodput/meter"
)

// A multipart/form-data upload (an audio transcription, a file for a
// batch) reaches the engine byte for byte: fasthttp parses such a body into
// a form unless told not to, and its Body then rebuilt the form, in an
// order of its own, with headers of its own.
func TestMultipartBodyPassesUnchanged(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		tp := textproto.NewReader(br)
		if _, err := tp.ReadLine(); err != nil {
			return
		}
		h, err := tp.ReadMIMEHeader()
		if err != nil {
			return
		}
		n, _ := strconv.Atoi(h.Get("Content-Length"))
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return
		}
		got <- b
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"text\":\"hi\"}")
	}()
	g := startGateway(t, Config{Upstream: "http://" + ln.Addr().String()})

	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	for _, f := range []struct{ k, v string }{{"model", "whisper-1"}, {"language", "en"}, {"temperature", "0"}, {"prompt", "z"}, {"a", "1"}} {
		_ = w.WriteField(f.k, f.v)
	}
	fh := make(textproto.MIMEHeader)
	fh.Set("Content-Disposition", `form-data; name="file"; filename="a.wav"`)
	fh.Set("Content-Type", "audio/wav")
	fw, _ := w.CreatePart(fh)
	fw.Write([]byte("RIFF\x00\x01\x02WAVEfmt "))
	w.Close()
	sent := body.Bytes()

	req, _ := http.NewRequest("POST", g.URL()+"/v1/audio/transcriptions", bytes.NewReader(sent))
	req.Header.Set("Content-Type", w.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	drainOK(t, resp, err)
	b := <-got
	if !bytes.Equal(b, sent) {
		t.Fatalf("the engine got %d bytes:\n%q\nthe client sent %d:\n%q", len(b), b, len(sent), sent)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK || !strings.Contains(rec.Route, "other") {
		t.Fatalf("record %+v", rec)
	}
}
