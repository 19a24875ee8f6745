-- Records the digest $1 of the function bodies just applied by a binary of
-- schema version $2 (persistence/functions.go).
INSERT INTO queen.schema_functions (digest, schema_version) VALUES ($1, $2)
ON CONFLICT (singleton) DO UPDATE
   SET digest = excluded.digest, schema_version = excluded.schema_version, applied_at = clock_timestamp()
