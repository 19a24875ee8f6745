package loadtest

import (
	"math"

	"github.com/queen-mq/queen-go/loadtest/report"
)

// bytesPerMessage is what a stored message cost the database between two
// readings (bytes); nil is unknown.
type bytesPerMessage struct {
	// WAL is the WAL written; DB and Sidecar the growth of the database
	// and of the hash sidecar's relations.
	WAL, DB, Sidecar *float64
}

// storagePerMessage divides the sizes' change from prev to cur (timeline
// points, or the run's start and end) by the messages stored in between,
// cur.StoredMessages - prev.StoredMessages, to 0.1 B. Every figure is nil
// when no message was stored in between or either reading is missing
// (DBBytes 0: the database could not be read); the WAL's also when
// cur.WALBytes is 0 (the run's start position is unknown: a stored message
// always writes WAL). A growth may be negative (retention dropping data).
func storagePerMessage(prev, cur report.TimelinePoint) bytesPerMessage {
	var out bytesPerMessage
	n := cur.StoredMessages - prev.StoredMessages
	if n <= 0 || prev.DBBytes <= 0 || cur.DBBytes <= 0 {
		return out
	}
	per := func(b int64) *float64 {
		v := math.Round(float64(b)/float64(n)*10) / 10
		return &v
	}
	out.DB, out.Sidecar = per(cur.DBBytes-prev.DBBytes), per(cur.SidecarBytes-prev.SidecarBytes)
	if cur.WALBytes > 0 {
		out.WAL = per(cur.WALBytes - prev.WALBytes)
	}
	return out
}

// runStart is the database's figures before the run's first push: where the
// WAL and the growth that storagePerMessage divides start.
type runStart struct {
	// sizes holds DBBytes and SidecarBytes (0: not read).
	sizes report.TimelinePoint
	// walAt is the WAL position ("" when not read); err the reading's
	// error.
	walAt, err string
}
