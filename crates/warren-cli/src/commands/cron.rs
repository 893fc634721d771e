//! `warren cron add|list|show|run|pause|resume|remove|runs` (STATE-9).
//!
//! The changes (add, remove, pause, resume, run) are verbs of the control seam
//! ([`super::control`]): a running daemon executes them on its scheduler, which re-reads the
//! store at once; with no daemon this process executes them on its own stores, and adding or
//! resuming a job says so ("stored; it runs when `warren daemon` is running") — never
//! "scheduled". `warren cron run NAME` runs the job under the same lock row as scheduled runs
//! (a run already holding it refuses, naming it), in the daemon or, with none, in this process.
//! Read commands never create the store.

use std::process::ExitCode;
use std::sync::Arc;

use serde_json::json;
use warren_config::InstallRoot;
use warren_gateway::control::{AdminOp, CronOp, CronReply, SchedulerState};
use warren_jobs::cron::JobSpec;
use warren_runtime::DaemonStatus;
use warren_store::cron::{CronStore, Job, Run};

use super::Ran;
use crate::cli::CronCommand;

pub fn run(root: &InstallRoot, cmd: CronCommand, json: bool) -> anyhow::Result<ExitCode> {
    match cmd {
        CronCommand::Add {
            name,
            agent,
            cron,
            tz,
            every,
            at,
            message,
            command,
            session,
            budget_usd,
            daily_budget_usd,
            catch_up,
            webhook,
        } => {
            let spec = JobSpec {
                name,
                agent,
                cron,
                tz,
                every,
                at,
                message,
                command,
                session,
                budget_usd,
                daily_budget_usd,
                catch_up,
                webhook,
                enabled: Some(true),
            };
            add(root, spec, json)
        }
        CronCommand::List => list(root, json),
        CronCommand::Show { name } => show(root, &name, json),
        CronCommand::Run { name } => run_now(root, &name, json),
        CronCommand::Pause { name } => set_enabled(root, CronOp::CronPause { name }, json),
        CronCommand::Resume { name } => set_enabled(root, CronOp::CronResume { name }, json),
        CronCommand::Remove { name } => {
            control(root, CronOp::CronRemove { name: name.clone() })?;
            println!("removed cron job '{name}' and its run history");
            Ok(ExitCode::SUCCESS)
        }
        CronCommand::Runs { name, limit } => runs(root, &name, limit, json),
    }
}

/// Whether a daemon runs on `root` (its pid).
fn daemon_pid(root: &InstallRoot) -> Option<Option<u32>> {
    match warren_runtime::probe(root) {
        Ok(DaemonStatus::Running { pid, .. }) => Some(pid),
        _ => None,
    }
}

/// Who fires the stored jobs, as the verb's executor saw it.
enum Daemon {
    /// No daemon runs on this root.
    None,
    /// Its scheduler runs and re-reads the store (pid).
    Scheduling(Option<u32>),
    /// Its scheduler is off (`[cron] enabled = false`, or a store that does not open: the
    /// daemon's reason): nothing fires (pid, reason).
    SchedulerOff(Option<u32>, String),
}

/// Runs a cron verb through the control seam: the daemon's scheduler or this process.
fn control(root: &InstallRoot, op: CronOp) -> anyhow::Result<(Daemon, CronReply)> {
    let (ran, body) = super::run_op(root, &AdminOp::Cron(op))?;
    let reply: CronReply = serde_json::from_value(body)?;
    let daemon = match (ran, reply.scheduler) {
        (Ran::Daemon(pid), SchedulerState::Running) => Daemon::Scheduling(pid),
        (Ran::Daemon(pid), _) => Daemon::SchedulerOff(
            pid,
            reply
                .reason
                .clone()
                .unwrap_or_else(|| "[cron] enabled = false".to_string()),
        ),
        (Ran::Here, _) => Daemon::None,
    };
    Ok((daemon, reply))
}

/// The job a verb answered with.
fn job_of(reply: CronReply) -> anyhow::Result<Job> {
    reply
        .job
        .ok_or_else(|| anyhow::anyhow!("the cron verb answered without the job"))
}

