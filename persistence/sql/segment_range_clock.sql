-- What range maintenance needs from the queues (migration 0010):
-- PostgreSQL's clock; the span, in minutes, that new ranges take (that of
-- the longest retentionSeconds over all queues, queen.segment_span_minutes;
-- NULL when no queue has a retention, then no range is made ahead); and the
-- shortest retentionSeconds (a range whose upper bound is not that far in
-- the past keeps rows of every queue, so its drop is not tried).
SELECT clock_timestamp(),
       queen.segment_span_minutes(max(r)),
       COALESCE(min(r), 0)::float8,
       count(r) > 0
  FROM (SELECT (q.options ->> 'retentionSeconds')::float8 AS r
          FROM queen.queues q
         WHERE COALESCE((q.options ->> 'retentionSeconds')::float8, 0) > 0) x
