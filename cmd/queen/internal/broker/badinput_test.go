package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestBadInput: every malformed push gets a 4xx naming the field and writes
// nothing at all (SPEC.md §10). The broker runs with MaxPayloadBytes 1000.
func TestBadInput(t *testing.T) {
	const maxPayload = 1000
	e := startEnv(t, func(c *Config) { c.MaxPayloadBytes = maxPayload })

	type bad struct {
		name  string
		body  func(q string) []byte
		code  string
		index int // -1: no index
		field string
	}
	str := func(n int, c byte) string { return string(bytes.Repeat([]byte{c}, n)) }
	ten := func(q string, bad string) []byte {
		var parts []string
		for i := 0; i < 10; i++ {
			if i == 5 {
				parts = append(parts, bad)
				continue
			}
			parts = append(parts, fmt.Sprintf(`{"queue":%q,"partition":"p","transactionId":"ok-%d"}`, q, i))
		}
		return []byte(`{"items":[` + strings.Join(parts, ",") + `]}`)
	}
	cases := []bad{
		{"invalid_json_top_level", func(q string) []byte { return []byte(`{"items":[{"queue":"` + q + `"}]`) }, "invalid_json", -1, ""},
		{"invalid_json_in_item", func(q string) []byte {
			return []byte(`{"items":[{"queue":"` + q + `","partition":}]}`)
		}, "invalid_json", 0, "items[0].partition"},
		{"not_an_object", func(q string) []byte { return []byte(`[{"queue":"` + q + `"}]`) }, "invalid_json", -1, ""},
		{"missing_queue", func(q string) []byte { return []byte(`{"items":[{"partition":"p","transactionId":"t"}]}`) }, "missing_field", 0, "items[0].queue"},
		{"empty_queue", func(q string) []byte { return []byte(`{"items":[{"queue":"","transactionId":"t"}]}`) }, "missing_field", 0, "items[0].queue"},
		{"missing_items", func(q string) []byte { return []byte(`{"queue":"` + q + `"}`) }, "missing_field", -1, "items"},
		{"non_string_transaction_id", func(q string) []byte { return []byte(`{"items":[{"queue":"` + q + `","transactionId":12345}]}`) }, "invalid_field", 0, "items[0].transactionId"},
		{"object_transaction_id", func(q string) []byte { return []byte(`{"items":[{"queue":"` + q + `","transactionId":{"id":1}}]}`) }, "invalid_field", 0, "items[0].transactionId"},
		{"non_string_queue", func(q string) []byte { return []byte(`{"items":[{"queue":7}]}`) }, "invalid_field", 0, "items[0].queue"},
		{"control_char_in_partition", func(q string) []byte { return []byte(`{"items":[{"queue":"` + q + `","partition":"a\u0001b"}]}`) }, "control_character", 0, "items[0].partition"},
		{"newline_in_partition", func(q string) []byte { return []byte(`{"items":[{"queue":"` + q + `","partition":"a\nb"}]}`) }, "control_character", 0, "items[0].partition"},
		{"del_in_transaction_id", func(q string) []byte { return []byte(`{"items":[{"queue":"` + q + `","transactionId":"x\u007f"}]}`) }, "control_character", 0, "items[0].transactionId"},
		{"transaction_id_1025_bytes", func(q string) []byte {
			return []byte(`{"items":[{"queue":"` + q + `","transactionId":"` + str(1025, 't') + `"}]}`)
		}, "too_long", 0, "items[0].transactionId"},
		{"transaction_id_1025_bytes_after_unescaping", func(q string) []byte {
			// 341 × "日" (3 bytes) + "ab" = 1025 bytes, written as \u escapes.
			return []byte(`{"items":[{"queue":"` + q + `","transactionId":"` + strings.Repeat(`\u65e5`, 341) + `ab"}]}`)
		}, "too_long", 0, "items[0].transactionId"},
		{"partition_256_bytes", func(q string) []byte {
			return []byte(`{"items":[{"queue":"` + q + `","partition":"` + str(256, 'p') + `"}]}`)
		}, "too_long", 0, "items[0].partition"},
		{"payload_over_limit", func(q string) []byte {
			return []byte(`{"items":[{"queue":"` + q + `","payload":"` + str(maxPayload, 'x') + `"}]}`)
		}, "payload_too_large", 0, "items[0].payload"},
		{"data_over_limit", func(q string) []byte {
			return []byte(`{"items":[{"queue":"` + q + `","data":{"k":"` + str(maxPayload, 'x') + `"}}]}`)
		}, "payload_too_large", 0, "items[0].data"},
		{"lone_surrogate", func(q string) []byte { return []byte(`{"items":[{"queue":"` + q + `","transactionId":"\ud800"}]}`) }, "invalid_utf8", 0, "items[0].transactionId"},
		{"invalid_utf8", func(q string) []byte {
			return []byte("{\"items\":[{\"queue\":\"" + q + "\",\"transactionId\":\"\xff\xfe\"}]}")
		}, "invalid_utf8", 0, "items[0].transactionId"},
		{"invalid_utf8_fe_ff", func(q string) []byte {
			return []byte("{\"items\":[{\"queue\":\"" + q + "\",\"transactionId\":\"\xfe\xff\"}]}")
		}, "invalid_utf8", 0, "items[0].transactionId"},
		{"c1_control_in_transaction_id", func(q string) []byte { return []byte(`{"items":[{"queue":"` + q + `","transactionId":"x\u0085"}]}`) }, "control_character", 0, "items[0].transactionId"},
		{"bom_in_partition", func(q string) []byte { return []byte(`{"items":[{"queue":"` + q + `","partition":"\ufeffp"}]}`) }, "control_character", 0, "items[0].partition"},
		{"line_separator_in_partition", func(q string) []byte { return []byte(`{"items":[{"queue":"` + q + `","partition":"p\u2028"}]}`) }, "control_character", 0, "items[0].partition"},
		{"zero_width_space_in_partition", func(q string) []byte {
			return []byte(`{"items":[{"queue":"` + q + `","partition":"o` + "\u200b" + `-1"}]}`)
		}, "control_character", 0, "items[0].partition"},
		{"10001_items", func(q string) []byte {
			var b strings.Builder
			b.WriteString(`{"items":[`)
			for i := 0; i < 10001; i++ {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, `{"queue":%q,"transactionId":"i%d"}`, q, i)
			}
			b.WriteString(`]}`)
			return []byte(b.String())
		}, "too_many_items", -1, "items"},
		{"item_5_of_10_non_string_txn", func(q string) []byte {
			return ten(q, `{"queue":"`+q+`","partition":"p","transactionId":5}`)
		}, "invalid_field", 5, "items[5].transactionId"},
		{"item_5_of_10_control_char", func(q string) []byte {
			return ten(q, `{"queue":"`+q+`","partition":"p\u001f","transactionId":"t5"}`)
		}, "control_character", 5, "items[5].partition"},
		{"item_5_of_10_payload_over_limit", func(q string) []byte {
			return ten(q, `{"queue":"`+q+`","partition":"p","transactionId":"t5","payload":"`+str(maxPayload, 'y')+`"}`)
		}, "payload_too_large", 5, "items[5].payload"},
	}
	for _, via := range transports {
		t.Run(via, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					q := "bad-" + c.name + "-" + via
					before := e.totalRows(t)
					st, rs, eb := e.push(t, via, c.body(q))
					if st < 400 || st >= 500 {
						t.Fatalf("status %d, want 4xx (replies %+v)", st, rs)
					}
					eq(t, http.StatusBadRequest, st, "status")
					if eb == nil {
						t.Fatal("no error body")
					}
					eq(t, c.code, eb.Code, "code (error %q)", eb.Error)
					eq(t, c.field, eb.Field, "field (error %q)", eb.Error)
					if c.index < 0 {
						if eb.Index != nil {
							t.Fatalf("index %d, want none", *eb.Index)
						}
					} else {
						if eb.Index == nil {
							t.Fatalf("no index, want %d", c.index)
						}
						eq(t, c.index, *eb.Index, "index")
					}
					eq(t, false, *eb.Retryable, "retryable")
					eq(t, stats{}, e.stats(t, q), "database holds nothing for %s", q)
					eq(t, before, e.totalRows(t), "segment/sidecar/queue rows")
				})
			}

			// Boundaries: exactly at the limits is accepted.
			t.Run("limits_accepted", func(t *testing.T) {
				q := "bad-limits-" + via
				body := []byte(`{"items":[` +
					`{"queue":"` + q + `","partition":"p","transactionId":"` + str(1024, 't') + `"},` +
					`{"queue":"` + q + `","partition":"` + str(255, 'p') + `","transactionId":"x"},` +
					`{"queue":"` + q + `","partition":"p","transactionId":"y","payload":"` + str(maxPayload-2, 'z') + `"}]}`)
				rs := e.pushOK(t, via, body, 3)
				wantStatuses(t, rs, "queued", "queued", "queued")
				eq(t, int64(3), e.stats(t, q).Messages, "stored")
			})
		})
	}
}

