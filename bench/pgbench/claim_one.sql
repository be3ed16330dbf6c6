-- One job per transaction: claim the next due job and mark it finished, in one UPDATE.
UPDATE ceiling_job
   SET status = 'succeeded', attempts = attempts + 1, worker_id = 'pgbench',
       started_at = now(), finished_at = now()
 WHERE id = (SELECT id FROM ceiling_job
              WHERE status = 'pending' AND run_at <= now()
              ORDER BY priority DESC, run_at, id
              LIMIT 1 FOR UPDATE SKIP LOCKED);
