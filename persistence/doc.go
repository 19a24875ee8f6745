// Package persistence owns everything PostgreSQL: the versioned migrations of
// the queen schema, every SQL statement (embedded .sql files), the Store the
// actors and transports call, and the frame codec of segments. Nothing above
// this package imports pgx; errors leave it as *queen.Error values or the
// sentinel errors declared here.
package persistence
