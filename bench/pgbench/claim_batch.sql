-- 50 jobs per statement (and per transaction): claim the next 50 due jobs and mark them
-- finished, in one UPDATE.
UPDATE ceiling_job
   SET status = 'succeeded', attempts = attempts + 1, worker_id = 'pgbench',
       started_at = now(), finished_at = now()
 WHERE id IN (SELECT id FROM ceiling_job
               WHERE status = 'pending' AND run_at <= now()
               ORDER BY priority DESC, run_at, id
               LIMIT 50 FOR UPDATE SKIP LOCKED);
