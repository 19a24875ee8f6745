package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/queen-mq/queen-go"
)

// The module does not require github.com/stretchr/testify (adding it needs a
// go.mod change outside this package's files), so these small helpers stand
// in for require.

func mustDecode(t testing.TB, body string) []queen.Item {
	t.Helper()
	items, err := DecodePush([]byte(body), 0)
	if err != nil {
		t.Fatalf("DecodePush(%.200q): unexpected error %v", body, err)
	}
	return items
}

// wantErr checks that err is the registry error want, at item index (-1: no
// index) and field path field ("" to skip the check).
func wantErr(t testing.TB, err error, want *queen.Error, index int, field string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error; want %s", want.Code)
	}
	var e *queen.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %T %v is not a *queen.Error", err, err)
	}
	if !errors.Is(err, want) {
		t.Fatalf("got %s (%q); want %s", e.Code, e.Message, want.Code)
	}
	if e.Status != 400 || e.Retryable {
		t.Fatalf("error %s: status %d retryable %v; want 400, not retryable", e.Code, e.Status, e.Retryable)
	}
	if e.Message == want.Message {
		t.Fatalf("error %s has the registry's generic message %q; want a sentence naming the problem", e.Code, e.Message)
	}
	switch {
	case index < 0 && e.Index != nil:
		t.Fatalf("error %s (%q) has index %d; want none", e.Code, e.Message, *e.Index)
	case index >= 0 && e.Index == nil:
		t.Fatalf("error %s (%q) has no index; want %d", e.Code, e.Message, index)
	case index >= 0 && *e.Index != index:
		t.Fatalf("error %s (%q) has index %d; want %d", e.Code, e.Message, *e.Index, index)
	}
	if field != "" && e.Field != field {
		t.Fatalf("error %s (%q) has field %q; want %q", e.Code, e.Message, e.Field, field)
	}
	if e.Field != "" && !strings.Contains(e.Message, e.Field[strings.LastIndex(e.Field, ".")+1:]) && e.Code != queen.ErrInvalidUTF8.Code && e.Code != queen.ErrInvalidJSON.Code {
		t.Fatalf("error %s: message %q does not name the field %q", e.Code, e.Message, e.Field)
	}
}

func body(items ...string) string {
	return `{"items":[` + strings.Join(items, ",") + `]}`
}

func TestDecodePushDefaults(t *testing.T) {
	t.Parallel()
	items := mustDecode(t, body(`{"queue":"orders"}`, `{"queue":"orders","partition":"","transactionId":"","traceId":null}`, `{"queue":"orders","partition":null,"transactionId":null}`))
	if len(items) != 3 {
		t.Fatalf("got %d items; want 3", len(items))
	}
	seen := map[string]bool{}
	for i, it := range items {
		if it.Queue != "orders" || it.Partition != queen.DefaultPartition || string(it.Payload) != "{}" || it.TraceID != nil {
			t.Fatalf("item %d = %+v; want queue orders, partition Default, payload {}, no trace", i, it)
		}
		id, err := uuid.Parse(it.TransactionID)
		if err != nil || id.Version() != 7 || id.Variant() != uuid.RFC4122 || id.String() != it.TransactionID {
			t.Fatalf("item %d: generated transactionId %q is not a canonical UUIDv7 (%v)", i, it.TransactionID, err)
		}
		if seen[it.TransactionID] {
			t.Fatalf("item %d: generated transactionId %q repeats", i, it.TransactionID)
		}
		seen[it.TransactionID] = true
		if it.Hash != queen.HashTxn(it.TransactionID) {
			t.Fatalf("item %d: Hash is not HashTxn(TransactionID)", i)
		}
	}
	// Payload defaults are separate copies.
	items[0].Payload[0] = 'X'
	if string(items[1].Payload) != "{}" {
		t.Fatalf("payload defaults share memory")
	}
}

func TestDecodePushGeneratedIDsDistinct(t *testing.T) {
	t.Parallel()
	n := 2000
	items := mustDecode(t, body(strings.Split(strings.Repeat(`{"queue":"q"},`, n-1)+`{"queue":"q"}`, ",")...))
	seen := make(map[string]bool, n)
	for i, it := range items {
		id, err := uuid.Parse(it.TransactionID)
		if err != nil || id.Version() != 7 || id.String() != it.TransactionID {
			t.Fatalf("item %d: %q is not a canonical UUIDv7", i, it.TransactionID)
		}
		if seen[it.TransactionID] {
			t.Fatalf("item %d: %q repeats", i, it.TransactionID)
		}
		seen[it.TransactionID] = true
	}
}

