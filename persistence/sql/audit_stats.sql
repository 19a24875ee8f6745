-- The database's size figures for the load test's timeline: the whole
-- database, the hash sidecar (log_txn_hashes, hash_blocks, hash_merged and hash_prints with their indexes
-- and TOAST, every partition of a partitioned table included:
-- pg_partition_tree lists a partitioned table's members and nothing for a
-- plain table, hence the table itself is added, once), the
-- current WAL position, and the WAL bytes written since a position.
-- $1 the earlier WAL position (text, as this statement returns it), or NULL
-- (then 0 bytes).
SELECT pg_database_size(current_database()),
       (SELECT COALESCE(sum(pg_total_relation_size(t.relid)), 0)::bigint
        FROM (SELECT relid FROM pg_partition_tree(to_regclass('queen.log_txn_hashes'))
              UNION SELECT to_regclass('queen.log_txn_hashes')
              UNION SELECT relid FROM pg_partition_tree(to_regclass('queen.hash_blocks'))
              UNION SELECT relid FROM pg_partition_tree(to_regclass('queen.hash_merged'))
              UNION SELECT to_regclass('queen.hash_prints')) t
        WHERE t.relid IS NOT NULL),
       pg_current_wal_lsn()::text,
       COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), $1::text::pg_lsn), 0)::bigint
