package persistence

import (
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	queen "github.com/queen-mq/queen-go"
)

// A database out of disk space is named as such (docs/contract.md §12): a
// statement PostgreSQL refuses for lack of space (SQLSTATE 53100 disk_full,
// which is also how "could not extend file ...: No space left on device"
// arrives) is queen.ErrStorageFull (503, retryable, nothing written), never
// the generic unavailable; and the Store remembers when it last met one, so
// that /health says degraded (Store.StorageFull).
//
// A full disk also makes PostgreSQL restart (a WAL write that fails with
// ENOSPC is a PANIC), which empties the unlogged level-0 sidecar ranges;
// their rebuild (refillLostRanges) then fails for lack of space too, and
// every push meets a lost range (QS001, "sidecar range ... is being rebuilt
// after a database restart"). While the Store knows the disk is full, such
// a push is answered storage_full as well: the rebuild cannot finish until
// space is freed, and then it does (within one push, as after any restart).

// sqlstateDiskFull is PostgreSQL's disk_full (class 53, insufficient
// resources). The class's other codes (out_of_memory 53200,
// too_many_connections 53300, configuration_limit_exceeded 53400) are not
// about disk space and stay queen.ErrUnavailable.
const sqlstateDiskFull = "53100"

// StorageFullHold is how long Store.StorageFull keeps reporting a full disk
// after the last statement that met one: 30 s.
const StorageFullHold = 30 * time.Second

// storageFull reports whether err says the database is out of disk space:
// queen.ErrStorageFull, or a PostgreSQL error with SQLSTATE 53100 or the
// operating system's "No space left on device" (ENOSPC) in its message or
// detail, whatever its code (an I/O error reported under another one).
func storageFull(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, queen.ErrStorageFull) {
		return true
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return pgErr.Code == sqlstateDiskFull || strings.Contains(pgErr.Message, enospc) || strings.Contains(pgErr.Detail, enospc)
}

// enospc is strerror(ENOSPC), which PostgreSQL puts in the message of a
// file write or extension that failed for lack of space.
const enospc = "No space left on device"

// storageFullError is queen.ErrStorageFull naming err, PostgreSQL's own
// words (the file it could not extend, for one) with its detail.
func storageFullError(err error) *queen.Error {
	words := err.Error()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Detail != "" {
		words += ": " + pgErr.Detail
	}
	return queen.ErrStorageFull.With("the database is out of disk space: nothing was written; retry with the same transaction ids once space is freed (%s)", words)
}

// fullDisk is when the Store last met a full disk (Unix nanoseconds, 0:
// never).
type fullDisk struct{ at atomic.Int64 }

// note records that err, when it says so, met a full disk.
func (f *fullDisk) note(err error) {
	if storageFull(err) {
		f.mark()
	}
}

// mark records that a statement met a full disk now.
func (f *fullDisk) mark() { f.at.Store(time.Now().UnixNano()) }

// recent reports whether a full disk was met within StorageFullHold.
func (f *fullDisk) recent() bool {
	at := f.at.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < StorageFullHold
}

// StorageFull reports whether a statement of this Store (a push, pop, ack
// or transaction, the retention loop, the rebuild of the sidecar ranges)
// met a database out of disk space (SQLSTATE 53100) within the last
// StorageFullHold: /health is then degraded ("storage":"full"). Only
// statements that need space meet it, so a broker that writes nothing
// reports a full disk at most StorageFullHold after its last write.
func (s *Store) StorageFull() bool { return s.full.recent() }
