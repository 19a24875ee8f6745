-- Deletes the sidecar of partition $1's segment starting at $2: its
-- log_txns row and its per-hash rows (a retention step).
WITH h AS (
    DELETE FROM queen.log_txn_hashes WHERE partition_id = $1 AND segment = $2
)
DELETE FROM queen.log_txns WHERE partition_id = $1 AND first_offset = $2
