-- The version guard (SPEC.md §2): every broker advertises, in its
-- queen.brokers row, the storage layout generation it reads and writes
-- (persistence.LayoutGeneration: the highest "-- queen:layout N" marker among
-- its migrations), its schema version (the newest migration it embeds), its
-- release and its VCS revision. A layout migration of generation G is refused
-- while a live broker advertises a layout below G (migrate_older_brokers).
--
-- The defaults are what a broker that predates the guard reads as: it
-- inserts its row without these columns, so it counts as layout generation
-- 0, schema 0 and release '' (unknown). Adding columns with constant
-- defaults rewrites nothing. Not a layout migration itself: no push reads
-- this table.
ALTER TABLE queen.brokers
    ADD COLUMN layout         integer NOT NULL DEFAULT 0,
    ADD COLUMN schema_version integer NOT NULL DEFAULT 0,
    ADD COLUMN release        text    NOT NULL DEFAULT '',
    ADD COLUMN revision       text    NOT NULL DEFAULT '';
