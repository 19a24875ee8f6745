-- Drops range $1 of log_txn_hashes (upper bound $2) when still unused; true
-- when dropped. Run under a short lock_timeout (sidecar_lock_timeout).
SELECT queen.sidecar_drop_range($1::text, $2::timestamptz)
