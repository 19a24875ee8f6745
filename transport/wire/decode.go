package wire

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/queen-mq/queen-go"
)

// maxNestingDepth is the deepest nesting of a body, as in encoding/json:
// anything deeper could not be re-encoded by encoding/json (a pop reply
// embeds the payload), so it is refused at push.
const maxNestingDepth = 10000

// DecodePush parses and validates a push body {"items":[...]} (SPEC.md §3, §10).
//
// It returns the items in request order with Partition defaulted, TransactionID
// generated (a UUIDv7 string) when absent, null or "", Payload defaulted to {}
// ("data" is an alias of "payload"; "payload" wins when both are present; an
// explicit null is kept as null) and Hash = HashTxn(TransactionID). Payloads
// are copies, never aliases of body (the payloads of one call share one
// allocation, each capped so that an append copies). maxPayloadBytes ≤ 0
// means DefaultMaxPayloadBytes.
//
// Any problem returns an *Error from the registry (400, or 413 for a body over
// MaxBodyBytes, which the transports normally refuse before) naming the item
// index and field path, e.g. "items[3].transactionId". When a body has several
// problems, the one reported is: invalid UTF-8 or a lone surrogate escape
// anywhere; else the first JSON syntax error; else too many items; else the
// first problem in document order. Keys are matched exactly (case-sensitive);
// unknown keys are ignored; a known key given twice in one object is invalid
// JSON here (as in encoding/json/v2).
func DecodePush(body []byte, maxPayloadBytes int) ([]queen.Item, error) {
	if len(body) > queen.MaxBodyBytes {
		return nil, bodyTooLarge(len(body))
	}
	if maxPayloadBytes <= 0 {
		maxPayloadBytes = queen.DefaultMaxPayloadBytes
	}
	p := pushDecoder{decoder: decoder{b: body, item: -1, key: -1}, maxPayload: maxPayloadBytes}
	p.parse()
	switch {
	case p.err != nil:
		return nil, p.finalErr()
	case p.count > queen.MaxItems:
		e := queen.ErrTooManyItems.With("the request has %d items; the limit is %d", p.count, queen.MaxItems)
		e.Field = "items"
		return nil, e
	case p.sem != nil:
		return nil, p.sem
	case !p.sawItems:
		e := queen.ErrMissingField.With("the body has no \"items\" array")
		e.Field = "items"
		return nil, e
	}
	if err := p.finish(); err != nil {
		return nil, err
	}
	return p.items, nil
}

