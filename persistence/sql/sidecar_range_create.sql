-- Creates the range [$1, $2) of log_txn_hashes unless it exists; true when
-- created. Run under a short lock_timeout (sidecar_lock_timeout).
SELECT queen.sidecar_create_range($1::timestamptz, $2::timestamptz)
