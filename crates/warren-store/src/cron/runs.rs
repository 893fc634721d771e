//! A cron run's life in the store (STATE-9, issue 17): [`CronStore::claim`] takes the job's
//! lock and records the run in one transaction, [`CronStore::finish`] stores the result and the
//! status in one, [`CronStore::reap`] turns the runs of a gone holder `lost`,
//! [`CronStore::heartbeat`] keeps a live holder's lock fresh; the run history reads.

use rusqlite::{OptionalExtension, Transaction, TransactionBehavior, params};

use super::rows::{RUN_COLUMNS, get_job, run_row};
use super::{CronError, CronStore, Job, JobAfterRun, OUTPUT_EXCERPT, Run, RunResult, RunStatus};
use crate::control_plane::{Owner, Reaper, StoredOwner, monotonic_ms};
use crate::timefmt;

impl CronStore {
    /// Claims `name` for run `run_id` of `owner` and records the run as `running`, with the
    /// owner's start time and PID namespace ([`Owner::stored`]). A live holder refuses the claim
    /// ([`CronError::Held`], naming it); a holder that is gone
    /// ([`StoredOwner::is_alive_beating`]: a PID reused by another process counts, and so does
    /// a holder we cannot judge whose heartbeat is stale) loses the lock and its run becomes
    /// `lost`. `next_fire` (scheduled runs) advances the schedule in the same
    /// transaction.
    pub fn claim(
        &self,
        name: &str,
        run_id: &str,
        trigger: &str,
        session: Option<&str>,
        owner: &Owner,
        next_fire: Option<Option<i64>>,
    ) -> Result<Job, CronError> {
        self.writable()?;
        let mut conn = self.conn();
        // IMMEDIATE: a deferred read-judge-write would fail at once with SQLITE_BUSY when the
        // heartbeat's UPDATE commits between the read and the write.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let job = get_job(&tx, name)
            .map_err(|e| self.err(e))?
            .ok_or_else(|| CronError::NotFound(name.into()))?;
        if let Some(run) = &job.lock_run {
            let holder = tx
                .query_row(
                    "SELECT lock_pid, lock_boot, lock_start, lock_ns, lock_beat_ms FROM jobs
                     WHERE name = ?1 AND lock_pid IS NOT NULL AND lock_boot IS NOT NULL",
                    params![name],
                    |r| Ok((StoredOwner::from_row(r, 0)?, r.get::<_, Option<i64>>(4)?)),
                )
                .optional()
                .map_err(|e| self.err(e))?;
            if let Some((holder, beat)) = holder {
                if holder.is_alive_beating(beat, monotonic_ms()) {
                    return Err(CronError::Held {
                        job: name.into(),
                        run: run.clone(),
                        pid: holder.pid,
                        since: job.locked_at.clone().unwrap_or_default(),
                    });
                }
                mark_lost(&tx, run).map_err(|e| self.err(e))?;
            }
        }
        let now = timefmt::format(timefmt::now());
        let owner = owner.stored();
        tx.execute(
            "INSERT INTO runs (id, job, agent, trigger, started_at, status, session, owner_pid,
             owner_boot, owner_start, owner_ns)
             VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6, ?7, ?8, ?9, ?10)",
            params![
                run_id,
                name,
                job.agent.as_str(),
                trigger,
                now,
                session,
                owner.pid,
                owner.boot_id,
                owner.start,
                owner.pid_ns
            ],
        )
        .map_err(|e| self.err(e))?;
        tx.execute(
            "UPDATE jobs SET lock_run = ?2, lock_pid = ?3, lock_boot = ?4, lock_start = ?8,
             lock_ns = ?9, locked_at = ?5, lock_beat_ms = ?10,
             next_fire_ms = CASE WHEN ?6 THEN ?7 ELSE next_fire_ms END
             WHERE name = ?1",
            params![
                name,
                run_id,
                owner.pid,
                owner.boot_id,
                now,
                next_fire.is_some(),
                next_fire.flatten(),
                owner.start,
                owner.pid_ns,
                monotonic_ms()
            ],
        )
        .map_err(|e| self.err(e))?;
        let job = get_job(&tx, name)
            .map_err(|e| self.err(e))?
            .ok_or_else(|| CronError::NotFound(name.into()))?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(job)
    }

    /// Stores the result of a running run, releases the job's lock and applies `after` — one
    /// transaction. A run no longer `running` (reaped as lost meanwhile) is left as it is;
    /// returns whether this call ended it. Prunes the job's history to `keep` runs.
    pub fn finish(
        &self,
        run_id: &str,
        result: &RunResult,
        after: &JobAfterRun,
        keep: u32,
    ) -> Result<bool, CronError> {
        self.writable()?;
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        let output = excerpt(&result.output);
        let receipts = serde_json::to_string(&result.receipts).unwrap_or_else(|_| "[]".into());
        let changed = tx
            .execute(
                "UPDATE runs SET status = ?2, error = ?3, output = ?4, tokens_in = ?5,
                 tokens_out = ?6, cost_usd = ?7, receipts = ?8, finished_at = ?9
                 WHERE id = ?1 AND status = 'running'",
                params![
                    run_id,
                    result.status.as_str(),
                    result.error,
                    output,
                    result.tokens_in,
                    result.tokens_out,
                    result.cost_usd,
                    receipts,
                    timefmt::format(timefmt::now()),
                ],
            )
            .map_err(|e| self.err(e))?;
        let job: Option<String> = tx
            .query_row("SELECT job FROM runs WHERE id = ?1", params![run_id], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| self.err(e))?;
        if let Some(job) = job {
            let ok = result.status == RunStatus::Ok;
            tx.execute(
                "UPDATE jobs SET lock_run = NULL, lock_pid = NULL, lock_boot = NULL,
                 lock_start = NULL, lock_ns = NULL, locked_at = NULL, lock_beat_ms = NULL,
                 failures = CASE WHEN ?3 THEN 0 ELSE failures + 1 END,
                 next_fire_ms = CASE WHEN ?4 THEN ?5 ELSE next_fire_ms END,
                 enabled = CASE WHEN ?6 IS NULL THEN enabled ELSE 0 END,
                 paused_reason = COALESCE(?6, paused_reason), updated_at = ?7
                 WHERE name = ?1 AND lock_run = ?2",
                params![
                    job,
                    run_id,
                    ok,
                    after.next_fire_ms.is_some(),
                    after.next_fire_ms.flatten(),
                    after.pause,
                    timefmt::format(timefmt::now()),
                ],
            )
            .map_err(|e| self.err(e))?;
            tx.execute(
                "DELETE FROM runs WHERE job = ?1 AND status != 'running' AND id NOT IN
                 (SELECT id FROM runs WHERE job = ?1 ORDER BY started_at DESC LIMIT ?2)",
                params![job, keep],
            )
            .map_err(|e| self.err(e))?;
        }
        tx.commit().map_err(|e| self.err(e))?;
        Ok(changed == 1)
    }

    /// Records the delivery outcome of a finished run.
    pub fn set_delivery(
        &self,
        run_id: &str,
        delivery: &str,
        error: Option<&str>,
    ) -> Result<(), CronError> {
        self.conn()
            .execute(
                "UPDATE runs SET delivery = ?2, delivery_error = ?3 WHERE id = ?1",
                params![run_id, delivery, error],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The job's failure count (after a finish).
    pub fn failures(&self, name: &str) -> Result<u32, CronError> {
        Ok(self.get(name)?.map_or(0, |j| j.failures))
    }

    /// Marks `lost` every running run whose owner is provably gone and releases its job's
    /// lock; returns the lost run ids.
    pub fn reap(&self) -> Result<Vec<String>, CronError> {
        self.reap_with(Reaper::Anytime)
    }

    /// [`CronStore::reap`] at daemon start, before this process claimed any job: a run or
    /// lock of this very PID in this boot is an earlier process's that had the same PID (a
    /// container's PID 1 restarted), so it is lost too and its lock released.
    pub fn reap_at_start(&self) -> Result<Vec<String>, CronError> {
        self.reap_with(Reaper::AtStart)
    }

    fn reap_with(&self, reaper: Reaper) -> Result<Vec<String>, CronError> {
        self.writable()?;
        let mut conn = self.conn();
        // IMMEDIATE, as in `claim`: the heartbeat may commit between the judging and the write.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        // With the owner's start time, a PID reused by an unrelated process after a crash does
        // not keep a run `running` (and its job locked) forever; NULL (a row of schema 1): the
        // PID and boot decide ([`StoredOwner::is_alive`]).
        // A run's heartbeat is its job lock's (the lock holder runs it).
        let now = monotonic_ms();
        let lost = crate::control_plane::gone_owners(
            &tx,
            "SELECT r.id, r.owner_pid, r.owner_boot, r.owner_start, r.owner_ns, j.lock_beat_ms
             FROM runs r LEFT JOIN jobs j ON j.lock_run = r.id WHERE r.status = 'running'",
            reaper,
            now,
        )
        .map_err(|e| self.err(e))?;
        for id in &lost {
            mark_lost(&tx, id).map_err(|e| self.err(e))?;
        }
        // Locks whose run row is gone or ended (never expected; cleared if the owner is gone).
        let stale = crate::control_plane::gone_owners(
            &tx,
            "SELECT name, lock_pid, lock_boot, lock_start, lock_ns, lock_beat_ms FROM jobs
             WHERE lock_run IS NOT NULL",
            reaper,
            now,
        )
        .map_err(|e| self.err(e))?;
        for name in stale {
            tx.execute(
                "UPDATE jobs SET lock_run = NULL, lock_pid = NULL, lock_boot = NULL,
                 lock_start = NULL, lock_ns = NULL, locked_at = NULL, lock_beat_ms = NULL
                 WHERE name = ?1",
                params![name],
            )
            .map_err(|e| self.err(e))?;
        }
        tx.commit().map_err(|e| self.err(e))?;
        Ok(lost)
    }

    /// Renews `lock_beat_ms` of the job locks `owner` holds to now ([`monotonic_ms`]), in one
    /// UPDATE: locks of
    /// this very process (the rule of [`crate::control_plane::same_owner`] on the `lock_`
    /// columns), never an earlier one's that had its PID, whose heartbeat must age. The
    /// holder calls it every [`crate::control_plane::HEARTBEAT`]; returns the locks renewed.
    pub fn heartbeat(&self, owner: &Owner) -> Result<usize, CronError> {
        self.writable()?;
        let o = owner.stored();
        self.conn()
            .execute(
                "UPDATE jobs SET lock_beat_ms = ?5
                 WHERE lock_run IS NOT NULL AND lock_pid = ?1 AND lock_boot = ?2
                 AND (lock_start IS NULL OR ?3 IS NULL OR lock_start = ?3)
                 AND (lock_ns IS NULL OR ?4 IS NULL OR lock_ns = ?4)",
                params![o.pid, o.boot_id, o.start, o.pid_ns, monotonic_ms()],
            )
            .map_err(|e| self.err(e))
    }

    /// Runs of `job`, newest first.
    pub fn runs(&self, job: &str, limit: u32) -> Result<Vec<Run>, CronError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare(&format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE job = ?1
                 ORDER BY started_at DESC, rowid DESC LIMIT ?2"
            ))
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![job, limit], run_row)
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    pub fn run(&self, id: &str) -> Result<Option<Run>, CronError> {
        self.conn()
            .query_row(
                &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"),
                params![id],
                run_row,
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// What `job`'s runs cost since `since` (stored UTC text, e.g. today's midnight).
    pub fn spent_since(&self, job: &str, since: &str) -> Result<f64, CronError> {
        self.conn()
            .query_row(
                "SELECT COALESCE(SUM(cost_usd), 0) FROM runs WHERE job = ?1 AND started_at >= ?2",
                params![job, since],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))
    }
}

pub(super) fn excerpt(text: &str) -> String {
    if text.len() <= OUTPUT_EXCERPT {
        return text.to_string();
    }
    let mut end = OUTPUT_EXCERPT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…[truncated]", &text[..end])
}

pub(super) fn mark_lost(tx: &Transaction<'_>, run: &str) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE runs SET status = 'lost', finished_at = ?2,
         error = 'the process running it exited before the result was stored'
         WHERE id = ?1 AND status = 'running'",
        params![run, timefmt::format(timefmt::now())],
    )?;
    tx.execute(
        "UPDATE jobs SET lock_run = NULL, lock_pid = NULL, lock_boot = NULL, lock_start = NULL,
         lock_ns = NULL, locked_at = NULL, lock_beat_ms = NULL WHERE lock_run = ?1",
        params![run],
    )?;
    Ok(())
}
