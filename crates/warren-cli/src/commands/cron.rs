//! `warren cron add|list|show|run|pause|resume|remove|runs` (STATE-9).
//!
//! The CLI writes `data/cron/jobs.db` itself (the same store routines the daemon uses) and then
//! nudges a running daemon (`POST /admin/cron/wake`) so its scheduler re-reads the store; with
//! no daemon running, adding or resuming a job says so ("stored; it runs when `warren daemon`
//! is running") — never "scheduled". `warren cron run NAME` runs the job in this process under
//! the same lock row as scheduled runs (a run already holding it refuses, naming it). Read
//! commands never create the store.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use serde_json::json;
use warren_config::{ConfigStore, InstallRoot};
use warren_jobs::cron::{JobSpec, Scheduler, schedule_of};
use warren_runtime::{AgentHost, DaemonStatus};
use warren_store::cron::{CronStore, Job, Run, now_ms};

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
        CronCommand::Pause { name } => set_enabled(root, &name, false, json),
        CronCommand::Resume { name } => set_enabled(root, &name, true, json),
        CronCommand::Remove { name } => {
            if !root.cron_db().exists() {
                anyhow::bail!(warren_store::cron::CronError::NotFound(name));
            }
            super::stores(root).cron()?.remove(&name)?;
            nudge(root);
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

/// What a running daemon said when told to re-read the store.
enum Daemon {
    /// No daemon runs on this root.
    None,
    /// Its scheduler runs and re-reads the store (pid).
    Scheduling(Option<u32>),
    /// Its scheduler is off (`[cron] enabled = false`, or a store that does not open:
    /// the daemon's reason): nothing fires (pid, reason).
    SchedulerOff(Option<u32>, String),
    /// It runs but did not answer (pid).
    Unreached(Option<u32>),
}

/// Tells a running daemon's scheduler to re-read the store.
fn nudge(root: &InstallRoot) -> Daemon {
    let Some(pid) = daemon_pid(root) else {
        return Daemon::None;
    };
    match warren_gateway::client::admin_call(root, "POST", "/admin/cron/wake") {
        Ok((200, answer)) if answer["scheduler"] == "running" => Daemon::Scheduling(pid),
        Ok((200, answer)) if answer["scheduler"] == "off" => Daemon::SchedulerOff(
            pid,
            answer["reason"]
                .as_str()
                .unwrap_or("[cron] enabled = false")
                .to_string(),
        ),
        Ok((status, answer)) => {
            eprintln!(
                "warning: the running daemon was not told about the change (HTTP {status}: {answer}); it picks it up at its next reload"
            );
            Daemon::Unreached(pid)
        }
        Err(e) => {
            eprintln!(
                "warning: the running daemon was not told about the change ({e}); it picks it up at its next reload"
            );
            Daemon::Unreached(pid)
        }
    }
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
        Daemon::Unreached(p) => format!(
            "stored; the running daemon (pid {}) was not reached: it runs once the daemon reloads (next fire time {next})",
            pid(p)
        ),
        Daemon::None => {
            format!("stored; it runs when `warren daemon` is running (next fire time {next})")
        }
    }
}

fn add(root: &InstallRoot, spec: JobSpec, json: bool) -> anyhow::Result<ExitCode> {
    let config = ConfigStore::load(root.clone())?;
    let name = spec.name.clone();
    let job = spec
        .into_job(config.snapshot().config(), "runtime")
        .with_context(|| format!("cron job '{name}' not added"))?;
    super::stores(root).cron()?.insert(&job)?;
    let status = where_it_runs(&nudge(root), &job);
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
    println!(
        "{:<20} {:<12} {:<30} {:<28} {:<9} STATE",
        "NAME", "AGENT", "SCHEDULE", "NEXT", "SOURCE"
    );
    for j in &jobs {
        println!(
            "{:<20} {:<12} {:<30} {:<28} {:<9} {}",
            j.name,
            j.agent,
            schedule_text(j),
            j.next_fire().unwrap_or_else(|| "-".into()),
            j.source,
            state_of(j)
        );
    }
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
    println!(
        "{:<28} {:<9} {:<10} {:<28} {:>8} {:>8} {:>10}  ERROR",
        "RUN", "TRIGGER", "STATUS", "STARTED", "IN", "OUT", "COST USD"
    );
    for r in runs {
        let error = r
            .error
            .clone()
            .or_else(|| r.delivery_error.clone())
            .unwrap_or_default();
        println!(
            "{:<28} {:<9} {:<10} {:<28} {:>8} {:>8} {:>10.6}  {error}",
            r.id, r.trigger, r.status, r.started_at, r.tokens_in, r.tokens_out, r.cost_usd
        );
    }
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

fn set_enabled(
    root: &InstallRoot,
    name: &str,
    enabled: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    // A job that is not there creates no store.
    if !root.cron_db().exists() {
        anyhow::bail!(warren_store::cron::CronError::NotFound(name.into()));
    }
    let store = super::stores(root).cron()?;
    let job = store
        .get(name)?
        .ok_or_else(|| warren_store::cron::CronError::NotFound(name.into()))?;
    let next = if enabled {
        schedule_of(&job)?.next_after(now_ms())
    } else {
        None
    };
    let reason = (!enabled).then_some("paused by the operator");
    let job = store.set_enabled(name, enabled, reason, next)?;
    let daemon = nudge(root);
    let status = if enabled {
        where_it_runs(&daemon, &job)
    } else {
        "paused".to_string()
    };
    if json {
        super::print_json(&json!({"job": job, "status": status}))?;
    } else {
        println!("cron job '{name}': {status}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs the job now in this process, under the job's lock row (the daemon's scheduled runs
/// and this one can never overlap).
fn run_now(root: &InstallRoot, name: &str, json: bool) -> anyhow::Result<ExitCode> {
    // A job that is not there creates no store (the scheduler below opens them for writing).
    let known = match open_read(root)? {
        Some(store) => store.get(name)?.is_some(),
        None => false,
    };
    if !known {
        anyhow::bail!(warren_store::cron::CronError::NotFound(name.into()));
    }
    let store = ConfigStore::load(root.clone())?;
    let snapshot = store.snapshot();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let run = runtime.block_on(async {
        let host = Arc::new(
            AgentHost::for_process(root, Arc::clone(&snapshot))
                .map_err(|e| anyhow::anyhow!("creating the receipt key: {e}"))?,
        );
        let scheduler = Scheduler::open(root, host)?;
        // The job lock this process takes must beat, or a daemon that cannot judge us (in
        // another container) takes it once the heartbeat set at the claim goes stale.
        warren_runtime::heartbeat::keep_beating(
            root.control_plane_db(),
            Some(root.cron_db()),
            false,
            warren_store::control_plane::HEARTBEAT,
        );
        anyhow::Ok(scheduler.run_now(name).await?)
    })?;
    nudge(root);
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