// DecodeConfigure parses and validates a configure body
// {"queue":"q","namespace":"","task":"","options":{...},"mode":"merge"} (SPEC.md §6, §10).
// queue is required and must be a valid name; namespace and task, when not
// empty, follow the same rules; options, when present and not null, must be an
// object of the options of SPEC.md §6 (whole numbers 0 to MaxOptionValue,
// 2^31-1, leaseTime from 1, dedupCheckPayload true or false, the not-enforced ones any JSON
// value), returned typed as req.Options; of several refused options the
// first in sorted key order is named (ErrUnknownOption or ErrInvalidOption,
// field "options.<key>"); mode is "merge", "replace" or absent. Unknown
// top-level keys are ignored. Errors are *Error from the registry with the
// field path ("queue", "options.leaseTime", ...).
func DecodeConfigure(body []byte) (queen.ConfigureRequest, error) {
	if len(body) > queen.MaxBodyBytes {
		return queen.ConfigureRequest{}, bodyTooLarge(len(body))
	}
	d := decoder{b: body, item: -1, key: -1}
	var req queen.ConfigureRequest
	opts := map[string]json.RawMessage{}
	var seen uint8
	d.skipWS()
	if d.peek() == '{' {
		d.walkObject(func(key []byte) bool {
			var bit uint8
			var dst *string
			switch string(key) {
			case "queue":
				bit, dst = 1, &req.Queue
			case "namespace":
				bit, dst = 2, &req.Namespace
			case "task":
				bit, dst = 4, &req.Task
			case "mode":
				bit = 8
			case "options":
				bit = 16
			default:
				_, _, ok := d.skipValue()
				return ok
			}
			name := string(key)
			if seen&bit != 0 {
				d.semantic(fieldErr(queen.ErrInvalidJSON.With("%q is given twice", name), name))
			}
			seen |= bit
			if bit == 16 {
				return d.configureOptions(opts)
			}
			s, kind, ok := d.stringValue()
			if !ok {
				return false
			}
			switch {
			case kind == valOther:
				d.semantic(fieldErr(queen.ErrInvalidField.With("%s must be a string", name), name))
			case bit == 8:
				switch {
				case kind == valNull || string(s) == "replace":
				case string(s) == "merge":
					req.Merge = true
				default:
					d.semantic(fieldErr(queen.ErrInvalidField.With("mode must be \"merge\" or \"replace\", got %q", s), "mode"))
				}
			case kind == valString:
				*dst = string(s)
				req.NamespaceSet = req.NamespaceSet || bit == 2
				req.TaskSet = req.TaskSet || bit == 4
			}
			return true
		})
	} else {
		if d.i < len(d.b) {
			d.semantic(queen.ErrInvalidJSON.With("the body must be a JSON object"))
		}
		d.skipValue()
	}
	d.end()
	if d.err != nil {
		return queen.ConfigureRequest{}, d.finalErr()
	}
	if d.sem != nil {
		return queen.ConfigureRequest{}, d.sem
	}
	if req.Queue == "" {
		return queen.ConfigureRequest{}, fieldErr(queen.ErrMissingField.With("queue is required"), "queue")
	}
	if e := validateName(req.Queue, "queue"); e != nil {
		return queen.ConfigureRequest{}, e
	}
	for _, l := range [...]struct{ v, f string }{{req.Namespace, "namespace"}, {req.Task, "task"}} {
		if l.v == "" {
			continue
		}
		if e := validateName(l.v, l.f); e != nil {
			return queen.ConfigureRequest{}, e
		}
	}
	p, err := optionsPatch(opts)
	if err != nil {
		return queen.ConfigureRequest{}, err
	}
	req.Options = p
	return req, nil
}

// configureOptions reads the "options" value into opts (copies of the raw values).
func (d *decoder) configureOptions(opts map[string]json.RawMessage) bool {
	if d.peek() == '{' {
		return d.walkObject(func(key []byte) bool {
			start, end, ok := d.skipValue()
			if !ok {
				return false
			}
			k := string(key)
			if _, dup := opts[k]; dup {
				d.semantic(fieldErr(queen.ErrInvalidJSON.With("option %q is given twice", k), "options."+k))
			}
			opts[k] = json.RawMessage(append([]byte(nil), d.b[start:end]...))
			return true
		})
	}
	start, end, ok := d.skipValue()
	if ok && string(d.b[start:end]) != "null" {
		d.semantic(fieldErr(queen.ErrInvalidField.With("options must be an object"), "options"))
	}
	return ok
}

// bodyTooLarge is the 413 the transports give before reading a body this
// large; the decoders refuse one too, in case a transport did not.
func bodyTooLarge(n int) *queen.Error {
	return queen.ErrBodyTooLarge.With("the request body is %d bytes; the limit is %d (16 MiB)", n, queen.MaxBodyBytes)
}

// validateName checks the length and characters of a name known to be UTF-8
// (queen.CheckName).
func validateName(name, field string) *queen.Error {
	return queen.CheckName(name, field)
}

func fieldErr(e *queen.Error, field string) *queen.Error {
	e.Field = field
	return e
}

// ---------------------------------------------------------------------------
// Push

// Bits of the keys an item has carried, to refuse a known key given twice.
const (
	keyQueue = 1 << iota
	keyPartition
	keyTransactionID
	keyTraceID
	keyPayload
	keyData
)

type pushDecoder struct {
	decoder
	maxPayload int
	items      []queen.Item
	count      int  // items seen in the (first) items array, decoded or not
	sawItems   bool // the body had an "items" key
	// last queue and partition, reused so that a batch for one queue
	// allocates its name once.
	lastQueue, lastPartition string
	payloadBytes             int // sum of the payloads to copy in finish
}

