-- Segments' frames are compressed by the broker (zstd, persistence/frame.go:
-- packSegment), so PostgreSQL no longer tries to compress them: lz4 finds
-- nothing in zstd output and spends CPU on every segment large enough to
-- be toasted. frames are stored EXTERNAL, like legacy_ids: out of line,
-- uncompressed, when the row passes the TOAST threshold. Rows already
-- stored keep the form they have (a raw or lz4-compressed value still
-- reads); only new rows are affected.
--
-- The storage of a column is set on every leaf table (migration 0010): on
-- segments_kept, on each range of segments_timed attached now, and, through
-- segment_storage, on the ranges segment_create_range makes from now on.
-- A range detached and awaiting its drop is left as it is. hashes (migration
-- 0017) is stored like legacy_ids (message_ids before migration 0022;
-- NULL in the segments written since, whose ids are derived).
CREATE OR REPLACE FUNCTION queen.segment_storage(n text) RETURNS void
    LANGUAGE plpgsql
AS $$
BEGIN
    EXECUTE format('ALTER TABLE queen.%I ALTER COLUMN legacy_ids SET STORAGE EXTERNAL', n);
    EXECUTE format('ALTER TABLE queen.%I ALTER COLUMN frames SET STORAGE EXTERNAL', n);
    EXECUTE format('ALTER TABLE queen.%I ALTER COLUMN hashes SET STORAGE EXTERNAL', n);
END
$$;
