// Package browsertest is for tests only: a headless Chromium tab driven with chromedp, with the page's JavaScript errors collected (checked at the start with a probe error). Without a Chromium binary Start skips the test, or fails it when CI is set (.ci/run installs Debian's chromium). The console's browser test (cmd/queen/internal/broker/console_test.go) and the load report's use it.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// ChromiumPath finds a Chromium binary: CHROME_PATH, else chromium,
// chromium-browser, google-chrome on PATH; "" when none.
func ChromiumPath() string {
	if p := os.Getenv("CHROME_PATH"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Browser is one headless Chromium tab.
type Browser struct {
	// Ctx is the tab's chromedp context.
	Ctx  context.Context
	mu   sync.Mutex
	errs []string
}

// Start starts Chromium (up to three tries: it now and then exits during its
// start on a loaded machine) with a window of width × height, and stops it
// when the test ends.
func Start(t *testing.T, width, height int) *Browser {
	t.Helper()
	path := ChromiumPath()
	if path == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("no Chromium binary (chromium, chromium-browser, google-chrome or CHROME_PATH) and CI is set: .ci/run installs Debian's chromium")
		}
		t.Skip("no Chromium binary found (install Debian's chromium, or set CHROME_PATH): the browser test is skipped")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(width, height),
	}
	b := &Browser{}
	listen := chromedp.WithListener(func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			b.addErr(fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber+1, msg))
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				var parts []string
				for _, a := range ev.Args {
					parts = append(parts, string(a.Value)+a.Description)
				}
				b.addErr("console." + string(ev.Type) + ": " + strings.Join(parts, " "))
			}
		}
	})
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		// Chromium's process-singleton socket goes to a folder of its own
		// under TMPDIR, which it leaves behind: give it the test's.
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
			append(opts, chromedp.UserDataDir(t.TempDir()), chromedp.Env("TMPDIR="+t.TempDir()))...)
		ctx, cancelCtx := chromedp.NewContext(actx, listen)
		if err = chromedp.Do(ctx); err == nil { // starts the browser
			t.Cleanup(func() {
				cancelCtx()
				cancelAlloc() // waits for the browser process to end
			})
			b.Ctx = ctx
			break
		}
		cancelCtx()
		cancelAlloc()
		t.Logf("start Chromium %s (attempt %d): %v", path, attempt, err)
	}
	if err != nil {
		t.Fatalf("start Chromium %s: %v", path, err)
	}
	// The listener sees errors: an uncaught exception and a console.error
	// on the blank page are caught, then forgotten.
	Eval[bool](t, b, `setTimeout(() => { throw new Error("probe-exception") }, 0); console.error("probe-console"); true`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		b.mu.Lock()
		all := strings.Join(b.errs, "; ")
		b.mu.Unlock()
		if strings.Contains(all, "probe-exception") && strings.Contains(all, "probe-console") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page's errors are not seen: %q", all)
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.mu.Lock()
	b.errs = nil
	b.mu.Unlock()
	return b
}

func (b *Browser) addErr(s string) {
	b.mu.Lock()
	b.errs = append(b.errs, s)
	b.mu.Unlock()
}

// NoJSErrors fails the test on any JavaScript error seen so far.
func (b *Browser) NoJSErrors(t *testing.T, step string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.errs) > 0 {
		t.Fatalf("JavaScript errors after %s: %s", step, strings.Join(b.errs, "; "))
	}
}

// Run runs chromedp actions with a deadline of 30 s.
func (b *Browser) Run(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Eval decodes a JavaScript expression's value (JSON) into a T, with a
// deadline of 30 s.
func Eval[T any](t *testing.T, b *Browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// WaitFor polls a JavaScript boolean expression every 50 ms until it is
// true, failing the test after 30 s.
func (b *Browser) WaitFor(t *testing.T, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !Eval[bool](t, b, "!!("+expr+")") {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30 s (%s)", what, expr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