func (p *pushDecoder) parse() {
	p.skipWS()
	if p.peek() != '{' {
		if p.i < len(p.b) {
			p.semantic(queen.ErrInvalidJSON.With("the body must be a JSON object {\"items\":[...]}"))
		}
		p.skipValue()
		p.end()
		return
	}
	p.walkObject(func(key []byte) bool {
		if string(key) != "items" {
			_, _, ok := p.skipValue()
			return ok
		}
		if p.sawItems {
			p.semantic(fieldErr(queen.ErrInvalidJSON.With("\"items\" is given twice"), "items"))
			_, _, ok := p.skipValue()
			return ok
		}
		p.sawItems = true
		if p.peek() == '[' {
			return p.parseItems()
		}
		p.semantic(fieldErr(queen.ErrInvalidJSON.With("\"items\" must be an array"), "items"))
		_, _, ok := p.skipValue()
		return ok
	})
	p.end()
}

// parseItems reads the items array at p.i.
func (p *pushDecoder) parseItems() bool {
	if !p.open() {
		return false
	}
	if p.peek() == ']' {
		p.close()
		return true
	}
	for {
		idx := p.count
		p.count++
		p.item, p.key = idx, -1
		p.skipWS()
		switch {
		case p.sem == nil && p.count <= queen.MaxItems && p.peek() == '{':
			if !p.parseItem(idx) {
				return false
			}
		default:
			if p.sem == nil && p.count <= queen.MaxItems && p.i < len(p.b) {
				p.semantic(queen.ErrInvalidJSON.With("items[%d] must be an object", idx).At(idx, fmt.Sprintf("items[%d]", idx)))
			}
			if _, _, ok := p.skipValue(); !ok {
				return false
			}
		}
		p.item, p.key = -1, -1
		p.skipWS()
		switch p.peek() {
		case ',':
			p.i++
		case ']':
			p.close()
			return true
		default:
			return p.syntax("after an item of \"items\"", "',' or ']'")
		}
	}
}

// parseItem reads item idx (an object at p.i) and appends it to p.items
// unless it is invalid, in which case it records the problem in p.sem.
func (p *pushDecoder) parseItem(idx int) bool {
	var (
		it            queen.Item
		seen          uint8
		payload, data [2]int // value spans in p.b
	)
	fail := func(e *queen.Error, field string) {
		p.semantic(e.At(idx, fmt.Sprintf("items[%d].%s", idx, field)))
	}
	ok := p.walkObject(func(key []byte) bool {
		var bit uint8
		switch string(key) {
		case "queue":
			bit = keyQueue
		case "partition":
			bit = keyPartition
		case "transactionId":
			bit = keyTransactionID
		case "traceId":
			bit = keyTraceID
		case "payload":
			bit = keyPayload
		case "data":
			bit = keyData
		default:
			_, _, ok := p.skipValue()
			return ok
		}
		if seen&bit != 0 {
			fail(queen.ErrInvalidJSON.With("items[%d].%s is given twice", idx, key), string(key))
		}
		seen |= bit
		if bit == keyPayload || bit == keyData {
			start, end, ok := p.skipValue()
			if bit == keyPayload {
				payload = [2]int{start, end}
			} else {
				data = [2]int{start, end}
			}
			return ok
		}
		s, kind, ok := p.stringValue()
		if !ok || p.sem != nil {
			return ok
		}
		switch bit {
		case keyQueue:
			switch {
			case kind == valOther:
				fail(queen.ErrInvalidField.With("items[%d].queue must be a string", idx), "queue")
			case kind == valString && len(s) > 0:
				it.Queue = intern(s, &p.lastQueue)
			}
		case keyPartition:
			switch {
			case kind == valOther:
				fail(queen.ErrInvalidField.With("items[%d].partition must be a string or null", idx), "partition")
			case kind == valString && len(s) > 0:
				it.Partition = intern(s, &p.lastPartition)
			}
		case keyTransactionID:
			switch {
			case kind == valOther:
				fail(queen.ErrInvalidField.With("items[%d].transactionId must be a string or null", idx), "transactionId")
			case kind == valString:
				it.TransactionID = string(s)
			}
		case keyTraceID:
			switch {
			case kind == valOther:
				fail(queen.ErrInvalidField.With("items[%d].traceId must be a string or null", idx), "traceId")
			case kind == valString:
				t := string(s)
				it.TraceID = &t
			}
		}
		return true
	})
	if !ok || p.sem != nil {
		return ok
	}
	if it.Queue != "" && it.Partition == "" {
		it.Partition = queen.DefaultPartition
	}
	var trace string
	if it.TraceID != nil {
		trace = *it.TraceID
	}
	// The one item validator, shared with the clients (SPEC.md §10).
	if e := queen.ValidateItem(idx, it.Queue, it.Partition, it.TransactionID, trace); e != nil {
		p.semantic(e)
		return true
	}
	field, span := "payload", payload
	if seen&keyPayload == 0 {
		field, span = "data", data
	}
	if seen&(keyPayload|keyData) != 0 {
		// The payload rule, whose encoding part the walk has checked.
		if e := queen.CheckPayload(idx, field, p.b[span[0]:span[1]], p.maxPayload); e != nil {
			p.semantic(e)
			return true
		}
		// Point into the body for now; finish copies every payload at once.
		it.Payload = p.b[span[0]:span[1]:span[1]]
		p.payloadBytes += span[1] - span[0]
	} else {
		p.payloadBytes += len(emptyPayload)
	}
	p.items = append(p.items, it)
	return true
}

