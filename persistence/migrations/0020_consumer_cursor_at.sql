-- The time of a consumer's position (issue 40): consumers.cursor_at is the
-- created_at of the segment holding offset "cursor", recorded with the
-- cursor_at_of it was read for. created_at grows with the offset in a
-- partition, so every segment holding an offset above the cursor is at
-- least that old: a pop's and an ack's reads above the cursor then prune the
-- time ranges of segments_timed stored before it (run-time partition
-- pruning), instead of descending the index of every range of the
-- retention (their number grows until retention drops the first, and each
-- read's cost with it: the fade of a run's first minutes).
--
-- The bound holds only while cursor_at_of = "cursor": a writer that does
-- not know the columns (a broker of the release before, or a seek) leaves
-- them behind, and the readers then prune nothing. Not a layout migration:
-- both releases read and write the same rows.
ALTER TABLE queen.consumers
    ADD COLUMN cursor_at    timestamptz,
    ADD COLUMN cursor_at_of bigint;
