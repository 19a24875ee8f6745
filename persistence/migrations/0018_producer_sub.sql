-- The producer's identity on every stored message (issue 41, SPEC.md §14):
-- with JWT on, the "sub" of the token that pushed a message. Every item of
-- one request carries the same, and a commit writes one segment per run of
-- items with the same producer (persistence.Store.assign), so a segment
-- stores it once: producer_sub, '' when its items had none (JWT off). A
-- dead letter copies its message's (NULL: none).
--
-- '' rather than NULL for none: a segment row has no NULL otherwise, and a
-- single NULL gives it a null bitmap, which moves its data from byte 24 of
-- the tuple to byte 32 (MAXALIGN(23 + 2)): 8 bytes more per segment in the
-- table and in the WAL. '' is one byte (a short varlena header). The
-- default is a constant, so adding the column rewrites no row (the rows
-- stored before read '' from the catalog), and a broker of an older
-- release, which names the columns it writes, stores '' too. Readers take
-- NULL as none as well.
--
-- Not a layout migration: the column changes no verdict and an older
-- broker's push and reads go on as before.

ALTER TABLE queen.segments ADD COLUMN producer_sub text DEFAULT '';

-- A range detached from segments_timed and awaiting its drop is no partition
-- any more: it gets the column too, so attaching it back (a configure raised
-- a retention meanwhile, queen.segment_drop_detached) still matches (as
-- migration 0017 did for hashes).
DO $$
DECLARE
    n text;
BEGIN
    FOR n IN SELECT r.name FROM queen.segment_ranges r
              WHERE to_regclass(format('queen.%I', r.name)) IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM pg_inherits i
                                 WHERE i.inhrelid = format('queen.%I', r.name)::regclass)
    LOOP
        EXECUTE format('ALTER TABLE queen.%I ADD COLUMN IF NOT EXISTS producer_sub text DEFAULT %L', n, '');
    END LOOP;
END
$$;

ALTER TABLE queen.dead_letters ADD COLUMN producer_sub text;
