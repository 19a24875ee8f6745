-- Locks the consumer rows of (partition, group $2) for every partition id in
-- $1 (uuid[]), one statement for a multi-partition pop (PopPartitions), and
-- reads each row's state as consume_lock does, prefixed by the partition's
-- 1-based position in $1. A partition without a consumer row (or that does
-- not exist) has no row. consume_lock_many_skip is the same lock for a pop
-- that skips a row another request holds. Keep the columns as consume_lock's.
--
-- Rows are locked in ascending partition id (the order every pop and ack
-- locks consumer rows in, so they cannot deadlock): the ids are sorted here
-- (a sorted subquery is not flattened, and a LATERAL subquery is the inner
-- side of a nested loop, run once per outer row in that order).
--
-- Each row is one primary-key lookup whatever the statistics said when a
-- generic plan was cached: the LATERAL subquery takes its key from the
-- outer row, so it runs once per element as a lookup of the consumer
-- row's primary key (a join of the array with queen.consumers could be
-- planned as a hash join over a scan of the whole table). The pop runs it
-- with enable_seqscan off (consume_plan_begin): a table analysed while
-- nearly empty would otherwise be planned as a scan repeated per element.
-- TestManyPlansStayIndexed checks the cached plan.
SELECT u.i,
       l.*
  FROM (SELECT x.pid, x.i
          FROM unnest($1::uuid[]) WITH ORDINALITY AS x (pid, i)
         ORDER BY x.pid) u
 CROSS JOIN LATERAL (
    SELECT c."cursor",
           c.lease_id,
           COALESCE(c.lease_expires_at > clock_timestamp(), false),
           c.lease_to,
           c.fail_counts,
           COALESCE(e.last_offset, queen.partition_cold_end(p.id, p.floor_offset)),
           p.name,
           q.name,
           COALESCE((q.options ->> 'leaseTime')::bigint, 300),
           COALESCE((q.options ->> 'retryLimit')::bigint, 3),
           COALESCE((q.options ->> 'delayedProcessing')::bigint, 0),
           COALESCE((q.options ->> 'windowBuffer')::bigint, 0),
           clock_timestamp(),
           c.bisect
      FROM queen.consumers c
      JOIN queen.partitions p ON p.id = c.partition_id
      LEFT JOIN queen.partition_ends e ON e.partition_id = p.id
      JOIN queen.queues q ON q.id = p.queue_id
     WHERE c.partition_id = u.pid AND c.consumer_group = $2
       FOR UPDATE OF c
 ) l
