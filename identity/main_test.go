package identity

import (
	"testing"

	"go.uber.org/goleak"
)

// Every watcher must stop with its context.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
