-- Before a range of segments_timed is detached to be dropped (segranges.go):
-- raises the floor (partitions.floor_offset, migration 0019) of every
-- partition whose newest segment is in the range to that segment's last
-- offset, so queen.partition_cold_end still finds the partition's end once
-- the range is gone. One backward descent of the range's index per
-- partition, and one of segments_offset per partition with a segment in the
-- range; a partition with a newer segment elsewhere is left alone. The
-- range's time is long past, so no push writes into it meanwhile.
-- {{range}} as in segment_range_detach.
UPDATE queen.partitions p
   SET floor_offset = m.last_offset
  FROM (SELECT x.id, x.num, (SELECT s.last_offset FROM {{range}} s
                       WHERE s.partition_num = x.num
                       ORDER BY s.first_offset DESC
                       LIMIT 1) AS last_offset
          FROM queen.partitions x) m
 WHERE p.id = m.id
   AND m.last_offset IS NOT NULL
   AND p.floor_offset < m.last_offset
   AND NOT EXISTS (SELECT 1 FROM queen.segments s
                    WHERE s.partition_num = m.num AND s.first_offset > m.last_offset)
