-- Deletes up to $1 rows of the DEFAULT partition of log_txn_hashes whose
-- segment's log_txns row is gone (SPEC.md §7): rows land there only when
-- their time range did not exist yet, and such a row counts for nothing once
-- its log_txns row is purged. Returns the rows deleted (twice, as the other
-- retention statements return rows and messages). No partition row lock.
WITH d AS (
    DELETE FROM queen.log_txn_hashes_default x
     WHERE x.ctid = ANY (ARRAY(
        SELECT y.ctid
          FROM queen.log_txn_hashes_default y
         WHERE NOT EXISTS (SELECT 1 FROM queen.log_txns t
                            WHERE t.partition_id = y.partition_id AND t.first_offset = y.segment)
         LIMIT $1::bigint))
    RETURNING 1
)
SELECT count(*), count(*) FROM d
