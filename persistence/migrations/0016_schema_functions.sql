-- The functions of the queen schema are defined by persistence/functions
-- (one file each, CREATE OR REPLACE), applied after the migrations by every
-- binary whose schema version the database holds, not redefined across
-- migrations (issue 42). This row records the digest of the bodies applied,
-- so a start re-applies them only when they changed (a redefinition
-- invalidates the plans of every session that inlined them).
CREATE TABLE queen.schema_functions (
    singleton      boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    digest         text        NOT NULL,
    schema_version integer     NOT NULL,
    applied_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