/// What a stored job will do, honestly: scheduled by a running daemon's scheduler, or only
/// stored (no daemon, its scheduler off, or it was not reached).
fn where_it_runs(daemon: &Daemon, job: &Job) -> String {
    let pid = |p: &Option<u32>| p.map_or_else(|| "?".into(), |p| p.to_string());
    let Some(next) = job.next_fire() else {
        return "stored; it has no next fire time".to_string();
    };
    match daemon {
        Daemon::Scheduling(p) => format!(
            "scheduled by the running daemon (pid {}); next run at {next}",
            pid(p)
        ),
        Daemon::SchedulerOff(p, reason) => format!(
            "stored; the running daemon (pid {}) has its scheduler off ({reason}), so it does not run (next fire time {next})",
            pid(p)
        ),
        Daemon::None => {
            format!("stored; it runs when `warren daemon` is running (next fire time {next})")
        }
    }
}

fn add(root: &InstallRoot, spec: JobSpec, json: bool) -> anyhow::Result<ExitCode> {
    let (daemon, reply) = control(
        root,
        CronOp::CronAdd {
            job: Box::new(spec),
        },
    )?;
    let job = job_of(reply)?;
    let status = where_it_runs(&daemon, &job);
    if json {
        super::print_json(&json!({"job": job, "status": status}))?;
    } else {
        println!("added cron job '{}': {status}", job.name);
    }
    Ok(ExitCode::SUCCESS)
}

fn open_read(root: &InstallRoot) -> anyhow::Result<Option<Arc<CronStore>>> {
    Ok(super::stores(root).cron_existing()?)
}

fn state_of(job: &Job) -> String {
    match (&job.lock_run, job.enabled, &job.paused_reason) {
        (Some(run), _, _) => format!("running ({run})"),
        (None, true, _) => "enabled".into(),
        (None, false, Some(reason)) => format!("paused: {reason}"),
        (None, false, None) => "paused".into(),
    }
}

fn schedule_text(job: &Job) -> String {
    match (job.schedule_kind.as_str(), &job.tz) {
        ("cron", Some(tz)) => format!("cron {} ({tz})", job.schedule),
        (kind, _) => format!("{kind} {}", job.schedule),
    }
}

fn list(root: &InstallRoot, json: bool) -> anyhow::Result<ExitCode> {
    let jobs = match open_read(root)? {
        Some(store) => store.list()?,
        None => Vec::new(),
    };
    if json {
        let rows: Vec<_> = jobs
            .iter()
            .map(|j| json!({"job": j, "next_fire": j.next_fire(), "state": state_of(j)}))
            .collect();
        super::print_json(&json!(rows))?;
        return Ok(ExitCode::SUCCESS);
    }
    if jobs.is_empty() {
        println!("no cron jobs (add one with `warren cron add`)");
        return Ok(ExitCode::SUCCESS);
    }
    let mut table =
        crate::output::Table::new(&["NAME", "AGENT", "SCHEDULE", "NEXT", "SOURCE", "STATE"]);
    for j in &jobs {
        table.row(vec![
            j.name.to_string(),
            j.agent.to_string(),
            schedule_text(j),
            j.next_fire().unwrap_or_else(|| "-".into()),
            j.source.to_string(),
            state_of(j).to_string(),
        ]);
    }
    table.print();
    if daemon_pid(root).is_none() {
        println!("(no daemon is running: nothing fires until `warren daemon` runs)");
    }
    Ok(ExitCode::SUCCESS)
}

