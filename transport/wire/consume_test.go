package wire

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/queen-mq/queen-go"
)

func TestDecodePopQuery(t *testing.T) {
	r, err := DecodePopQuery("q", "", url.Values{})
	if err != nil || r.Batch != 1 || r.Timeout != queen.DefaultPopTimeout || r.ConsumerGroup != queen.DefaultConsumerGroup || r.Wait || r.AutoAck {
		t.Fatalf("defaults: %+v %v", r, err)
	}
	r, err = DecodePopQuery("q", "p", url.Values{"batch": {"50"}, "wait": {"true"}, "timeout": {"1500"}, "consumerGroup": {"g"},
		"autoAck": {"true"}, "subscriptionMode": {"new-only"}})
	if err != nil || r.Batch != 50 || !r.Wait || r.Timeout != 1500*time.Millisecond || r.ConsumerGroup != "g" || !r.AutoAck || !r.SubscriptionNew || r.Partition != "p" {
		t.Fatalf("parsed: %+v %v", r, err)
	}
	r, err = DecodePopQuery("q", "", url.Values{"subscriptionFrom": {"2026-01-02T03:04:05Z"}})
	if err != nil || r.SubscriptionFrom == nil || r.SubscriptionFrom.Year() != 2026 {
		t.Fatalf("subscriptionFrom: %+v %v", r, err)
	}
	for _, bad := range []url.Values{
		{"batch": {"0x1"}}, {"batch": {"-1"}}, {"batch": {"10001"}}, {"timeout": {"-5"}}, {"wait": {"maybe"}},
		{"subscriptionFrom": {"yesterday"}}, {"consumerGroup": {"a\x01b"}},
	} {
		if _, err := DecodePopQuery("q", "", bad); err == nil || queen.AsError(err).Status != 400 {
			t.Errorf("%v: %v, want a 400", bad, err)
		}
	}
	if _, err := DecodePopQuery("", "", nil); !errors.Is(err, queen.ErrMissingField) {
		t.Errorf("no queue: %v", err)
	}
}

// Upstream's subscription rule: a subscriptionFrom time wins over any mode;
// subscriptionFrom now and the modes new, new-only and now start at the
// group's first pop; every other mode (from_beginning, timestamp, ...) is all.
func TestDecodePopSubscriptionMode(t *testing.T) {
	for _, c := range []struct {
		mode, from string
		isNew      bool
		hasFrom    bool
	}{
		{"", "", false, false}, {"all", "", false, false}, {"from_beginning", "", false, false},
		{"timestamp", "", false, false}, {"later", "", false, false},
		{"new", "", true, false}, {"new-only", "", true, false}, {"now", "", true, false},
		{"", "now", true, false}, {"all", "now", true, false},
		{"timestamp", "2026-01-02T03:04:05Z", false, true}, {"all", "2026-01-02T03:04:05Z", false, true},
		{"new", "2026-01-02T03:04:05Z", false, true},
	} {
		r, err := DecodePopQuery("q", "", url.Values{"subscriptionMode": {c.mode}, "subscriptionFrom": {c.from}})
		if err != nil || r.SubscriptionNew != c.isNew || (r.SubscriptionFrom != nil) != c.hasFrom {
			t.Errorf("mode %q from %q: new %v from %v (%v), want new %v from %v", c.mode, c.from, r.SubscriptionNew, r.SubscriptionFrom, err, c.isNew, c.hasFrom)
		}
		body := marshalPop(c.mode, c.from)
		if r2, err := DecodePop(body); err != nil || r2.SubscriptionNew != r.SubscriptionNew || (r2.SubscriptionFrom != nil) != c.hasFrom {
			t.Errorf("NATS %s: %+v %v", body, r2, err)
		}
	}
}

func marshalPop(mode, from string) []byte {
	b, _ := json.Marshal(map[string]any{"queue": "q", "subscriptionMode": mode, "subscriptionFrom": from})
	return b
}

// partitions=N (upstream's v4 multi-partition pop): default 1, at most
// MaxPopPartitions; a larger, negative or non-integer value is refused with
// invalid_field naming partitions (and, above the limit, the limit), like a
// batch above MaxPopBatch.
func TestDecodePopPartitions(t *testing.T) {
	for q, want := range map[string]int{"": 1, "0": 1, "1": 1, "3": 3, "100": 100} {
		v := url.Values{}
		if q != "" {
			v.Set("partitions", q)
		}
		if r, err := DecodePopQuery("q", "", v); err != nil || r.Partitions != want {
			t.Errorf("partitions=%q: %d %v, want %d", q, r.Partitions, err, want)
		}
	}
	for _, bad := range []string{"-1", "two", "1.5", "101", "500"} {
		_, err := DecodePopQuery("q", "", url.Values{"partitions": {bad}})
		if e := queen.AsError(err); err == nil || e.Field != "partitions" || e.Code != queen.ErrInvalidField.Code {
			t.Errorf("partitions=%q: %v, want a 400 invalid_field naming partitions", bad, err)
		}
	}
	for _, body := range []string{`{"queue":"q","partitions":101}`, `{"queue":"q","partitions":-1}`} {
		_, err := DecodePop([]byte(body))
		if e := queen.AsError(err); err == nil || e.Field != "partitions" || !strings.Contains(e.Message, "1 to 100") {
			t.Errorf("NATS pop %s: %v, want a 400 naming partitions and its limit", body, err)
		}
	}
	// The same rule as batch: over the limit is refused, never capped.
	if _, err := DecodePopQuery("q", "", url.Values{"batch": {"10001"}}); err == nil || queen.AsError(err).Field != "batch" {
		t.Errorf("batch=10001: %v, want a 400 naming batch", err)
	}
	if r, err := DecodePop([]byte(`{"queue":"q","batch":10,"partitions":4}`)); err != nil || r.Partitions != 4 || r.Batch != 10 {
		t.Errorf("NATS pop body: %+v %v", r, err)
	}
}

