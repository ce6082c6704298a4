package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"coinpulse/internal/storetest"
	"coinpulse/internal/testlog"
)

// The browser tests drive Debian's Chromium (apt-get install -y chromium)
// with chromedp against `coinpulse serve` processes, and save a full-page
// PNG of every page they see.
const (
	// chromiumEnv names the Chromium binary; unset, /usr/bin/chromium (or
	// chromium on PATH) is used when it exists, and the tests skip when
	// it does not, or fail if COINPULSE_REQUIRE_SERVICES=1.
	chromiumEnv = "COINPULSE_TEST_CHROMIUM"
	// screenshotsEnv names a directory for the screenshots; unset, they go
	// to a new directory under the system's temporary directory, which
	// the test logs and leaves for a person to look at.
	screenshotsEnv = "COINPULSE_SCREENSHOTS"
)

// chromiumPath returns the Chromium binary to drive, skipping the test (or
// failing it, under COINPULSE_REQUIRE_SERVICES=1) when there is none.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(chromiumEnv); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("%s=%s: %v", chromiumEnv, p, err)
		}
		return p
	}
	for _, p := range []string{"/usr/bin/chromium", "chromium"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv(storetest.RequireServicesEnv) == "1" {
		t.Fatalf("no Chromium: %s is not set and /usr/bin/chromium is missing, but %s=1 (install it with apt-get install -y chromium)",
			chromiumEnv, storetest.RequireServicesEnv)
	}
	t.Skipf("skipping browser tests: no Chromium found; install it (apt-get install -y chromium) or set %s=/path/to/chromium", chromiumEnv)
	return ""
}

// screenshotDir returns the directory the test's screenshots go to.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(screenshotsEnv)
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	} else {
		var err error
		if dir, err = os.MkdirTemp("", "coinpulse-screenshots-"); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

// browser is one headless Chromium with one tab, for one test.
type browser struct {
	t        *testing.T
	ctx      context.Context // the tab's
	base     string          // the server's base URL
	dir      string          // where screenshots go
	shots    int
	step     time.Duration   // the longest one step (an action or a poll) may take
	out      *testlog.Buffer // Chromium's stdout and stderr
	mu       sync.Mutex
	problems []string        // uncaught exceptions and console errors
	failing  map[string]bool // URLs whose error status the test expects
}

// expectFailing tells the console watch that path answers an error status
// on purpose (the browser logs an error for it).
func (b *browser) expectFailing(path string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failing[b.base+path] = true
}

// newBrowser starts Chromium (the binary at path) and opens a tab for
// pages of base.
func newBrowser(t *testing.T, path, base string) *browser {
	t.Helper()
	b := &browser{t: t, base: base, dir: screenshotDir(t), step: 15 * time.Second, out: &testlog.Buffer{}, failing: map[string]bool{}}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox, // Chromium refuses to run as root with its sandbox
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
		chromedp.CombinedOutput(b.out),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	b.ctx = ctx
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	// The first action starts the browser, whose life is bound to ctx.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("start %s: %v\n%s", path, err, b.out)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not start within 30 s\n%s", path, b.out)
	}
	go b.watchConsole()
	// Let pages of base read the clipboard, so that the test can check
	// what a copy button put there.
	for _, name := range []string{"clipboard-read", "clipboard-write"} {
		if _, err := chromedp.CallBrowser(ctx, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
			Permission: &cdpbrowser.PermissionDescriptor{Name: name}, Setting: cdpbrowser.PermissionSettingGranted, Origin: base,
		}); err != nil {
			t.Fatalf("grant %s: %v", name, err)
		}
	}
	return b
}

// watchConsole records the page's uncaught exceptions and console errors.
func (b *browser) watchConsole() {
	for m, err := range chromedp.Console(b.ctx) {
		if err != nil {
			return
		}
		if !m.IsException() && m.Type != chromedp.ConsoleError {
			continue
		}
		b.mu.Lock()
		if m.Source != "network" || !b.failing[m.URL] {
			b.problems = append(b.problems, fmt.Sprintf("%s (%s)", m, m.URL))
		}
		b.mu.Unlock()
	}
}

// consoleProblems returns the exceptions and console errors seen so far.
func (b *browser) consoleProblems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.problems...)
}

