// Package chrometest runs a private headless Chromium for tests: the
// distribution's `chromium` binary (Debian package chromium), driven over
// the DevTools protocol (github.com/chromedp/chromedp), with an empty
// profile in the test's temporary folder and nothing that reaches beyond
// the machine: no background networking, component updates, sync or QUIC,
// and host names other than localhost resolve to nothing.
package chrometest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/goodput/goodput/internal/testenv"
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

// Problems collects what the pages of ctx's browser log as an error or a
// warning, and every exception they throw; the func it returns gives what
// was collected since its last call.
func Problems(t testing.TB, ctx context.Context) func() []string {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	err := chromedp.Listen(ctx, func(ev any) {
		var p string
		switch ev := ev.(type) {
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.EntryLevelError || ev.Entry.Level == cdplog.EntryLevelWarning {
				p = fmt.Sprintf("log %s: %s %s", ev.Entry.Level, ev.Entry.Text, ev.Entry.URL)
			}
		case *runtime.EventExceptionThrown:
			p = fmt.Sprintf("exception: %s %s:%d", ev.ExceptionDetails.Text, ev.ExceptionDetails.URL, ev.ExceptionDetails.LineNumber)
			if ex := ev.ExceptionDetails.Exception; ex != nil {
				p += " " + ex.Description
			}
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning {
				p = fmt.Sprintf("console.%s", ev.Type)
				for _, a := range ev.Args {
					p += " " + string(a.Value) + a.Description
				}
			}
		}
		if p != "" {
			mu.Lock()
			seen = append(seen, p)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		ps := seen
		seen = nil
		return ps
	}
}
