//! The rows of `jobs.db`: the column lists and the row codecs of jobs and runs.

use rusqlite::{Connection, OptionalExtension, params};

use super::{Job, Run};
use crate::sqlite_util::alias_column;

// The owner's start time and namespace (`jobs.lock_start`/`lock_ns`, `runs.owner_start`/
// `owner_ns`) are read only where a lock is judged (claim, reap), not with these columns: read
// paths still answer on a file left at schema 1 (never migrated by a read, or read-only after a
// failed migration).
pub(super) const JOB_COLUMNS: &str = "name, agent, schedule_kind, schedule, tz, message, command, session, \
    enabled, paused_reason, source, catch_up, budget_usd, daily_budget_usd, webhook, \
    next_fire_ms, failures, note, created_at, updated_at, lock_run, lock_pid, lock_boot, locked_at, \
    probe, probe_state";

pub(super) const RUN_COLUMNS: &str = "id, job, agent, trigger, started_at, finished_at, status, error, \
    output, tokens_in, tokens_out, cost_usd, receipts, session, delivery, delivery_error, \
    owner_pid, owner_boot";

pub(super) fn insert_job(conn: &Connection, job: &Job) -> rusqlite::Result<()> {
    conn.execute(
        &format!(
            "INSERT INTO jobs ({JOB_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10,
             ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26)"
        ),
        params![
            job.name,
            job.agent.as_str(),
            job.schedule_kind,
            job.schedule,
            job.tz,
            job.message,
            job.command,
            job.session,
            job.enabled,
            job.paused_reason,
            job.source,
            job.catch_up,
            job.budget_usd,
            job.daily_budget_usd,
            job.webhook,
            job.next_fire_ms,
            job.failures,
            job.note,
            job.created_at,
            job.updated_at,
            job.lock_run,
            job.lock_pid,
            job.lock_boot,
            job.locked_at,
            job.probe,
            job.probe_state,
        ],
    )?;
    Ok(())
}

pub(super) fn get_job(conn: &Connection, name: &str) -> rusqlite::Result<Option<Job>> {
    conn.query_row(
        &format!("SELECT {JOB_COLUMNS} FROM jobs WHERE name = ?1"),
        params![name],
        job_row,
    )
    .optional()
}

pub(super) fn list_jobs(conn: &Connection) -> rusqlite::Result<Vec<Job>> {
    let mut stmt = conn.prepare(&format!("SELECT {JOB_COLUMNS} FROM jobs ORDER BY name"))?;
    let rows = stmt.query_map([], job_row)?;
    rows.collect()
}

pub(super) fn job_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Job> {
    Ok(Job {
        name: r.get(0)?,
        agent: alias_column(r, 1)?,
        schedule_kind: r.get(2)?,
        schedule: r.get(3)?,
        tz: r.get(4)?,
        message: r.get(5)?,
        command: r.get(6)?,
        session: r.get(7)?,
        enabled: r.get(8)?,
        paused_reason: r.get(9)?,
        source: r.get(10)?,
        catch_up: r.get(11)?,
        budget_usd: r.get(12)?,
        daily_budget_usd: r.get(13)?,
        webhook: r.get(14)?,
        next_fire_ms: r.get(15)?,
        failures: r.get(16)?,
        note: r.get(17)?,
        created_at: r.get(18)?,
        updated_at: r.get(19)?,
        lock_run: r.get(20)?,
        lock_pid: r.get(21)?,
        lock_boot: r.get(22)?,
        locked_at: r.get(23)?,
        probe: r.get(24)?,
        probe_state: r.get(25)?,
    })
}

pub(super) fn run_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Run> {
    let receipts: String = r.get(12)?;
    Ok(Run {
        id: r.get(0)?,
        job: r.get(1)?,
        agent: alias_column(r, 2)?,
        trigger: r.get(3)?,
        started_at: r.get(4)?,
        finished_at: r.get(5)?,
        status: r.get(6)?,
        error: r.get(7)?,
        output: r.get(8)?,
        tokens_in: r.get(9)?,
        tokens_out: r.get(10)?,
        cost_usd: r.get(11)?,
        receipts: serde_json::from_str(&receipts).unwrap_or_default(),
        session: r.get(13)?,
        delivery: r.get(14)?,
        delivery_error: r.get(15)?,
        owner_pid: r.get(16)?,
        owner_boot: r.get(17)?,
    })
}
