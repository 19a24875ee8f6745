-- Whether queen.partition_ends (migration 0019, UNLOGGED: the partitions'
-- allocator rows) is whole (issue 42). A crash or a promoted standby empties
-- every UNLOGGED table at once, this one with the allocator rows, so its
-- row says that no crash emptied them since the last full rebuild
-- (partition_ends_ensure with no partition named, which inserts it in the
-- same statement as the rows it rebuilt).
--
-- Before this migration every retention pass (a few seconds apart) and
-- every broker's start looked for missing rows with an anti-join over every
-- partition: 200,000 partitions cost it about 250,000 buffers and 200 ms a
-- pass, a cost that grew with the partitions ever created, not with the
-- traffic. Now a pass reads this row and stops.
--
-- Not a layout migration: no push reads it, and the brokers of the release
-- before rebuild as they did (an anti-join that finds nothing missing).
CREATE UNLOGGED TABLE queen.partition_ends_alive (
    alive boolean PRIMARY KEY DEFAULT true CHECK (alive)
);
