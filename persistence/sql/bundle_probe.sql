-- The window probe of a bundle (SPEC.md §3, §8), run as its own statement
-- after bundle_lock, so its snapshot includes every commit made before the
-- locks were granted: the pushes of other brokers and the latest configure.
-- A partition its actor knew (persistence.lockBundle) is not locked yet:
-- what this statement reads of it may be overtaken by a writer that commits
-- before the bump takes its lock, and the bump then finds it moved
-- (bundle_bump) and nothing is written.
-- Per partition (parallel arrays): $1 partition id, $3 its watermark offset
-- (-1 = the whole window), $4..$5 the 1-based bounds of its distinct
-- incoming hashes in $2 (uuid[]), $7 the window (seconds) the watermark
-- assumes, $10 its queue's name (text[]). $11 the names of the queues
-- whose windows to read (text[]): every queue of the bundle, also those of
-- the partitions the caller kept out of the arrays (persistence.probeArgs:
-- the cache vouches for them, and their ends and this window tell whether
-- they need a second probe). Per hash: $6 whether the cache suspects it (it has seen it),
-- $8..$9 the created_at span (timestamptz, both ends included; -infinity
-- and infinity when unbounded) of the sidecar rows that may hold it.
--
-- Returns one row per queue named in $11 (partition and hash NULL) giving its
-- window, its dedupCheckPayload option, whether it has retentionSeconds
-- (for the choice of segments_timed, persistence.bundleRows.copySegments)
-- and, last, its name: the caller gives each partition its queue's (a
-- partition per row made 470 rows of a 470-partition bundle that said the
-- same thing). Then one row per hit
-- (queue NULL): partition, window, hash, offset, the original's stored
-- message id from its covering segment (16 bytes sliced from legacy_ids in
-- a segment written before layout 3, empty when the segment derives its
-- ids, NULL when the segment is gone), that segment's first offset (for
-- bundle_originals) and, last, its created_at (the caller derives the id
-- from it, persistence.messageID). A window of 0 looks nothing up.
--
-- Two ways to find hits, both limited to rows inside the window:
--  * narrowed (the watermark is >= 0 and the window is not wider than the
--    cache assumed): the hashes of the segments after the watermark, the
--    writes the cache has not seen, unpacked and matched against the
--    incoming hashes (usually there are none, and the partition's end on
--    its allocator row, queen.partition_ends, says so: then no segment is
--    read; the end is exact under the row's lock, and for a partition not
--    locked yet the bump checks that it did not move; a partition without
--    a row, which a crash emptied, is not locked, and the caller discards
--    this statement's answer for it, persistence.lostEnds, or the bump
--    finds no row);
--    plus one index lookup per suspect, in the window and within its span
--    (the time of the cache's generations that may hold it).
--  * otherwise: one index lookup per incoming hash, in the whole window.
-- The watermark is a segment boundary (persistence.PushBatch), so "segments
-- after it" is first_offset > watermark.
--
-- The conditions that choose a branch for a partition (looks_up: not
-- narrowed or a suspect among its hashes; narrowed and unseen) filter the
-- scan of w, before the LATERAL subqueries: a partition a branch does not
-- apply to costs that branch a filtered row, not a rescan of its
-- subqueries. The usual partition of a warm cache takes neither branch and
-- is not sent at all (persistence.probeArgs keeps it out, and probes it
-- again only when bundle_lock's end or this statement's window says it
-- moved, or after the bump found it moved), so the arrays hold the partitions with suspects, without a
-- watermark, or moved.
-- The per-hash condition (not narrowed, or this hash a suspect) stays a
-- one-time filter inside the lookup's subquery.
--
-- A lookup is queen.sidecar_find (migration 0011): one index descent per
-- level-0 range of log_txn_hashes (and the DEFAULT partition) and, per
-- level-1 table of hash_blocks in the window (or the suspect's span;
-- migration 0023: a table holds up to 16 compacted ranges), one row of its
-- merged index once it is closed and merged (migration 0027), else one
-- primary-key descent and a row per range, never the older ones (both
-- levels self-contained, migration 0017); it raises QS001 while a range
-- it needs is being rebuilt after a crash. A range is planned while it is
-- young and small (a new one every span); pushes and transactions run this
-- statement with enable_seqscan off (probe_plan_begin / plan_end), so
-- no plan scans a range that fills up later.
--
-- Every lookup is an equality on a primary key or on both columns of
-- log_txn_hashes_lookup, and the LATERAL ... OFFSET 0 subqueries keep them
-- per-row lookups, so each incoming hash is one index descent whatever the
-- statistics said when the plan was cached: a generic plan made while the
-- tables were small must not scan a partition later (an `= ANY(array
-- slice)` probe and a `first_offset <= x ORDER BY ... LIMIT 1` segment lookup
-- both did, and pushes slowed down as the window filled).
--
-- The queue rows are read once per queue named, not once per partition (a
-- bundle spread over 1,000 partitions of one queue read the same row 1,000
-- times through the partition's). Each partition belongs to the queue it
-- names: a partition locked by bundle_lock exists (a queue's deletion
-- deletes its partitions, which waits for those locks), and a deleted one
-- not locked yet has no allocator row left for the bump to find.
WITH qo AS MATERIALIZED (
    SELECT q.name, q.dedup_window_seconds AS seconds, q.dedup_check_payload AS check_payload,
           COALESCE((q.options ->> 'retentionSeconds')::float8 > 0, false) AS retained
      FROM queen.queues q
     WHERE q.name = ANY ($11::text[])
), w0 AS MATERIALIZED (
    SELECT i.partition_id, i.watermark, i.lo, i.hi, i.assumed, i.queue, qo.seconds, qo.check_payload, qo.retained,
           e.last_offset AS "end", e.num,
           -- Whether the partition looks a hash up at all: a window, and
           -- not narrowed or a suspect among its hashes.
           (qo.seconds > 0 AND NOT (i.watermark >= 0 AND qo.seconds <= i.assumed
                                    AND NOT true = ANY (($6::boolean[])[i.lo:i.hi]))) AS looks_up
      FROM unnest($1::uuid[], $3::bigint[], $4::int[], $5::int[], $7::bigint[], $10::text[]) AS i (partition_id, watermark, lo, hi, assumed, queue)
      LEFT JOIN qo ON qo.name = i.queue
      LEFT JOIN LATERAL (
        -- The partition's number (migration 0025: segments name their
        -- partition by it), from the allocator row the caller holds locked.
        SELECT e.last_offset, e.num FROM queen.partition_ends e WHERE e.partition_id = i.partition_id OFFSET 0
      ) e ON true
), qa AS MATERIALIZED (
    -- Once per queue with a partition that looks a hash up: the window's
    -- lower edge at the probe, on PostgreSQL's clock, and the check that
    -- the level-0 ranges ending after it are alive, or QS001
    -- (queen.sidecar_assert_alive). Every lookup of the queue's partitions
    -- uses this edge, so they read no range the check did not cover, and
    -- skip the check. (Once per partition, the check was about a quarter
    -- of the probe of a spread bundle: 10 µs a call.)
    SELECT e.name, e.after, queen.sidecar_assert_alive(e.after) AS checked
      FROM (SELECT qo.name, clock_timestamp() - make_interval(secs => qo.seconds) AS after
              FROM qo
             WHERE qo.seconds > 0
               AND EXISTS (SELECT 1 FROM w0 WHERE w0.queue = qo.name AND w0.looks_up)
            OFFSET 0) e
), w AS MATERIALIZED (
    SELECT w0.partition_id, w0.num, w0.watermark, w0.lo, w0.hi, w0.seconds, w0.check_payload, w0.retained,
           (w0.watermark >= 0 AND w0.seconds <= w0.assumed) AS narrowed,
           -- Whether a segment may start after the watermark: the
           -- partition's end (its allocator row, migration 0019) is past
           -- it. At the end, the cache has
           -- seen every write and the segments are not read.
           (w0."end" IS NULL OR w0."end" > w0.watermark) AS unseen,
           -- The window's lower edge (a column, so queen.sidecar_find is
           -- inlined: a volatile argument would make it a separate plan per
           -- call) and the check of its ranges, from qa: set when the
           -- partition looks a hash up.
           qa.after,
           qa.checked,
           w0.looks_up
      FROM w0
      LEFT JOIN qa ON qa.name = w0.queue
)
SELECT NULL::uuid AS partition_id, qo.seconds, NULL::uuid AS hash, NULL::bigint AS "offset", NULL::bytea AS message_id,
       qo.check_payload, NULL::bigint AS segment, qo.retained, qo.name AS queue, NULL::timestamptz AS created_at
  FROM qo
