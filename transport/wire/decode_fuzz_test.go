package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/queen-mq/queen-go"
)

// FuzzDecodePush checks that DecodePush never panics, that what it accepts
// satisfies the Item invariants, and that it accepts exactly what a slow
// reference built on encoding/json accepts, with the same items.
func FuzzDecodePush(f *testing.F) {
	for _, tc := range pushErrCases {
		f.Add([]byte(tc.body), uint16(0))
	}
	for _, b := range []string{
		`{"items":[]}`,
		body(`{"queue":"q"}`),
		body(`{"queue":"q","partition":"p","transactionId":"t","traceId":"x","payload":{"a":[1,-2.5e+3,"s\n\u00e9\ud83d\ude00",true,false,null]}}`),
		body(`{"queue":"Bed\u0026Breakfast-771","transactionId":"2026\/07\/BK-11","data":"日本"}`),
		body(`{"queue":"q","payload":null,"data":1}`, `{"queue":"q","partition":null,"transactionId":null,"traceId":null}`),
		body(`{"queue":"q","transactionId":"","partition":"","extra":{"queue":1}}`),
		body(`{"queue":"q\ufeff","partition":"p\u2028","transactionId":"t\u0085\u200b"}`),
		body(`{"queue":"q","partition":"\u200c\u200d\u00a0\u009f","transactionId":"\u2029\ufeff"}`),
		` {"a":{"items":1},"items":[{"queue":"q","payload":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}]} `,
	} {
		f.Add([]byte(b), uint16(0))
		f.Add([]byte(b), uint16(8))
	}
	f.Add(benchBody(3), uint16(300))
	f.Fuzz(func(t *testing.T, b []byte, limit uint16) {
		maxPayload := int(limit)
		in := bytes.Clone(b)
		items, err := DecodePush(in, maxPayload)
		if maxPayload <= 0 {
			maxPayload = queen.DefaultMaxPayloadBytes
		}
		want, refErr := refDecodePush(b, maxPayload)
		if err != nil {
			var e *queen.Error
			if !errors.As(err, &e) || e.Status != 400 || e.Retryable || e.Message == "" {
				t.Fatalf("error is not a 400 from the registry: %#v", err)
			}
			if e.Index != nil && (*e.Index < 0 || !strings.HasPrefix(e.Field, "items[")) {
				t.Fatalf("error %q: index %d, field %q", e.Message, *e.Index, e.Field)
			}
			if items != nil {
				t.Fatalf("items returned with an error")
			}
			if refErr == "" {
				t.Fatalf("DecodePush refused a body the reference accepts: %v", err)
			}
			return
		}
		if refErr != "" {
			t.Fatalf("DecodePush accepted a body the reference refuses (%s)", refErr)
		}
		if items == nil || len(items) != len(want) {
			t.Fatalf("got %d items; the reference %d", len(items), len(want))
		}
		for i := range in {
			in[i] = 0 // payloads must not alias the body
		}
		for i, it := range items {
			checkItem(t, i, it, maxPayload)
			w := want[i]
			if it.Queue != w.Queue || it.Partition != w.Partition || !bytes.Equal(it.Payload, w.Payload) ||
				(it.TraceID == nil) != (w.TraceID == nil) || (it.TraceID != nil && *it.TraceID != *w.TraceID) ||
				(w.TransactionID != "" && it.TransactionID != w.TransactionID) {
				t.Fatalf("item %d: got %+v (payload %q); the reference %+v (payload %q)", i, it, it.Payload, w, w.Payload)
			}
			if w.TransactionID == "" {
				if id, err := uuid.Parse(it.TransactionID); err != nil || id.Version() != 7 {
					t.Fatalf("item %d: generated transactionId %q is not a UUIDv7", i, it.TransactionID)
				}
			}
		}
	})
}

