-- The sha256 of each migration file as applied: a file edited after a schema applied it (its
-- change would never run there) is refused at start (projections/migrate.py). Rows applied before
-- this column existed are filled with the files' current sums by the migrator.
ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS sha256 text;