// TestBodySizeLimits: a body over 16 MiB is refused with 413 over HTTP and
// never accepted over NATS; a ~15 MiB body over NATS is accepted and answered
// (SPEC.md §10, §11).
func TestBodySizeLimits(t *testing.T) {
	e := startEnv(t, nil)
	// bigBody is a valid push of n items whose payloads are strings of size bytes.
	bigBody := func(q string, n, size int) []byte {
		var b bytes.Buffer
		b.Grow(n * (size + 80))
		b.WriteString(`{"items":[`)
		pad := bytes.Repeat([]byte{'x'}, size)
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"queue":%q,"partition":"p","transactionId":"big-%d","payload":"`, q, i)
			b.Write(pad)
			b.WriteString(`"}`)
		}
		b.WriteString(`]}`)
		return b.Bytes()
	}
	const mib = 1 << 20

	t.Run("http/over_16MiB_is_413", func(t *testing.T) {
		q := "big-http-413"
		body := bigBody(q, 17, 990_000)
		if len(body) <= 16*mib {
			t.Fatalf("test body is %d bytes", len(body))
		}
		st, _, eb := e.push(t, "http", body)
		eq(t, http.StatusRequestEntityTooLarge, st, "status")
		eq(t, "body_too_large", eb.Code, "code")
		eq(t, stats{}, e.stats(t, q), "nothing written")
	})

	t.Run("nats/15MiB_accepted", func(t *testing.T) {
		q := "big-nats-15"
		body := bigBody(q, 15, 1_000_000)
		if len(body) >= 15*mib || len(body) < 14*mib {
			t.Fatalf("test body is %d bytes", len(body))
		}
		rs := e.pushOK(t, "nats", body, 15)
		for i, r := range rs {
			eq(t, "queued", r.Status, "item %d", i)
		}
		fs := e.frames(t, q, "p")
		eq(t, 15, len(fs), "stored")
		for _, f := range fs {
			eq(t, 1_000_002, len(f.Payload), "stored payload size of %s", f.TransactionID)
		}
	})

	t.Run("nats/over_max_payload_refused_by_nats", func(t *testing.T) {
		q := "big-nats-17"
		body := bigBody(q, 17, 1_000_000)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := e.tryPush(ctx, "nats", body)
		if !errors.Is(err, nats.ErrMaxPayload) {
			t.Fatalf("a %d-byte request over NATS: err %v, want nats.ErrMaxPayload", len(body), err)
		}
		eq(t, stats{}, e.stats(t, q), "nothing written")
	})

	// Between 16 MiB and the server's max_payload (16 MiB + 64 KiB of room
	// for headers) NATS delivers the request: the broker must refuse it as
	// HTTP does (SPEC.md §10: a body over 16 MiB is a 413).
	t.Run("nats/over_16MiB_below_max_payload", func(t *testing.T) {
		q := "big-nats-16plus"
		body := bigBody(q, 17, 987_000)
		if len(body) <= 16*mib || int64(len(body)) >= e.nc.MaxPayload() {
			t.Fatalf("test body is %d bytes (max_payload %d)", len(body), e.nc.MaxPayload())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		r, err := e.tryPush(ctx, "nats", body)
		switch {
		case errors.Is(err, nats.ErrMaxPayload):
		case err != nil:
			t.Fatalf("request: %v", err)
		default:
			if r.Status != http.StatusRequestEntityTooLarge {
				t.Errorf("a %d-byte body over NATS (over 16 MiB = %d) was answered %d, want 413 body_too_large; replies: %d items", len(body), 16*mib, r.Status, len(r.Items))
			} else {
				eq(t, "body_too_large", r.Err.Code, "code")
			}
		}
		eq(t, int64(0), e.stats(t, q).Messages, "messages written from a body over 16 MiB")
	})
}

