package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/goodput/goodput/meter"
	"github.com/valyala/fastjson"
)

// wideMembers returns n small members, "a0":0,"a1":0,...: an object of
// them costs fastjson some 140 bytes for each byte.
func wideMembers(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"a%d":0`, i)
	}
	return b.String()
}

// A large body made of many small members (at its top level, in
// stream_options, in Ollama's options, in the last message or its content
// parts) or of many small messages is read without building them: it
// costs the gateway at most a few times its size (1 MiB of them cost 57 to
// 65 times its size), and reads as a whole one does (FuzzShallowRequest).
func TestWideBodyParsedShallow(t *testing.T) {
	wide := wideMembers(100_000) // about 1 MiB
	for _, c := range []struct {
		name, body string
		echo       bool
	}{
		{"top level", `{"model":"m","stream":true,"max_tokens":7,` + wide + `,"messages":[{"role":"user","content":"hi"}]}`, false},
		{"stream_options", `{"model":"m","stream":true,"max_tokens":7,"stream_options":{"include_usage":false,` + wide + `}}`, false},
		{"options", `{"model":"m","max_tokens":7,"options":{"num_predict":7,` + wide + `}}`, false},
		{"messages", `{"model":"m","stream":true,"max_tokens":7,"echo":true,"messages":[` + strings.Repeat(`{"role":"user","content":"hi"},`, 40_000) + `{"role":"assistant","content":"x"}]}`, true},
		{"last message", `{"model":"m","stream":true,"max_tokens":7,"echo":true,"messages":[{"role":"assistant","content":"x",` + wide + `}]}`, true},
		{"content part", `{"model":"m","stream":true,"max_tokens":7,"echo":true,"messages":[{"role":"assistant","content":[{"type":"text","text":"x",` + wide + `}]}]}`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := []byte(c.body)
			var (
				p           fastjson.Parser
				ri, ollama  reqInfo
				dup, folded string
			)
			alloc, took := allocatedBy(func() {
				var v *fastjson.Value
				ri, v = parseRequest(&p, body)
				dup, folded = duplicateKey(v), foldedKey(v)
				ollama = ri
				nativeRequest(meter.APIOllamaChat, v, &ollama)
				ri.echo, _ = echoOf(meter.APIChat, v, body)
			})
			t.Logf("%d-byte body: %d bytes allocated (%.2f times its size), %v", len(body), alloc, float64(alloc)/float64(len(body)), took)
			if alloc > 3*uint64(len(body)) {
				t.Errorf("reading a %d-byte body allocated %d bytes (%.0f times its size)", len(body), alloc, float64(alloc)/float64(len(body)))
			}
			if !ri.valid || ri.model != "m" || ri.maxTokens != 7 || dup != "" || folded != "" || c.echo != (ri.echo == meter.EchoChunk) ||
				c.name == "options" && ollama.maxTokens != 7 {
				t.Fatalf("read %+v, duplicate %q %q", ri, dup, folded)
			}
		})
	}
}

// Of a large Ollama body, foldedKey names the member whose name folds to
// model, stream or options (not spelled so) also when a pair of other
// names that fold alike, or a duplicate, comes before it: the copy keeps
// that member wherever it is, as it keeps the pair.
func TestWideBodyFoldedReadName(t *testing.T) {
	pad := `"pad":"` + strings.Repeat("x", 70<<10) + `"`
	for _, b := range []string{
		`{"aa":1,"AA":2,"Model":"x","model":"m",` + pad + `}`,
		`{"aa":1,"AA":2,"STREAM":true,"model":"m",` + pad + `}`,
		`{"aa":1,"aa":2,"Options":{},"model":"m",` + pad + `}`,
	} {
		read := func(from, keep int) string {
			defer func(f, k int) { shallowFrom, keepWhole = f, k }(shallowFrom, keepWhole)
			shallowFrom, keepWhole = from, keep
			var p fastjson.Parser
			_, v := parseRequest(&p, []byte(b))
			return fmt.Sprintf("%q %q", duplicateKey(v), foldedKey(v))
		}
		if full, shallow := read(1<<30, 1<<30), read(64<<10, 4<<10); full != shallow {
			t.Errorf("%.30s: full %s, shallow %s", b, full, shallow)
		}
	}
}

// A large body with a member named "" twice before a duplicate the
// gateway reads (two models: the gateway charges the first, the engine
// runs the last) is refused as the small one is: duplicateKey passes over
// a repeated empty name (the gateway reads none) and finds the model; the
// copy kept only the empty pair, so the body passed.
func TestWideBodyEmptyNameDuplicate(t *testing.T) {
	pad := `"pad":"` + strings.Repeat("x", 70<<10) + `"`
	for _, b := range []string{
		`{"":0,"":1,"model":"cheap","model":"dear",` + pad + `}`,
		`{"":0,"x":1,"":2,"stream_options":{"include_usage":false},"stream_options":{"include_usage":true},` + pad + `}`,
		`{"":0,"":1,"aa":1,"AA":2,` + pad + `}`,
		`{"stream_options":{"":0,"":1,"include_usage":false,"include_usage":true,` + pad + `}}`,
		`{"options":{"":0,"":1,"num_predict":1,"num_predict":900000,` + pad + `}}`,
	} {
		read := func(from, keep int) string {
			defer func(f, k int) { shallowFrom, keepWhole = f, k }(shallowFrom, keepWhole)
			shallowFrom, keepWhole = from, keep
			var p fastjson.Parser
			_, v := parseRequest(&p, []byte(b))
			return fmt.Sprintf("%q %q", duplicateKey(v), foldedKey(v))
		}
		if full, shallow := read(1<<30, 1<<30), read(64<<10, 4<<10); full != shallow {
			t.Errorf("%.40s: full %s, shallow %s", b, full, shallow)
		}
	}
}
