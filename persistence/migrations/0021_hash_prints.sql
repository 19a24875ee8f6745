-- Fingerprints of each compacted sidecar range per partition (SPEC.md §8,
-- issue 40): the first four bytes of every hash a partition stored in the
-- range, in one bytea per (range, partition), written by
-- queen.sidecar_compact with the range's level-1 blocks and deleted by
-- queen.sidecar_expire with them.
--
-- A hash cache hydrates from the segments' hashes (migration 0017), and a
-- queue whose retention is shorter than its window loses segments inside
-- the window. Before this migration such a cache could not vouch until the
-- hole left the window (an hour by default), so a broker that restarted
-- probed every hash in every range of the window, and the push rate of a
-- cluster with retention and restarts fell with the window's length. Now
-- the hole's hashes are read back as fingerprints (about 4 bytes a hash,
-- lossy: a fingerprint that matches makes a suspect, looked up in that
-- range's span only), and the cache vouches at once.
--
-- UNLOGGED, like level 0: no WAL. A crash or a promoted standby empties
-- them, and queen.hash_prints_alive with them, which lists the ranges whose
-- fingerprints are complete: a range not listed is not covered, and a
-- cache that needs it waits, as before, for its hole to leave the window.
--
-- Not a layout migration: no push reads the fingerprints, and the brokers of
-- the release before read and write the same rows (their compactions and
-- expiries run the functions defined here).
CREATE UNLOGGED TABLE queen.hash_prints (
    lo           timestamptz NOT NULL,
    partition_id uuid        NOT NULL,
    prints       bytea       NOT NULL,
    PRIMARY KEY (lo, partition_id)
);
ALTER TABLE queen.hash_prints ALTER COLUMN prints SET STORAGE EXTERNAL;

CREATE UNLOGGED TABLE queen.hash_prints_alive (
    lo timestamptz PRIMARY KEY
);