func TestDecodeAck(t *testing.T) {
	it, err := DecodeAck([]byte(`{"transactionId":"Bed&Breakfast-771","partitionId":"0190a4b6-0000-7000-8000-000000000001","status":"success","leaseId":"0190a4b6-0000-7000-8000-000000000002"}`))
	if err != nil || it.Status != queen.AckCompleted || it.Offset != -1 || it.Hash != queen.HashTxn("Bed&Breakfast-771") || it.LeaseID == nil || it.ConsumerGroup != queen.DefaultConsumerGroup {
		t.Fatalf("%+v %v", it, err)
	}
	its, err := DecodeAckBatch([]byte(`{"consumerGroup":"g","acknowledgments":[{"partitionId":"0190a4b6-0000-7000-8000-000000000001","offset":4,"status":"failed","error":"x"},{"partitionId":"0190a4b6-0000-7000-8000-000000000001","transactionId":"t","consumerGroup":"h"}]}`))
	if err != nil || len(its) != 2 || its[0].Offset != 4 || its[0].Status != queen.AckFailed || its[0].ConsumerGroup != "g" || its[1].ConsumerGroup != "h" {
		t.Fatalf("%+v %v", its, err)
	}
	for _, bad := range []string{
		`{"transactionId":"t"}`,
		`{"partitionId":"x","transactionId":"t"}`,
		`{"partitionId":"0190a4b6-0000-7000-8000-000000000001"}`,
		`{"partitionId":"0190a4b6-0000-7000-8000-000000000001","offset":-1}`,
		`{"partitionId":"0190a4b6-0000-7000-8000-000000000001","offset":"1"}`,
		`{"partitionId":"0190a4b6-0000-7000-8000-000000000001","transactionId":"t","status":"done"}`,
		`{"partitionId":"0190a4b6-0000-7000-8000-000000000001","transactionId":"t\u0000"}`,
		`[1]`, `{"partitionId":`, "{\"partitionId\":\"\xff\"}",
	} {
		if _, err := DecodeAck([]byte(bad)); err == nil || queen.AsError(err).Status != 400 {
			t.Errorf("%s: %v, want a 400", bad, err)
		}
	}
	if _, err := DecodeAckBatch([]byte(`{}`)); !errors.Is(err, queen.ErrMissingField) {
		t.Errorf("no acknowledgments: %v", err)
	}
	if _, err := DecodeAckBatch([]byte(`{"acknowledgments":[{"transactionId":"t"}]}`)); err == nil || queen.AsError(err).Index == nil || *queen.AsError(err).Index != 0 {
		t.Errorf("item errors name the index: %v", err)
	}
	// An error text is kept to MaxAckErrorBytes (issue 38: 15 MiB were
	// stored in a dead letter).
	long := strings.Repeat("e", 1<<20)
	it, err = DecodeAck([]byte(`{"partitionId":"0190a4b6-0000-7000-8000-000000000001","offset":1,"status":"failed","error":"` + long + `"}`))
	if err != nil || len(it.Error) > queen.MaxAckErrorBytes || !strings.HasSuffix(it.Error, queen.AckErrorTruncatedMarker) {
		t.Errorf("a 1 MiB error text: %d bytes kept, %v", len(it.Error), err)
	}
}

func TestDecodeLeaseExtendAndSeek(t *testing.T) {
	for body, want := range map[string]int64{``: 0, `{}`: 0, `{"seconds":30}`: 30} {
		if n, err := DecodeLeaseExtend([]byte(body)); err != nil || n != want {
			t.Errorf("%q: %d %v", body, n, err)
		}
	}
	if _, err := DecodeLeaseExtend([]byte(`{"seconds":-1}`)); err == nil {
		t.Error("negative seconds accepted")
	}
	if r, err := DecodeSeek([]byte(`{"toEnd":true}`)); err != nil || !r.ToEnd {
		t.Errorf("toEnd: %+v %v", r, err)
	}
	if r, err := DecodeSeek([]byte(`{"timestamp":"2026-01-02T03:04:05.5Z"}`)); err != nil || r.Timestamp == nil {
		t.Errorf("timestamp: %+v %v", r, err)
	}
	for _, bad := range []string{`{}`, `{"toEnd":true,"timestamp":"2026-01-02T03:04:05Z"}`, `{"timestamp":"soon"}`} {
		if _, err := DecodeSeek([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
