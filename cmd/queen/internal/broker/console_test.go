package broker

// The web console (package transport/console) in a real headless Chromium,
// driven with chromedp against a real broker: every page, bad input, and no
// JavaScript errors. Without a browser binary the browser test skips (fails
// under CI); the plain-HTTP checks of the console's routes always run.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/internal/browsertest"
	"github.com/queen-mq/queen-go/transport/auth"
)

// browser is the console's headless Chromium tab (internal/browsertest)
// with the console's own helpers.
type browser struct{ *browsertest.Browser }

func startBrowser(t *testing.T) *browser {
	t.Helper()
	return &browser{browsertest.Start(t, 1280, 820)}
}

// noJSErrors fails the test on any JavaScript error seen so far.
func (b *browser) noJSErrors(t *testing.T, step string) {
	t.Helper()
	b.NoJSErrors(t, step)
}

// run runs chromedp actions with a deadline.
func (b *browser) run(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	b.Run(t, what, actions...)
}

// eval returns a JavaScript expression's value as a string.
func (b *browser) eval(t *testing.T, expr string) string {
	t.Helper()
	v := browsertest.Eval[any](t, b.Browser, expr)
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// waitFor polls a JavaScript boolean expression until it is true (30 s).
func (b *browser) waitFor(t *testing.T, what, expr string) {
	t.Helper()
	eventually(t, 30*time.Second, 100*time.Millisecond, what, func() (bool, string) {
		return b.eval(t, "!!("+expr+")") == "true", b.eval(t, `document.getElementById("error").hidden ? document.getElementById("main").innerText.slice(0, 300) : "error: " + document.getElementById("error").textContent`)
	})
}

// goHash shows a console page: the error box cleared, then location.hash set.
func (b *browser) goHash(t *testing.T, hash string) {
	t.Helper()
	b.eval(t, `document.getElementById("error").hidden = true; document.getElementById("main").replaceChildren(); location.hash = `+strconv.Quote(hash)+`; true`)
}

const errShown = `!document.getElementById("error").hidden && document.getElementById("error").textContent.length > 0`

// TestConsoleBrowser: the console in headless Chromium against a real broker.
func TestConsoleBrowser(t *testing.T) {
	b := startBrowser(t)
	e := startEnv(t, nil)
	e.configureOK(t, "http", []byte(`{"queue":"web","options":{"dedupWindowSeconds":600}}`))
	e.configureOK(t, "http", []byte(`{"queue":"old","options":{"dedupWindowSeconds":600}}`))
	orig := e.pushOK(t, "http", items(it("web", "p", "k1"), it("web", "p", "k2")), 2)

	// / redirects to /ui/, which opens on the overview.
	b.run(t, "open the console", chromedp.Navigate(e.base+"/"))
	b.waitFor(t, "the overview", `document.getElementById("rate-queued")`)
	if u := b.eval(t, "location.pathname"); u != "/ui/" {
		t.Fatalf("/ redirected to %q", u)
	}
	// No JWT and no admin token: the broker is open, no sign-in.
	if sub, role, _ := b.whoShown(t); sub != "open broker" || role != "admin" ||
		b.eval(t, `document.getElementById("token-form").hidden && document.getElementById("sign-out").hidden`) != "true" {
		t.Fatalf("an open broker's badge: %q, %q", sub, role)
	}
	// Pushes with repeats while the page polls: non-zero queued and
	// duplicate rates show.
	n := 0
	eventually(t, 60*time.Second, 200*time.Millisecond, "non-zero queued and duplicate rates", func() (bool, string) {
		n++
		k := "load-" + strconv.Itoa(n)
		e.pushOK(t, "http", items(it("web", "load", k), it("web", "load", k), it("web", "load", "load-1")), 3)
		q, d := b.eval(t, `document.getElementById("rate-queued").textContent`), b.eval(t, `document.getElementById("rate-duplicate").textContent`)
		nonZero := func(s string) bool {
			f, err := strconv.ParseFloat(strings.ReplaceAll(s, ",", ""), 64)
			return err == nil && f > 0
		}
		return nonZero(q) && nonZero(d), "queued " + q + ", duplicate " + d
	})
	b.waitFor(t, "the chart's queued line", `document.querySelector('#chart polyline[data-series="queued"]')`)
	if p := os.Getenv("QUEEN_CONSOLE_SCREENSHOT"); p != "" {
		// A short load (8 s of 60-item pushes, a third of them repeats)
		// while the page polls, then the picture (docs/console.png).
		end := time.Now().Add(8 * time.Second)
		for i := 0; time.Now().Before(end); i++ {
			var its []item
			for j := range 60 {
				k := j
				if j%3 == 2 {
					k = j - 1
				}
				its = append(its, it("web", "shot-"+strconv.Itoa(k%8), fmt.Sprintf("s%d-%d", i, k)))
			}
			e.pushOK(t, "http", items(its...), 60)
		}
		b.waitFor(t, "the chart", `document.querySelector('#chart polyline[data-series="duplicate"]')`)
		ctx, cancel := context.WithTimeout(b.Ctx, 30*time.Second)
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b.noJSErrors(t, "the overview")

	// Queues: the list with each queue's duplicate rate, a queue's page
	// with its partitions, a consumer group's cursor and lag and recent
	// messages (a peek: nothing leased), an unknown queue.
	b.goHash(t, "#/queues")
	b.waitFor(t, "the queue list", `document.querySelector('#queues-table tr[data-queue="web"]') && document.querySelector('#queues-table tr[data-queue="old"]')`)
	if r := b.eval(t, `document.querySelector('#queues-table tr[data-queue="web"] td.duplicate-rate').dataset.rate`); r == "" || r == "0" {
		t.Fatalf("web's duplicate rate after repeats: %q", r)
	}
	if r := b.eval(t, `document.querySelector('#queues-table tr[data-queue="web"] td.duplicate-rate').textContent`); !strings.HasSuffix(r, "%") {
		t.Fatalf("web's duplicate rate shown as %q", r)
	}
	if r := b.eval(t, `document.querySelector('#queues-table tr[data-queue="old"] td.duplicate-rate').textContent`); r != "—" {
		t.Fatalf("old (no pushes yet) shows the duplicate rate %q", r)
	}
	// Group cg consumes k1 (autoAck): cursor 0 in partition p, lag 2 (k2,
	// and k3, whose payload holds markup).
	e.pushOK(t, "http", items(item{"queue": "web", "partition": "p", "transactionId": "k3", "payload": map[string]any{"html": "<img src=x onerror=alert(1)>"}}), 1)
	if got := e.popHTTP(t, "web", "p", vals("consumerGroup", "cg", "autoAck", "true")); len(got.Messages) != 1 || got.Messages[0].TransactionID != "k1" {
		t.Fatalf("cg's pop: %+v", got)
	}
	b.goHash(t, "#/queues/web")
	b.waitFor(t, "the queue's page", `document.getElementById("queue-options") && document.getElementById("queue-options").textContent.includes("dedupWindowSeconds")`)
	b.waitFor(t, "the partitions and the group", `document.querySelector('#partitions-table tr[data-partition="p"]') && document.querySelector('#groups-table tr[data-group="cg"][data-partition="p"]')`)
	if lag := b.eval(t, `document.querySelector('#groups-table tr[data-group="cg"][data-partition="p"] td.lag').textContent`); lag != "2" {
		t.Fatalf("cg's lag in p: %q, want 2 (k2, k3)", lag)
	}
	b.goHash(t, "#/queues/web?partition=p")
	b.waitFor(t, "p's recent messages", `document.querySelector('#messages-table tr[data-offset="1"]') && document.querySelector('#messages-table tr[data-offset="2"]')`)
	if txt := b.eval(t, `document.querySelector('#messages-table tr[data-offset="1"]').textContent`); !strings.Contains(txt, orig[1].MessageID) || !strings.Contains(txt, "k2") {
		t.Fatalf("k2's row: %s", txt)
	}
	// JWT off: no producer.
	if txt := b.eval(t, `document.querySelector('#messages-table tr[data-offset="1"] td.producer').textContent`); txt != "—" {
		t.Fatalf("k2's producer shown as %q, want — (JWT off)", txt)
	}
	// A payload with markup is text, never HTML.
	if n := b.eval(t, `document.querySelectorAll('#messages-table img').length`); n != "0" {
		t.Fatalf("the payload became %s element(s)", n)
	}
	if txt := b.eval(t, `document.querySelector('#messages-table tr[data-offset="2"] td.payload').textContent`); !strings.Contains(txt, "<img src=x onerror=alert(1)>") {
		t.Fatalf("k3's payload shown as %q", txt)
	}
	// The page polls: a message pushed now shows up, and cg's lag grows.
	e.pushOK(t, "http", items(it("web", "p", "k4")), 1)
	b.waitFor(t, "a new message on the page", `document.querySelector('#messages-table tr[data-offset="3"]') && document.querySelector('#groups-table tr[data-group="cg"][data-partition="p"]').dataset.lag === "3"`)
	if got := e.popHTTP(t, "web", "p", vals("consumerGroup", "cg", "batch", "10", "autoAck", "true")); txnsOf(got.Messages) != "k2,k3,k4" {
		t.Fatalf("cg after the page's peeks got %s", txnsOf(got.Messages))
	}
	b.goHash(t, "#/queues/web?partition=nope")
	b.waitFor(t, "an unknown partition's error", errShown+` && document.getElementById("messages-error")`)
	b.goHash(t, "#/queues/nope")
	b.waitFor(t, "an unknown queue's error", errShown+` && document.getElementById("main").textContent.length > 0`)
	b.noJSErrors(t, "the queues pages")

	// The dedup inspector: a known id, an unknown id, an id whose window
	// closed, bad input.
	b.goHash(t, "#/dedup?queue=web&partition=p&transactionId=k2")
	b.waitFor(t, "a known id", `document.querySelector('#dedup-state[data-state="in_window"]')`)
	if txt := b.eval(t, `document.getElementById("dedup-kv").textContent`); !strings.Contains(txt, orig[1].MessageID) || !strings.Contains(txt, "window closes at") {
		t.Fatalf("known id: %s", txt)
	}
	b.goHash(t, "#/dedup?queue=web&partition=p&transactionId=never-pushed")
	b.waitFor(t, "an unknown id", `document.querySelector('#dedup-state[data-state="unknown"]')`)
	e.pushOK(t, "http", items(it("old", "p", "aged")), 1)
	e.ageQueue(t, "old", 700*time.Second)
	b.goHash(t, "#/dedup?queue=old&partition=p&transactionId=aged")
	b.waitFor(t, "an id whose window closed", `document.querySelector('#dedup-state[data-state="expired"]')`)
	b.goHash(t, "#/dedup?queue=missing&partition=p&transactionId=x")
	b.waitFor(t, "an unknown queue's error", errShown)
	b.goHash(t, "#/dedup?queue=web")
	b.waitFor(t, "the inspector form", `document.getElementById("dedup-go")`)
	b.eval(t, `document.getElementById("dedup-go").click(); true`)
	b.waitFor(t, "an empty id's error", errShown+` && document.getElementById("error").textContent.includes("transactionId")`)
	b.noJSErrors(t, "the dedup inspector")

	// DLQ: a dead letter replayed from the page is moved; replayed again by
	// id it is gone (moved removed it, SPEC.md §13).
	e.pushOK(t, "http", items(it("dl", "p", "d1")), 1)
	e.deadLetter(t, "dl", "p", "g1")
	dls := e.dlq(t, "dl")
	if len(dls) != 1 {
		t.Fatalf("dead letters: %+v", dls)
	}
	id := strconv.FormatInt(dls[0].ID, 10)
	b.goHash(t, "#/dlq?queue=dl&consumerGroup=g1")
	b.waitFor(t, "the dead letter listed", `document.querySelector('#dlq-table tr[data-id="`+id+`"] button.replay-one')`)
	if txt := b.eval(t, `document.querySelector('#dlq-table tr[data-id="`+id+`"] td.producer').textContent`); txt != "—" {
		t.Fatalf("the dead letter's producer shown as %q, want — (JWT off)", txt)
	}
	b.eval(t, `document.querySelector('#dlq-table button.replay-one').click(); true`)
	b.waitFor(t, "the replay moved", `document.querySelector('#replay-table tr[data-id="`+id+`"][data-result="moved"]') && document.getElementById("dlq-empty")`)
	if left := e.dlq(t, "dl"); len(left) != 0 {
		t.Fatalf("the moved dead letter is still there: %+v", left)
	}
	b.eval(t, `document.getElementById("replay-ids").value = "`+id+`"; document.getElementById("replay-ids-go").click(); true`)
	b.waitFor(t, "the second replay gone", `document.querySelector('#replay-table tr[data-id="`+id+`"][data-result="gone"]')`)
	b.eval(t, `document.getElementById("error").hidden = true; document.getElementById("replay-ids").value = "abc"; document.getElementById("replay-ids-go").click(); true`)
	b.waitFor(t, "a malformed id's error", errShown)
	b.goHash(t, "#/dlq?queue=nope")
	b.waitFor(t, "an unknown queue's error", errShown)
	b.noJSErrors(t, "the DLQ page")

	// Cluster: this broker is listed, with the shard grid.
	b.goHash(t, "#/cluster")
	b.waitFor(t, "the broker listed", `document.querySelector('#cluster-brokers tr[data-broker]') && document.getElementById("cluster-brokers").textContent.includes("this broker") && document.querySelectorAll('#shard-grid div').length > 0`)
	b.goHash(t, "#/no-such-page")
	b.waitFor(t, "an unknown page", `document.getElementById("main").textContent.includes("No page")`)
	b.noJSErrors(t, "the cluster page")
}

// TestConsoleBrowserToken: with QUEEN_ADMIN_TOKEN set (JWT off), the
// console asks for the token, shows the broker's 401 message for a wrong
// one, then signs in with it as admin (nothing disabled) and sends it.
func TestConsoleBrowserToken(t *testing.T) {
	b := startBrowser(t)
	e := startEnv(t, func(c *Config) { c.AdminToken = "s3cret" })
	e.pushOK(t, "http", items(it("tok", "p", "a")), 1)
	b.run(t, "open the queues page", chromedp.Navigate(e.base+"/ui/#/queues"))
	b.waitFor(t, "the token form", signedOutWith("QUEEN_ADMIN_TOKEN"))
	b.signIn(t, "wrong")
	b.waitFor(t, "a wrong token refused", signedOutWith("QUEEN_ADMIN_TOKEN (missing or wrong)"))
	b.signIn(t, "s3cret")
	b.waitFor(t, "the queue list", `document.querySelector('#queues-table tr[data-queue="tok"]')`)
	if sub, role, exp := b.whoShown(t); sub != "admin token" || role != "admin" || exp != "" {
		t.Fatalf("the badge shows %q, %q, %q", sub, role, exp)
	}
	b.goHash(t, "#/dlq")
	b.waitFor(t, "the DLQ page", `document.getElementById("dlq-go")`)
	if d := b.eval(t, `document.getElementById("dlq-go").disabled || document.getElementById("replay-ids-go").disabled || !!document.querySelector(".locked-reason, header nav a.locked")`); d != "false" {
		t.Fatalf("the admin token: a control is disabled")
	}
	b.noJSErrors(t, "the token")
}

// TestConsoleRoutes: the console's files, the / redirect and GET
// /api/v1/stats over plain HTTP (no browser needed).
func TestConsoleRoutes(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(e.base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("GET /: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for path, want := range map[string]string{"/ui/": "text/html", "/ui/console.js": "javascript", "/ui/console.css": "text/css"} {
		resp, err := http.Get(e.base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), want) {
			t.Fatalf("GET %s: %d %q", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	if st, _ := e.httpDo(t, http.MethodGet, "/ui/nope.js", nil); st != http.StatusNotFound {
		t.Fatalf("GET /ui/nope.js: %d", st)
	}
	// Stats: totals count verdicts; rates need a second sample.
	e.pushOK(t, "http", items(it("st", "p", "a"), it("st", "p", "a"), it("st", "p", "b")), 3)
	var s struct {
		WindowSeconds      float64  `json:"windowSeconds"`
		QueuedPerSecond    float64  `json:"queuedPerSecond"`
		DuplicatePerSecond float64  `json:"duplicatePerSecond"`
		QueuedTotal        int64    `json:"queued"`
		DuplicateTotal     int64    `json:"duplicate"`
		CommitP50Ms        *float64 `json:"commitP50Ms"`
		CommitP99Ms        *float64 `json:"commitP99Ms"`
		AckedPerSecond     float64  `json:"ackedPerSecond"`
		AckPerSecond       float64  `json:"ackPerSecond"`
		CacheBytes         int64    `json:"cacheBytes"`
		RSSBytes           int64    `json:"rssBytes"`
	}
	get := func() {
		st, body := e.httpDo(t, http.MethodGet, "/api/v1/stats", nil)
		if st != http.StatusOK || json.Unmarshal(body, &s) != nil {
			t.Fatalf("GET /api/v1/stats: %d %s", st, body)
		}
	}
	get()
	if s.QueuedTotal != 2 || s.DuplicateTotal != 1 {
		t.Fatalf("stats totals: %+v", s)
	}
	e.pushOK(t, "http", items(it("st", "p", "c"), it("st", "p", "c")), 2)
	get()
	if s.WindowSeconds <= 0 || s.QueuedPerSecond <= 0 || s.DuplicatePerSecond <= 0 || s.CommitP99Ms == nil || *s.CommitP99Ms <= 0 ||
		s.CommitP50Ms == nil || *s.CommitP50Ms <= 0 || *s.CommitP50Ms > *s.CommitP99Ms {
		t.Fatalf("stats rates: %+v", s)
	}
	// Acks: one acked, one failed (retry scheduled): ackedPerSecond counts
	// the acked one only.
	got := e.popHTTP(t, "st", "p", vals("consumerGroup", "sg", "batch", "2"))
	if len(got.Messages) != 2 {
		t.Fatalf("pop: %+v", got)
	}
	if r := results(ackBatch(t, e, "sg", ackOf(got.Messages[0], "completed"), ackOf(got.Messages[1], "failed"))); r[0] != queen.Acked || r[1] != queen.RetryScheduled {
		t.Fatalf("acks: %v", r)
	}
	get()
	if s.AckedPerSecond <= 0 || s.AckPerSecond < 2*s.AckedPerSecond*0.999 {
		t.Fatalf("stats ack rates after one acked and one failed ack: %+v", s)
	}
	if st, _ := e.httpDo(t, http.MethodPost, "/api/v1/stats", nil); st != http.StatusMethodNotAllowed {
		t.Fatalf("POST /api/v1/stats: %d", st)
	}
	// Behind the admin token like the other admin routes; the files are not.
	et := startEnv(t, func(c *Config) { c.AdminToken = "tok" })
	if st, _, _ := et.httpAuth(t, http.MethodGet, "/api/v1/stats", "", nil); st != http.StatusUnauthorized {
		t.Fatalf("stats without the token: %d", st)
	}
	if st, _, _ := et.httpAuth(t, http.MethodGet, "/api/v1/stats", "Bearer tok", nil); st != http.StatusOK {
		t.Fatalf("stats with the token: %d", st)
	}
	if st, _, _ := et.httpAuth(t, http.MethodGet, "/ui/", "", nil); st != http.StatusOK {
		t.Fatalf("the console's page without the token: %d", st)
	}
}

// timelineState is what the overview's live timeline shows (console.js,
// drawTimeline): the samples with a reply, each series' latest value and
// its values, and the lines drawn.
type timelineState struct {
	Points        int     `json:"points"`
	Stored        float64 `json:"stored"`
	StoredPoints  int     `json:"storedPoints"`
	Acked         float64 `json:"acked"`
	P50, P99, RSS float64
	StoredLines   int `json:"storedLines"`
	RSSLines      int `json:"rssLines"`
	// WAL and DB are the bytes per stored message (the storage chart).
	WAL, DB  float64
	WALLines int `json:"walLines"`
}

const timelineExpr = `(() => {
	const key = (chart, s) => document.querySelector("#" + chart + ' .tl-key[data-series="' + s + '"]');
	const val = (chart, s) => { const k = key(chart, s); return k && k.dataset.value ? Number(k.dataset.value) : 0; };
	const f = document.getElementById("tl-rates");
	return {points: f ? Number(f.dataset.points) : 0, stored: val("tl-rates", "stored"),
		storedPoints: key("tl-rates", "stored") ? Number(key("tl-rates", "stored").dataset.points || 0) : 0,
		acked: val("tl-rates", "acked"), P50: val("tl-latency", "p50"), P99: val("tl-latency", "p99"), RSS: val("tl-rss", "rss"),
		storedLines: document.querySelectorAll('#tl-rates polyline[data-series="stored"]').length,
		rssLines: document.querySelectorAll('#tl-rss polyline[data-series="rss"]').length,
		WAL: val("tl-storage", "wal"), DB: val("tl-storage", "db"),
		walLines: document.querySelectorAll('#tl-storage polyline[data-series="wal"]').length};
})()`

// TestConsoleTimeline (issue 40): the overview's live timeline against a
// real broker. Pushes, pops and acks while the page polls: the charts gain
// points, stored/s and acked/s read above 0, the commit latency, the RSS and
// the WAL per stored message have values (the storage gauges read every
// 100 ms here), and the timeline outlives a visit to another page.
// QUEEN_CONSOLE_TIMELINE_SCREENSHOT=/path/timeline.png writes a picture of
// the overview after a 60 s load.
func TestConsoleTimeline(t *testing.T) {
	b := startBrowser(t)
	e := startEnv(t, func(c *Config) { c.storageEvery = 100 * time.Millisecond })
	b.run(t, "open the console", chromedp.Navigate(e.base+"/ui/#/overview"))
	b.waitFor(t, "the timeline's charts", `document.getElementById("tl-rates") && document.getElementById("tl-latency") && document.getElementById("tl-rss") && document.getElementById("tl-storage")`)

	// One round of load: 30 fresh messages over 3 partitions, then what
	// group tl gets of them in one pop, acked.
	n := 0
	load := func(size int) {
		var its []item
		for range size {
			n++
			its = append(its, it("timeline", "p"+strconv.Itoa(n%3), "m-"+strconv.Itoa(n)))
		}
		e.pushOK(t, "http", items(its...), size)
		got := e.popHTTP(t, "timeline", "", vals("consumerGroup", "tl", "batch", strconv.Itoa(size)))
		if len(got.Messages) == 0 {
			return
		}
		var acks []map[string]any
		for _, m := range got.Messages {
			acks = append(acks, ackOf(m, "completed"))
		}
		for i, r := range ackBatch(t, e, "tl", acks...) {
			if r.Result != queen.Acked {
				t.Fatalf("ack %d of %s: %+v", i, got.Messages[i].TransactionID, r)
			}
		}
	}
	state := func() timelineState { return browsertest.Eval[timelineState](t, b.Browser, timelineExpr) }
	var st timelineState
	eventually(t, 60*time.Second, 200*time.Millisecond, "two timeline points and a stored rate above 0", func() (bool, string) {
		load(30)
		st = state()
		return st.Points >= 2 && st.StoredPoints >= 2 && st.Stored > 0, fmt.Sprintf("%+v", st)
	})
	eventually(t, 60*time.Second, 200*time.Millisecond, "an acked rate above 0, the latency and the RSS", func() (bool, string) {
		load(30)
		st = state()
		return st.Acked > 0 && st.P50 > 0 && st.P99 >= st.P50 && st.RSS > 0 && st.StoredLines > 0 && st.RSSLines > 0, fmt.Sprintf("%+v", st)
	})
	eventually(t, 60*time.Second, 200*time.Millisecond, "WAL bytes per stored message", func() (bool, string) {
		load(30)
		st = state()
		return st.WAL > 0 && st.WALLines > 0, fmt.Sprintf("%+v", st)
	})
	b.noJSErrors(t, "the timeline")

	// Another page and back: the ring kept polling meanwhile.
	before := st.Points
	b.goHash(t, "#/cluster")
	b.waitFor(t, "the cluster page", `document.querySelector('#cluster-brokers tr[data-broker]')`)
	b.goHash(t, "#/overview")
	b.waitFor(t, "the timeline again, with what it had", `document.getElementById("tl-rates") && Number(document.getElementById("tl-rates").dataset.points) > `+strconv.Itoa(before))

	if p := os.Getenv("QUEEN_CONSOLE_TIMELINE_SCREENSHOT"); p != "" {
		// A minute of load whose size changes every 15 s, then the picture.
		start := time.Now()
		for time.Since(start) < 60*time.Second {
			load([]int{40, 120, 60, 200}[int(time.Since(start)/(15*time.Second))%4])
		}
		b.waitFor(t, "the load on the chart", `Number(document.getElementById("tl-rates").dataset.points) > 40`)
		ctx, cancel := context.WithTimeout(b.Ctx, 30*time.Second)
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		b.noJSErrors(t, "the screenshot's load")
	}
}

// signIn pastes token into the console's sign-in and submits it.
func (b *browser) signIn(t *testing.T, token string) {
	t.Helper()
	b.waitFor(t, "the sign-in", `!document.getElementById("token-form").hidden`)
	b.eval(t, `document.getElementById("token").value = `+strconv.Quote(token)+`; document.getElementById("token-form").requestSubmit(); true`)
}

// whoShown is the header's badge: sub, role and expiry ("" when hidden).
func (b *browser) whoShown(t *testing.T) (sub, role, exp string) {
	t.Helper()
	if b.eval(t, `document.getElementById("who").hidden`) == "true" {
		return "", "", ""
	}
	return b.eval(t, `document.getElementById("who-sub").textContent`), b.eval(t, `document.getElementById("who-role").textContent`),
		b.eval(t, `document.getElementById("who-exp").textContent`)
}

// signedOutWith is the condition of the sign-in shown again with the
// broker's message saying why in the error box.
func signedOutWith(why string) string {
	return `!document.getElementById("token-form").hidden && document.getElementById("who").hidden && document.getElementById("signed-out") && ` +
		errShown + ` && document.getElementById("error").textContent.includes(` + strconv.Quote(why) + `) && !sessionStorage.getItem("queenToken")`
}

// TestConsoleBrowserJWT (issue 41): with JWT on, the console signs in with
// a pasted JWT, shows the token's sub, role and expiry as the broker's GET
// /api/v1/auth/whoami gives them, and shows the controls the role may not
// use disabled with the reason (the DLQ's and the dedup inspector's need
// admin) rather than letting them fail 403; the access page says what each
// level allows. An expired token, at sign-in or during the session, shows
// the broker's 401 message and the sign-in again.
func TestConsoleBrowserJWT(t *testing.T) {
	b := startBrowser(t)
	e := startJWTEnv(t)
	admin := e.token(t, auth.HS256, "admin")
	// Queue jq with a message and a dead letter (group g).
	if st, body := e.pushAuth(t, "http", admin, items(it("jq", "p", "m1"), it("jq", "p", "m2"))); st != http.StatusCreated {
		t.Fatalf("seed push: %d %s", st, body)
	}
	var pop popReply
	st, _, body := e.httpAuth(t, http.MethodGet, "/api/v1/pop/queue/jq/partition/p?consumerGroup=g&wait=false", admin, nil)
	if st != http.StatusOK || json.Unmarshal(body, &pop) != nil || len(pop.Messages) != 1 {
		t.Fatalf("seed pop: %d %s", st, body)
	}
	a := ackOf(pop.Messages[0], "dlq")
	if st, _, body := e.httpAuth(t, http.MethodPost, "/api/v1/ack/batch", admin, json.RawMessage(marshal(map[string]any{"acknowledgments": []any{a}, "consumerGroup": "g"}))); st != http.StatusOK {
		t.Fatalf("seed dead letter: %d %s", st, body)
	}

	// No token: the sign-in, with the broker's 401 message.
	b.run(t, "open the console", chromedp.Navigate(e.base+"/ui/#/dlq?queue=jq"))
	b.waitFor(t, "the sign-in with the broker's message", signedOutWith("no token"))

	exp := time.Now().Add(2 * time.Hour)
	for _, c := range []struct {
		role    string
		allowed string // the access table's rows, read-only, read-write, admin
	}{
		{"read-only", "true,false,false"},
		{"read-write", "true,true,false"},
		{"admin", "true,true,true"},
	} {
		sub := "alice-" + c.role
		claims := jwtClaims(sub, c.role)
		claims["exp"] = exp.Unix()
		tok := e.keys.Sign(t, auth.HS256, claims)
		if c.role == "read-write" {
			tok = "Bearer " + tok // pasted with its scheme: taken too
		}
		b.signIn(t, tok)
		b.waitFor(t, c.role+" signed in", `!document.getElementById("who").hidden && document.getElementById("who-sub").textContent === `+strconv.Quote(sub))
		gotSub, gotRole, gotExp := b.whoShown(t)
		if gotSub != sub || gotRole != c.role || !strings.HasPrefix(gotExp, "expires in ") {
			t.Fatalf("%s: the badge shows sub %q, role %q, %q", c.role, gotSub, gotRole, gotExp)
		}
		if title := b.eval(t, `document.getElementById("who-exp").title`); !strings.Contains(title, exp.UTC().Format("2006-01-02 15:04:05")) {
			t.Fatalf("%s: the expiry's title %q, want %s", c.role, title, exp.UTC())
		}
		if n := b.eval(t, `sessionStorage.getItem("queenToken").startsWith("Bearer")`); n != "false" {
			t.Fatalf("%s: the stored token keeps its scheme", c.role)
		}

		// The DLQ page (opened on #/dlq?queue=jq): admin lists the dead
		// letter with its replay button; below admin the controls are
		// disabled with the reason, and nothing was asked of the DLQ.
		b.goHash(t, "#/dlq?queue=jq&r="+c.role)
		b.waitFor(t, c.role+": the DLQ page", `document.getElementById("dlq-go")`)
		if c.role == "admin" {
			b.waitFor(t, "admin: the dead letter listed", `document.querySelector('#dlq-table button.replay-one')`)
			if d := b.eval(t, `document.getElementById("dlq-go").disabled || document.getElementById("replay-ids-go").disabled || !!document.querySelector(".locked-reason")`); d != "false" {
				t.Fatalf("admin: the DLQ's controls are disabled")
			}
			if cls := b.eval(t, `document.querySelector('header nav a[data-page="dlq"]').className`); strings.Contains(cls, "locked") {
				t.Fatalf("admin: the DLQ link is marked locked: %q", cls)
			}
			b.goHash(t, "#/dedup?queue=jq&partition=p&transactionId=m1")
			b.waitFor(t, "admin: the inspector answers", `document.querySelector('#dedup-state[data-state="in_window"]') && !document.getElementById("dedup-go").disabled`)
		} else {
			if d := b.eval(t, `document.getElementById("dlq-go").disabled && document.getElementById("replay-ids-go").disabled && document.getElementById("dlq-go").dataset.needs === "admin"`); d != "true" {
				t.Fatalf("%s: the DLQ's controls are not disabled", c.role)
			}
			why := b.eval(t, `document.querySelector("#main .locked-reason").textContent`)
			if !strings.Contains(why, "needs the admin role") || !strings.Contains(why, `sub "`+sub+`"`) || !strings.Contains(why, "has "+c.role) {
				t.Fatalf("%s: the reason shown: %q", c.role, why)
			}
			if title := b.eval(t, `document.getElementById("dlq-go").title`); title != why {
				t.Fatalf("%s: the button's title %q, want the reason %q", c.role, title, why)
			}
			if n := b.eval(t, `document.querySelectorAll("#dlq-table").length`); n != "0" {
				t.Fatalf("%s: dead letters listed", c.role)
			}
			if !strings.Contains(b.eval(t, `document.querySelector('header nav a[data-page="dlq"]').className`), "locked") {
				t.Fatalf("%s: the DLQ link is not marked locked", c.role)
			}
			// The dedup inspector likewise.
			b.goHash(t, "#/dedup?queue=jq&partition=p&transactionId=m1")
			b.waitFor(t, c.role+": the inspector locked", `document.getElementById("dedup-go") && document.getElementById("dedup-go").disabled && document.querySelector("#main .locked-reason")`)
			if n := b.eval(t, `document.querySelectorAll("#dedup-state").length`); n != "0" {
				t.Fatalf("%s: the inspector answered", c.role)
			}
		}
		if errBox := b.eval(t, errShown); errBox != "false" {
			t.Fatalf("%s: an error shown: %s", c.role, b.eval(t, `document.getElementById("error").textContent`))
		}

		// A queue's page: its messages (read-only reaches the peek, each
		// with its producer), its dead letters for admin only.
		b.goHash(t, "#/queues/jq?partition=p")
		b.waitFor(t, c.role+": the queue's messages", `document.querySelector('#messages-table tr[data-offset="1"]')`)
		if p := b.eval(t, `document.querySelector('#messages-table tr[data-offset="1"] td.producer').textContent`); p != "sub-admin" {
			t.Fatalf("%s: m2's producer shown as %q", c.role, p)
		}
		if c.role == "admin" {
			b.waitFor(t, "admin: the queue's dead letters", `document.querySelector('#queue-dlq #dlq-table')`)
		} else {
			b.waitFor(t, c.role+": the queue's dead letters locked", `document.querySelector('#queue-dlq .locked-reason[data-needs="admin"]')`)
		}

		// The access page: what each level allows, as the broker says.
		b.goHash(t, "#/access")
		b.waitFor(t, c.role+": the access page", `document.querySelectorAll('#access-table tr[data-level]').length === 3`)
		if got := b.eval(t, `[...document.querySelectorAll('#access-table tr[data-level]')].map((r) => r.dataset.allowed).join()`); got != c.allowed {
			t.Fatalf("%s: levels allowed %s, want %s", c.role, got, c.allowed)
		}
		if kv := b.eval(t, `document.getElementById("access-kv").textContent`); !strings.Contains(kv, sub) || !strings.Contains(kv, "JWT") {
			t.Fatalf("%s: the access page's identity: %q", c.role, kv)
		}
		b.noJSErrors(t, c.role)

		// Sign out: the sign-in again, no error.
		b.eval(t, `document.getElementById("sign-out").click(); true`)
		b.waitFor(t, c.role+" signed out", `!document.getElementById("token-form").hidden && document.getElementById("who").hidden && document.getElementById("error").hidden && !sessionStorage.getItem("queenToken")`)
	}

	// An expired token: the broker's message, and the sign-in again.
	expired := jwtClaims("old", "admin")
	expired["exp"] = time.Now().Add(-time.Hour).Unix()
	b.signIn(t, e.keys.Sign(t, auth.HS256, expired))
	b.waitFor(t, "an expired token refused", signedOutWith("the token expired at"))
	// A token with another key: likewise.
	b.signIn(t, e.other.Sign(t, auth.HS256, jwtClaims("mallory", "admin")))
	b.waitFor(t, "a bad signature refused", signedOutWith("signature does not verify"))

	// During a session: once the broker answers 401 for the stored token
	// (here it is swapped for an expired one, as the stored token would
	// be when its exp passes), the next poll shows the message and the
	// sign-in.
	b.signIn(t, admin)
	b.waitFor(t, "admin signed in", `!document.getElementById("who").hidden && document.getElementById("who-role").textContent === "admin"`)
	b.goHash(t, "#/cluster")
	b.waitFor(t, "the cluster page", `document.querySelector('#cluster-brokers tr[data-broker]')`)
	b.eval(t, `sessionStorage.setItem("queenToken", `+strconv.Quote(e.keys.Sign(t, auth.HS256, expired))+`); true`)
	b.waitFor(t, "signed out by the broker's 401", signedOutWith("the token expired at"))
	if n := b.eval(t, `document.querySelectorAll("#cluster-brokers").length`); n != "0" {
		t.Fatalf("the cluster page stayed after the 401")
	}
	b.noJSErrors(t, "the expired token")
}
