INSERT INTO queen.schema_migrations (version, name) VALUES ($1, $2)
