// Package persistence owns everything PostgreSQL: the versioned migrations of
// the queen schema, every SQL statement (embedded .sql files), the Store the
// actors and transports call (it implements actors.Store and consume.Store,
// whose requests and answers are the kernel's store protocol: queen.PushBatch,
// queen.PopSpec, ...), and the frame codec of segments. Nothing above this
// package imports pgx (TestImportBoundaries); errors leave it as *queen.Error values or the
// sentinel errors declared here.
package persistence
