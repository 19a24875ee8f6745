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

// TestAdmissionCountsArrivedBytes (issue 29 item 2, issue 38 item 3): a
// push body holds the in-flight body budget by what has arrived (its
// buffer: 64 KiB, then doubling up to the declared length), never by what it
// declares, until it is answered; a body that stops arriving is cut off
// after the body idle timeout. With a 1 MiB budget:
//   - eight sockets that announce 16 MiB bodies and send a few bytes hold
//     8 x 64 KiB (not 128 MiB), and a normal push is answered 201 queued
//     while they do (before this change they held the whole budget and every
//     push was refused);
//   - a chunked 15 MiB upload sent as fast as it goes is refused with 503
//     overloaded once it has filled the budget, so its writer never
//     finishes, and the refusal holds nothing;
//   - the eight stalled sockets are answered 408 body_stalled after the idle
//     timeout, and the budget in use returns to 0;
//   - the pushes retried then are admitted and stored.
func TestAdmissionCountsArrivedBytes(t *testing.T) {
	const budget = 1 << 20
	const idle = 3 * time.Second
	e := startEnv(t, func(c *Config) { c.MaxInFlightBodyBytes = budget; c.BodyIdleTimeout = idle })
	q := "admission"
	type slowSocket struct {
		c  net.Conn
		br *bufio.Reader
	}
	var slow []slowSocket
	for i := 0; i < 8; i++ {
		c, br := e.rawPush(t, 16<<20, false)
		if _, err := c.Write([]byte(`{"items":[`)); err != nil {
			t.Fatal(err)
		}
		slow = append(slow, slowSocket{c, br})
	}
	eventually(t, 10*time.Second, 10*time.Millisecond, "the slow sockets hold their first 64 KiB each", func() (bool, string) {
		got := e.b.svc.InFlightBodyBytes()
		return got == 8*64<<10, fmt.Sprintf("budget in use %d", got)
	})
	r, err := e.tryPushRaw(t, pushBodyOf(t, q, "normal", 4<<10))
	if err != nil || r.Status != http.StatusCreated || !strings.Contains(string(r.Raw), `"status":"queued"`) {
		t.Fatalf("a normal push beside eight slow sockets: %v %d %s", err, r.Status, clip(r.Raw))
	}

	// A chunked upload counts as it is read, and is refused once the budget
	// is full of bytes that arrived.
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

	// The stalled bodies are cut off and release what they held.
	for i, s := range slow {
		res, body, _ := readResponse(t, s.br)
		var eb errBody
		_ = json.Unmarshal(body, &eb)
		if res.StatusCode != http.StatusRequestTimeout || eb.Code != "body_stalled" {
			t.Fatalf("stalled socket %d: status %d %s; want 408 body_stalled", i, res.StatusCode, clip(body))
		}
	}
	eventually(t, 10*time.Second, 10*time.Millisecond, "the budget is released", func() (bool, string) {
		got := e.b.svc.InFlightBodyBytes()
		return got == 0, fmt.Sprintf("budget in use %d", got)
	})
	r, err = e.tryPushRaw(t, pushBodyOf(t, q, "retry", 512<<10))
	if err != nil || r.Status != http.StatusCreated {
		t.Fatalf("retry after the stalled bodies: %v %d %s", err, r.Status, clip(r.Raw))
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
