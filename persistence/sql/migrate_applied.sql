SELECT version FROM queen.schema_migrations ORDER BY version
