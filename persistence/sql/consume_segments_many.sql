-- The segments to deliver (SPEC.md §4, §6): per partition id in $1
-- (uuid[]), the segments holding the next messages of group $2 above its
-- cursor (read from the consumer row, which this transaction has just
-- locked), each row led by the partition's 1-based position in $1, ordered
-- by position then offset: only when no live lease holds the consumer row,
-- only messages stored at least delayedProcessing seconds ago, only once
-- the partition's newest segment is windowBuffer seconds old, and per
-- partition at most as many segments as fill a batch of $3 messages (each
-- segment holds at least one message above the cursor, so at most $3 are
-- read, and the running count stops earlier when segments hold many). A
-- partition without a consumer row, or with nothing to deliver, has no
-- row. One partition's pop passes one element.
--
-- Every lookup is per partition inside a LATERAL subquery keyed by the outer
-- row (the consumer row and its partition by primary key, the segments by
-- segments_offset), so a generic plan cached while the tables were small
-- never joins the array with a scan of a table. The pop runs it with
-- enable_seqscan off (consume_plan_begin): a table analysed while nearly
-- empty would otherwise be planned as a scan repeated per partition.
SELECT u.i, s.first_offset, s.last_offset, s.created_at, s.legacy_ids, s.frames, s.producer_sub
  FROM unnest($1::uuid[]) WITH ORDINALITY AS u (pid, i)
 CROSS JOIN LATERAL (
    SELECT c."cursor", p.num,
           -- The time of the cursor's segment (migration 0020): every
           -- segment above it is at least that old, so the ranges stored
           -- before it are pruned; unknown (-infinity) when it was not
           -- recorded for this cursor.
           CASE WHEN c.cursor_at_of = c."cursor" THEN COALESCE(c.cursor_at, '-infinity'::timestamptz)
                ELSE '-infinity'::timestamptz END AS since,
           clock_timestamp() - make_interval(secs => COALESCE((q.options ->> 'delayedProcessing')::bigint, 0)) AS visible,
           -- Every segment this statement sees was stamped before it
           -- committed, so before this clock reading (taken after the
           -- snapshot): the empty ranges made ahead of time
           -- (persistence.segmentLead) are pruned from the bound's descent.
           clock_timestamp() AS now
      FROM queen.consumers c
      JOIN queen.partitions p ON p.id = c.partition_id
      LEFT JOIN queen.partition_ends e ON e.partition_id = p.id
      JOIN queen.queues q ON q.id = p.queue_id
     WHERE c.partition_id = u.pid AND c.consumer_group = $2
       AND (c.lease_expires_at IS NULL OR c.lease_expires_at <= clock_timestamp())
       AND COALESCE(e.last_offset, queen.partition_cold_end(p.id, p.floor_offset)) > c."cursor"
       AND (COALESCE((q.options ->> 'windowBuffer')::bigint, 0) = 0
            OR (SELECT w.created_at FROM queen.segments w WHERE w.partition_num = p.num ORDER BY w.first_offset DESC LIMIT 1)
               <= clock_timestamp() - make_interval(secs => COALESCE((q.options ->> 'windowBuffer')::bigint, 0)))
    OFFSET 0
 ) c
 CROSS JOIN LATERAL (
    SELECT x.first_offset, x.last_offset, x.created_at, x.legacy_ids, x.frames, x.producer_sub
      FROM (
        SELECT g.*, sum(g.n) OVER (ORDER BY g.first_offset) AS acc
          FROM (
            SELECT sg.first_offset, sg.last_offset, sg.created_at, sg.legacy_ids, sg.frames, sg.producer_sub,
                   sg.last_offset - GREATEST(sg.first_offset, c."cursor" + 1) + 1 AS n
              FROM queen.segments sg
             WHERE sg.partition_num = c.num AND sg.last_offset > c."cursor" AND sg.created_at <= c.visible
               AND sg.created_at >= c.since
               -- An index bound: the segment holding the cursor's next
               -- offset starts at or after this (last_offset alone is a
               -- filter, and the scan read every consumed segment still
               -- stored first).
               AND sg.first_offset >= COALESCE((SELECT b.first_offset FROM queen.segments b
                                                 WHERE b.partition_num = c.num AND b.first_offset <= c."cursor" + 1
                                                   AND b.created_at >= c.since AND b.created_at <= c.now
                                                 ORDER BY b.first_offset DESC LIMIT 1), -1)
             ORDER BY sg.first_offset
             LIMIT $3
          ) g
      ) x
     WHERE x.acc - x.n < $3
 ) s
 ORDER BY u.i, s.first_offset