var emptyPayload = []byte("{}")

// finish copies the payloads out of the body (one allocation for the whole
// request), generates missing transaction ids and computes the hashes.
func (p *pushDecoder) finish() error {
	arena := make([]byte, 0, p.payloadBytes)
	for i := range p.items {
		it := &p.items[i]
		src := it.Payload
		if src == nil {
			src = emptyPayload
		}
		start := len(arena)
		arena = append(arena, src...)
		it.Payload = arena[start:len(arena):len(arena)]
		if it.TransactionID == "" {
			id, err := uuid.NewV7()
			if err != nil {
				return queen.ErrInternal.With("cannot generate a transaction id: %v", err)
			}
			it.TransactionID = id.String()
		}
		it.Hash = queen.HashTxn(it.TransactionID)
	}
	if p.items == nil {
		p.items = []queen.Item{}
	}
	return nil
}

// intern returns s as a string, reusing *last when equal.
func intern(s []byte, last *string) string {
	if string(s) == *last {
		return *last
	}
	*last = string(s)
	return *last
}

// ---------------------------------------------------------------------------
// The scanner: a single pass over the body that checks the JSON grammar
// (RFC 8259), UTF-8 and surrogate escapes, and decodes the strings the caller
// asks for.

// decoder walks a JSON body. A syntax or encoding problem (err) stops the
// walk; a semantic one (sem, the first) does not, so that a body with both
// reports the syntax problem.
type decoder struct {
	b     []byte
	i     int
	err   *queen.Error // first syntax or encoding error; the walk stops there
	sem   *queen.Error // first semantic error; the walk goes on
	depth int          // containers open around p.i
	stack []byte       // kinds ('{' or '[') of the containers skipValue opened
	buf   []byte       // unescaped string values
	kbuf  []byte       // unescaped keys
	item  int          // index of the item being read, -1 outside "items"
	key   int          // start of the raw key being read in the item, -1 if none
}

// Kinds of a value read by stringValue.
const (
	valNull = iota
	valString
	valOther
)

// semantic records e unless a problem is already known.
func (d *decoder) semantic(e *queen.Error) {
	if d.sem == nil {
		d.sem = e
	}
}

// locate sets e's index and field path when the walk is inside an item.
func (d *decoder) locate(e *queen.Error) *queen.Error {
	if d.item < 0 {
		return e
	}
	field := fmt.Sprintf("items[%d]", d.item)
	if d.key >= 0 {
		if s, _, ok := (&decoder{b: d.b, i: d.key}).rawString(); ok {
			field += "." + s
		}
	}
	return e.At(d.item, field)
}

