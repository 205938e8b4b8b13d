package bench

import (
	"testing"

	"github.com/goodput/goodput/meter"
)

func TestNormalizeEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"": EndpointCompletions, "completions": EndpointCompletions, "chat": EndpointChat,
		"responses": EndpointResponses, "/v1/responses": EndpointResponses,
		"messages": EndpointMessages, " /v1/messages ": EndpointMessages,
	} {
		if got, err := NormalizeEndpoint(in); err != nil || got != want {
			t.Errorf("NormalizeEndpoint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"/v1/responses/abc", "/v1/messages/count_tokens", "anthropic"} {
		if _, err := NormalizeEndpoint(bad); err == nil {
			t.Errorf("NormalizeEndpoint(%q) accepted", bad)
		}
	}
}

// Each API gets its own request body: its prompt field, its output limit
// and, where its schema has them, ignore_eos and stream_options.
func TestRequestBodies(t *testing.T) {
	for _, c := range []struct {
		api        meter.API
		max        int
		want       string
		backend    string
		endpointOf string
	}{
		{meter.APIChat, 8, `{"model":"m","messages":[{"role":"user","content":"a \"b\""}],"max_tokens":8,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`, "openai-chat", EndpointChat},
		{meter.APICompletions, 0, `{"model":"m","prompt":"a \"b\"","stream":true,"stream_options":{"include_usage":true}}`, "openai", EndpointCompletions},
		{meter.APIResponses, 8, `{"model":"m","input":"a \"b\"","max_output_tokens":8,"ignore_eos":true,"stream":true}`, "openai-responses", EndpointResponses},
		{meter.APIResponses, 0, `{"model":"m","input":"a \"b\"","stream":true}`, "openai-responses", EndpointResponses},
		{meter.APIMessages, 8, `{"model":"m","messages":[{"role":"user","content":"a \"b\""}],"max_tokens":8,"stream":true}`, "anthropic-messages", EndpointMessages},
		{meter.APIMessages, 0, `{"model":"m","messages":[{"role":"user","content":"a \"b\""}],"max_tokens":4096,"stream":true}`, "anthropic-messages", EndpointMessages},
	} {
		c2 := &client{model: "m", api: c.api}
		if got := string(c2.body(Request{Prompt: `a "b"`, MaxTokens: c.max})); got != c.want {
			t.Errorf("%v max %d:\n%s\nwant\n%s", c.api, c.max, got, c.want)
		}
		if endpointAPI(c.endpointOf) != c.api || backendName(c.endpointOf) != c.backend {
			t.Errorf("%s: API %v backend %q", c.endpointOf, endpointAPI(c.endpointOf), backendName(c.endpointOf))
		}
	}
}
