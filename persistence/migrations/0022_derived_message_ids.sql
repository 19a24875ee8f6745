-- queen:layout 3
-- Segments stop storing message ids (issue 42, SPEC.md §2). Every segment
-- carried its messages' UUIDv7s in message_ids, 16 bytes (17 with the
-- length) per message in the row and so in the WAL, dense or spread. The
-- id is now derived from what the row already holds: its partition, the
-- message's offset and the segment's created_at (persistence.messageID: a
-- UUIDv7 whose time is created_at's milliseconds and whose other bits come
-- from the XXH3 of the partition and offset). The push derives the id it
-- answers the same way, under the row lock once the commit's stamp is read.
--
-- message_ids becomes legacy_ids: the segments written before this
-- migration keep their stored ids (readers use them where present), and new
-- segments store '' there (its default): one byte, a short varlena header.
-- Not NULL: a segment row has no NULL otherwise (migration 0018), and one
-- NULL would give it a null bitmap, moving its data from byte 24 of the
-- tuple to byte 32, 8 bytes more per segment.
--
-- A layout migration (persistence.LayoutMarker): brokers of an older
-- release write and read message_ids, which the rename removes, so once
-- this runs their pushes and reads fail and never answer `queued` (nor
-- hand out ids that no reader derives); Migrate refuses to run it while
-- such a broker is live. The rename and the default change the catalog
-- only (they recurse to every range of segments_timed), so the migration
-- takes no time whatever the number of segments.
ALTER TABLE queen.segments RENAME COLUMN message_ids TO legacy_ids;
ALTER TABLE queen.segments ALTER COLUMN legacy_ids SET DEFAULT '';

-- A range detached from segments_timed and awaiting its drop is no partition
-- any more: it is renamed too, so attaching it back (a configure raised a
-- retention meanwhile, queen.segment_drop_detached) still matches (as
-- migrations 0017 and 0018 did for their columns).
DO $$
DECLARE
    n text;
BEGIN
    FOR n IN SELECT r.name FROM queen.segment_ranges r
              WHERE to_regclass(format('queen.%I', r.name)) IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM pg_inherits i
                                 WHERE i.inhrelid = format('queen.%I', r.name)::regclass)
    LOOP
        EXECUTE format('ALTER TABLE queen.%I RENAME COLUMN message_ids TO legacy_ids', n);
        EXECUTE format('ALTER TABLE queen.%I ALTER COLUMN legacy_ids SET DEFAULT %L', n, '');
    END LOOP;
END
$$;