// syntax records a syntax error at d.i: found while reading ctx, wanted want.
func (d *decoder) syntax(ctx, want string) bool {
	if d.err != nil {
		return false
	}
	if ctx != "" {
		ctx = " " + ctx
	}
	var e *queen.Error
	if d.i >= len(d.b) {
		e = queen.ErrInvalidJSON.With("invalid JSON: the body ends%s; expected %s", ctx, want)
	} else {
		e = queen.ErrInvalidJSON.With("invalid JSON at byte %d: found %s%s; expected %s", d.i, quoteByte(d.b[d.i]), ctx, want)
	}
	d.err = d.locate(e)
	return false
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return fmt.Sprintf("%q", rune(c))
	}
	return fmt.Sprintf("byte 0x%02X", c)
}

// badUTF8 records an encoding error at byte off.
func (d *decoder) badUTF8(off int, what string) bool {
	if d.err == nil {
		d.err = d.locate(queen.ErrInvalidUTF8.With("the request body has %s at byte %d", what, off))
	}
	return false
}

// finalErr returns the syntax error, or the invalid UTF-8 / lone surrogate
// the walk did not reach (the body after a syntax error is still checked, so
// an encoding problem anywhere is reported as one).
func (d *decoder) finalErr() *queen.Error {
	if d.err.Code == queen.ErrInvalidJSON.Code {
		if e := checkEncoding(d.b); e != nil {
			return e
		}
	}
	return d.err
}

// checkEncoding reports invalid UTF-8 or a lone surrogate escape anywhere in
// b, a body that is not valid JSON (strings are told apart by their quotes).
func checkEncoding(b []byte) *queen.Error {
	if !utf8.Valid(b) {
		for i := 0; i < len(b); {
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				return queen.ErrInvalidUTF8.With("the request body has invalid UTF-8 at byte %d", i)
			}
			i += n
		}
	}
	in := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			in = !in
		case c == '\\' && in:
			if i+1 < len(b) && b[i+1] == 'u' {
				if msg, n := surrogate(b, i); msg != "" {
					return queen.ErrInvalidUTF8.With("the request body has %s at byte %d", msg, i)
				} else if n > 2 {
					i += n - 1
					continue
				}
			}
			i++
		}
	}
	return nil
}

// surrogate looks at the \u escape at b[i:]: it returns a description of a
// lone surrogate, or the length of the escape (or pair) to skip (2 when the
// escape is malformed).
func surrogate(b []byte, i int) (string, int) {
	r, ok := hex4(b, i+2)
	if !ok {
		return "", 2
	}
	switch {
	case r >= 0xdc00 && r <= 0xdfff:
		return fmt.Sprintf("a lone low surrogate escape \\u%04x", r), 0
	case r >= 0xd800 && r <= 0xdbff:
		if i+11 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
			if r2, ok := hex4(b, i+8); ok && r2 >= 0xdc00 && r2 <= 0xdfff {
				return "", 12
			}
		}
		return fmt.Sprintf("a lone high surrogate escape \\u%04x", r), 0
	}
	return "", 6
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

