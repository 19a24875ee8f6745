package wire

import (
	"strconv"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/queen-mq/queen-go"
)

// AppendPushReplies appends the JSON push reply of SPEC.md §3 (an array, one
// element per item) to dst. It writes what encoding/json writes for
// []PushReply (PushReply.MarshalJSON), without reflection: the push path's
// replies are its largest output. Each element carries the transaction id
// twice: "transaction_id" (SPEC.md §3) and "transactionId", the key the
// upstream Queen SDKs read.
func AppendPushReplies(dst []byte, rs []PushReply) []byte {
	dst = append(dst, '[')
	for i := range rs {
		if i > 0 {
			dst = append(dst, ',')
		}
		r := &rs[i]
		dst = append(dst, `{"index":`...)
		dst = strconv.AppendInt(dst, int64(r.Index), 10)
		dst = append(dst, `,"message_id":`...)
		dst = AppendJSONString(dst, r.MessageID)
		dst = append(dst, `,"transaction_id":`...)
		dst = AppendJSONString(dst, r.TransactionID)
		dst = append(dst, `,"transactionId":`...)
		dst = AppendJSONString(dst, r.TransactionID)
		dst = append(dst, `,"partition_id":`...)
		dst = AppendJSONString(dst, r.PartitionID)
		dst = append(dst, `,"trace_id":`...)
		if r.TraceID == nil {
			dst = append(dst, "null"...)
		} else {
			dst = AppendJSONString(dst, *r.TraceID)
		}
		dst = append(dst, `,"queueName":`...)
		dst = AppendJSONString(dst, r.QueueName)
		dst = append(dst, `,"partition":`...)
		dst = AppendJSONString(dst, r.Partition)
		dst = append(dst, `,"status":`...)
		dst = AppendJSONString(dst, string(r.Status))
		if r.Error != "" {
			dst = append(dst, `,"error":`...)
			dst = AppendJSONString(dst, r.Error)
		}
		if r.Code != "" {
			dst = append(dst, `,"code":`...)
			dst = AppendJSONString(dst, r.Code)
		}
		if r.PayloadMismatch {
			dst = append(dst, `,"payloadMismatch":true`...)
		}
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// MarshalJSON writes r as one element of AppendPushReplies.
func (r PushReply) MarshalJSON() ([]byte, error) {
	b := AppendPushReplies(nil, []PushReply{r})
	return b[1 : len(b)-1], nil
}

const hexDigits = "0123456789abcdef"

// AppendJSONString appends s as a JSON string: '"', '\\' and control
// characters escaped, invalid UTF-8 replaced by U+FFFD (as encoding/json
// does), everything else as is.
func AppendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// DecodePushReplies parses a push reply (SPEC.md §3) without reflection:
// the Go client reads one per request. Unknown fields are skipped.
func DecodePushReplies(body []byte) ([]PushReply, error) {
	d := &decoder{b: body, item: -1, key: -1}
	d.skipWS()
	if d.peek() != '[' {
		d.syntax("at the start of a push reply", "'['")
		return nil, d.finalErr()
	}
	d.open()
	out := make([]PushReply, 0, 16)
	if d.peek() == ']' {
		d.close()
		d.end()
		if d.err != nil {
			return nil, d.finalErr()
		}
		return out, nil
	}
	for {
		if d.peek() != '{' {
			d.syntax("in a push reply", "an object")
			return nil, d.finalErr()
		}
		var r PushReply
		str := func(dst *string) bool {
			v, kind, ok := d.stringValue()
			if kind == valString {
				*dst = string(v)
			}
			return ok
		}
		ok := d.walkObject(func(k []byte) bool {
			switch string(k) {
			case "index":
				start := d.i
				if !d.number() {
					return false
				}
				n, err := strconv.Atoi(string(d.b[start:d.i]))
				if err != nil {
					d.i = start
					return d.syntax("in index", "an integer")
				}
				r.Index = n
				return true
			case "message_id":
				return str(&r.MessageID)
			case "transaction_id", "transactionId":
				return str(&r.TransactionID)
			case "partition_id":
				return str(&r.PartitionID)
			case "trace_id":
				v, kind, ok := d.stringValue()
				if kind == valString {
					t := string(v)
					r.TraceID = &t
				}
				return ok
			case "queueName":
				return str(&r.QueueName)
			case "partition":
				return str(&r.Partition)
			case "status":
				var s string
				ok := str(&s)
				r.Status = queen.Verdict(s)
				return ok
			case "error":
				return str(&r.Error)
			case "code":
				return str(&r.Code)
			case "payloadMismatch":
				start, end, ok := d.skipValue()
				r.PayloadMismatch = ok && string(d.b[start:end]) == "true"
				return ok
			}
			_, _, ok := d.skipValue()
			return ok
		})
		if !ok {
			return nil, d.finalErr()
		}
		out = append(out, r)
		d.skipWS()
		switch d.peek() {
		case ',':
			d.i++
			d.skipWS()
		case ']':
			d.close()
			d.end()
			if d.err != nil {
				return nil, d.finalErr()
			}
			return out, nil
		default:
			d.syntax("after a push reply element", "',' or ']'")
			return nil, d.finalErr()
		}
	}
}

// PushReply is one element of the HTTP/NATS push reply, field names exactly as
// the Queen wire format (SPEC.md §3); on the wire TransactionID is written
// under "transactionId" as well (MarshalJSON), the key upstream SDKs read.
type PushReply struct {
	Index         int           `json:"index"`
	MessageID     string        `json:"message_id"`
	TransactionID string        `json:"transaction_id"`
	PartitionID   string        `json:"partition_id"`
	TraceID       *string       `json:"trace_id"`
	QueueName     string        `json:"queueName"`
	Partition     string        `json:"partition"`
	Status        queen.Verdict `json:"status"`
	Error         string        `json:"error,omitempty"`
	Code          string        `json:"code,omitempty"`
	// PayloadMismatch: a duplicate whose payload differs from the original's,
	// on a queue with dedupCheckPayload (SPEC.md §6); on the wire only when
	// true ("payloadMismatch":true).
	PayloadMismatch bool `json:"payloadMismatch,omitempty"`
}

// Reply builds the wire element for item i with result r.
func Reply(i int, it *queen.Item, r queen.Result) PushReply {
	p := PushReply{
		Index:         i,
		MessageID:     r.MessageID.String(),
		TransactionID: it.TransactionID,
		PartitionID:   r.PartitionID.String(),
		TraceID:       it.TraceID,
		QueueName:     it.Queue,
		Partition:     it.Partition,
		Status:        r.Verdict,
	}
	if r.Verdict == queen.Duplicate {
		p.PayloadMismatch = r.PayloadMismatch
	}
	if r.Verdict == queen.Failed {
		p.MessageID = ""
		if r.PartitionID == (uuid.UUID{}) {
			p.PartitionID = ""
		}
		if r.Err != nil {
			p.Error, p.Code = r.Err.Message, r.Err.Code
		}
	}
	return p
}
