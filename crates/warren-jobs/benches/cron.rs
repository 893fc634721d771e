//! Scheduler overhead (issue 17, benchmark): 1,000 jobs with due times spread over a minute —
//! fire-time lateness (the run's start minus its due time; target p99 <= 50 ms on an idle
//! machine) — and 1,000 dormant jobs (due in an hour) — the timer task's wakeups per minute
//! (target: none except at due times).
//!
//! The jobs are one-shot agent turns of the offline `script` provider (memory `none`), so the
//! figure is the scheduler's (timer, claim, control plane, turn door), not a model's.
//!
//! Run: `cargo bench -p warren-runtime --bench cron` (about two minutes).

use std::sync::Arc;
use std::time::Duration;

use warren_config::{ConfigStore, InstallRoot};
use warren_jobs::cron::{JobSpec, Scheduler};
use warren_runtime::{AgentHost, ProcessServices};
use warren_store::cron::{CronStore, format_ms, now_ms};

const JOBS: usize = 1000;
const SPREAD_MS: i64 = 60_000;
const DORMANT_SECS: u64 = 30;

fn root(dir: &std::path::Path) -> Result<InstallRoot, Box<dyn std::error::Error>> {
    let root = InstallRoot::at(dir.join("warren"));
    root.ensure_layout()?;
    std::fs::write(
        root.root().join("script.json"),
        r#"{"turns": [[{"text": "ok", "usage": {"input_tokens": 1, "output_tokens": 1}}]]}"#,
    )?;
    std::fs::write(
        root.config_file(),
        format!(
            "[agents.bench]\nprovider = \"s\"\nmodel = \"m\"\n[agents.bench.memory]\nbackend = \"none\"\n[providers.s]\nkind = \"script\"\nscript = \"{}\"\n[cost]\nenabled = false\n",
            root.root().join("script.json").display()
        ),
    )?;
    Ok(root)
}

fn add_jobs(
    root: &InstallRoot,
    config: &warren_config::Config,
    due: impl Fn(usize) -> i64,
) -> Result<(), Box<dyn std::error::Error>> {
    let store = CronStore::open(&root.cron_db())?;
    for i in 0..JOBS {
        let at = format_ms(due(i));
        let job = JobSpec {
            at: Some(at),
            message: Some("tick".into()),
            ..JobSpec::new(format!("job{i:04}"), "bench".parse()?)
        }
        .into_job(config, "runtime")?;
        store.insert(&job)?;
    }
    Ok(())
}

async fn scheduler(root: &InstallRoot) -> Result<Arc<Scheduler>, Box<dyn std::error::Error>> {
    let store = ConfigStore::load(root.clone())?;
    let snapshot = store.snapshot();
    let process =
        Arc::new(ProcessServices::new(root, snapshot.config()).map_err(|e| e.to_string())?);
    let host = Arc::new(AgentHost::new(root, snapshot, process));
    host.open_sessions().await;
    let scheduler = Scheduler::open(root, host)?;
    scheduler.prepare().await?;
    Ok(scheduler)
}

fn parse_ms(text: &str) -> Option<i64> {
    warren_store::timefmt::parse(text)
        .and_then(|t| i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok())
}

async fn lateness() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let root = root(dir.path())?;
    let config = ConfigStore::load(root.clone())?.snapshot().config().clone();
    let t0 = now_ms() + 3000;
    let due = |i: usize| t0 + (i as i64) * SPREAD_MS / JOBS as i64;
    add_jobs(&root, &config, due)?;
    let scheduler = scheduler(&root).await?;
    let running = scheduler.start();
    let store = CronStore::open(&root.cron_db())?;
    let deadline = std::time::Instant::now() + Duration::from_millis(SPREAD_MS as u64 + 30_000);
    let mut late = Vec::with_capacity(JOBS);
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        late.clear();
        for i in 0..JOBS {
            if let Some(run) = store.runs(&format!("job{i:04}"), 1)?.first()
                && let Some(started) = parse_ms(&run.started_at)
            {
                late.push(started - due(i));
            }
        }
        if late.len() == JOBS || std::time::Instant::now() > deadline {
            break;
        }
    }
    let wakeups = scheduler.wakeups();
    running.stop(Duration::from_secs(5)).await;
    late.sort_unstable();
    let pct = |p: f64| late[((late.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "cron lateness: {} of {JOBS} jobs fired over {} s; lateness p50 {} ms, p99 {} ms, max {} ms (target p99 <= 50 ms); timer wakeups {wakeups}",
        late.len(),
        SPREAD_MS / 1000,
        pct(0.5),
        pct(0.99),
        late.last().copied().unwrap_or_default()
    );
    if late.len() < JOBS || pct(0.99) > 50 {
        return Err("cron lateness: target missed".into());
    }
    Ok(())
}

async fn dormant() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let root = root(dir.path())?;
    let config = ConfigStore::load(root.clone())?.snapshot().config().clone();
    let t0 = now_ms() + 3_600_000;
    add_jobs(&root, &config, |i| t0 + i as i64)?;
    let scheduler = scheduler(&root).await?;
    let running = scheduler.start();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = scheduler.wakeups();
    let (cpu0, switches0) = (cpu_ticks(), context_switches());
    tokio::time::sleep(Duration::from_secs(DORMANT_SECS)).await;
    let woke = scheduler.wakeups() - before;
    let (cpu, switches) = (cpu_ticks() - cpu0, context_switches() - switches0);
    running.stop(Duration::from_secs(5)).await;
    println!(
        "cron dormant: {JOBS} jobs due in an hour; {woke} timer wakeups in {DORMANT_SECS} s = {:.1} wakeups/min (target 0); the process: {} ms CPU and {switches} voluntary context switches (all its threads) in {DORMANT_SECS} s",
        woke as f64 * 60.0 / DORMANT_SECS as f64,
        cpu * 10
    );
    if woke > 0 {
        return Err("cron dormant: the timer woke without a due job".into());
    }
    Ok(())
}

/// This process's user + system CPU time in clock ticks (1/100 s), from `/proc/self/stat`.
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which ends with the last ')'): utime is the 12th,
    // stime the 13th of them.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<u64> = rest
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0)
}

/// Voluntary context switches (= wakeups from sleep) of all this process's threads, those
/// that exited included (`getrusage(RUSAGE_SELF)`; libc offers no safe wrapper).
#[allow(unsafe_code)]
fn context_switches() -> u64 {
    // SAFETY: getrusage only writes the zeroed struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage the call may write.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0;
    }
    u64::try_from(usage.ru_nvcsw).unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let dormant = dormant().await;
        let lateness = lateness().await;
        dormant.and(lateness)
    })
}
