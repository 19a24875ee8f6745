-- Purges the sidecar of partition $1's segment starting at $2, as a
-- retention step does: its log_txns row. Its per-hash rows count for nothing
-- from then on and go with their time range (SPEC.md §7).
DELETE FROM queen.log_txns WHERE partition_id = $1 AND first_offset = $2