// checkItem asserts the invariants of a decoded item.
func checkItem(t *testing.T, i int, it queen.Item, maxPayload int) {
	t.Helper()
	for _, s := range []struct {
		v   string
		max int
	}{{it.Queue, queen.MaxNameBytes}, {it.Partition, queen.MaxNameBytes}, {it.TransactionID, queen.MaxTransactionIDBytes}} {
		if s.v == "" || len(s.v) > s.max || !utf8.ValidString(s.v) || strings.ContainsFunc(s.v, refControl) {
			t.Fatalf("item %d: bad name or id %q", i, s.v)
		}
	}
	if queen.ValidateName(it.Queue, "queue") != nil || queen.ValidateName(it.Partition, "partition") != nil {
		t.Fatalf("item %d: ValidateName refuses %q / %q", i, it.Queue, it.Partition)
	}
	if it.TraceID != nil && !utf8.ValidString(*it.TraceID) {
		t.Fatalf("item %d: traceId is not UTF-8", i)
	}
	if len(it.Payload) == 0 || len(it.Payload) > max(maxPayload, 2) || !json.Valid(it.Payload) || !utf8.Valid(it.Payload) {
		t.Fatalf("item %d: bad payload %q", i, it.Payload)
	}
	// The kernel's payload rule, which the shards apply again, agrees.
	if e := queen.ValidatePayload(i, "payload", it.Payload, max(maxPayload, 2)); e != nil {
		t.Fatalf("item %d: ValidatePayload refuses a payload DecodePush took: %v", i, e)
	}
	if it.Hash != queen.HashTxn(it.TransactionID) {
		t.Fatalf("item %d: Hash is not HashTxn(TransactionID)", i)
	}
	// The payload re-encodes (a pop reply embeds it).
	if _, err := json.Marshal(it); err != nil {
		t.Fatalf("item %d does not encode: %v", i, err)
	}
}

// refDecodePush is a slow, obviously-correct DecodePush on encoding/json. It
// returns the items (TransactionID "" where one is generated) or why it refuses.
func refDecodePush(b []byte, maxPayload int) ([]queen.Item, string) {
	if !json.Valid(b) {
		return nil, "invalid JSON"
	}
	if checkEncoding(b) != nil {
		return nil, "invalid UTF-8"
	}
	top, why := refObject(b, "items")
	if why != "" {
		return nil, why
	}
	raw, ok := top["items"]
	if !ok {
		return nil, "no items"
	}
	var list []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &list) != nil {
		return nil, "items not an array"
	}
	if len(list) > queen.MaxItems {
		return nil, "too many items"
	}
	out := []queen.Item{}
	for _, r := range list {
		m, why := refObject(r, "queue", "partition", "transactionId", "traceId", "payload", "data")
		if why != "" {
			return nil, why
		}
		var it queen.Item
		str := func(k string) (string, bool, string) { // value, present, problem
			v, ok := m[k]
			if !ok || string(v) == "null" {
				return "", false, ""
			}
			var s string
			if v[0] != '"' || json.Unmarshal(v, &s) != nil {
				return "", false, k + " not a string"
			}
			return s, true, ""
		}
		var bad string
		it.Queue, _, bad = str("queue")
		if bad != "" {
			return nil, bad
		}
		if it.Partition, _, bad = str("partition"); bad != "" {
			return nil, bad
		}
		if it.TransactionID, _, bad = str("transactionId"); bad != "" {
			return nil, bad
		}
		trace, hasTrace, bad := str("traceId")
		if bad != "" {
			return nil, bad
		}
		if hasTrace {
			it.TraceID = &trace
		}
		if it.Queue == "" {
			return nil, "no queue"
		}
		if it.Partition == "" {
			it.Partition = queen.DefaultPartition
		}
		for _, s := range []struct {
			v    string
			max  int
			name bool
		}{{it.Queue, queen.MaxNameBytes, true}, {it.Partition, queen.MaxNameBytes, true}, {it.TransactionID, queen.MaxTransactionIDBytes, false}} {
			if len(s.v) > s.max {
				return nil, "too long"
			}
			if strings.ContainsFunc(s.v, refControl) || (s.name && strings.ContainsFunc(s.v, refInvisible)) {
				return nil, "control character"
			}
		}
		it.Payload = json.RawMessage("{}")
		if v, ok := m["payload"]; ok {
			it.Payload = v
		} else if v, ok := m["data"]; ok {
			it.Payload = v
		}
		if len(it.Payload) > maxPayload && (m["payload"] != nil || m["data"] != nil) {
			return nil, "payload too large"
		}
		out = append(out, it)
	}
	return out, ""
}

// refControl is Unicode's control category (Cc), written out.
func refControl(r rune) bool { return unicode.Is(unicode.Cc, r) }

// refInvisible is what names refuse beyond controls: the separators U+2028
// and U+2029 and the format characters (Cf) but for ZWNJ and ZWJ.
func refInvisible(r rune) bool {
	return unicode.In(r, unicode.Zl, unicode.Zp) || (unicode.Is(unicode.Cf, r) && r != '\u200c' && r != '\u200d')
}

// refObject decodes a JSON object into its members (raw values), refusing a
// non-object or one of the known keys given twice.
func refObject(b []byte, known ...string) (map[string]json.RawMessage, string) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, "not an object"
	}
	m := map[string]json.RawMessage{}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, "bad key"
		}
		k := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, "bad value"
		}
		for _, n := range known {
			if n == k {
				if seen[k] {
					return nil, "duplicate " + k
				}
				seen[k] = true
				m[k] = v
			}
		}
	}
	return m, ""
}
