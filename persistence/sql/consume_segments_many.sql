-- The segments to deliver (SPEC.md §4, §6), per element k of the parallel
-- arrays of the consumer rows a pop has just locked (consumer_lock, whose
-- columns they are): $1 the partition's number (bigint[]), $2 the group's
-- cursor (bigint[]), $3 the time of the cursor's segment (timestamptz[],
-- consumer_lock's since: -infinity when unknown), $4 the queue's
-- delayedProcessing and $5 its windowBuffer (bigint[], seconds). Each row is
-- led by k, ordered by k then offset: the segments holding the next
-- messages above the cursor, only messages stored at least
-- delayedProcessing seconds ago, only once the partition's newest segment
-- is windowBuffer seconds old, and at most as many segments as fill a
-- batch of $6 messages (each segment holds at least one message above the
-- cursor, so at most $6 are read, and the running count stops earlier when
-- segments hold many). The caller passes only rows without a live lease
-- whose partition ends above the cursor; an element with nothing to
-- deliver has no row.
--
-- It reads no consumer, partition or queue row: the lock read them in the
-- same transaction, under the lock, so a pop pays each lookup once
-- (about 13 buffers a partition at 10,000 partitions). Every lookup is a
-- descent of segments_offset per element inside a LATERAL subquery keyed
-- by the element, so a generic plan cached while the tables were small
-- never joins the arrays with a scan of a table. The pop runs it with
-- enable_seqscan off (consume_plan_begin): a table analysed while nearly
-- empty would otherwise be planned as a scan repeated per partition.
SELECT u.i, s.first_offset, s.last_offset, s.created_at, s.legacy_ids, s.frames, s.producer_sub
  FROM unnest($1::bigint[], $2::bigint[], $3::timestamptz[], $4::bigint[], $5::bigint[])
       WITH ORDINALITY AS u (num, cur, since, delayed, wbuf, i)
 CROSS JOIN LATERAL (
    SELECT u.num, u.cur AS "cursor", u.since,
           clock_timestamp() - make_interval(secs => u.delayed) AS visible,
           -- Every segment this statement sees was stamped before it
           -- committed, so before this clock reading (taken after the
           -- snapshot): the empty ranges made ahead of time
           -- (persistence.segmentLead) are pruned from the bound's descent.
           clock_timestamp() AS now
     WHERE u.wbuf = 0
        OR (SELECT w.created_at FROM queen.segments w WHERE w.partition_num = u.num ORDER BY w.first_offset DESC LIMIT 1)
           <= clock_timestamp() - make_interval(secs => u.wbuf)
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
             LIMIT $6
          ) g
      ) x
     WHERE x.acc - x.n < $6
 ) s
 ORDER BY u.i, s.first_offset