UNION ALL
SELECT x.partition_id,
       w.seconds,
       x.hash,
       x."offset",
       (SELECT COALESCE(substring(s.legacy_ids FROM ((x."offset" - s.first_offset) * 16 + 1)::int FOR 16), '')
          FROM queen.segments s
         WHERE s.partition_num = x.num AND s.first_offset = x.segment
           -- Written by the same statement, with the same stamp: the time
           -- ranges of segments_timed other than this one are pruned.
           AND s.created_at = x.created_at),
       NULL::boolean,
       x.segment,
       NULL::boolean,
       NULL::text,
       x.created_at
  FROM w
 CROSS JOIN LATERAL unnest(($2::uuid[])[w.lo:w.hi], ($6::boolean[])[w.lo:w.hi],
                          ($8::timestamptz[])[w.lo:w.hi], ($9::timestamptz[])[w.lo:w.hi]) AS h (hash, suspect, since, until)
 CROSS JOIN LATERAL (
    SELECT w.partition_id, w.num, h.hash, f."offset", f.segment, f.created_at
      FROM queen.sidecar_find(w.partition_id, h.hash, w.after,
                              -- The suspect's span, when the cache's knowledge
                              -- holds (narrowed): the ranges outside it are
                              -- not read.
                              CASE WHEN w.narrowed THEN h.since ELSE '-infinity'::timestamptz END,
                              CASE WHEN w.narrowed THEN h.until ELSE 'infinity'::timestamptz END,
                              COALESCE(w.checked, false)) f
     WHERE (NOT w.narrowed OR h.suspect)
    OFFSET 0
 ) x
 -- Filtered at the scan of w: a partition that looks nothing up never
 -- reaches the laterals.
 WHERE w.looks_up
