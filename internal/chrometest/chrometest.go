// Package chrometest runs a private headless Chromium for tests: the
// distribution's `chromium` binary (Debian package chromium), driven over
// the DevTools protocol (github.com/chromedp/chromedp), with an empty
// profile in the test's temporary folder and nothing that reaches beyond
// the machine: no background networking, component updates, sync or QUIC,
// and host names other than localhost resolve to nothing.
package chrometest

import (
	"context"
	"github.com/goodput/goodput/internal/testenv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// Binary returns the path of the browser. Without one it skips the test,
// except in CI (CI set), where it fails: CI must run these tests in a real
// browser.
func Binary(t testing.TB) string {
	t.Helper()
	return testenv.Binary(t, "chromium", "chromium", "chromium-browser")
}

// Start starts the browser with a window of width × height and returns a
// context for chromedp.Run and chromedp.Do on its first tab. The browser is stopped (and
// its output logged, if the test failed) when the test ends.
func Start(t testing.TB, width, height int) context.Context {
	t.Helper()
	bin := Binary(t)
	profile := t.TempDir() // removed after the browser has exited (cleanups run last first)
	out := &testenv.SyncBuffer{}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Headless,
		chromedp.NoSandbox, // root, in a container
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(width, height),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1"),
		chromedp.CombinedOutput(out),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() {
		cancel()
		cancelAlloc() // waits for the browser to exit
		if t.Failed() {
			t.Logf("chromium output:\n%s", withoutDBus(out.String()))
		}
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("chromium: %v\n%s", err, out.String())
	}
	return ctx
}

// withoutDBus is the output less the lines of the browser's complaints that
// it finds no D-Bus (there is none in a container, and it needs none).
func withoutDBus(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if !strings.Contains(l, ":ERROR:dbus/") {
			keep = append(keep, l)
		}
	}
	return strings.TrimSpace(strings.Join(keep, "\n"))
}
