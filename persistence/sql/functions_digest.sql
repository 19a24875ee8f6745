-- The digest of the function bodies applied (queen.schema_functions,
-- persistence/functions.go), locked until the caller's transaction ends so
-- two starts apply them once; no row before the first application.
SELECT digest FROM queen.schema_functions FOR UPDATE
