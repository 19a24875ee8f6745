-- Locks the consumer rows (partition $1[k], group $2[k]) (parallel arrays,
-- in the caller's lock order: ascending partition id, then group) and reads
-- each row's state with its partition's end, names and queue options and the
-- database's clock, prefixed by its 1-based position k. The one lock of
-- consumer rows (SPEC.md §4): pops, acks and transactions. A row that does
-- not exist has no row. persistence.sqlConsumerLockSkip is this statement
-- with SKIP LOCKED (a pop that skips a row another request holds: that row
-- has no row either). The last column is the seconds this row's lock
-- waited: from the previous row's lock being granted (the statement's start
-- for the first) to this one's, so a wait is counted once, by the row that
-- waited (the /metrics ack lock wait). The session's lock_timeout bounds
-- each wait. The two before it are the partition's number and the time of
-- the cursor's segment, which a pop passes on to consume_segments_many.
--
-- Rows are locked in the order of their positions (WITH ORDINALITY, sorted;
-- a sorted subquery is not flattened, and the LATERAL subquery is the inner
-- side of a nested loop, run once per position in order), each by a
-- primary-key lookup keyed by its element: a join of the arrays with
-- queen.consumers could be planned as a hash join over a scan of the whole
-- table when a generic plan was cached while it was small. Callers run it
-- with enable_seqscan off (consume_plan_begin); TestManyPlansStayIndexed
-- checks the cached plan.
SELECT z.i, z."cursor", z.lease_id, z.live, z.lease_to, z.fail_counts, z.last_offset, z.partition_name,
       z.queue_name, z.lease_time, z.retry_limit, z.delayed, z.window_buffer, z.now, z.bisect, z.num, z.since,
       EXTRACT(epoch FROM z.granted - COALESCE(lag(z.granted) OVER (ORDER BY z.i), statement_timestamp()))::float8
  FROM (
    SELECT u.i, l.*, clock_timestamp() AS granted
      FROM (SELECT x.pid, x.grp, x.i
              FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY AS x (pid, grp, i)
             ORDER BY x.i) u
     CROSS JOIN LATERAL (
        SELECT c."cursor",
               c.lease_id,
               COALESCE(c.lease_expires_at > clock_timestamp(), false) AS live,
               c.lease_to,
               c.fail_counts,
               COALESCE(e.last_offset, queen.partition_cold_end(p.id, p.floor_offset)) AS last_offset,
               p.name AS partition_name,
               q.name AS queue_name,
               COALESCE((q.options ->> 'leaseTime')::bigint, 300) AS lease_time,
               COALESCE((q.options ->> 'retryLimit')::bigint, 3) AS retry_limit,
               COALESCE((q.options ->> 'delayedProcessing')::bigint, 0) AS delayed,
               COALESCE((q.options ->> 'windowBuffer')::bigint, 0) AS window_buffer,
               clock_timestamp() AS now,
               c.bisect,
               p.num,
               -- The time of the cursor's segment (migration 0020): every
               -- segment above the cursor is at least that old
               -- (consume_segments_many prunes the ranges before it);
               -- -infinity when it was not recorded for this cursor.
               CASE WHEN c.cursor_at_of = c."cursor" THEN COALESCE(c.cursor_at, '-infinity'::timestamptz)
                    ELSE '-infinity'::timestamptz END AS since
          FROM queen.consumers c
          JOIN queen.partitions p ON p.id = c.partition_id
          LEFT JOIN queen.partition_ends e ON e.partition_id = p.id
          JOIN queen.queues q ON q.id = p.queue_id
         WHERE c.partition_id = u.pid AND c.consumer_group = u.grp
           FOR UPDATE OF c
     ) l
    OFFSET 0
  ) z
 ORDER BY z.i
