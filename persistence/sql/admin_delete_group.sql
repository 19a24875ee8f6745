-- Drops consumer group $1: its cursors, leases and subscriptions (dead
-- letters stay). Returns how many consumer rows were removed.
WITH s AS (
    DELETE FROM queen.subscriptions WHERE consumer_group = $1
), d AS (
    DELETE FROM queen.consumers WHERE consumer_group = $1 RETURNING 1
)
SELECT count(*) FROM d
