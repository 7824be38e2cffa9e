WITH claimed AS MATERIALIZED 
(SELECT tasks.seq AS seq 
FROM tasks 
WHERE tasks.status = 'queued' AND tasks.type = %(type_)s::VARCHAR ORDER BY tasks.priority, tasks.fair_key, tasks.seq 
 LIMIT %(limit_)s FOR UPDATE SKIP LOCKED)
 UPDATE tasks SET status=%(status)s::VARCHAR, modified_at=%(now_)s::TIMESTAMP WITH TIME ZONE, receipt=%(receipt_)s::UUID WHERE tasks.seq IN (SELECT claimed.seq 
FROM claimed) AND tasks.status = 'queued' RETURNING tasks.id, tasks.scheduler_id, tasks.schedule_id, tasks.organisation, tasks.type, tasks.priority, tasks.status, tasks.hash, tasks.data, tasks.attempts, tasks.reason, tasks.created_at, tasks.modified_at, tasks.seq, tasks.fair_key, tasks.receipt