fn show(root: &InstallRoot, name: &str, json: bool) -> anyhow::Result<ExitCode> {
    let store =
        open_read(root)?.ok_or_else(|| warren_store::cron::CronError::NotFound(name.into()))?;
    let job = store
        .get(name)?
        .ok_or_else(|| warren_store::cron::CronError::NotFound(name.into()))?;
    let runs = store.runs(name, 5)?;
    if json {
        super::print_json(&json!({"job": job, "next_fire": job.next_fire(),
                                  "state": state_of(&job), "runs": runs}))?;
        return Ok(ExitCode::SUCCESS);
    }
    println!("name:      {}", job.name);
    println!("agent:     {}", job.agent);
    println!("schedule:  {}", schedule_text(&job));
    match (&job.message, &job.command) {
        (Some(m), _) => println!("message:   {m}"),
        (_, Some(c)) => println!("command:   {c}"),
        _ => {}
    }
    println!(
        "session:   {}",
        job.session.as_deref().unwrap_or("isolated per run")
    );
    println!("source:    {}", job.source);
    println!("state:     {}", state_of(&job));
    println!(
        "next:      {}",
        job.next_fire().unwrap_or_else(|| "-".into())
    );
    println!("failures:  {} in a row", job.failures);
    if let Some(url) = &job.webhook {
        println!("webhook:   {url}");
    }
    if let Some(note) = &job.note {
        println!("note:      {note}");
    }
    println!();
    print_runs(&runs);
    Ok(ExitCode::SUCCESS)
}

fn print_runs(runs: &[Run]) {
    if runs.is_empty() {
        println!("no runs yet");
        return;
    }
    let mut table = crate::output::Table::new(&[
        "RUN",
        "TRIGGER",
        "STATUS",
        "STARTED",
        ">IN",
        ">OUT",
        ">COST USD",
        "ERROR",
    ]);
    for r in runs {
        let error = r
            .error
            .clone()
            .or_else(|| r.delivery_error.clone())
            .unwrap_or_default();
        table.row(vec![
            r.id.to_string(),
            r.trigger.to_string(),
            r.status.to_string(),
            r.started_at.to_string(),
            r.tokens_in.to_string(),
            r.tokens_out.to_string(),
            format!("{:.6}", r.cost_usd),
            error,
        ]);
    }
    table.print();
}

fn runs(root: &InstallRoot, name: &str, limit: u32, json: bool) -> anyhow::Result<ExitCode> {
    let store = open_read(root)?;
    let runs = match &store {
        Some(s) => {
            if s.get(name)?.is_none() {
                anyhow::bail!(warren_store::cron::CronError::NotFound(name.into()));
            }
            s.runs(name, limit)?
        }
        None => anyhow::bail!(warren_store::cron::CronError::NotFound(name.into())),
    };
    if json {
        super::print_json(&serde_json::to_value(&runs)?)?;
    } else {
        print_runs(&runs);
    }
    Ok(ExitCode::SUCCESS)
}

fn set_enabled(root: &InstallRoot, op: CronOp, json: bool) -> anyhow::Result<ExitCode> {
    let enabled = matches!(op, CronOp::CronResume { .. });
    let (daemon, reply) = control(root, op)?;
    let job = job_of(reply)?;
    let status = if enabled {
        where_it_runs(&daemon, &job)
    } else {
        "paused".to_string()
    };
    if json {
        super::print_json(&json!({"job": job, "status": status}))?;
    } else {
        println!("cron job '{}': {status}", job.name);
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs the job now — in the running daemon, else in this process on its own stores — under
/// the job's lock row (scheduled runs and this one can never overlap).
fn run_now(root: &InstallRoot, name: &str, json: bool) -> anyhow::Result<ExitCode> {
    let (_, reply) = control(
        root,
        CronOp::CronRun {
            name: name.to_string(),
        },
    )?;
    let run = reply
        .run
        .ok_or_else(|| anyhow::anyhow!("the cron verb answered without the run"))?;
    if json {
        super::print_json(&serde_json::to_value(&run)?)?;
    } else {
        println!(
            "run {} of '{name}': {}{}",
            run.id,
            run.status,
            run.error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        );
        if let Some(output) = run.output.as_deref().filter(|o| !o.is_empty()) {
            println!("{output}");
        }
        if let Some(e) = &run.delivery_error {
            println!("delivery: {e}");
        }
    }
    Ok(if run.status == "ok" {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
