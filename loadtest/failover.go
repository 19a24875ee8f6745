package loadtest

import (
	"context"
	"net/http"
	"strings"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport"
)

// failoverSender pushes over HTTP to one of several brokers: it starts at
// its own broker (producers are spread round robin) and moves to the next
// one when a request fails in transport (the broker is down or did not
// answer). The failed request's items are retried by the producer with the
// same transactionIds, wherever they go next.
type failoverSender struct {
	urls []string
	cur  int
	s    httpSender
}

func newFailoverSender(hc *http.Client, urls []string, start int) *failoverSender {
	return &failoverSender{urls: urls, cur: start % len(urls), s: httpSender{hc: hc}}
}

func (f *failoverSender) send(ctx context.Context, items []transport.PushItem, out []result) error {
	f.s.url = strings.TrimRight(f.urls[f.cur], "/") + "/api/v1/push"
	err := f.s.send(ctx, items, out)
	if err != nil && f.s.transportFailed {
		f.cur = (f.cur + 1) % len(f.urls)
	}
	return err
}

func (f *failoverSender) close() {}

// failoverConsumer is a consumer's HTTP client over several brokers: it
// starts at its own and moves to the next one after a transport failure.
type failoverConsumer struct {
	cs  []*httpConsumer
	cur int
}

func newFailoverConsumer(hc *http.Client, urls []string, start int, token string) *failoverConsumer {
	f := &failoverConsumer{cur: start % len(urls)}
	for _, u := range urls {
		f.cs = append(f.cs, &httpConsumer{hc: hc, base: strings.TrimRight(u, "/"), token: token})
	}
	return f
}

// after moves on when the call just made on c failed in transport.
func (f *failoverConsumer) after(c *httpConsumer) {
	if c.transportFailed {
		f.cur = (f.cur + 1) % len(f.cs)
	}
}

func (f *failoverConsumer) pop(ctx context.Context, r popReq) (queen.PopResult, error) {
	c := f.cs[f.cur]
	res, err := c.pop(ctx, r)
	f.after(c)
	return res, err
}

func (f *failoverConsumer) ack(ctx context.Context, group string, acks []transport.Ack) ([]queen.AckResult, error) {
	c := f.cs[f.cur]
	res, err := c.ack(ctx, group, acks)
	f.after(c)
	return res, err
}

func (f *failoverConsumer) configure(ctx context.Context, body []byte) ([]byte, error) {
	c := f.cs[f.cur]
	res, err := c.configure(ctx, body)
	f.after(c)
	return res, err
}

func (f *failoverConsumer) close() {}
