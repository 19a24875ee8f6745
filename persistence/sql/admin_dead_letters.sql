-- Dead letters, oldest first, filtered by queue $1, group $2 and partition
-- name $5 ('' = any) and dead-lettered within [$6, $7] (NULL = open), $3
-- rows from row $4, with the total count of the filter; and no more rows
-- once those taken hold $8 bytes of frames and error texts (the first row
-- is always returned), so a page of large dead letters stays a bounded
-- reply (queen.MaxDLQReplyBytes). The sizes are read from the rows' TOAST
-- pointers (octet_length does not fetch a value), so the rows left out are
-- never read.
WITH page AS MATERIALIZED (
    SELECT d.id, q.name AS queue, COALESCE(p.name, '') AS partition, d.partition_id, d.consumer_group,
           d."offset", d.message_id, d.frame, d.created_at, d.error, d.attempts, d.dead_at, d.producer_sub,
           count(*) OVER () AS total,
           octet_length(d.frame) + octet_length(d.error) AS size
      FROM queen.dead_letters d
      JOIN queen.queues q ON q.id = d.queue_id
      LEFT JOIN queen.partitions p ON p.id = d.partition_id
     WHERE ($1 = '' OR q.name = $1) AND ($2 = '' OR d.consumer_group = $2)
       AND ($5 = '' OR p.name = $5)
       AND ($6::timestamptz IS NULL OR d.dead_at >= $6) AND ($7::timestamptz IS NULL OR d.dead_at <= $7)
     ORDER BY d.id
     LIMIT $3 OFFSET $4
)
SELECT x.id, x.queue, x.partition, x.partition_id, x.consumer_group, x."offset", x.message_id,
       x.frame, x.created_at, x.error, x.attempts, x.dead_at, x.producer_sub, x.total
  FROM (SELECT page.*, sum(page.size) OVER (ORDER BY page.id ROWS UNBOUNDED PRECEDING) AS acc FROM page) x
 WHERE x.acc - x.size < $8::bigint
 ORDER BY x.id
