package target

import "net/http"

// NewFailoverSender pushes over HTTP to one of several brokers: it starts
// at its own broker (producers are spread round robin) and moves to the
// next one when a request fails in transport (the broker is down or did not
// answer; client.HTTPConfig). The failed request's items are retried by the
// producer with the same transactionIds, wherever they go next. token as
// NewNATSSender's.
func NewFailoverSender(hc *http.Client, urls []string, start int, token string) *HTTPSender {
	return NewHTTPSender(hc, token, rotate(urls, start)...)
}

// NewFailoverConsumer is a consumer's HTTP client over several brokers: it
// starts at its own and moves to the next one after a transport failure.
func NewFailoverConsumer(hc *http.Client, urls []string, start int, token string) ConsumeClient {
	return NewHTTPConsumer(hc, token, rotate(urls, start)...)
}

// rotate is urls starting at start (modulo their count).
func rotate(urls []string, start int) []string {
	k := start % len(urls)
	return append(append([]string(nil), urls[k:]...), urls[:k]...)
}
