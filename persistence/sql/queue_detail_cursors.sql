-- A queue's consumer-group cursors for its detail (GET
-- /api/v1/queues/{queue}): $1 queue name, $2 most cursors listed. One row
-- per (group, partition) the group has popped, by group then partition
-- (byte order): the cursor, the partition's last offset, the lease expiry
-- while a lease is live (PostgreSQL's clock), and last the count of every
-- such row. Found through consumers_queue (queue_id, consumer_group).
SELECT c.consumer_group, p.name, c."cursor", COALESCE(e.last_offset, queen.partition_cold_end(p.id, p.floor_offset)),
       CASE WHEN c.lease_expires_at > clock_timestamp() THEN c.lease_expires_at END,
       count(*) OVER ()
  FROM queen.queues q
  JOIN queen.consumers c ON c.queue_id = q.id
  JOIN queen.partitions p ON p.id = c.partition_id
  LEFT JOIN queen.partition_ends e ON e.partition_id = p.id
 WHERE q.name = $1
 ORDER BY c.consumer_group COLLATE "C", p.name COLLATE "C"
 LIMIT $2
