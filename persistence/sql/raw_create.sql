-- A fresh raw baseline table, one row per message, no dedup. {{table}} is
-- replaced by the sanitized, schema-qualified table name (identifiers cannot
-- be parameters).
CREATE TABLE {{table}} (
    id             uuid        PRIMARY KEY,
    queue          text        NOT NULL,
    partition      text        NOT NULL,
    transaction_id text        NOT NULL,
    payload        jsonb       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp()
)
