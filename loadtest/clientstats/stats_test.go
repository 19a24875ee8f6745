package clientstats

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Stretches that meet share no bucket: the requests of a fault's during
// and after windows and the rest add up to the whole run.
func TestClientStatsWindows(t *testing.T) {
	t.Parallel()
	s := New(time.Now())
	for b := range 100 { // 10 s, one request per 100 ms
		switch {
		case b >= 20 && b < 35: // a fault from 2.0 s, recovered at 3.5 s
			s.Add(b, "push:failed:unavailable", 10)
		case b == 37: // a request it left unanswered, failing after
			s.Add(b, "push:timeout", 0)
		default:
			s.Add(b, "", 0)
		}
	}
	at, rec, settled := 2*time.Second, 3500*time.Millisecond, 5*time.Second
	during, after := s.Window(at, rec), s.Window(rec, settled)
	require.Equal(t, int64(15), during.Requests)
	require.Equal(t, int64(15), during.Errors)
	require.Equal(t, int64(150), during.FailedItems)
	require.Equal(t, map[string]int64{"push:failed:unavailable": 15}, during.ByKind)
	require.Equal(t, 1.0, during.ErrorRate)
	require.Equal(t, int64(15), after.Requests)
	require.Equal(t, int64(1), after.Errors)
	require.Zero(t, after.FailedItems)
	before, rest := s.Window(0, at), s.Window(settled, 10*time.Second)
	require.Equal(t, int64(100), before.Requests+during.Requests+after.Requests+rest.Requests)
	require.Zero(t, before.Errors+rest.Errors)
	// Mid-bucket ends round to the nearest boundary.
	require.Equal(t, int64(15), s.Window(2040*time.Millisecond, 3460*time.Millisecond).Requests)
	require.Zero(t, s.Window(time.Second, time.Second).Requests)

	require.Equal(t, 3800*time.Millisecond, s.LastError(at, settled), "the end of the last bucket with an error")
	require.Equal(t, time.Duration(-1), s.LastError(settled, 10*time.Second))
	var nilStats *Stats
	nilStats.Record("push:timeout") // a nil *Stats records nothing
}
