package wire

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
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

// TestDecodeTraceAndCacheSwitch: the trace event is validated as upstream
// Queen does, and the dedup cache's switch needs its one field.
func TestDecodeTraceAndCacheSwitch(t *testing.T) {
	const pid = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	if err := DecodeTrace([]byte(`{"transactionId":"t","partitionId":"` + pid + `","traceNames":["a"],"data":{"n":1}}`)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		body  string
		err   *queen.Error
		field string
	}{
		{`{"partitionId":"` + pid + `","data":{}}`, queen.ErrMissingField, "transactionId"},
		{`{"transactionId":"t","data":{}}`, queen.ErrMissingField, "partitionId"},
		{`{"transactionId":"t","partitionId":"` + pid + `"}`, queen.ErrMissingField, "data"},
		{`{"transactionId":"t","partitionId":"p-1","data":{}}`, queen.ErrInvalidField, "partitionId"},
		{`{"transactionId":5,"partitionId":"` + pid + `","data":{}}`, queen.ErrInvalidField, ""},
		{`[]`, queen.ErrInvalidJSON, ""},
	} {
		err := DecodeTrace([]byte(c.body))
		if !errors.Is(err, c.err) || (c.field != "" && queen.AsError(err).Field != c.field) {
			t.Errorf("trace %s: %v, want %s at %q", c.body, err, c.err.Code, c.field)
		}
	}

	for body, want := range map[string]bool{`{"enabled":true}`: true, `{"enabled":false}`: false} {
		if on, err := DecodeCacheSwitch([]byte(body)); err != nil || on != want {
			t.Errorf("%s: %v %v", body, on, err)
		}
	}
	for body, want := range map[string]*queen.Error{`{}`: queen.ErrMissingField, `{"enabled":null}`: queen.ErrMissingField,
		`{"enabled":"yes"}`: queen.ErrInvalidField, `{`: queen.ErrInvalidJSON} {
		if _, err := DecodeCacheSwitch([]byte(body)); !errors.Is(err, want) {
			t.Errorf("%s: %v, want %s", body, err, want.Code)
		}
	}
}

// TestNewConfigureReply: notEnforced lists the set options of
// queen.NotEnforcedOptions in that order, and is [] (not null) when none.
func TestNewConfigureReply(t *testing.T) {
	var o queen.Options
	if err := json.Unmarshal([]byte(`{"ttl":5,"priority":1,"leaseTime":60}`), &o); err != nil {
		t.Fatal(err)
	}
	r := NewConfigureReply(queen.ConfigureResult{Queue: "q", Options: o, Created: true})
	if !r.Configured || r.Queue != "q" || !r.Created || len(r.NotEnforced) != 2 || r.NotEnforced[0] != "priority" || r.NotEnforced[1] != "ttl" {
		t.Fatalf("%+v", r)
	}
	b, err := json.Marshal(NewConfigureReply(queen.ConfigureResult{Queue: "q"}))
	if err != nil || !strings.Contains(string(b), `"notEnforced":[]`) {
		t.Fatalf("%s %v", b, err)
	}
}