UNION ALL
SELECT w.partition_id,
       w.seconds,
       u.hash,
       t.first_offset + u.i,
       (SELECT COALESCE(substring(s.legacy_ids FROM (u.i * 16 + 1)::int FOR 16), '')
          FROM queen.segments s
         WHERE s.partition_num = w.num AND s.first_offset = t.first_offset
           AND s.created_at = t.created_at),
       NULL::boolean,
       t.first_offset,
       NULL::boolean,
       NULL::text,
       t.created_at
  FROM w
 CROSS JOIN LATERAL (
    SELECT t.first_offset, t.hashes, t.created_at
      FROM queen.segments t
     WHERE t.partition_num = w.num
       -- A two-sided range on parameters is estimated narrow, so this
       -- stays an index range scan (a one-sided one was planned as a
       -- scan of the table when one partition held most of it).
       AND t.first_offset > w.watermark
       AND t.first_offset < w.watermark + 4611686018427387904
       -- statement_timestamp() is stable: the time ranges of
       -- segments_timed older than the window are pruned when the scan
       -- starts (clock_timestamp() is volatile and prunes nothing).
       AND t.created_at > statement_timestamp() - make_interval(secs => w.seconds)
       AND t.created_at > clock_timestamp() - make_interval(secs => w.seconds)
    OFFSET 0
 ) t
 CROSS JOIN LATERAL (
    SELECT k.i, encode(substring(t.hashes FROM (k.i * 16 + 1)::int FOR 16), 'hex')::uuid AS hash
      FROM generate_series(0, length(t.hashes) / 16 - 1) AS k (i)
 ) u
 WHERE u.hash = ANY (($2::uuid[])[w.lo:w.hi])
   -- Filtered at the scan of w, as above.
   AND w.narrowed AND w.unseen AND w.seconds > 0
