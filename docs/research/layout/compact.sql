-- Measures level-1 (compacted, logged) forms of the UNLOGGED level-0 indexes,
-- built over everything in the database (one "range").
\set ON_ERROR_STOP on
SELECT count(*) AS hashes FROM queen.log_txn_hashes \gset
SELECT count(*) AS nruns FROM queen.runs \gset
SELECT CASE WHEN :hashes <= 48 THEN 0 ELSE least(30, ceil(log(2, :hashes / 48.0))::int) END AS k \gset
CHECKPOINT;
SELECT pg_current_wal_lsn() AS l0 \gset
BEGIN;
SET LOCAL max_parallel_workers_per_gather = 0;
CREATE TABLE queen.hash_blocks_x (lo timestamptz NOT NULL, bucket bigint NOT NULL, hashes uuid[] NOT NULL, firsts bigint[] NOT NULL, idxs integer[] NOT NULL) WITH (autovacuum_enabled = false);
INSERT INTO queen.hash_blocks_x (lo, bucket, hashes, firsts, idxs)
SELECT '2000-01-01', e.bucket, array_agg(e.hash), array_agg(e.first), array_agg(e.idx)
  FROM (SELECT x.hash, x.segment AS first, (x."offset" - x.segment)::int AS idx,
               ('x' || substr(x.hash::text, 1, 8))::bit(32)::bigint >> (32 - :k) AS bucket
          FROM queen.log_txn_hashes x OFFSET 0) e
 GROUP BY e.bucket;
ALTER TABLE queen.hash_blocks_x ADD PRIMARY KEY (lo, bucket);
COMMIT;
SELECT pg_current_wal_lsn() AS l1 \gset
BEGIN;
CREATE TABLE queen.run_blocks_x (partition_id uuid NOT NULL, lo timestamptz NOT NULL, firsts bigint[] NOT NULL, commits bigint[] NOT NULL, poss int[] NOT NULL, idxs int[] NOT NULL) WITH (autovacuum_enabled = false);
INSERT INTO queen.run_blocks_x
SELECT partition_id, '2000-01-01', array_agg(first_offset ORDER BY first_offset), array_agg(commit_id ORDER BY first_offset),
       array_agg(pos ORDER BY first_offset), array_agg(idx ORDER BY first_offset)
  FROM queen.runs GROUP BY partition_id;
ALTER TABLE queen.run_blocks_x ADD PRIMARY KEY (partition_id, lo);
COMMIT;
SELECT pg_current_wal_lsn() AS l2 \gset
SELECT :hashes AS hashes, :nruns AS runs, :k AS bits,
       round(pg_wal_lsn_diff(:'l1', :'l0') / :hashes, 1) AS hb_wal_per_hash,
       round(pg_total_relation_size('queen.hash_blocks_x')::numeric / :hashes, 1) AS hb_db_per_hash,
       round(pg_wal_lsn_diff(:'l2', :'l1') / :hashes, 1) AS rb_wal_per_msg,
       round(pg_total_relation_size('queen.run_blocks_x')::numeric / :hashes, 1) AS rb_db_per_msg,
       round(pg_total_relation_size('queen.run_blocks_x')::numeric / :nruns, 1) AS rb_db_per_run,
       round((pg_total_relation_size('queen.log_txn_hashes'))::numeric / :hashes, 1) AS l0_hash_db_per_hash,
       round((pg_total_relation_size('queen.runs'))::numeric / :hashes, 1) AS l0_runs_db_per_msg;
DROP TABLE queen.hash_blocks_x, queen.run_blocks_x;
