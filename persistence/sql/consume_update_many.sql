-- Writes consumer rows of group $2 after a pop or an ack (SPEC.md §4), in
-- one statement: parallel arrays, one element per row, partition ids $1
-- (uuid[], distinct), $3 cursor (bigint[]), $4 lease id (uuid[], NULL
-- releases the lease), $5 lease seconds from now (float8[], NULL keeps the
-- current expiry), $6 lease_to (bigint[]), $7 the failure counts of the
-- messages above the cursor (jsonb[]), $8 the bisection (jsonb[], NULL:
-- none). The caller holds the rows' locks. Returns each written row's
-- 1-based position in $1 and its lease expiry.
--
-- Each row is found by its primary key inside a LATERAL subquery keyed by
-- the element (its ctid, read in this statement's snapshot under the lock
-- the caller holds), and the UPDATE joins on that ctid, so the only way to
-- reach a row is a TID lookup per element: a join on (partition_id,
-- consumer_group) could be planned as a hash or merge join over a scan of
-- the whole table, or of the group's every row (consumers_group), when a
-- generic plan was cached while the table was small. Run with enable_seqscan
-- off (consume_plan_begin), a scan of the table is never cheaper than the
-- TID lookups; TestManyPlansStayIndexed checks the cached plan.
--
-- The rows that take a lease (lease and secs not NULL: a pop's claimed
-- rows) are recorded in queen.consumer_leases in the same statement
-- (migration 0014), one row per lease id naming the group, the partitions
-- and the greatest of their expiries (an existing row of the same lease
-- gains the partitions); an ack that keeps the lease ($5 NULL) or releases
-- it writes no lease row.
WITH w AS (
    UPDATE queen.consumers c
       SET "cursor"         = v.cur,
           -- The time of the new position (migration 0020): unchanged when
           -- the cursor is, else read from the segment holding it, its
           -- index descended only in the ranges at or after the old
           -- position's time when the cursor moves forward from a known one,
           -- and never in the empty ranges made ahead of time
           -- (persistence.segmentLead): every segment this statement sees
           -- was stamped before v read the clock, after the snapshot.
           cursor_at        = CASE WHEN v.cur < 0 THEN NULL
                                   WHEN v.cur = c.cursor_at_of AND c."cursor" = c.cursor_at_of THEN c.cursor_at
                                   ELSE (SELECT s.created_at FROM queen.segments s
                                          WHERE s.partition_num = (SELECT n.num FROM queen.partitions n WHERE n.id = c.partition_id)
                                            AND s.first_offset <= v.cur AND s.created_at <= v.now
                                            AND s.created_at >= CASE WHEN c.cursor_at_of = c."cursor" AND c."cursor" <= v.cur
                                                                     THEN COALESCE(c.cursor_at, '-infinity'::timestamptz)
                                                                     ELSE '-infinity'::timestamptz END
                                          ORDER BY s.first_offset DESC
                                          LIMIT 1)
                              END,
           cursor_at_of     = CASE WHEN v.cur < 0 THEN NULL ELSE v.cur END,
           lease_id         = v.lease,
           lease_expires_at = CASE WHEN v.lease IS NULL THEN NULL
                                   WHEN v.secs IS NULL THEN c.lease_expires_at
                                   ELSE clock_timestamp() + make_interval(secs => v.secs) END,
           lease_to         = CASE WHEN v.lease IS NULL THEN NULL ELSE v.lease_to END,
           fail_counts      = v.counts,
           bisect           = v.bisect,
           updated_at       = clock_timestamp()
      FROM (
        SELECT u.i, u.cur, u.lease, u.secs, u.lease_to, u.counts, u.bisect, k.tid, clock_timestamp() AS now
          FROM unnest($1::uuid[], $3::bigint[], $4::uuid[], $5::float8[], $6::bigint[], $7::jsonb[], $8::jsonb[])
               WITH ORDINALITY AS u (pid, cur, lease, secs, lease_to, counts, bisect, i)
         CROSS JOIN LATERAL (
            SELECT k.ctid AS tid
              FROM queen.consumers k
             WHERE k.partition_id = u.pid AND k.consumer_group = $2
            OFFSET 0
         ) k
      ) v
     WHERE c.ctid = v.tid
    RETURNING v.i, v.secs, c.partition_id, c.lease_id, c.lease_expires_at
), l AS (
    INSERT INTO queen.consumer_leases AS l (lease_id, consumer_group, partition_ids, expires_at)
    SELECT w.lease_id, $2, array_agg(w.partition_id ORDER BY w.partition_id), max(w.lease_expires_at)
      FROM w
     WHERE w.secs IS NOT NULL AND w.lease_id IS NOT NULL
     GROUP BY w.lease_id
    ON CONFLICT (lease_id) DO UPDATE
       SET partition_ids = ARRAY(SELECT DISTINCT x FROM unnest(l.partition_ids || EXCLUDED.partition_ids) AS x),
           expires_at    = GREATEST(l.expires_at, EXCLUDED.expires_at)
)
SELECT w.i, w.lease_expires_at FROM w
