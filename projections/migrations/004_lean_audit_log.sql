-- Schemas built before 001 was made lean (payload jsonb, an index by aggregate) get the same shape
-- as fresh ones, so a replay into a fresh schema digests equal to them. A no-op on fresh schemas.
DROP INDEX IF EXISTS audit_log_aggregate;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM information_schema.columns
               WHERE table_schema = current_schema() AND table_name = 'audit_log'
                 AND column_name = 'payload' AND data_type = 'jsonb') THEN
        ALTER TABLE audit_log ALTER COLUMN payload TYPE json USING payload::text::json;
    END IF;
END $$;
