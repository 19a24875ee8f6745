-- The rows of a raw baseline table. {{table}} as in raw_create.sql.
SELECT count(*) FROM {{table}}
