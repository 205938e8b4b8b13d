package proxy

import (
	"testing"

	"github.com/goodput/goodput/meter"
	"github.com/valyala/fastjson"
)

// A chat body that asks for echo without messages (or with messages that
// are not an array) echoes nothing; reading it must not panic (it did:
// fastjson's Array on the nil of an absent member, a 500 recorded as the
// engine's error for a body the engine would answer itself).
func TestEchoWithoutMessages(t *testing.T) {
	for _, body := range []string{`{"model":"m","echo":true}`, `{"model":"m","echo":true,"messages":null}`, `{"echo":"yes","messages":{}}`} {
		var p fastjson.Parser
		v, err := p.Parse(body)
		if err != nil {
			t.Fatal(err)
		}
		if e, _ := echoOf(meter.APIChat, v, []byte(body)); e != meter.EchoNone {
			t.Errorf("%s: echo %d, want none", body, e)
		}
	}
}
