-- The floor step of retention_expired and retention_completed (migration
-- 0019), spliced into both as their CTE f in place of their {{floor}} line
-- (persistence.withFloor): a partition left with no segment after the ones
-- the statement's CTE d deleted (none starts above them) keeps its end in
-- partitions.floor_offset, which queen.partition_cold_end reads when a
-- crash emptied queen.partition_ends. A newer segment, if any, is not
-- deleted by the statement and carries the end itself.
    UPDATE queen.partitions p
       SET floor_offset = m.last_offset
      FROM (SELECT d.partition_num, max(d.last_offset) AS last_offset FROM d GROUP BY d.partition_num) m
     WHERE p.num = m.partition_num
       AND p.floor_offset < m.last_offset
       AND NOT EXISTS (SELECT 1 FROM queen.segments s
                        WHERE s.partition_num = m.partition_num AND s.first_offset > m.last_offset)
