UPDATE tasks SET status=?, modified_at=?, receipt=? WHERE tasks.seq IN (SELECT tasks.seq 
FROM tasks 
WHERE tasks.status = 'queued' AND tasks.scheduler_id = ? ORDER BY tasks.priority, tasks.seq
 LIMIT ? OFFSET ?) RETURNING id, scheduler_id, schedule_id, organisation, type, priority, status, hash, data, attempts, reason, created_at, modified_at, seq, fair_key, receipt
