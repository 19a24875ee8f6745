package broker

import (
	"net/http"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// TestConfigure: configure is a full replace with a visible diff; unknown or
// invalid options are refused and change nothing; "mode":"merge" keeps the
// omitted options; not-enforced options are echoed (SPEC.md §6).
func TestConfigure(t *testing.T) {
	e := startEnv(t, nil)
	for _, via := range transports {
		t.Run(via, func(t *testing.T) {
			t.Run("full_replace", func(t *testing.T) {
				q := "cfg-replace-" + via
				m := e.configureOK(t, via, marshal(map[string]any{"queue": q, "namespace": "billing", "task": "invoices", "options": map[string]any{"dedupWindowSeconds": 86400}}))
				eq(t, true, m["configured"], "configured")
				eq(t, q, m["queue"].(string), "queue")
				eq(t, "billing", m["namespace"].(string), "namespace")
				eq(t, "invoices", m["task"].(string), "task")
				opts := m["options"].(map[string]any)
				eq(t, float64(86400), opts["dedupWindowSeconds"], "options.dedupWindowSeconds")
				for k, v := range map[string]float64{"leaseTime": 300, "retryLimit": 3, "retentionSeconds": 0, "completedRetentionSeconds": 0, "delayedProcessing": 0, "windowBuffer": 0} {
					eq(t, v, opts[k], "default of %s in the reply", k)
				}
				eq(t, int64(86400), e.dbWindow(t, q), "queues.dedup_window_seconds")
				eq(t, float64(86400), e.queueOption(t, via, q, "dedupWindowSeconds"), "GET options.dedupWindowSeconds")

				// No options at all: every option back to its default, and the reply says so.
				m = e.configureOK(t, via, marshal(map[string]any{"queue": q}))
				opts = m["options"].(map[string]any)
				eq(t, float64(3600), opts["dedupWindowSeconds"], "options.dedupWindowSeconds after a replace without it")
				changed, ok := m["changed"].(map[string]any)
				if !ok {
					t.Fatalf("reply without a changed object: %v", m)
				}
				if !reflect.DeepEqual(sortedKeys(changed), []string{"dedupWindowSeconds"}) {
					t.Fatalf("changed = %v, want only dedupWindowSeconds", changed)
				}
				c := changed["dedupWindowSeconds"].(map[string]any)
				eq(t, float64(86400), c["from"], "changed.dedupWindowSeconds.from")
				eq(t, float64(3600), c["to"], "changed.dedupWindowSeconds.to")
				eq(t, int64(3600), e.dbWindow(t, q), "queues.dedup_window_seconds after the replace")
				eq(t, float64(3600), e.queueOption(t, via, q, "dedupWindowSeconds"), "GET after the replace")

				// Same again: nothing changes.
				m = e.configureOK(t, via, marshal(map[string]any{"queue": q, "options": map[string]any{}}))
				if ch, _ := m["changed"].(map[string]any); len(ch) != 0 {
					t.Fatalf("an identical configure reports changes: %v", ch)
				}
			})

			t.Run("unknown_and_invalid_options", func(t *testing.T) {
				q := "cfg-unknown-" + via
				e.configureOK(t, via, marshal(map[string]any{"queue": q, "options": map[string]any{"dedupWindowSeconds": 86400, "leaseTime": 60}}))
				cases := []struct {
					name, key, code string
					value           any
				}{
					{"misspelt_key", "dedupWindowSecs", "unknown_option", 60},
					{"negative", "dedupWindowSeconds", "invalid_option", -1},
					{"fraction", "leaseTime", "invalid_option", 1.5},
					{"string", "retryLimit", "invalid_option", "5"},
				}
				for _, c := range cases {
					t.Run(c.name, func(t *testing.T) {
						st, _, eb := e.configure(t, via, marshal(map[string]any{"queue": q, "options": map[string]any{c.key: c.value}}))
						eq(t, http.StatusBadRequest, st, "status")
						if eb == nil {
							t.Fatal("no error body")
						}
						eq(t, c.code, eb.Code, "code")
						eq(t, "options."+c.key, eb.Field, "field")
						if !strings.Contains(eb.Error, c.key) {
							t.Fatalf("error %q does not name %q", eb.Error, c.key)
						}
						eq(t, false, *eb.Retryable, "retryable")
						eq(t, float64(86400), e.queueOption(t, via, q, "dedupWindowSeconds"), "stored window unchanged")
						eq(t, float64(60), e.queueOption(t, via, q, "leaseTime"), "stored leaseTime unchanged")
						eq(t, int64(86400), e.dbWindow(t, q), "queues.dedup_window_seconds unchanged")
					})
				}
				// A refused configure of a new queue does not create it.
				q2 := "cfg-unknown-new-" + via
				st, _, eb := e.configure(t, via, marshal(map[string]any{"queue": q2, "options": map[string]any{"bogus": 1}}))
				eq(t, http.StatusBadRequest, st, "status for a new queue")
				eq(t, "options.bogus", eb.Field, "field")
				eq(t, int64(0), e.stats(t, q2).Queues, "queue created by a refused configure")
			})

			t.Run("merge", func(t *testing.T) {
				q := "cfg-merge-" + via
				e.configureOK(t, via, marshal(map[string]any{"queue": q, "options": map[string]any{"dedupWindowSeconds": 86400, "leaseTime": 60}}))
				m := e.configureOK(t, via, marshal(map[string]any{"queue": q, "mode": "merge", "options": map[string]any{"retryLimit": 5}}))
				opts := m["options"].(map[string]any)
				eq(t, float64(86400), opts["dedupWindowSeconds"], "merged dedupWindowSeconds")
				eq(t, float64(60), opts["leaseTime"], "merged leaseTime")
				eq(t, float64(5), opts["retryLimit"], "merged retryLimit")
				changed := m["changed"].(map[string]any)
				if !reflect.DeepEqual(sortedKeys(changed), []string{"retryLimit"}) {
					t.Fatalf("changed = %v, want only retryLimit", changed)
				}
				eq(t, int64(86400), e.dbWindow(t, q), "queues.dedup_window_seconds after merge")
				eq(t, float64(86400), e.queueOption(t, via, q, "dedupWindowSeconds"), "GET after merge")
				eq(t, float64(60), e.queueOption(t, via, q, "leaseTime"), "GET leaseTime after merge")
				// The merged window is the one pushes use.
				a := e.pushOK(t, via, items(it(q, "p", "m1")), 1)[0]
				b := e.pushOK(t, via, items(it(q, "p", "m1")), 1)[0]
				wantStatuses(t, []reply{a, b}, "queued", "duplicate")
			})

			t.Run("not_enforced", func(t *testing.T) {
				q := "cfg-ne-" + via
				m := e.configureOK(t, via, marshal(map[string]any{"queue": q, "options": map[string]any{"priority": 5, "ttl": 100, "encryptionEnabled": false, "dedupWindowSeconds": 10}}))
				opts := m["options"].(map[string]any)
				eq(t, float64(5), opts["priority"], "echoed priority")
				eq(t, float64(100), opts["ttl"], "echoed ttl")
				eq(t, false, opts["encryptionEnabled"], "echoed encryptionEnabled")
				eq(t, float64(10), opts["dedupWindowSeconds"], "dedupWindowSeconds")
				raw, ok := m["notEnforced"].([]any)
				if !ok {
					t.Fatalf("reply without a notEnforced list: %v", m)
				}
				var ne []string
				for _, v := range raw {
					ne = append(ne, v.(string))
				}
				sort.Strings(ne)
				if !reflect.DeepEqual(ne, []string{"encryptionEnabled", "priority", "ttl"}) {
					t.Fatalf("notEnforced = %v, want [encryptionEnabled priority ttl]", ne)
				}
				eq(t, float64(5), e.queueOption(t, via, q, "priority"), "GET priority")
				eq(t, int64(10), e.dbWindow(t, q), "queues.dedup_window_seconds")
			})
		})
	}
}
