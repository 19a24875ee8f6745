-- The live brokers (expires_at ahead on PostgreSQL's clock) that advertise a
-- layout generation below $1, the generation of the layout migration about
-- to be applied: it is refused while any is listed (SPEC.md §2). A broker
-- that predates the version guard reads as generation 0 (the column's
-- default, migration 0015).
SELECT id, http_url, layout, release, expires_at
FROM queen.brokers
WHERE expires_at > clock_timestamp() AND layout < $1
ORDER BY started_at, id