// TestConcurrentErrorReplies: many refused requests at once over NATS each
// get their own 400 with the micro error headers and the JSON body (SPEC.md
// §11); run with -race this also checks the error path is free of races.
func TestConcurrentErrorReplies(t *testing.T) {
	e := startEnv(t, nil)
	const n = 400
	for _, via := range transports {
		t.Run(via, func(t *testing.T) {
			results := make([]result, n)
			errs := make([]error, n)
			gate := make(chan struct{})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			done := make(chan int, n)
			for i := 0; i < n; i++ {
				go func(i int) {
					defer func() { done <- i }()
					<-gate
					body := []byte(fmt.Sprintf(`{"items":[{"queue":"conc-err-%s","transactionId":%d}]}`, via, i))
					results[i], errs[i] = e.tryPush(ctx, via, body)
				}(i)
			}
			close(gate)
			for i := 0; i < n; i++ {
				<-done
			}
			for i := range results {
				if errs[i] != nil {
					t.Fatalf("request %d: %v", i, errs[i])
				}
				r := results[i]
				checkTransportContract(t, via, r)
				eq(t, http.StatusBadRequest, r.Status, "status of request %d", i)
				eq(t, "items[0].transactionId", r.Err.Field, "field of request %d", i)
				if via == "nats" {
					eq(t, "400", r.Header.Get("Nats-Service-Error-Code"), "Nats-Service-Error-Code")
				}
			}
			eq(t, stats{}, e.stats(t, "conc-err-"+via), "nothing written")
		})
	}
}
