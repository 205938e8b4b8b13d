package meter

import "testing"

// Ollama's answer to a load or an unload (one JSON object: done, empty,
// no count, done_reason "load" or "unload") is read as such; an answer
// done and empty for another reason, or with a count, is not.
func TestOllamaModelOpBody(t *testing.T) {
	for _, c := range []struct {
		api  API
		body string
		op   ModelOp
	}{
		{APIOllamaGenerate, `{"model":"llama3","created_at":"2025-09-01T10:00:00Z","response":"","done":true,"done_reason":"load"}`, ModelOpLoad},
		{APIOllamaGenerate, `{"model":"llama3","created_at":"2025-09-01T10:00:00Z","response":"","done":true,"done_reason":"unload"}`, ModelOpUnload},
		{APIOllamaChat, `{"model":"g","created_at":"2025-09-01T10:00:00Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"load"}`, ModelOpLoad},
		{APIOllamaChat, `{"model":"g","created_at":"2025-09-01T10:00:00Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"unload"}`, ModelOpUnload},
		{APIOllamaGenerate, `{"model":"llama3","response":"","done":true,"done_reason":"stop"}`, ModelOpNone},
		{APIOllamaGenerate, `{"model":"llama3","response":"hi","done":true,"done_reason":"load"}`, ModelOpNone},
		{APIOllamaGenerate, `{"model":"llama3","response":"","done":true,"done_reason":"load","eval_count":3}`, ModelOpNone},
		{APIOllamaGenerate, `{"model":"llama3","response":"","done":false,"done_reason":"load"}`, ModelOpNone},
		{APIOllamaGenerate, `{"error":"model 'x' not found","done":true,"done_reason":"load"}`, ModelOpNone},
		{APICompletions, `{"model":"llama3","response":"","done":true,"done_reason":"load"}`, ModelOpNone},
	} {
		var info EventInfo
		err := ParseResponseBody(c.api, []byte(c.body), 1, &info)
		if err != nil && c.op != ModelOpNone {
			t.Fatalf("%s: %v", c.body, err)
		}
		if info.ModelOp != c.op {
			t.Errorf("%v %s: model op %q, want %q", c.api, c.body, info.ModelOp, c.op)
		}
	}
}