// fatalf fails the test after saving a screenshot of the page as it is.
func (b *browser) fatalf(format string, args ...any) {
	b.t.Helper()
	msg := fmt.Sprintf(format, args...)
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	if loc, err := chromedp.Run(ctx, chromedp.Location()); err == nil {
		msg += "\n  page: " + loc
	}
	if text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(0, 2000) : ""`)); err == nil {
		msg += "\n  text: " + strings.ReplaceAll(text, "\n", "\n        ")
	}
	if png, err := chromedp.Run(ctx, fullPagePNG()); err == nil {
		b.shots++
		name := filepath.Join(b.dir, fmt.Sprintf("%02d-FAILED.png", b.shots))
		if os.WriteFile(name, png, 0o644) == nil {
			msg += "\n  screenshot: " + name
		}
	}
	b.t.Fatal(msg)
}

// do runs steps within b.step, failing the test on an error.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, b.step)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.fatalf("%s: %v", what, err)
	}
}

// value runs one action that returns a value.
func value[T any](b *browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, b.step)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.fatalf("%s: %v", what, err)
	}
	return v
}

// load runs steps that make the tab load a page (a navigation, a click on
// a link or a submit button) and waits for it; it returns the page's HTTP
// response, after any redirects.
func (b *browser) load(what string, steps ...chromedp.Action[chromedp.Void]) *network.Response {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, b.step)
	defer cancel()
	res, err := chromedp.RunResponse(ctx, steps...)
	if err != nil {
		b.fatalf("%s: %v", what, err)
	}
	if res == nil {
		b.fatalf("%s: no page loaded", what)
	}
	return res
}

// open loads base+path and checks that it answers 200 at want (a path).
func (b *browser) open(path, want string) *network.Response {
	b.t.Helper()
	res := b.load("open "+path, chromedp.Navigate(b.base+path))
	b.expectPage(res, want)
	return res
}

// expectPage checks that res is a 200 page at path want.
func (b *browser) expectPage(res *network.Response, want string) {
	b.t.Helper()
	if res.Status != 200 {
		b.fatalf("%s answered %d", res.URL, res.Status)
	}
	if got := b.path(); got != want {
		b.fatalf("on %s, want %s", got, want)
	}
}

// path is the path of the tab's current page.
func (b *browser) path() string {
	b.t.Helper()
	loc := value(b, "location", chromedp.Location())
	return strings.TrimPrefix(strings.SplitN(loc, "?", 2)[0], b.base)
}

// click clicks a button or link that loads a page and checks it.
func (b *browser) click(sel, want string) *network.Response {
	b.t.Helper()
	res := b.load("click "+sel, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
	b.expectPage(res, want)
	return res
}

// typeInto clears a form field and types text into it.
func (b *browser) typeInto(sel, text string) {
	b.t.Helper()
	b.do("type into "+sel,
		chromedp.WaitVisible(chromedp.CSS(sel)),
		chromedp.Clear(chromedp.CSS(sel)),
		chromedp.SendKeys(chromedp.CSS(sel), text))
}

// text returns the trimmed text of the first element sel matches, waiting
// for it to be there.
func (b *browser) text(sel string) string {
	b.t.Helper()
	return strings.TrimSpace(value(b, "text of "+sel, chromedp.TextContent(chromedp.CSS(sel))))
}

// js evaluates an expression in the page.
func js[T any](b *browser, expr string) T {
	b.t.Helper()
	return value(b, expr, chromedp.Evaluate[T](expr))
}

// count is how many elements sel matches now.
func (b *browser) count(sel string) int {
	b.t.Helper()
	return js[int](b, fmt.Sprintf("document.querySelectorAll(%q).length", sel))
}

// texts returns the trimmed texts of every element sel matches now.
func (b *browser) texts(sel string) []string {
	b.t.Helper()
	return js[[]string](b, fmt.Sprintf("Array.from(document.querySelectorAll(%q), e => e.textContent.trim())", sel))
}

// screenshot saves a full-page PNG of the tab as NN-name.png.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	png := value(b, "screenshot "+name, fullPagePNG())
	b.shots++
	file := filepath.Join(b.dir, fmt.Sprintf("%02d-%s.png", b.shots, name))
	if err := os.WriteFile(file, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// maxShotHeight caps a screenshot's height (CSS pixels): software
// rendering of a very long page (such as /docs) takes many seconds.
const maxShotHeight = 6000

// fullPagePNG captures the whole page, below the fold too, as a PNG, down
// to maxShotHeight. (chromedp's FullScreenshot sets no clip, and Chromium
// then captures the viewport only.)
func fullPagePNG() chromedp.Action[[]byte] {
	return func(ctx context.Context, t *chromedp.Target) ([]byte, error) {
		m, err := cdp.Call(ctx, t, page.GetLayoutMetrics, cdp.Empty{})
		if err != nil {
			return nil, err
		}
		clip := &page.Viewport{Width: 1280, Height: 900, Scale: 1}
		if m.CSSContentSize != nil {
			clip.Width, clip.Height = math.Ceil(m.CSSContentSize.Width), min(math.Ceil(m.CSSContentSize.Height), maxShotHeight)
		}
		yes := true
		r, err := cdp.Call(ctx, t, page.CaptureScreenshot, page.CaptureScreenshotParams{
			Format: page.CaptureScreenshotFormatPng, Clip: clip, FromSurface: &yes, CaptureBeyondViewport: &yes,
		})
		return r.Data, err
	}
}

// restCall is one answer of the REST API.
type restCall struct {
	status    int
	code      string // the error's code, if any
	requestID string
}

// restGet calls the REST API at base with a key.
func restGet(t *testing.T, base, path, key string) restCall {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		t.Fatalf("GET %s: %d, %v", path, res.StatusCode, err)
	}
	return restCall{status: res.StatusCode, code: body.Error.Code, requestID: res.Header.Get("X-Request-Id")}
}

var errNotYet = errors.New("not yet")

// back goes back in the tab's history and waits until expr, evaluated in
// the page, gives want: the page shown may be replaced meanwhile (one
// restored from the back-forward cache reloads itself).
func (b *browser) back(what, want, expr string) {
	b.t.Helper()
	b.do("go back", chromedp.NavigateBack())
	b.until(what+" after Back", 10*time.Second, 100*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
		defer cancel()
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		if err != nil || got != want {
			return fmt.Errorf("%q (%v), want %q: %w", got, err, want, errNotYet)
		}
		return nil
	})
}

// until calls check every interval until it
// returns nil, failing the test with its last error after within.
func (b *browser) until(what string, within, interval time.Duration, check func() error) time.Duration {
	b.t.Helper()
	start := time.Now()
	for {
		err := check()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > within {
			b.fatalf("%s: not within %s: %v", what, within, err)
		}
		time.Sleep(interval)
	}
}

var liveKey = regexp.MustCompile(`^sk_live_[0-9A-Za-z]{38}$`)

// The key-management dashboard at /user/api, in a real browser, against a
// real `serve` on SQLite: sign up, log out, fail and then succeed to log
// in, create a live key and see it once, call the API with it and see the
// call among the recent ones and on the 30-day chart, revoke it (after the
// confirmation) and see the next call refused, and log out. Every page is
// saved as a PNG (see screenshotDir).
func TestBrowserDashboard(t *testing.T) {
	started := time.Now()
	chromium := chromiumPath(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "coinpulse.db")
	// startProc ticks the market every second (--refresh 1s); calls are
	// metered within 100 ms.
	p := startProc(t, "--db", db, "--meter-interval", "100ms")
	b := newBrowser(t, chromium, p.base)
	t.Logf("serve and Chromium up in %s", time.Since(started).Round(time.Millisecond))
	// A local part beyond ASCII, which an <input type=email> would not
	// submit (an audit); log-ins type it in another case.
	const email, password = "Jörg.Browser@example.com", "correct horse battery"
	login := strings.ToLower(email)

	// Logged out, the dashboard sends you to log in.
	b.open("/user/api", "/user/api/login")

	// Sign up: the account is made, logged in, on the free tier.
	b.open("/user/api/signup", "/user/api/signup")
	b.typeInto("#email", email)
	b.typeInto("#password", password)
	b.screenshot("signup")
	b.click("#signup-submit", "/user/api")
	b.screenshot("dashboard-new-account")
	if tier := b.text("#tier"); tier != "free" {
		t.Errorf("#tier %q after sign-up, want free", tier)
	}
	if b.count("#upgrade") != 1 || b.text("#expires") == "" {
		t.Errorf("a free account shows no #upgrade or an empty #expires")
	}
	if n := b.count("#keys tr[data-key-id]"); n != 0 {
		t.Errorf("a new account lists %d keys", n)
	}

	// Log out, then log in: a wrong password first.
	b.click("#logout", "/user/api/login")
	b.typeInto("#email", login)
	b.typeInto("#password", "not the password")
	b.expectFailing("/user/api/login")
	res := b.load("submit a wrong password", chromedp.Click(chromedp.CSS("#login-submit"), chromedp.NodeVisible))
	if got := b.path(); got != "/user/api/login" || res.Status >= 500 {
		b.fatalf("a wrong password: %d at %s, want the log-in page again", res.Status, got)
	}
	t.Logf("a wrong password answers %d", res.Status)
	if msg := b.text("#form-error"); msg == "" {
		t.Error("a wrong password shows an empty #form-error")
	}
	b.screenshot("login-wrong-password")
	b.typeInto("#email", login)
	b.typeInto("#password", password)
	b.click("#login-submit", "/user/api")
	b.screenshot("dashboard-logged-in")

	// Create a live key with the default permissions (read).
	b.typeInto("#key-name", "browser test")
	b.do("choose live", chromedp.SetValue(chromedp.CSS("#key-mode"), "live"))
	if !js[bool](b, `document.querySelector("#perm-read").checked && !document.querySelector("#perm-write").checked`) {
		t.Error("#perm-read is not checked (or #perm-write is) by default")
	}
	// The new key's page answers POST /user/api/keys; its script puts the
	// dashboard's address in its place in the history.
	res = b.load("click #key-create", chromedp.Click(chromedp.CSS("#key-create"), chromedp.NodeVisible))
	if res.Status != 200 || !strings.HasSuffix(res.URL, "/user/api/keys") {
		b.fatalf("#key-create loaded %s with %d, want /user/api/keys with 200", res.URL, res.Status)
	}
	if got := b.path(); got != "/user/api" {
		t.Errorf("the new key's page is at %s in the history, want /user/api", got)
	}
	if cc := fmt.Sprint(res.Headers["Cache-Control"]); !strings.Contains(cc, "no-store") {
		t.Errorf("the new-key page's Cache-Control is %q, want no-store", cc)
	}
	key := js[string](b, `(e => (e.value !== undefined ? e.value : e.textContent).trim())(document.querySelector("#new-key"))`)
	if !liveKey.MatchString(key) {
		b.fatalf("#new-key holds %q, want a live key", key)
	}
	if b.text("#new-key-warning") == "" {
		t.Error("#new-key-warning is empty")
	}
	b.do("the copy button shows", chromedp.WaitVisible(chromedp.CSS("#copy-key")))
	b.do("copy", chromedp.Click(chromedp.CSS("#copy-key")))
	b.until("#copy-status to say something", 5*time.Second, 50*time.Millisecond, func() error {
		if b.text("#copy-status") == "" {
			return errNotYet
		}
		return nil
	})
	if status := b.text("#copy-status"); status != "Copied." {
		t.Errorf("#copy-status says %q after #copy-key, want Copied.", status)
	}
	if got := b.clipboard(); got != key {
		t.Errorf("#copy-key put %q on the clipboard, want the key", got)
	}
	b.screenshot("new-key")

	// A reload of the new key's page shows the dashboard rather than send
	// the form again, which would create a second key; there the key is
	// listed but never shown again, not even after another reload.
	if href := js[string](b, `document.querySelector("#back-to-dashboard").getAttribute("href")`); href != "/user/api" {
		t.Errorf("#back-to-dashboard links to %q, want /user/api", href)
	}
	b.expectPage(b.load("reload the new key's page", chromedp.Reload()), "/user/api")
	keyID := b.shownOnce(key)
	b.load("reload", chromedp.Reload())
	b.shownOnce(key)
	row := fmt.Sprintf(`#keys tr[data-key-id="%s"]`, keyID)
	if mode := b.text(row + " .key-mode"); mode != "live" {
		t.Errorf("the key's .key-mode is %q, want live", mode)
	}
	b.screenshot("dashboard-with-key")

	// Call the API with it; the call appears among the recent calls.
	c := restGet(t, p.base, "/api/v1/markets/global", key)
	if c.status != 200 || c.requestID == "" {
		t.Fatalf("GET /api/v1/markets/global with the new key: %d %s, X-Request-Id %q", c.status, c.code, c.requestID)
	}
	took := b.until("the call among #recent-calls", 10*time.Second, 100*time.Millisecond, func() error {
		b.load("reload", chromedp.Reload())
		for _, id := range b.texts("#recent-calls tbody tr .request-id") {
			if id == c.requestID {
				return nil
			}
		}
		return fmt.Errorf("no row with request id %s: %w", c.requestID, errNotYet)
	})
	t.Logf("the call was listed %s after it was answered", took.Round(time.Millisecond))
	if paths := b.texts("#recent-calls tbody tr .call-path"); len(paths) != 1 || !strings.HasSuffix(paths[0], "/markets/global") {
		t.Errorf("#recent-calls paths %q, want the one call to /api/v1/markets/global", paths)
	}
	if calls, left := b.text("#month-calls"), b.text("#allowance-left"); calls != "1" || left != "999" {
		t.Errorf("#month-calls %q, #allowance-left %q; want 1 and 999 (free: 1,000 a month)", calls, left)
	}
	// The 30-day chart: 30 bars, each with a title; today's has the call.
	titles := b.texts("svg#daily-chart rect.bar title")
	if n := b.count("svg#daily-chart rect.bar"); n != 30 || len(titles) != 30 {
		t.Errorf("svg#daily-chart has %d rect.bar and %d titles, want 30 each", n, len(titles))
	} else {
		today := time.Now().UTC().Format("2006-01-02")
		if last := titles[29]; !strings.Contains(last, today) || !strings.Contains(last, "1 call") {
			t.Errorf("the last bar's title is %q, want today's (%s) with 1 call", last, today)
		}
		for i, s := range titles {
			if s == "" {
				t.Errorf("bar %d has an empty title", i)
			}
		}
	}
	if stats := b.text("#key-stats"); !strings.Contains(stats, "browser test") {
		t.Errorf("#key-stats does not list the key: %q", stats)
	}
	if lat := b.text("#latency"); lat == "" {
		t.Error("#latency is empty")
	}
	b.screenshot("dashboard-after-call")

	// On a phone (390 × 844, touch): the page does not scroll sideways, and
	// the key's row, its Revoke button included, fits the screen.
	b.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	b.load("reload", chromedp.Reload())
	if w, sw := js[float64](b, "window.innerWidth"), js[float64](b, "document.documentElement.scrollWidth"); sw > w {
		t.Errorf("on a phone the page is %.0f px wide in a %.0f px window", sw, w)
	}
	if r := js[map[string]float64](b, fmt.Sprintf(`(() => { const r = document.querySelector("#revoke-%s").getBoundingClientRect(); return {left: r.left, right: r.right, width: r.width} })()`, keyID)); r["width"] == 0 || r["left"] < 0 || r["right"] > 390 {
		t.Errorf("on a phone the Revoke button is at %v, not within the 390 px screen", r)
	}
	// The key form's mode select shows its whole choice: its text is
	// measured in the select's own font against its inner width, less
	// room for the arrow.
	if fit := js[map[string]float64](b, `(() => { const s = document.querySelector("#key-mode"), st = getComputedStyle(s), c = document.createElement("canvas").getContext("2d"); c.font = st.font; return {text: Math.max(...[...s.options].map(o => c.measureText(o.text).width)), room: s.clientWidth - parseFloat(st.paddingLeft) - parseFloat(st.paddingRight) - 24} })()`); fit["room"] <= 0 || fit["text"] > fit["room"] {
		t.Errorf("on a phone the key form's mode choices are %.0f px wide in a select with %.0f px for text", fit["text"], fit["room"])
	}
	b.screenshot("dashboard-phone")
	b.do("desktop viewport", chromedp.EmulateReset())
	b.load("reload", chromedp.Reload())

	// Revoke it, confirming; the next call is refused.
	b.click("#revoke-"+keyID, "/user/api/keys/"+keyID+"/revoke")
	b.screenshot("revoke-confirm")
	b.click("#revoke-confirm", "/user/api")
	if b.count(row) != 0 {
		t.Errorf("the revoked key is still listed in #keys")
	}
	if n := b.text("#notice"); !strings.Contains(n, `The key "browser test" (`+key[:len("sk_live_")+4]+"…") || !strings.Contains(n, ") is revoked") {
		t.Errorf("#notice after revoking = %q, want it to name the key browser test as revoked", n)
	}
	b.screenshot("dashboard-after-revoke")
	// The node that revoked it refuses it from the next request on, not
	// at its next poll of the auth epoch.
	if refused := restGet(t, p.base, "/api/v1/markets/global", key); refused.status != 401 || refused.code != "INVALID_API_KEY" {
		t.Errorf("the first call with the revoked key: %d %s, want 401 INVALID_API_KEY", refused.status, refused.code)
	}

	// A key of the longest name (64 characters), and every table fits its
	// box from a desktop to a phone, either side of the 64rem where the
	// tables stack: nothing, the Revoke button least of all, is out of
	// view (an audit: at 768 px and, with a long name, at 1280 px the keys
	// table hid its last columns; on a phone the recent calls showed two
	// of seven; a review: and at 900 px).
	status := value(b, "create a key of a long name", chromedp.Evaluate[float64](`fetch("/user/api/data/keys", {method: "POST",
		headers: {"X-CSRF-Token": document.querySelector('meta[name="csrf-token"]').content},
		body: JSON.stringify({name: "W".repeat(64), mode: "test", permissions: ["read"]})}).then(r => r.status)`, chromedp.EvalAwaitPromise))
	if status != 201 {
		t.Fatalf("creating a key of a 64-character name: %v", status)
	}
	for _, vp := range []struct {
		name string
		w, h int64
	}{{"desktop", 1280, 800}, {"narrow desktop", 1040, 800}, {"landscape tablet", 1024, 768}, {"small laptop", 900, 700}, {"tablet", 768, 1024}, {"phone", 390, 844}} {
		b.do(vp.name+" viewport", chromedp.EmulateViewport(vp.w, vp.h))
		b.load("reload", chromedp.Reload())
		if over := js[[]string](b, `Array.from(document.querySelectorAll("table"), t => t.scrollWidth > t.parentElement.clientWidth + 1 ? (t.id || t.querySelector("th").textContent) + ": " + t.scrollWidth + " px in " + t.parentElement.clientWidth : "").filter(Boolean)`); len(over) > 0 {
			t.Errorf("at %d px these tables are wider than their box: %q", vp.w, over)
		}
		if w, sw := js[float64](b, "window.innerWidth"), js[float64](b, "document.documentElement.scrollWidth"); sw > w {
			t.Errorf("at %d px the page is %.0f px wide", vp.w, sw)
		}
		b.screenshot("dashboard-long-name-" + strings.ReplaceAll(vp.name, " ", "-"))
	}
	b.do("desktop viewport", chromedp.EmulateReset())
	b.load("reload", chromedp.Reload())

	// Log out: the dashboard sends you to log in again, and Back does not
	// show the account: a page restored from the back-forward cache loads
	// itself anew (an audit: Chromium restored the account's page, as it
	// did the new key's, despite no-store).
	b.click("#logout", "/user/api/login")
	b.screenshot("logged-out")
	b.back("the log-in page, not the account", "/user/api/login", `location.pathname`)
	b.open("/user/api", "/user/api/login")

	for _, m := range b.consoleProblems() {
		t.Errorf("browser console: %s", m)
	}
	p.term(t)
	t.Logf("%d screenshots in %s; the test took %s", b.shots, b.dir, time.Since(started).Round(time.Millisecond))
}

// clipboard returns the text on the clipboard (the page may read it: the
// browser was told to grant that).
func (b *browser) clipboard() string {
	b.t.Helper()
	return value(b, "read the clipboard", chromedp.Evaluate[string](`navigator.clipboard.readText()`, chromedp.EvalAwaitPromise))
}

// shownOnce checks that the dashboard lists exactly one key, masked, and
// nowhere shows the full key; it returns the key's id.
func (b *browser) shownOnce(key string) string {
	b.t.Helper()
	html := value(b, "page HTML", chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	if strings.Contains(html, key) || strings.Contains(html, key[len("sk_live_"):]) {
		b.fatalf("the dashboard shows the full key again")
	}
	if b.count("#new-key") != 0 {
		b.t.Error("the dashboard has a #new-key")
	}
	ids := js[[]string](b, `Array.from(document.querySelectorAll("#keys tr[data-key-id]"), e => e.dataset.keyId)`)
	if len(ids) != 1 || ids[0] == "" {
		b.fatalf("#keys lists key ids %q, want the one new key", ids)
	}
	return ids[0]
}
