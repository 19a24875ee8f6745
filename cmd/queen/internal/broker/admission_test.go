package broker

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// pushBodyOf returns a valid one-item push body of exactly n bytes (the
// payload string pads it).
func pushBodyOf(t *testing.T, q, txn string, n int) []byte {
	t.Helper()
	head := fmt.Sprintf(`{"items":[{"queue":%q,"partition":"p","transactionId":%q,"payload":"`, q, txn)
	tail := `"}]}`
	pad := n - len(head) - len(tail)
	if pad < 0 {
		t.Fatalf("body of %d bytes is too small", n)
	}
	return []byte(head + strings.Repeat("x", pad) + tail)
}

// rawPush opens a connection to the broker's HTTP gateway and sends a push's
// request line and headers only: contentLength < 0 sends
// "Transfer-Encoding: chunked" instead of a Content-Length.
func (e *env) rawPush(t *testing.T, contentLength int, expectContinue bool) (net.Conn, *bufio.Reader) {
	t.Helper()
	u, err := url.Parse(e.base)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var h strings.Builder
	fmt.Fprintf(&h, "POST /api/v1/push HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n", u.Host)
	if contentLength >= 0 {
		fmt.Fprintf(&h, "Content-Length: %d\r\n", contentLength)
	} else {
		h.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if expectContinue {
		h.WriteString("Expect: 100-continue\r\n")
	}
	h.WriteString("\r\n")
	if _, err := io.WriteString(c, h.String()); err != nil {
		t.Fatal(err)
	}
	// A hang is a failure, not a stuck test run.
	c.SetDeadline(time.Now().Add(time.Minute)) //nolint:errcheck
	return c, bufio.NewReader(c)
}

// readResponse reads one HTTP response (after any 100 Continue, which it
// reports) and its body.
func readResponse(t *testing.T, br *bufio.Reader) (res *http.Response, body []byte, continued bool) {
	t.Helper()
	for {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading the response: %v", err)
		}
		if res.StatusCode == http.StatusContinue {
			continued = true
			continue
		}
		body, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatalf("reading the response body: %v", err)
		}
		return res, body, continued
	}
}

// requireOverloaded checks a 503 overloaded reply with Retry-After.
func requireOverloaded(t *testing.T, what string, res *http.Response, body []byte) {
	t.Helper()
	var eb errBody
	_ = json.Unmarshal(body, &eb)
	if res.StatusCode != http.StatusServiceUnavailable || eb.Code != "overloaded" || res.Header.Get("Retry-After") == "" {
		t.Fatalf("%s: status %d Retry-After %q body %s; want 503 overloaded with Retry-After", what, res.StatusCode, res.Header.Get("Retry-After"), clip(body))
	}
}

// TestAdmissionBeforeReading (issue 29, item 2): a push body holds the
// in-flight body budget from its first byte until it is answered, and a push
// over the budget is answered 503 overloaded with Retry-After before its body
// is read. With a 1 MiB budget and one slow 768 KiB upload holding it:
//   - pushes declaring 512 KiB are refused at once: with "Expect:
//     100-continue" no 100 Continue comes first (the client never sends the
//     body), without it the reply comes while the client has sent headers
//     only;
//   - a chunked 15 MiB upload is refused after at most a few hundred KiB, so
//     its writer never finishes;
//   - the refused requests hold nothing (the budget in use stays the slow
//     upload's 768 KiB), and once the slow upload is answered (201 queued,
//     stored) the same pushes are admitted.
func TestAdmissionBeforeReading(t *testing.T) {
	const budget = 1 << 20
	e := startEnv(t, func(c *Config) { c.MaxInFlightBodyBytes = budget })
	q := "admission"
	slow := pushBodyOf(t, q, "slow", 768<<10)
	c, br := e.rawPush(t, len(slow), true)
	// The 100 Continue says the handler admitted the body and started
	// reading it.
	if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != http.StatusContinue {
		t.Fatalf("slow upload: want 100 Continue, got %v %v", res, err)
	}
	if _, err := c.Write(slow[:1024]); err != nil {
		t.Fatal(err)
	}
	eq(t, int64(len(slow)), e.b.svc.InFlightBodyBytes(), "budget held by the slow upload")

	const refused = 20
	for i := 0; i < refused; i++ {
		_, br := e.rawPush(t, 512<<10, true)
		res, body, continued := readResponse(t, br)
		requireOverloaded(t, "Expect: 100-continue", res, body)
		if continued {
			t.Fatalf("push %d: the broker asked for the body (100 Continue) before refusing it", i)
		}
		_, br = e.rawPush(t, 512<<10, false)
		res, body, _ = readResponse(t, br)
		requireOverloaded(t, "headers only", res, body)
	}

	// A chunked upload counts as it is read.
	cc, cbr := e.rawPush(t, -1, false)
	const total = 15 << 20
	done := make(chan int, 1)
	go func() {
		chunk := []byte(fmt.Sprintf("%x\r\n%s\r\n", 64<<10, strings.Repeat("x", 64<<10)))
		sent := 0
		for sent < total {
			if _, err := cc.Write(chunk); err != nil {
				break
			}
			sent += 64 << 10
		}
		done <- sent
	}()
	res, body, _ := readResponse(t, cbr)
	requireOverloaded(t, "chunked", res, body)
	cc.Close()
	if sent := <-done; sent >= total {
		t.Fatalf("the chunked upload sent all its %d bytes before it was refused", sent)
	}
	eq(t, int64(len(slow)), e.b.svc.InFlightBodyBytes(), "budget held after the refusals")

	if _, err := c.Write(slow[1024:]); err != nil {
		t.Fatal(err)
	}
	res, body, _ = readResponse(t, br)
	if res.StatusCode != http.StatusCreated || !strings.Contains(string(body), `"status":"queued"`) {
		t.Fatalf("slow upload: status %d %s", res.StatusCode, clip(body))
	}
	eq(t, int64(0), e.b.svc.InFlightBodyBytes(), "budget held once answered")

	// The refused ones are retried and admitted now.
	r, err := e.tryPushRaw(t, pushBodyOf(t, q, "retry", 512<<10))
	if err != nil || r.Status != http.StatusCreated {
		t.Fatalf("retry after the slow upload: %v %d %s", err, r.Status, clip(r.Raw))
	}
	eq(t, 2, len(e.frames(t, q, "p")), "stored messages")
}

// tryPushRaw posts body to /api/v1/push over HTTP.
func (e *env) tryPushRaw(t *testing.T, body []byte) (result, error) {
	t.Helper()
	res, err := e.hc.Post(e.base+"/api/v1/push", "application/json", strings.NewReader(string(body)))
	if err != nil {
		return result{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	return result{Status: res.StatusCode, Raw: raw, Header: res.Header}, err
}
