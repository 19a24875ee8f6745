-- The transaction-id hashes stored at (partition, offset) pairs, for acks
-- that name both an offset and a transactionId (checked against it; one
-- pair or many, from one consumer row or an ack call's many): per element
-- of the parallel arrays $1 (uuid[]), $2 (bigint[]) and $3 (text[], the
-- group acking), its 1-based position and the transaction-id
-- hash stored at that offset of that partition, read from the offset's
-- segment (16 bytes per frame, in frame order). An offset whose segment is
-- gone (retention) or never allocated has no row.
--
-- The consumer row and the partition's number (migration 0025) are read
-- once per (partition, group) named, in k, not once per element: an ack of
-- a pop's 100 offsets of one partition reads them once. Each element is
-- then one segments_offset descent per time range inside a LATERAL
-- subquery keyed by it (ORDER BY first_offset DESC LIMIT 1), never a join
-- of the arrays with a scan of the table. An offset above the group's
-- cursor lies in a segment at least as old as the cursor's (its time,
-- consumers.cursor_at, migration 0020), so the ranges stored before that
-- are pruned. Every segment this statement can see was stamped before it
-- committed, so before k read the clock (k.now, after the statement's
-- snapshot): the ranges made ahead of time for later writes
-- (persistence.segmentLead, five or more, empty) are pruned too. Each cost
-- an empty index's descent per offset, about 70 % of the statement's
-- buffers at 64 partitions with a 10-minute retention. A clock stepped
-- back could hide the newest segments from this read: their offsets then
-- go unchecked, as a segment retention removed does.
WITH u AS (
    SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::text[]) WITH ORDINALITY AS u (pid, o, grp, i)
), k AS MATERIALIZED (
    -- An aggregate over the (partition, group)'s consumer row, so that it
    -- stays a keyed lookup per element of d whatever the plan was made
    -- for (a join here became a merge join over all of consumers_pkey).
    SELECT d.pid, d.grp, b.cur, b.cursor_at, b.num, clock_timestamp() AS now
      FROM (SELECT DISTINCT pid, grp FROM u) d
     CROSS JOIN LATERAL (
        SELECT max(c."cursor") AS cur,
               max(CASE WHEN c.cursor_at_of = c."cursor" THEN c.cursor_at END) AS cursor_at,
               (SELECT n.num FROM queen.partitions n WHERE n.id = d.pid) AS num
          FROM queen.consumers c
         WHERE c.partition_id = d.pid AND c.consumer_group = d.grp
     ) b
)
SELECT u.i, substring(l.hashes FROM ((u.o - l.first_offset) * 16 + 1)::int FOR 16)
  FROM u
  JOIN k ON k.pid = u.pid AND k.grp = u.grp
 CROSS JOIN LATERAL (
    SELECT t.first_offset, t.last_offset, t.hashes
      FROM queen.segments t
     WHERE t.partition_num = k.num AND t.first_offset <= u.o AND t.created_at <= k.now
       AND t.created_at >= COALESCE(CASE WHEN u.o > k.cur THEN k.cursor_at END, '-infinity'::timestamptz)
     ORDER BY t.first_offset DESC
     LIMIT 1
 ) l
 WHERE l.last_offset >= u.o AND l.hashes IS NOT NULL
