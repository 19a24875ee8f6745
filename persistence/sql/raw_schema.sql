-- The schema of the load test's raw baseline tables (loadtest --mode raw):
-- plain tables written with COPY, outside the broker's queen schema.
CREATE SCHEMA IF NOT EXISTS queen_raw
