-- The ceiling's jobs table: the columns a job queue's claim touches, and a partial index
-- in claim order. bench/run.py fills it with :'n' pending rows before each pgbench run.
DROP TABLE IF EXISTS ceiling_job;
CREATE TABLE ceiling_job (
    id bigserial PRIMARY KEY,
    name varchar(200) NOT NULL,
    payload jsonb NOT NULL,
    status varchar(16) NOT NULL,
    priority integer NOT NULL DEFAULT 0,
    run_at timestamptz NOT NULL,
    attempts integer NOT NULL DEFAULT 0,
    worker_id varchar(100) NOT NULL DEFAULT '',
    started_at timestamptz,
    finished_at timestamptz
);
CREATE INDEX ceiling_job_claim ON ceiling_job (priority DESC, run_at, id)
    WHERE status = 'pending';
