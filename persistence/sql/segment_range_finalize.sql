-- Completes a concurrent detach of a range of segments_timed that was
-- interrupted (the range is still attached, pending detach). Not in a
-- transaction block. {{range}} as in segment_range_detach.
ALTER TABLE queen.segments_timed DETACH PARTITION {{range}} FINALIZE
