package wire

import (
	"errors"
	"net/url"
	"testing"

	"github.com/queen-mq/queen-go"
)

func TestDecodeDedup(t *testing.T) {
	q, err := DecodeDedupQuery(url.Values{"queue": {"q"}, "transactionId": {"Bed&Breakfast-771"}})
	if err != nil || q.Queue != "q" || q.Partition != queen.DefaultPartition || q.Hash != queen.HashTxn("Bed&Breakfast-771") {
		t.Fatalf("query: %+v %v", q, err)
	}
	// JSON escapes never change the key (SPEC.md §10).
	b, err := DecodeDedup([]byte(`{"queue":"q","partition":"p","transactionId":"2026\/07\/BK-11"}`))
	if err != nil || b.Partition != "p" || b.Hash != queen.HashTxn("2026/07/BK-11") {
		t.Fatalf("body: %+v %v", b, err)
	}
	for _, c := range []struct {
		body string
		err  *queen.Error
	}{
		{`{"transactionId":"x"}`, queen.ErrMissingField},
		{`{"queue":"q"}`, queen.ErrMissingField},
		{`{"queue":"q","transactionId":""}`, queen.ErrMissingField},
		{`{"queue":"q","transactionId":"a\u007fb"}`, queen.ErrControlChar},
		{`{"queue":"q","partition":5,"transactionId":"x"}`, queen.ErrInvalidField},
		{`{"queue":"q","transactionId":"\ud800"}`, queen.ErrInvalidUTF8},
		{`[]`, queen.ErrInvalidJSON},
	} {
		if _, err := DecodeDedup([]byte(c.body)); !errors.Is(err, c.err) {
			t.Errorf("%s: %v, want %s", c.body, err, c.err.Code)
		}
	}
}

func TestDecodeReplay(t *testing.T) {
	r, err := DecodeReplay([]byte(`{"queue":"q","consumerGroup":"g","ids":[3,1]}`))
	if err != nil || r.Queue != "q" || r.ConsumerGroup != "g" || len(r.IDs) != 2 || r.Limit != 0 {
		t.Fatalf("ids: %+v %v", r, err)
	}
	r, err = DecodeReplay([]byte(`{"queue":"q","partition":"p","from":"2026-01-02T03:04:05Z"}`))
	if err != nil || r.Partition != "p" || r.From == nil || r.To != nil || r.Limit != DefaultReplayLimit || r.IDs != nil {
		t.Fatalf("filter: %+v %v", r, err)
	}
	if ReplayTransactionID(42) != "dlq:42" {
		t.Fatal(ReplayTransactionID(42))
	}
	for _, body := range []string{
		`{"ids":[1]}`, `{"queue":"q","ids":[1],"partition":"p"}`, `{"queue":"q","ids":[]}`, `{"queue":"q","ids":[0]}`,
		`{"queue":"q","ids":[1.5]}`, `{"queue":"q","limit":10001}`, `{"queue":"q","to":"now"}`, `{"queue":"q","consumerGroup":7}`,
	} {
		if _, err := DecodeReplay([]byte(body)); err == nil || queen.AsError(err).Status != 400 {
			t.Errorf("%s: %v, want a 400", body, err)
		}
	}
}
