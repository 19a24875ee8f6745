-- The BRIN index on log_txn_hashes.created_at is read by nothing: retention
-- walks each partition's log_txns primary key oldest first and deletes the
-- per-hash rows through the lookup index. Every per-hash insert still paid
-- for it, and once vacuum lets new rows fill old pages its ranges widen
-- until they match everything.
DROP INDEX IF EXISTS queen.log_txn_hashes_created_at;
