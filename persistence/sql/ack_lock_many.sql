-- ack_lock for many consumer rows in one statement (an ack naming many
-- partitions, persistence.Ack): locks the rows (partition $1[k], group
-- $2[k]) (parallel arrays, in the caller's lock order: ascending partition
-- id, then group) and reads each as ack_lock does, prefixed by its 1-based
-- position k. A row that does not exist has no row. The last column is the
-- seconds this row's lock waited: from the previous row's lock being
-- granted (the statement's start for the first) to this one's, so a wait is
-- counted once, by the row that waited (the /metrics ack lock wait). The
-- session's lock_timeout bounds each wait. Keep the columns as ack_lock's.
--
-- Rows are locked in the order of their positions (WITH ORDINALITY, sorted;
-- a sorted subquery is not flattened, and the LATERAL subquery is the inner
-- side of a nested loop, run once per position in order), each by a
-- primary-key lookup keyed by its element (see consume_lock_many; the ack
-- runs it with enable_seqscan off, consume_plan_begin).
SELECT z.i, z."cursor", z.lease_id, z.live, z.lease_to, z.fail_counts, z.last_offset, z.partition_name,
       z.queue_name, z.lease_time, z.retry_limit, z.delayed, z.window_buffer, z.now, z.bisect,
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
               c.bisect
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
