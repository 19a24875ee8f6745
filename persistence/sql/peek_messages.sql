-- A peek (GET /api/v1/queues/{queue}/messages, queen.v1.peek): the stored
-- messages of one partition above an offset. Read-only: no row lock, no
-- lease, no cursor moved. $1 queue name, $2 partition name, $3 after (an
-- offset; -1 = from the oldest stored message), $4 limit (messages).
--
-- No row when the queue does not exist. Otherwise the partition's id (NULL
-- when the queue has no such partition) and last allocated offset on every
-- row, then one segment per row in offset order (all NULL when none holds a
-- message above $3): its first offset, created_at, message ids, frames and
-- producer (migration 0018).
--
-- The segments are read as consume_segments_many reads them: an index bound on
-- (partition_num, first_offset) — the segment holding offset $3 + 1 starts
-- at or after the last segment starting at or below it — then at most $4
-- segments in order (each holds a message above $3), cut by a running count
-- once $4 messages are covered, so a peek of a few messages reads a few
-- segments whatever the partition holds (one index descent per leaf table
-- of the partitioned segments table).
WITH p AS MATERIALIZED (
    SELECT p.id AS partition_id, p.num, COALESCE(e.last_offset, queen.partition_cold_end(p.id, p.floor_offset)) AS last_offset
      FROM queen.queues q
      LEFT JOIN queen.partitions p ON p.queue_id = q.id AND p.name = $2
      LEFT JOIN queen.partition_ends e ON e.partition_id = p.id
     WHERE q.name = $1
), b AS MATERIALIZED (
    -- The bound: the last segment starting at or below $3 + 1 (it may hold
    -- offset $3 + 1), else -1; one backward descent per leaf table.
    SELECT p.partition_id, p.num, p.last_offset,
           COALESCE((SELECT s.first_offset FROM queen.segments s
                      WHERE s.partition_num = p.num AND s.first_offset <= $3::bigint + 1
                      ORDER BY s.first_offset DESC
                      LIMIT 1), -1) AS lo
      FROM p
)
SELECT b.partition_id, b.last_offset, s.first_offset, s.created_at, s.legacy_ids, s.frames, s.producer_sub
  FROM b
  LEFT JOIN LATERAL (
    SELECT x.first_offset, x.created_at, x.legacy_ids, x.frames, x.producer_sub
      FROM (
        SELECT g.first_offset, g.created_at, g.legacy_ids, g.frames, g.producer_sub,
               sum(g.last_offset - GREATEST(g.first_offset, $3::bigint + 1) + 1) OVER (ORDER BY g.first_offset) AS acc,
               g.last_offset - GREATEST(g.first_offset, $3::bigint + 1) + 1 AS n
          FROM (
            SELECT s.first_offset, s.last_offset, s.created_at, s.legacy_ids, s.frames, s.producer_sub
              FROM queen.segments s
             WHERE s.partition_num = b.num
               AND s.first_offset >= b.lo
               AND s.last_offset > $3::bigint
             ORDER BY s.first_offset
             LIMIT $4::bigint
          ) g
      ) x
     WHERE x.acc - x.n < $4::bigint
  ) s ON true
 ORDER BY s.first_offset
