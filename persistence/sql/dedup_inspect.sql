-- The dedup inspector (SPEC.md §13): what the next push of one transactionId
-- to one partition would be answered, and until when. Read-only: no row lock,
-- no write. $1 queue name, $2 partition name, $3 the transactionId's hash.
--
-- No row when the queue does not exist. Otherwise one row: the partition id
-- (NULL when the queue has no such partition), the queue's window (seconds),
-- then the chosen sidecar hit (all NULL when the sidecar holds none): its
-- offset, created_at, whether it is inside the window, and the message id
-- stored in its covering segment (16 bytes sliced from legacy_ids in a
-- segment written before layout 3; empty when the segment derives its ids
-- from the partition, offset and created_at, persistence.messageID; NULL
-- when that segment is gone).
--
-- The lookup is the push probe's (queen.sidecar_find, the whole-window
-- branch: levels 0 and 1, an entry counting while its time range lives),
-- and "inside the window" is
-- the probe's own test, created_at > clock_timestamp() - window (a window of
-- 0 checks nothing, so nothing is inside it). Unlike the probe it does not
-- stop at the window's edge: a row past it is the `expired` answer.
-- Of several hits, the one a push would name comes first: inside the
-- window, the lowest offset (the original); otherwise the newest (the last
-- whose window closed).
WITH qp AS MATERIALIZED (
    SELECT p.id AS partition_id, p.num, q.dedup_window_seconds AS seconds, clock_timestamp() AS now
      FROM queen.queues q
      LEFT JOIN queen.partitions p ON p.queue_id = q.id AND p.name = $2
     WHERE q.name = $1
)
SELECT qp.partition_id, qp.seconds, h."offset", h.created_at, h.in_window,
       (SELECT COALESCE(substring(s.legacy_ids FROM ((h."offset" - s.first_offset) * 16 + 1)::int FOR 16), '')
          FROM queen.segments s
         WHERE s.partition_num = qp.num AND s.first_offset = h.segment
           AND s.created_at = h.created_at)
  FROM qp
  LEFT JOIN LATERAL (
    SELECT x."offset", x.segment, x.created_at,
           (qp.seconds > 0 AND x.created_at > qp.now - make_interval(secs => qp.seconds)) AS in_window
      FROM queen.sidecar_find(qp.partition_id, $3::uuid, '-infinity', '-infinity', 'infinity', false) x
     WHERE qp.partition_id IS NOT NULL
     ORDER BY 4 DESC,
              CASE WHEN (qp.seconds > 0 AND x.created_at > qp.now - make_interval(secs => qp.seconds)) THEN x."offset" END,
              x."offset" DESC
     LIMIT 1
  ) h ON true