func TestDecodePushFields(t *testing.T) {
	t.Parallel()
	trace := func(s string) *string { return &s }
	for _, tc := range []struct {
		name string
		item string
		want queen.Item
	}{
		{"all fields", `{"queue":"q","partition":"p1","transactionId":"t1","traceId":"tr","payload":{"a":[1,2.5e3,"x",true,false,null]}}`,
			queen.Item{Queue: "q", Partition: "p1", TransactionID: "t1", TraceID: trace("tr"), Payload: json.RawMessage(`{"a":[1,2.5e3,"x",true,false,null]}`)}},
		{"data alias", `{"queue":"q","transactionId":"t","data":{"k":1}}`, queen.Item{Queue: "q", Partition: "Default", TransactionID: "t", Payload: json.RawMessage(`{"k":1}`)}},
		{"payload wins over data", `{"queue":"q","transactionId":"t","data":{"d":1},"payload":{"p":1}}`, queen.Item{Queue: "q", Partition: "Default", TransactionID: "t", Payload: json.RawMessage(`{"p":1}`)}},
		{"payload wins, data first", `{"data":[1],"payload":[2],"queue":"q","transactionId":"t"}`, queen.Item{Queue: "q", Partition: "Default", TransactionID: "t", Payload: json.RawMessage(`[2]`)}},
		{"payload null kept", `{"queue":"q","transactionId":"t","payload":null,"data":{"d":1}}`, queen.Item{Queue: "q", Partition: "Default", TransactionID: "t", Payload: json.RawMessage(`null`)}},
		{"payload array", `{"queue":"q","transactionId":"t","payload":[ 1 , 2 ]}`, queen.Item{Queue: "q", Partition: "Default", TransactionID: "t", Payload: json.RawMessage(`[ 1 , 2 ]`)}},
		{"payload string", `{"queue":"q","transactionId":"t","payload":"a\"b\u00e9"}`, queen.Item{Queue: "q", Partition: "Default", TransactionID: "t", Payload: json.RawMessage(`"a\"b\u00e9"`)}},
		{"payload number", `{"queue":"q","transactionId":"t","payload":-0.5E-7}`, queen.Item{Queue: "q", Partition: "Default", TransactionID: "t", Payload: json.RawMessage(`-0.5E-7`)}},
		{"payload true", `{"queue":"q","transactionId":"t","payload":true}`, queen.Item{Queue: "q", Partition: "Default", TransactionID: "t", Payload: json.RawMessage(`true`)}},
		{"payload false", `{"queue":"q","transactionId":"t","payload":false}`, queen.Item{Queue: "q", Partition: "Default", TransactionID: "t", Payload: json.RawMessage(`false`)}},
		{"payload empty object", `{"queue":"q","transactionId":"t","payload":{}}`, queen.Item{Queue: "q", Partition: "Default", TransactionID: "t", Payload: json.RawMessage(`{}`)}},
		{"whitespace everywhere", "\t{ \"queue\" :\n\"q\" ,\r\"transactionId\" : \"t\" , \"payload\" :\n[ ] }\n", queen.Item{Queue: "q", Partition: "Default", TransactionID: "t", Payload: json.RawMessage(`[ ]`)}},
		{"unknown fields ignored", `{"queue":"q","transactionId":"t","priority":5,"meta":{"x":[{"queue":1}]},"Queue":7,"PAYLOAD":1,"ttl":null}`, queen.Item{Queue: "q", Partition: "Default", TransactionID: "t", Payload: json.RawMessage(`{}`)}},
		{"trace empty string kept", `{"queue":"q","transactionId":"t","traceId":""}`, queen.Item{Queue: "q", Partition: "Default", TransactionID: "t", TraceID: trace(""), Payload: json.RawMessage(`{}`)}},
		{"escaped keys", `{"\u0071ueue":"q","transaction\u0049d":"t","pay\u006coad":1}`, queen.Item{Queue: "q", Partition: "Default", TransactionID: "t", Payload: json.RawMessage(`1`)}},
		{"DEL and controls allowed in traceId", `{"queue":"q","transactionId":"t","traceId":"a\u0000\u007f"}`, queen.Item{Queue: "q", Partition: "Default", TransactionID: "t", TraceID: trace("a\x00\x7f"), Payload: json.RawMessage(`{}`)}},
		{"emoji pair", `{"queue":"q\ud83d\ude00","partition":"😀","transactionId":"\uD83D\uDE00"}`, queen.Item{Queue: "q😀", Partition: "😀", TransactionID: "😀", Payload: json.RawMessage(`{}`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			items := mustDecode(t, ` {"other":[1,{"a":"b"}], "items" : [`+tc.item+`], "more":true} `)
			if len(items) != 1 {
				t.Fatalf("got %d items", len(items))
			}
			got, want := items[0], tc.want
			want.Hash = queen.HashTxn(want.TransactionID)
			if got.Queue != want.Queue || got.Partition != want.Partition || got.TransactionID != want.TransactionID ||
				!bytes.Equal(got.Payload, want.Payload) || got.Hash != want.Hash ||
				(got.TraceID == nil) != (want.TraceID == nil) || (got.TraceID != nil && *got.TraceID != *want.TraceID) {
				t.Fatalf("got  %+v (payload %s)\nwant %+v (payload %s)", got, got.Payload, want, want.Payload)
			}
		})
	}
}

func TestDecodePushEscapeEquivalence(t *testing.T) {
	t.Parallel()
	for _, pair := range [][2]string{
		{`Bed&Breakfast-771`, `Bed\u0026Breakfast-771`},
		{`2026/07/BK-11`, `2026\/07\/BK-11`},
		{`日本`, `\u65e5\u672c`},
		{`日本`, `\u65E5\u672C`},
		{`😀`, `\ud83d\ude00`},
		{`a"b\c`, `a\u0022b\u005cc`},
		{"é", `\u00e9`},
	} {
		raw, esc := pair[0], pair[1]
		rawJSON, _ := json.Marshal(raw) // the canonical encoding of the raw form
		items := mustDecode(t, body(
			`{"queue":"q","transactionId":`+string(rawJSON)+`}`,
			`{"queue":"q","transactionId":"`+esc+`"}`,
		))
		if items[0].TransactionID != raw || items[1].TransactionID != raw {
			t.Fatalf("%s: decoded %q and %q; want %q", esc, items[0].TransactionID, items[1].TransactionID, raw)
		}
		if items[0].Hash != items[1].Hash || items[0].Hash != queen.HashTxn(raw) {
			t.Fatalf("%s: hashes differ between the raw and escaped forms", esc)
		}
	}
	// Names too.
	items := mustDecode(t, body(`{"queue":"Bed&Breakfast","partition":"日本"}`, `{"queue":"Bed\u0026Breakfast","partition":"\u65e5\u672c"}`))
	if items[0].Queue != items[1].Queue || items[0].Partition != items[1].Partition {
		t.Fatalf("escaped names differ: %+v %+v", items[0], items[1])
	}
}

func TestDecodePushPayloadCopied(t *testing.T) {
	t.Parallel()
	b := []byte(body(`{"queue":"q","payload":{"a":1}}`, `{"queue":"q","data":[2]}`, `{"queue":"q"}`))
	items, err := DecodePush(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 'Z'
	}
	if string(items[0].Payload) != `{"a":1}` || string(items[1].Payload) != `[2]` || string(items[2].Payload) != `{}` {
		t.Fatalf("payloads changed with the body: %s %s %s", items[0].Payload, items[1].Payload, items[2].Payload)
	}
	// Appending to one payload must not overwrite the next.
	_ = append(items[0].Payload, "XXXXXXXX"...)
	if string(items[1].Payload) != `[2]` {
		t.Fatalf("payloads share capacity: %s", items[1].Payload)
	}
}

func TestDecodePushEmpty(t *testing.T) {
	t.Parallel()
	for _, b := range []string{`{"items":[]}`, ` { "items" : [ ] } `, `{"x":1,"items":[],"y":[]}`} {
		items := mustDecode(t, b)
		if items == nil || len(items) != 0 {
			t.Fatalf("%s: got %#v; want an empty, non-nil slice", b, items)
		}
	}
}

func TestDecodePushLimits(t *testing.T) {
	t.Parallel()
	txn := func(n int) string { return `{"queue":"q","transactionId":"` + strings.Repeat("t", n) + `"}` }
	mustDecode(t, body(txn(queen.MaxTransactionIDBytes)))
	_, err := DecodePush([]byte(body(`{"queue":"q"}`, txn(queen.MaxTransactionIDBytes+1))), 0)
	wantErr(t, err, queen.ErrTooLong, 1, "items[1].transactionId")

	// Lengths count bytes after unescaping: 512 × "é" is 1024 bytes (3072 escaped).
	mustDecode(t, body(`{"queue":"q","transactionId":"`+strings.Repeat(`\u00e9`, 512)+`"}`))
	_, err = DecodePush([]byte(body(`{"queue":"q","transactionId":"`+strings.Repeat(`\u00e9`, 512)+`a"}`)), 0)
	wantErr(t, err, queen.ErrTooLong, 0, "items[0].transactionId")
	mustDecode(t, body(`{"queue":"q","transactionId":"`+strings.Repeat(`\/`, 1024)+`"}`))

	name := func(field string, n int) string {
		if field == "queue" {
			return `{"queue":"` + strings.Repeat("n", n) + `"}`
		}
		return `{"queue":"q","` + field + `":"` + strings.Repeat("n", n) + `"}`
	}
	for _, f := range []string{"queue", "partition"} {
		mustDecode(t, body(name(f, queen.MaxNameBytes)))
		_, err = DecodePush([]byte(body(name(f, queen.MaxNameBytes+1))), 0)
		wantErr(t, err, queen.ErrTooLong, 0, "items[0]."+f)
		// 128 × "é" is 256 bytes but 128 characters.
		_, err = DecodePush([]byte(body(strings.Replace(name(f, 0), `""`, `"`+strings.Repeat("é", 128)+`"`, 1))), 0)
		wantErr(t, err, queen.ErrTooLong, 0, "items[0]."+f)
	}

	// Payload size: the raw JSON of the value, against the given limit.
	const limit = 100
	payload := func(key string, n int) string { // a string value of n bytes of JSON
		return `{"queue":"q","` + key + `":"` + strings.Repeat("x", n-2) + `"}`
	}
	for _, key := range []string{"payload", "data"} {
		items, err := DecodePush([]byte(body(payload(key, limit))), limit)
		if err != nil || len(items[0].Payload) != limit {
			t.Fatalf("%s of exactly the limit: %v", key, err)
		}
		_, err = DecodePush([]byte(body(`{"queue":"q"}`, `{"queue":"q"}`, payload(key, limit+1))), limit)
		wantErr(t, err, queen.ErrPayloadTooLarge, 2, "items[2]."+key)
	}
	big := `{"queue":"q","payload":{"k":"` + strings.Repeat("x", queen.DefaultMaxPayloadBytes-8) + `"}}`
	if _, err := DecodePush([]byte(body(big)), 0); err != nil { // exactly 1 MiB with the default limit
		t.Fatalf("payload of exactly DefaultMaxPayloadBytes: %v", err)
	}
	big = `{"queue":"q","payload":{"k":"` + strings.Repeat("x", queen.DefaultMaxPayloadBytes-7) + `"}}`
	_, err = DecodePush([]byte(body(big)), 0)
	wantErr(t, err, queen.ErrPayloadTooLarge, 0, "items[0].payload")
	// The ignored alias is not measured when payload is present.
	mustDecode(t, body(`{"queue":"q","payload":1,"data":"`+strings.Repeat("x", limit)+`"}`))
}

func manyItems(n int, item string) []byte {
	var b bytes.Buffer
	b.WriteString(`{"items":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(item)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

func TestDecodePushMaxItems(t *testing.T) {
	t.Parallel()
	items, err := DecodePush(manyItems(queen.MaxItems, `{"queue":"q","payload":{"n":1}}`), 0)
	if err != nil || len(items) != queen.MaxItems {
		t.Fatalf("%d items: %d decoded, %v", queen.MaxItems, len(items), err)
	}
	_, err = DecodePush(manyItems(queen.MaxItems+1, `{"queue":"q"}`), 0)
	wantErr(t, err, queen.ErrTooManyItems, -1, "items")
	// Too many items is reported before any item's own problem.
	b := manyItems(queen.MaxItems+1, `{"queue":"q"}`)
	b = bytes.Replace(b, []byte(`{"queue":"q"}`), []byte(`{"queue":7}`), 1)
	_, err = DecodePush(b, 0)
	wantErr(t, err, queen.ErrTooManyItems, -1, "items")
	// A body over 16 MiB is refused whole (the transports normally do it first).
	huge := append(manyItems(1, `{"queue":"q","payload":"`+strings.Repeat("x", queen.MaxBodyBytes)+`"}`), ' ')
	_, err = DecodePush(huge, queen.MaxBodyBytes)
	if !errors.Is(err, queen.ErrBodyTooLarge) || queen.AsError(err).Status != 413 {
		t.Fatalf("body over MaxBodyBytes: %v", err)
	}
	if _, err = DecodeConfigure(huge); !errors.Is(err, queen.ErrBodyTooLarge) {
		t.Fatalf("configure body over MaxBodyBytes: %v", err)
	}
	// An encoding problem in an item past the limit is still found.
	b = manyItems(queen.MaxItems+1, `{"queue":"q"}`)
	b = append(b[:len(b)-2], `,{"queue":"\ud800"}]}`...)
	_, err = DecodePush(b, 0)
	wantErr(t, err, queen.ErrInvalidUTF8, queen.MaxItems+1, "")
	// ... and so is a syntax error.
	b = append(manyItems(queen.MaxItems+1, `{"queue":"q"}`), 'x')
	_, err = DecodePush(b, 0)
	wantErr(t, err, queen.ErrInvalidJSON, -1, "")
}

// nested returns a body whose deepest container is at depth total (the body
// object, items array and item object count).
func nested(total int) []byte {
	n := total - 3
	return []byte(`{"items":[{"queue":"q","payload":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}]}`)
}

func TestDecodePushNesting(t *testing.T) {
	t.Parallel()
	ok := nested(maxNestingDepth)
	if !json.Valid(ok) {
		t.Fatal("encoding/json refuses the deepest body we accept")
	}
	if _, err := DecodePush(ok, 0); err != nil {
		t.Fatalf("depth %d: %v", maxNestingDepth, err)
	}
	deep := nested(maxNestingDepth + 1)
	if json.Valid(deep) {
		t.Fatal("encoding/json accepts a body deeper than our limit")
	}
	_, err := DecodePush(deep, 0)
	wantErr(t, err, queen.ErrInvalidJSON, 0, "items[0].payload")
	// Deep bodies cost no stack: 8 MiB of '['.
	_, err = DecodePush([]byte(`{"items":[{"queue":"q","payload":`+strings.Repeat("[", 8<<20)), 0)
	wantErr(t, err, queen.ErrInvalidJSON, 0, "")
}

type errCase struct {
	name  string
	body  string
	want  *queen.Error
	index int    // -1: no index
	field string // "" : not checked
}

var pushErrCases = []errCase{
	// Not JSON, or not the expected shape.
	{"empty body", ``, queen.ErrInvalidJSON, -1, ""},
	{"whitespace body", " \n\t", queen.ErrInvalidJSON, -1, ""},
	{"truncated", `{"items":[{"queue":"q"}]`, queen.ErrInvalidJSON, -1, ""},
	{"truncated in item", `{"items":[{"queue":"q"`, queen.ErrInvalidJSON, 0, "items[0]"},
	{"truncated in string", `{"items":[{"queue":"q`, queen.ErrInvalidJSON, 0, "items[0].queue"},
	{"trailing garbage", `{"items":[]} x`, queen.ErrInvalidJSON, -1, ""},
	{"two objects", `{"items":[]}{}`, queen.ErrInvalidJSON, -1, ""},
	{"top-level array", `[{"queue":"q"}]`, queen.ErrInvalidJSON, -1, ""},
	{"top-level null", `null`, queen.ErrInvalidJSON, -1, ""},
	{"top-level string", `"items"`, queen.ErrInvalidJSON, -1, ""},
	{"BOM", "\ufeff" + `{"items":[]}`, queen.ErrInvalidJSON, -1, ""},
	{"single quotes", `{'items':[]}`, queen.ErrInvalidJSON, -1, ""},
	{"comment", `{"items":[] /* x */}`, queen.ErrInvalidJSON, -1, ""},
	{"trailing comma in array", `{"items":[{"queue":"q"},]}`, queen.ErrInvalidJSON, 1, ""},
	{"trailing comma in item", `{"items":[{"queue":"q",}]}`, queen.ErrInvalidJSON, 0, ""},
	{"trailing comma in body", `{"items":[],}`, queen.ErrInvalidJSON, -1, ""},
	{"missing colon", `{"items" []}`, queen.ErrInvalidJSON, -1, ""},
	{"unquoted key", `{"items":[{queue:"q"}]}`, queen.ErrInvalidJSON, 0, "items[0]"},
	{"items is an object", `{"items":{"queue":"q"}}`, queen.ErrInvalidJSON, -1, "items"},
	{"items is a string", `{"items":"[]"}`, queen.ErrInvalidJSON, -1, "items"},
	{"items is null", `{"items":null}`, queen.ErrInvalidJSON, -1, "items"},
	{"item is a number", body(`{"queue":"q"}`, `1`), queen.ErrInvalidJSON, 1, "items[1]"},
	{"item is null", body(`null`), queen.ErrInvalidJSON, 0, "items[0]"},
	{"item is an array", body(`[{"queue":"q"}]`), queen.ErrInvalidJSON, 0, "items[0]"},
	{"raw control char in string", body(`{"queue":"a` + "\n" + `b"}`), queen.ErrInvalidJSON, 0, "items[0].queue"},
	{"raw tab in payload", body(`{"queue":"q","payload":"a` + "\t" + `"}`), queen.ErrInvalidJSON, 0, "items[0].payload"},
	{"bad escape", body(`{"queue":"a\x41"}`), queen.ErrInvalidJSON, 0, "items[0].queue"},
	{"bad unicode escape", body(`{"queue":"a\u12G4"}`), queen.ErrInvalidJSON, 0, "items[0].queue"},
	{"short unicode escape", body(`{"queue":"a\u12"}`), queen.ErrInvalidJSON, 0, "items[0].queue"},
	{"leading zero", body(`{"queue":"q","payload":01}`), queen.ErrInvalidJSON, 0, ""},
	{"bare minus", body(`{"queue":"q","payload":-}`), queen.ErrInvalidJSON, 0, ""},
	{"no fraction digits", body(`{"queue":"q","payload":1.}`), queen.ErrInvalidJSON, 0, ""},
	{"no exponent digits", body(`{"queue":"q","payload":1e+}`), queen.ErrInvalidJSON, 0, ""},
	{"plus sign", body(`{"queue":"q","payload":+1}`), queen.ErrInvalidJSON, 0, ""},
	{"hex number", body(`{"queue":"q","payload":0x10}`), queen.ErrInvalidJSON, 0, ""},
	{"NaN", body(`{"queue":"q","payload":NaN}`), queen.ErrInvalidJSON, 0, ""},
	{"short literal", body(`{"queue":"q","payload":tru}`), queen.ErrInvalidJSON, 0, ""},
	{"literal with tail", body(`{"queue":"q","payload":nullx}`), queen.ErrInvalidJSON, 0, ""},
	{"capital literal", body(`{"queue":"q","payload":True}`), queen.ErrInvalidJSON, 0, ""},
	{"unclosed payload", body(`{"queue":"q","payload":{"a":[1,2}}`), queen.ErrInvalidJSON, 0, ""},
	{"mismatched brackets", body(`{"queue":"q","payload":[1}`), queen.ErrInvalidJSON, 0, ""},
	{"non-string key in payload", body(`{"queue":"q","payload":{1:2}}`), queen.ErrInvalidJSON, 0, ""},
	{"duplicate queue", body(`{"queue":"a","queue":"b"}`), queen.ErrInvalidJSON, 0, "items[0].queue"},
	{"duplicate payload", body(`{"queue":"a","payload":1,"payload":2}`), queen.ErrInvalidJSON, 0, "items[0].payload"},
	{"duplicate escaped key", body(`{"queue":"a","\u0071ueue":"b"}`), queen.ErrInvalidJSON, 0, "items[0].queue"},
	{"duplicate items", `{"items":[],"items":[]}`, queen.ErrInvalidJSON, -1, "items"},

	// Encoding.
	{"invalid UTF-8 in payload", body(`{"queue":"q","payload":{"k":"a` + "\xff" + `"}}`), queen.ErrInvalidUTF8, 0, "items[0].payload"},
	{"invalid UTF-8 in queue", body(`{"queue":"a` + "\xc3" + `"}`), queen.ErrInvalidUTF8, 0, "items[0].queue"},
	{"invalid UTF-8 in key", body(`{"queue":"q","k` + "\x80" + `":1}`), queen.ErrInvalidUTF8, 0, "items[0]"},
	{"invalid UTF-8 in top-level extra", `{"x":"` + "\xfe" + `","items":[]}`, queen.ErrInvalidUTF8, -1, ""},
	{"invalid UTF-8 outside strings", `{"items":[]}` + "\xff", queen.ErrInvalidUTF8, -1, ""},
	{"overlong encoding", body(`{"queue":"` + "\xc0\xaf" + `"}`), queen.ErrInvalidUTF8, 0, ""},
	{"UTF-8 encoded surrogate", body(`{"queue":"` + "\xed\xa0\x80" + `"}`), queen.ErrInvalidUTF8, 0, ""},
	{"truncated sequence", body(`{"queue":"` + "\xe6\x97" + `"}`), queen.ErrInvalidUTF8, 0, ""},
	{"lone high surrogate", body(`{"queue":"q","transactionId":"\ud800"}`), queen.ErrInvalidUTF8, 0, "items[0].transactionId"},
	{"high surrogate then char", body(`{"queue":"q","transactionId":"\ud800x"}`), queen.ErrInvalidUTF8, 0, ""},
	{"high surrogate then BMP escape", body(`{"queue":"q","transactionId":"\ud800\u0041"}`), queen.ErrInvalidUTF8, 0, ""},
	{"two high surrogates", body(`{"queue":"q","transactionId":"\ud800\ud800"}`), queen.ErrInvalidUTF8, 0, ""},
	{"lone low surrogate", body(`{"queue":"q","transactionId":"\udc00"}`), queen.ErrInvalidUTF8, 0, ""},
	{"reversed pair", body(`{"queue":"q","transactionId":"\udc00\ud800"}`), queen.ErrInvalidUTF8, 0, ""},
	{"high surrogate at end", body(`{"queue":"q","transactionId":"\uDBFF"}`), queen.ErrInvalidUTF8, 0, ""},
	{"lone surrogate in payload", body(`{"queue":"q","payload":{"a":["\ud83d"]}}`), queen.ErrInvalidUTF8, 0, "items[0].payload"},
	{"lone surrogate in payload key", body(`{"queue":"q","payload":{"\udfff":1}}`), queen.ErrInvalidUTF8, 0, "items[0].payload"},
	{"lone surrogate in item key", body(`{"queue":"q","\ud800":1}`), queen.ErrInvalidUTF8, 0, "items[0]"},
	{"lone surrogate in top-level key", `{"\ud800":1,"items":[]}`, queen.ErrInvalidUTF8, -1, ""},
	{"UTF-8 beats an earlier syntax error", `{"items":[}` + `"` + "\xff" + `"`, queen.ErrInvalidUTF8, -1, ""},
	{"surrogate beats an earlier syntax error", `{"items":[}, "\ud800"`, queen.ErrInvalidUTF8, -1, ""},
	{"UTF-8 beats an earlier field error", body(`{"queue":1}`, `{"queue":"`+"\xff"+`"}`), queen.ErrInvalidUTF8, 1, ""},
	{"syntax beats an earlier field error", body(`{"queue":1}`, `{"queue":}`), queen.ErrInvalidJSON, 1, ""},

	// Missing and mistyped fields.
	{"no items", `{}`, queen.ErrMissingField, -1, "items"},
	{"no items, other keys", `{"item":[],"Items":[]}`, queen.ErrMissingField, -1, "items"},
	{"no queue", body(`{"queue":"q"}`, `{"partition":"p"}`), queen.ErrMissingField, 1, "items[1].queue"},
	{"empty queue", body(`{"queue":""}`), queen.ErrMissingField, 0, "items[0].queue"},
	{"null queue", body(`{"queue":null}`), queen.ErrMissingField, 0, "items[0].queue"},
	{"empty item", body(`{}`), queen.ErrMissingField, 0, "items[0].queue"},
	{"queue is a number", body(`{"queue":1}`), queen.ErrInvalidField, 0, "items[0].queue"},
	{"queue is an object", body(`{"queue":{"name":"q"}}`), queen.ErrInvalidField, 0, "items[0].queue"},
	{"queue is true", body(`{"queue":true}`), queen.ErrInvalidField, 0, "items[0].queue"},
	{"partition is a number", body(`{"queue":"q","partition":0}`), queen.ErrInvalidField, 0, "items[0].partition"},
	{"partition is an array", body(`{"queue":"q","partition":["p"]}`), queen.ErrInvalidField, 0, "items[0].partition"},
	{"transactionId is a number", body(`{"queue":"q"}`, `{"queue":"q"}`, `{"queue":"q","transactionId":12345}`), queen.ErrInvalidField, 2, "items[2].transactionId"},
	{"transactionId is an object", body(`{"queue":"q","transactionId":{}}`), queen.ErrInvalidField, 0, "items[0].transactionId"},
	{"traceId is a bool", body(`{"queue":"q","traceId":false}`), queen.ErrInvalidField, 0, "items[0].traceId"},
	{"first problem wins", body(`{"queue":"q","partition":1}`, `{"queue":2}`), queen.ErrInvalidField, 0, "items[0].partition"},

	// Control characters.
	{"NUL in queue", body(`{"queue":"a\u0000b"}`), queen.ErrControlChar, 0, "items[0].queue"},
	{"newline escape in queue", body(`{"queue":"a\nb"}`), queen.ErrControlChar, 0, "items[0].queue"},
	{"raw DEL in queue", body(`{"queue":"a` + "\x7f" + `"}`), queen.ErrControlChar, 0, "items[0].queue"},
	{"tab in partition", body(`{"queue":"q","partition":"a\tb"}`), queen.ErrControlChar, 0, "items[0].partition"},
	{"escaped DEL in partition", body(`{"queue":"q","partition":"\u007F"}`), queen.ErrControlChar, 0, "items[0].partition"},
	{"unit separator in partition", body(`{"queue":"q","partition":"a\u001fb"}`), queen.ErrControlChar, 0, "items[0].partition"},
	{"escape char in transactionId", body(`{"queue":"q","transactionId":"\u001b[31m"}`), queen.ErrControlChar, 0, "items[0].transactionId"},
	{"CR in transactionId", body(`{"queue":"q"}`, `{"queue":"q","transactionId":"a\r"}`), queen.ErrControlChar, 1, "items[1].transactionId"},
	{"C1 NEL escape in transactionId", body(`{"queue":"q","transactionId":"a\u0085"}`), queen.ErrControlChar, 0, "items[0].transactionId"},
	{"raw C1 in queue", body(`{"queue":"a` + "\u009f" + `"}`), queen.ErrControlChar, 0, "items[0].queue"},
	{"BOM in queue", body(`{"queue":"\ufefforders"}`), queen.ErrControlChar, 0, "items[0].queue"},
	{"raw BOM in partition", body(`{"queue":"q","partition":"` + "\ufeff" + `p"}`), queen.ErrControlChar, 0, "items[0].partition"},
	{"line separator in partition", body(`{"queue":"q","partition":"a\u2028b"}`), queen.ErrControlChar, 0, "items[0].partition"},
	{"zero-width space in partition", body(`{"queue":"q"}`, `{"queue":"q","partition":"o\u200b-1"}`), queen.ErrControlChar, 1, "items[1].partition"},
}

func TestDecodePushErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range pushErrCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			items, err := DecodePush([]byte(tc.body), 0)
			if items != nil {
				t.Fatalf("got items with an error")
			}
			wantErr(t, err, tc.want, tc.index, tc.field)
			// The error body is valid JSON with the registry's code.
			e := queen.AsError(err)
			out, jerr := json.Marshal(e)
			if jerr != nil || !json.Valid(out) || !utf8.Valid(out) {
				t.Fatalf("error does not encode: %v %q", jerr, out)
			}
		})
	}
}

func TestDecodeConfigure(t *testing.T) {
	t.Parallel()
	req, err := DecodeConfigure([]byte(`{"queue":"orders","namespace":"billing","task":"invoices","options":{"dedupWindowSeconds":86400,"leaseTime":60,"priority":5},"mode":"merge","extra":[1]}`))
	if err != nil {
		t.Fatal(err)
	}
	if req.Queue != "orders" || req.Namespace != "billing" || req.Task != "invoices" || !req.Merge || givenOptions(req.Options) != 3 ||
		*req.Options.DedupWindowSeconds != 86400 || *req.Options.LeaseTime != 60 || string(req.Options.NotEnforced["priority"]) != "5" {
		t.Fatalf("got %+v", req)
	}
	for _, b := range []string{`{"queue":"q"}`, `{"queue":"q","options":{}}`, `{"queue":"q","options":null,"mode":null}`, `{"queue":"q","mode":"replace","namespace":null,"task":""}`, `{"queue":"q\u0026r"}`} {
		req, err := DecodeConfigure([]byte(b))
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if req.Merge || givenOptions(req.Options) != 0 || req.Namespace != "" || req.Task != "" {
			t.Fatalf("%s: got %+v; want a full replace with no options", b, req)
		}
	}
	// Raw option values are copies.
	b := []byte(`{"queue":"q","options":{"leaseTime":30,"ttl":[30]}}`)
	req, err = DecodeConfigure(b)
	if err != nil {
		t.Fatal(err)
	}
	copy(b, bytes.Repeat([]byte("Z"), len(b)))
	if *req.Options.LeaseTime != 30 || string(req.Options.NotEnforced["ttl"]) != "[30]" {
		t.Fatalf("options alias the body: %+v", req.Options)
	}

	for _, tc := range []errCase{
		{"empty", ``, queen.ErrInvalidJSON, -1, ""},
		{"not an object", `["q"]`, queen.ErrInvalidJSON, -1, ""},
		{"trailing garbage", `{"queue":"q"}]`, queen.ErrInvalidJSON, -1, ""},
		{"no queue", `{"options":{}}`, queen.ErrMissingField, -1, "queue"},
		{"empty queue", `{"queue":""}`, queen.ErrMissingField, -1, "queue"},
		{"queue is a number", `{"queue":1}`, queen.ErrInvalidField, -1, "queue"},
		{"queue too long", `{"queue":"` + strings.Repeat("q", 256) + `"}`, queen.ErrTooLong, -1, "queue"},
		{"queue has a control char", `{"queue":"a\u0007"}`, queen.ErrControlChar, -1, "queue"},
		{"namespace not a string", `{"queue":"q","namespace":5}`, queen.ErrInvalidField, -1, "namespace"},
		{"task has a control char", `{"queue":"q","task":"a\nb"}`, queen.ErrControlChar, -1, "task"},
		{"unknown mode", `{"queue":"q","mode":"patch"}`, queen.ErrInvalidField, -1, "mode"},
		{"mode not a string", `{"queue":"q","mode":true}`, queen.ErrInvalidField, -1, "mode"},
		{"options an array", `{"queue":"q","options":[]}`, queen.ErrInvalidField, -1, "options"},
		{"options a string", `{"queue":"q","options":"{}"}`, queen.ErrInvalidField, -1, "options"},
		{"unknown option", `{"queue":"q","options":{"dedupWindow":60}}`, queen.ErrUnknownOption, -1, "options.dedupWindow"},
		{"misspelt case", `{"queue":"q","options":{"LeaseTime":60}}`, queen.ErrUnknownOption, -1, "options.LeaseTime"},
		{"negative option", `{"queue":"q","options":{"leaseTime":-1}}`, queen.ErrInvalidOption, -1, "options.leaseTime"},
		{"fractional option", `{"queue":"q","options":{"retryLimit":1.5}}`, queen.ErrInvalidOption, -1, "options.retryLimit"},
		{"option wrong type", `{"queue":"q","options":{"dedupWindowSeconds":true}}`, queen.ErrInvalidOption, -1, "options.dedupWindowSeconds"},
		{"duplicate option", `{"queue":"q","options":{"leaseTime":60,"leaseTime":30}}`, queen.ErrInvalidJSON, -1, "options.leaseTime"},
		{"lease of 0", `{"queue":"q","options":{"leaseTime":0}}`, queen.ErrInvalidOption, -1, "options.leaseTime"},
		{"first refused key in sorted order", `{"queue":"q","options":{"zzz":1,"leaseTime":0}}`, queen.ErrInvalidOption, -1, "options.leaseTime"},
		{"first refused key in sorted order, unknown", `{"queue":"q","options":{"leaseTime":0,"aaa":1}}`, queen.ErrUnknownOption, -1, "options.aaa"},
		{"duplicate queue", `{"queue":"q","queue":"r"}`, queen.ErrInvalidJSON, -1, "queue"},
		{"invalid UTF-8", `{"queue":"q","options":{"priority":"` + "\xff" + `"}}`, queen.ErrInvalidUTF8, -1, ""},
		{"lone surrogate", `{"queue":"q","namespace":"\udead"}`, queen.ErrInvalidUTF8, -1, ""},
		{"lone surrogate in an option key", `{"queue":"q","options":{"\ud800":1}}`, queen.ErrInvalidUTF8, -1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeConfigure([]byte(tc.body))
			wantErr(t, err, tc.want, tc.index, tc.field)
		})
	}
}

// The pushes of the benchmark: n items of a ~200-byte payload each.
func benchBody(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"items":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"queue":"orders","partition":"customer-%d","transactionId":"order-%08d-attempt-1",`+
			`"payload":{"orderId":%d,"customer":"Bed\u0026Breakfast-771","amount":1234.56,"currency":"EUR",`+
			`"items":[{"sku":"BK-11","qty":2},{"sku":"BK-12","qty":1}],"note":"deliver to the back door, ring twice","paid":true}}`,
			i%8, i, i)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

func BenchmarkDecodePush(b *testing.B) {
	for _, n := range []int{100} {
		body := benchBody(n)
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				items, err := DecodePush(body, 0)
				if err != nil || len(items) != n {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/item")
		})
	}
}

func TestConfigureRefusesNonIntegerOptions(t *testing.T) {
	for _, v := range []string{`"60"`, `1.5`, `1e3`, `-1`, `true`, `null`, `{}`, `99999999999`} {
		_, err := DecodeConfigure([]byte(`{"queue":"q","options":{"leaseTime":` + v + `}}`))
		var e *queen.Error
		if !errors.As(err, &e) || e.Code != queen.ErrInvalidOption.Code || e.Field != "options.leaseTime" {
			t.Errorf("leaseTime %s: got %v, want invalid_option naming options.leaseTime", v, err)
		}
	}
	req, err := DecodeConfigure([]byte(`{"queue":"q","options":{"leaseTime":60,"dedupWindowSeconds":0}}`))
	if err != nil {
		t.Fatal(err)
	}
	o := req.Options.Apply(queen.DefaultOptions())
	if o.LeaseTime != 60 || o.DedupWindowSeconds != 0 {
		t.Fatalf("got %+v", o)
	}
}

// dedupCheckPayload is the one bool option (SPEC.md §6): only true and false.
func TestDedupCheckPayloadOption(t *testing.T) {
	if queen.DefaultOptions().DedupCheckPayload {
		t.Fatal("dedupCheckPayload is on by default")
	}
	for _, v := range []string{`"true"`, `1`, `0`, `null`, `{}`, `[]`} {
		_, err := DecodeConfigure([]byte(`{"queue":"q","options":{"dedupCheckPayload":` + v + `}}`))
		var e *queen.Error
		if !errors.As(err, &e) || e.Code != queen.ErrInvalidOption.Code || e.Field != "options.dedupCheckPayload" {
			t.Errorf("dedupCheckPayload %s: got %v, want invalid_option naming options.dedupCheckPayload", v, err)
		}
	}
	req, err := DecodeConfigure([]byte(`{"queue":"q","options":{"dedupCheckPayload":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	on := req.Options.Apply(queen.DefaultOptions())
	if !on.DedupCheckPayload {
		t.Fatalf("got %+v", on)
	}
	if m := on.Map(); m["dedupCheckPayload"] != true {
		t.Fatalf("Map: %v", m)
	}
	b, _ := json.Marshal(on)
	var back queen.Options
	if err := json.Unmarshal(b, &back); err != nil || !back.DedupCheckPayload || back.NotEnforced != nil {
		t.Fatalf("round trip of %s: %+v, %v", b, back, err)
	}
	// Options stored before the option existed read as off.
	if err := json.Unmarshal([]byte(`{"dedupWindowSeconds":60}`), &back); err != nil || back.DedupCheckPayload {
		t.Fatalf("old options: %+v, %v", back, err)
	}
	// A merge keeps it; a full replace without it turns it off.
	merged := queen.OptionsPatch{LeaseTime: new(int64(60))}.Apply(on)
	if !merged.DedupCheckPayload {
		t.Fatalf("merge: %+v", merged)
	}
}
func TestValidateName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		want *queen.Error
	}{
		{"orders", nil},
		{"Bed&Breakfast-771", nil},
		{"2026/07/BK-11", nil},
		{"日本", nil},
		{" spaces are fine ", nil},
		{strings.Repeat("x", 255), nil},
		{strings.Repeat("x", 256), queen.ErrTooLong},
		{strings.Repeat("é", 128), queen.ErrTooLong},
		{"", queen.ErrMissingField},
		{"a\x00", queen.ErrControlChar},
		{"a\x1f", queen.ErrControlChar},
		{"\x7f", queen.ErrControlChar},
		{"a\xffb", queen.ErrInvalidUTF8},
		{"\xfe\xff", queen.ErrInvalidUTF8},
		{"a\u0085", queen.ErrControlChar},
		{"\ufeffa", queen.ErrControlChar},
		{"a\u2028b", queen.ErrControlChar},
		{"a\u200bb", queen.ErrControlChar},
		{"a\u00a0b", nil},
		{"می\u200cخواهم", nil},
	} {
		err := queen.ValidateName(tc.name, "partition")
		if tc.want == nil {
			if err != nil {
				t.Fatalf("ValidateName(%q) = %v; want nil", tc.name, err)
			}
			continue
		}
		wantErr(t, err, tc.want, -1, "partition")
	}
	if err := queen.ValidateName("ok", "queue"); err != nil {
		t.Fatalf("a valid name returned a non-nil error interface: %#v", err)
	}
}

// givenOptions counts the options p gives.
func givenOptions(p queen.OptionsPatch) int {
	n := len(p.NotEnforced)
	v := reflect.ValueOf(p)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			n++
		}
	}
	return n
}

// Every option Options has (by its wire name) is accepted by the configure
// decoder and set by Apply; the not-enforced ones are kept raw.
func TestConfigureSetsEveryOption(t *testing.T) {
	t.Parallel()
	for k, v := range queen.DefaultOptions().Map() {
		lit := `7`
		if _, ok := v.(bool); ok {
			lit = `true`
		}
		req, err := DecodeConfigure([]byte(`{"queue":"q","options":{"` + k + `":` + lit + `}}`))
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if got := req.Options.Apply(queen.DefaultOptions()).Map()[k]; fmt.Sprint(got) != lit || givenOptions(req.Options) != 1 {
			t.Fatalf("%s: Apply gives %v, want %s (%+v)", k, got, lit, req.Options)
		}
	}
	for _, k := range queen.NotEnforcedOptions {
		req, err := DecodeConfigure([]byte(`{"queue":"q","options":{"` + k + `":{"x":1}}}`))
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		o := req.Options.Apply(queen.DefaultOptions())
		if string(o.NotEnforced[k]) != `{"x":1}` || len(o.NotEnforced) != 1 {
			t.Fatalf("%s: %+v", k, o.NotEnforced)
		}
	}
}

// Every whole-number option of a configure accepts exactly the range its
// refusal states: from its least value (1 for leaseTime, else 0) to
// MaxOptionValue, 2^31-1. Both edges are accepted and stored as given; one
// past either edge is refused with invalid_option naming the option, and the
// message states that same range.
func TestOptionBounds(t *testing.T) {
	least := map[string]int64{
		"dedupWindowSeconds": 0, "leaseTime": 1, "retryLimit": 0, "retentionSeconds": 0,
		"completedRetentionSeconds": 0, "delayedProcessing": 0, "windowBuffer": 0,
	}
	if MaxOptionValue != 2147483647 {
		t.Fatalf("MaxOptionValue = %d, want 2^31-1", int64(MaxOptionValue))
	}
	var all queen.OptionsPatch
	for name := range least {
		if wholeNumberOption(&all, name) == nil {
			t.Fatalf("%s is not a whole-number option", name)
		}
	}
	for _, name := range []string{"dedupCheckPayload", "priority", "nope"} {
		if wholeNumberOption(&all, name) != nil {
			t.Fatalf("%s taken as a whole-number option", name)
		}
	}
	for name, lo := range least {
		stated := fmt.Sprintf("from %d to %d", lo, int64(MaxOptionValue))
		for _, c := range []struct {
			v  int64
			ok bool
		}{{lo - 1, false}, {lo, true}, {lo + 1, true}, {MaxOptionValue - 1, true}, {MaxOptionValue, true}, {MaxOptionValue + 1, false}} {
			req, err := DecodeConfigure(fmt.Appendf(nil, `{"queue":"q","options":{%q:%d}}`, name, c.v))
			if c.ok {
				if err != nil {
					t.Errorf("%s %d: %v, want accepted", name, c.v, err)
					continue
				}
				got := wholeNumberOption(&req.Options, name)
				if *got == nil || **got != c.v {
					t.Errorf("%s %d: stored %v", name, c.v, *got)
				}
				continue
			}
			var e *queen.Error
			if !errors.As(err, &e) || e.Code != queen.ErrInvalidOption.Code || e.Field != "options."+name {
				t.Errorf("%s %d: %v, want invalid_option naming options.%s", name, c.v, err, name)
				continue
			}
			if !strings.Contains(e.Message, stated) {
				t.Errorf("%s %d: message %q does not state %q", name, c.v, e.Message, stated)
			}
		}
	}
}