func (d *decoder) peek() byte {
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

func (d *decoder) skipWS() {
	i := d.i
	for i < len(d.b) && isSpace[d.b[i]] {
		i++
	}
	d.i = i
}

var isSpace = [256]bool{' ': true, '\t': true, '\n': true, '\r': true}

// end checks that nothing but whitespace follows the top-level value.
func (d *decoder) end() {
	if d.err != nil {
		return
	}
	d.skipWS()
	if d.i < len(d.b) {
		d.syntax("after the top-level value", "the end of the body")
	}
}

// open enters the container at d.i and skips the whitespace after it.
func (d *decoder) open() bool {
	if d.depth >= maxNestingDepth {
		return d.syntax("nested more than 10000 deep", "a scalar")
	}
	d.depth++
	d.i++
	d.skipWS()
	return true
}

// close leaves the container whose closing bracket is at d.i.
func (d *decoder) close() {
	d.depth--
	d.i++
}

// walkObject reads the object at d.i, calling fn for each key (unescaped;
// valid only until fn reads a string) with d.i at the value, whitespace
// skipped. fn must consume the value and returns false on a syntax error.
func (d *decoder) walkObject(fn func(key []byte) bool) bool {
	if !d.open() {
		return false
	}
	if d.peek() == '}' {
		d.close()
		return true
	}
	item, key := d.item, d.key
	for {
		if d.peek() != '"' {
			return d.syntax("in an object", "a string key")
		}
		start := d.i
		k, ok := d.keyString()
		if !ok {
			return false
		}
		d.skipWS()
		if d.peek() != ':' {
			return d.syntax("after an object key", "':'")
		}
		d.i++
		d.skipWS()
		if item >= 0 && key < 0 {
			d.key = start // the key of an item's field, for error paths
		}
		if !fn(k) {
			return false
		}
		d.key = key
		d.skipWS()
		switch d.peek() {
		case ',':
			d.i++
			d.skipWS()
		case '}':
			d.close()
			return true
		default:
			return d.syntax("after an object value", "',' or '}'")
		}
	}
}

// keyString reads the string at d.i and returns its unescaped bytes (in the
// body when it has no escape, else in d.kbuf).
func (d *decoder) keyString() ([]byte, bool) {
	start, end, esc, ok := d.scanString()
	if !ok {
		return nil, false
	}
	if !esc {
		return d.b[start:end], true
	}
	d.kbuf = unescape(d.kbuf[:0], d.b[start:end])
	return d.kbuf, true
}

// stringValue reads a string-or-null value at d.i. For a string it returns
// the unescaped bytes (valid until the next string is read). Any other value
// is skipped and reported as valOther.
func (d *decoder) stringValue() ([]byte, int, bool) {
	switch d.peek() {
	case '"':
		start, end, esc, ok := d.scanString()
		if !ok {
			return nil, valString, false
		}
		if !esc {
			return d.b[start:end], valString, true
		}
		d.buf = unescape(d.buf[:0], d.b[start:end])
		return d.buf, valString, true
	case 'n':
		if d.literal("null") {
			return nil, valNull, true
		}
		return nil, valNull, false
	}
	_, _, ok := d.skipValue()
	return nil, valOther, ok
}

// rawString reads the string at d.i and returns its unescaped text; it is
// used only to name a key in an error.
func (d *decoder) rawString() (string, int, bool) {
	start, end, esc, ok := d.scanString()
	if !ok {
		return "", 0, false
	}
	if !esc {
		return string(d.b[start:end]), end, true
	}
	return string(unescape(nil, d.b[start:end])), end, true
}

// strPlain marks the bytes that stand for themselves inside a string: ASCII
// without control characters, '"' and '\\'.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

const lsb = 0x0101010101010101

// scanString reads the string at d.i (which is '"'), checking escapes, UTF-8
// and surrogates, and returns the span of its contents (between the quotes)
// and whether it has an escape.
func (d *decoder) scanString() (start, end int, esc, ok bool) {
	b := d.b
	i := d.i + 1
	start = i
	for {
		// Eight bytes at a time while none is a control character, '"',
		// '\\' or non-ASCII.
		for i+8 <= len(b) {
			x := binary.LittleEndian.Uint64(b[i:])
			q, bs := x^(lsb*'"'), x^(lsb*'\\')
			if (x|(x-lsb*0x20)|(q-lsb)&^q|(bs-lsb)&^bs)&(lsb*0x80) != 0 {
				break
			}
			i += 8
		}
		for i < len(b) && strPlain[b[i]] {
			i++
		}
		if i >= len(b) {
			d.i = i
			d.syntax("inside a string", "'\"'")
			return
		}
		switch c := b[i]; {
		case c == '"':
			d.i = i + 1
			return start, i, esc, true
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				d.i = len(b)
				d.syntax("inside a string", "an escape")
				return
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				msg, n := surrogate(b, i)
				if msg != "" {
					d.badUTF8(i, msg)
					return
				}
				if n == 2 {
					d.i = i
					d.syntax("inside a string", "\\u and four hex digits")
					return
				}
				i += n
			default:
				d.i = i + 1
				d.syntax("after '\\' in a string", "one of \"\\/bfnrtu")
				return
			}
		case c < 0x20:
			d.i = i
			d.syntax("inside a string (control characters must be escaped)", "'\"'")
			return
		default:
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				d.badUTF8(i, "invalid UTF-8")
				return
			}
			i += n
		}
	}
}

