-- queen:layout 1
-- The hash sidecar's authority moves into the segments (issue 42, SPEC.md
-- §2, §3, §7). Until now every (partition, commit) wrote a log_txns row (the
-- segment's hashes, with a primary key and a created_at btree) beside its
-- segment: about 280 bytes of WAL per message when traffic is spread over
-- many partitions (one message per partition per commit), a third of the
-- whole. Now:
--
--  * a segment carries its frames' transaction-id hashes (hashes, 16 bytes
--    per frame, in frame order): the logged source of the level-0 per-hash
--    rows, read by a crash's rebuild, the compaction of a range a crash
--    emptied, the probe of writes a cache has not seen, hydration and the
--    ack's offset check;
--  * the level-1 hash blocks are self-contained: each hash carries its
--    partition and its created_at (parts, stamps) beside its segment's
--    first offset and its index, so a lookup needs no other row. Retention
--    may drop a segment while its hashes are still inside the window (a
--    queue whose retentionSeconds is shorter than its dedupWindowSeconds):
--    the blocks still answer (a duplicate whose original segment is gone,
--    SPEC.md §3). 52 bytes a hash, written once per range;
--  * retention deletes or drops a segment only once the sidecar range of its
--    created_at is compacted into level 1 (logged), so a crash never needs a
--    segment that is gone to rebuild level 0;
--  * log_txns goes, and with it its purge: the sidecar's ranges expire by
--    time alone.
--
-- A layout migration (persistence.LayoutMarker): brokers of an older
-- release write log_txns in their push statement, so once this runs their
-- pushes fail (the table is gone) and never answer `queued` for an id only
-- the segments hold; Migrate refuses to run it while such a broker is live.

ALTER TABLE queen.segments ADD COLUMN hashes bytea;
-- Uncompressed out of line, like message_ids: hashes do not compress, and
-- substring() then fetches one hash's slice (every leaf: SET STORAGE
-- recurses to the partitions; queen.segment_storage sets it on new ranges).
ALTER TABLE queen.segments ALTER COLUMN hashes SET STORAGE EXTERNAL;

-- A range detached from segments_timed and awaiting its drop is no partition
-- any more: it gets the column too, so attaching it back (a configure raised
-- a retention meanwhile, queen.segment_drop_detached) still matches.
DO $$
DECLARE
    n text;
BEGIN
    FOR n IN SELECT r.name FROM queen.segment_ranges r
              WHERE to_regclass(format('queen.%I', r.name)) IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM pg_inherits i
                                 WHERE i.inhrelid = format('queen.%I', r.name)::regclass)
    LOOP
        EXECUTE format('ALTER TABLE queen.%I ADD COLUMN IF NOT EXISTS hashes bytea', n);
        EXECUTE format('ALTER TABLE queen.%I ALTER COLUMN hashes SET STORAGE EXTERNAL', n);
    END LOOP;
END
$$;

-- Each segment takes its hashes from its log_txns row. A segment whose row
-- was purged (older than its queue's sidecar floor) keeps NULL: nothing
-- inside any window needs it.
UPDATE queen.segments s
   SET hashes = t.hashes
  FROM queen.log_txns t
 WHERE t.partition_id = s.partition_id AND t.first_offset = s.first_offset;

-- A range rebuilt after a crash (or compacted after one) reads the segments
-- of its time: segments_timed prunes by range, segments_kept through this
-- index (a block range index: a few pages, and nothing written per insert
-- while the table's new pages are unsummarized).
CREATE INDEX segments_created_at ON queen.segments USING brin (created_at);

-- The level-1 blocks are built again in the self-contained form from the
-- log_txns rows of their ranges (the authority until now). A hash whose
-- row was purged is outside every window already.
TRUNCATE queen.hash_blocks;
ALTER TABLE queen.hash_blocks
    ADD COLUMN parts  uuid[]        NOT NULL,
    ADD COLUMN stamps timestamptz[] NOT NULL;
SET LOCAL max_parallel_workers_per_gather = 0;
SET LOCAL enable_hashagg = off;
INSERT INTO queen.hash_blocks (lo, bucket, hashes, firsts, idxs, parts, stamps)
SELECT e.lo, e.bucket, array_agg(e.hash), array_agg(e.first), array_agg(e.idx),
       array_agg(e.partition_id), array_agg(e.created_at)
  FROM (SELECT r.lo,
               encode(substring(t.hashes FROM g.i * 16 + 1 FOR 16), 'hex')::uuid AS hash,
               t.first_offset AS first, g.i AS idx, t.partition_id, t.created_at,
               ('x' || encode(substring(t.hashes FROM g.i * 16 + 1 FOR 4), 'hex'))::bit(32)::bigint >> (32 - r.bits) AS bucket
          FROM queen.sidecar_ranges r
          JOIN queen.log_txns t ON t.created_at >= r.lo AND t.created_at < r.hi
         CROSS JOIN LATERAL generate_series(0, length(t.hashes) / 16 - 1) AS g (i)
         WHERE r.bits IS NOT NULL
        OFFSET 0) e
 GROUP BY e.lo, e.bucket;

DROP TABLE queen.log_txns;
