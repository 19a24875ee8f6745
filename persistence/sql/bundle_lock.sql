-- Takes the row locks of every partition of a bundle in ascending id order
-- (the global lock order, so concurrent bundles cannot deadlock) and reads
-- each allocator (SPEC.md §3, DESIGN.md). $1 partition ids. The window is
-- read by bundle_probe, whose snapshot is taken after the locks are granted:
-- a row read here through a join could predate a configure that committed
-- while this statement waited for a lock.
SELECT p.id, p.last_offset
FROM queen.partitions p
WHERE p.id = ANY ($1::uuid[])
ORDER BY p.id
FOR UPDATE OF p