// unescape appends the text of the valid string contents s to dst.
func unescape(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			j := i + 1
			for j < len(s) && s[j] != '\\' {
				j++
			}
			dst = append(dst, s[i:j]...)
			i = j
			continue
		}
		switch s[i+1] {
		case 'u':
			r, _ := hex4(s, i+2)
			i += 6
			if r >= 0xd800 && r <= 0xdbff {
				r2, _ := hex4(s, i+2)
				r = (r-0xd800)<<10 | (r2 - 0xdc00) + 0x10000
				i += 6
			}
			dst = utf8.AppendRune(dst, r)
			continue
		case 'b':
			c = '\b'
		case 'f':
			c = '\f'
		case 'n':
			c = '\n'
		case 'r':
			c = '\r'
		case 't':
			c = '\t'
		default: // '"', '\\', '/'
			c = s[i+1]
		}
		dst = append(dst, c)
		i += 2
	}
	return dst
}

func (d *decoder) literal(word string) bool {
	if len(d.b)-d.i >= len(word) && string(d.b[d.i:d.i+len(word)]) == word {
		d.i += len(word)
		return true
	}
	for k := 0; k < len(word) && d.i < len(d.b) && d.b[d.i] == word[k]; k++ {
		d.i++
	}
	return d.syntax("in a literal", fmt.Sprintf("%q", word))
}

func (d *decoder) number() bool {
	b, i := d.b, d.i
	digits := func() bool {
		n := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > n
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		d.i = i
		return d.syntax("in a number", "a digit")
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			d.i = i
			return d.syntax("after the decimal point of a number", "a digit")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			d.i = i
			return d.syntax("in the exponent of a number", "a digit")
		}
	}
	d.i = i
	return true
}

// skipValue reads (and checks) one value at d.i without recursion and
// returns its span.
func (d *decoder) skipValue() (start, end int, ok bool) {
	b := d.b
	start = d.i
	base := len(d.stack)
	for {
		// A value starts at d.i.
		if d.i >= len(b) {
			d.syntax("", "a value")
			return
		}
		switch c := b[d.i]; {
		case c == '{' || c == '[':
			if !d.open() {
				return
			}
			d.stack = append(d.stack, c)
			if p := d.peek(); p == c+2 { // '}' or ']'
				d.close()
				d.stack = d.stack[:len(d.stack)-1]
				break
			}
			if c == '{' && !d.skipKey() {
				return
			}
			continue
		case c == '"':
			if _, _, _, str := d.scanString(); !str {
				return
			}
		case c == 't':
			if !d.literal("true") {
				return
			}
		case c == 'f':
			if !d.literal("false") {
				return
			}
		case c == 'n':
			if !d.literal("null") {
				return
			}
		case c == '-' || (c >= '0' && c <= '9'):
			if !d.number() {
				return
			}
		default:
			d.syntax("", "a value")
			return
		}
		// A value ended at d.i: close containers until another value is due.
		for {
			if len(d.stack) == base {
				return start, d.i, true
			}
			d.skipWS()
			top := d.stack[len(d.stack)-1]
			c := d.peek()
			if c == ',' {
				d.i++
				d.skipWS()
				if top == '{' && !d.skipKey() {
					return
				}
				break
			}
			if c != top+2 {
				if top == '{' {
					d.syntax("after an object value", "',' or '}'")
				} else {
					d.syntax("after an array element", "',' or ']'")
				}
				return
			}
			d.close()
			d.stack = d.stack[:len(d.stack)-1]
		}
	}
}

// skipKey reads `"key" :` and the whitespace after it.
func (d *decoder) skipKey() bool {
	if d.peek() != '"' {
		return d.syntax("in an object", "a string key")
	}
	if _, _, _, ok := d.scanString(); !ok {
		return false
	}
	d.skipWS()
	if d.peek() != ':' {
		return d.syntax("after an object key", "':'")
	}
	d.i++
	d.skipWS()
	return true
}
