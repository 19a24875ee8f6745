-- Poison isolation by bisection (SPEC.md §4): an expired lease over several
-- unacked messages charges none of them; the group's next deliveries in the
-- partition are bisected until the expired range is passed. bisect holds
-- that state (rules.Bisection as a JSON object: to, hot, size, cap, mark,
-- since); NULL when the row is not bisecting. Adding a nullable column
-- rewrites nothing.
ALTER TABLE queen.consumers ADD COLUMN bisect jsonb;
