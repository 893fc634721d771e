//! The cron scheduler against a live `warren daemon` and the fake OpenAI server (STATE-9,
//! STATE-11, STATE-19): repeated runs with one row each and their tokens and cost; a daemon
//! killed at a named failpoint during a run leaves the run `lost` (never `ok`), its lock
//! cleared, and the job runs again on schedule, not twice; a manual run during a scheduled one
//! is refused naming the holder; a turn that needs approval fails with that reason; a webhook
//! delivery failure is recorded on the run; adding a job with no daemon says so.

use crate::common::{self, bin, json_of, wait_until};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use warren_testkit::fake_llm::{FakeCall, FakeOpenAi, FakeReply};
use warren_testkit::{DaemonChild, TempRoot, free_port, http, pair, text};

type R = Result<(), Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(30);

/// A supervised agent `careful` beside `main`; rates 1000x real ones, and each call first
/// reserves its worst case (prompt + 4096 output tokens) against the daily cap: the caps are
/// raised to match (issue 16 §4).
const SECTIONS: &str = r#"
[agents.careful]
provider = "fake"
model = "gpt-test"
risk_profile = "careful"

[risk_profiles.careful]
autonomy = "supervised"
approval_timeout_secs = 5
max_cost_per_day_usd = 100000.0

[risk_profiles.default]
max_cost_per_day_usd = 100000.0

[cost.rates.gpt-test]
input_per_mtok = 1000.0
output_per_mtok = 2000.0
"#;

fn config(fake: &FakeOpenAi, port: u16, extra: &str) -> String {
    common::fake_config(fake, "sk-cron-secret", port, SECTIONS, extra)
}

fn runs(root: &TempRoot, job: &str) -> Result<Vec<Value>, Box<dyn std::error::Error>> {
    Ok(json_of(root, &["cron", "runs", job, "--limit", "100"])?
        .as_array()
        .cloned()
        .unwrap_or_default())
}

#[test]
fn an_every_second_job_runs_repeatedly_with_one_row_per_run_and_its_cost_state9() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&config(&fake, port, ""))?;
    for i in 0..20 {
        fake.push(FakeReply::text(&format!("tick {i}")).with_usage(100, 50));
    }
    // No daemon: the job is stored, and the CLI says it does not run yet.
    let out = root.run(
        bin(),
        &[
            "cron",
            "add",
            "tick",
            "--agent",
            "main",
            "--every",
            "1s",
            "--message",
            "tick?",
        ],
    )?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("stored; it runs when `warren daemon` is running"),
        "{stdout}"
    );
    assert!(!stdout.contains("scheduled"), "{stdout}");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        runs(&root, "tick")?.is_empty(),
        "nothing runs without a daemon"
    );

    let mut daemon = common::ready_daemon(&root)?;
    wait_until("3 runs", WAIT, || {
        Ok(runs(&root, "tick")?
            .iter()
            .filter(|r| r["status"] == "ok")
            .count()
            >= 3)
    })?;
    let all = runs(&root, "tick")?;
    let ok: Vec<&Value> = all.iter().filter(|r| r["status"] == "ok").collect();
    let mut ids: Vec<&str> = all.iter().filter_map(|r| r["id"].as_str()).collect();
    ids.dedup();
    assert_eq!(ids.len(), all.len(), "one row per run: {all:?}");
    for r in &ok {
        assert_eq!(
            (r["tokens_in"].as_u64(), r["tokens_out"].as_u64()),
            (Some(100), Some(50)),
            "{r}"
        );
        // 100 × $1000/M + 50 × $2000/M = $0.2
        let cost = r["cost_usd"].as_f64().unwrap_or(0.0);
        assert!((cost - 0.2).abs() < 1e-9, "{r}");
        assert!(
            r["output"].as_str().is_some_and(|o| o.starts_with("tick ")),
            "{r}"
        );
        assert_eq!(r["trigger"], "schedule", "{r}");
    }
    // Each scheduled run is its own isolated session, through the turn door.
    let sessions: Vec<&str> = ok.iter().filter_map(|r| r["session"].as_str()).collect();
    assert!(
        sessions.iter().all(|s| s.starts_with("cron-tick-")),
        "{sessions:?}"
    );
    // The control plane has them, owned by the daemon.
    let cp = json_of(&root, &["runs", "list"])?;
    let cp = cp.as_array().cloned().unwrap_or_default();
    assert!(
        cp.iter().any(|r| r["state"] == "ok"
            && r["owner_pid"] == daemon.pid()
            && r["label"] == "cron:tick"),
        "{cp:?}"
    );
    let mine = json_of(&root, &["runs", "list", "--agent", "main"])?;
    assert!(
        mine.as_array()
            .is_some_and(|rows| !rows.is_empty() && rows.iter().all(|r| r["agent"] == "main")),
        "{mine}"
    );
    let others = json_of(&root, &["runs", "list", "--agent", "careful"])?;
    assert_eq!(others, json!([]), "--agent filters");
    // The API lists the job and its runs, and health shows the scheduler.
    let token = pair(&root, bin(), port, "ci")?;
    let (status, listed) = http(port, "GET", "/api/cron", Some(&token), "")?;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["jobs"][0]["name"], "tick", "{listed}");
    let (status, plane) = http(port, "GET", "/api/runs", Some(&token), "")?;
    assert_eq!(status, 200, "{plane}");
    assert!(
        plane.to_string().contains("cron:tick"),
        "GET /api/runs lists the control plane's runs: {plane}"
    );
    let (_, health) = http(port, "GET", "/api/health", Some(&token), "")?;
    assert_eq!(
        health["components"]["cron"]["scheduler"], "running",
        "{health}"
    );

    // Pause: no further runs.
    let out = root.run(bin(), &["cron", "pause", "tick"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    std::thread::sleep(Duration::from_millis(1500));
    let before = runs(&root, "tick")?.len();
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        runs(&root, "tick")?.len(),
        before,
        "a paused job does not fire"
    );
    let (_, health) = http(port, "GET", "/api/health", Some(&token), "")?;
    assert_eq!(
        health["components"]["cron"]["paused"][0]["name"], "tick",
        "{health}"
    );

    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}

/// How the first daemon dies during a run of job `beat`.
#[derive(Clone, Copy, Debug)]
enum Death {
    /// It aborts at this named failpoint (SIGABRT: no destructors, no flushing).
    At(&'static str),
    /// The test SIGKILLs it while the run's turn streams.
    Kill,
}

#[test]
fn a_daemon_killed_right_after_the_claim_leaves_the_run_lost_and_the_job_runs_again_once_state11()
-> R {
    killed_during_a_run(Death::At("cron-run-started"))
}

#[test]
fn a_daemon_killed_after_the_turn_before_its_result_is_stored_leaves_the_run_lost_not_ok_state11()
-> R {
    killed_during_a_run(Death::At("cron-run-before-finish"))
}

#[test]
fn a_daemon_sigkilled_while_the_turn_streams_leaves_the_run_lost_and_the_job_runs_again_once_state11()
-> R {
    killed_during_a_run(Death::Kill)
}

fn killed_during_a_run(death: Death) -> R {
    use std::os::unix::process::ExitStatusExt;
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&config(
        &fake,
        port,
        "\n[cron.jobs.beat]\nagent = \"main\"\nevery = \"2s\"\nmessage = \"beat\"\n",
    ))?;
    let mut cmd = root.warren(bin(), &["daemon"]);
    let status = match death {
        Death::At(point) => {
            cmd.env("FAILPOINTS", format!("{point}=return"));
            let mut first = DaemonChild::spawn(cmd)?;
            let status = first.wait(WAIT)?;
            assert_eq!(status.signal(), Some(6), "killed at {point}: {status:?}");
            status
        }
        Death::Kill => {
            // The first turn streams for about 4 s; the daemon is killed in the middle of it.
            fake.push(FakeReply::Chat {
                text: (0..40).map(|i| format!("w{i} ")).collect(),
                calls: Vec::new(),
                usage: (10, 40),
                chunk_delay: Duration::from_millis(100),
            });
            let mut first = DaemonChild::spawn(cmd)?;
            wait_until("the turn of the first run to stream", WAIT, || {
                Ok(fake.requests().len() == 1
                    && json_of(&root, &["cron", "show", "beat"])?["job"]["lock_run"].is_string())
            })?;
            std::thread::sleep(Duration::from_millis(300));
            first.signal("KILL")?;
            let status = first.wait(WAIT)?;
            assert_eq!(status.signal(), Some(9), "SIGKILLed: {status:?}");
            status
        }
    };
    // Where it died: before the turn (no provider call) or after it (one call, its reply not
    // stored as the run's result).
    let calls = fake.requests().len();
    match death {
        Death::At("cron-run-started") => assert_eq!(calls, 0, "died before the turn"),
        _ => assert_eq!(calls, 1, "died during or after the turn"),
    }
    let crashed = runs(&root, "beat")?;
    assert_eq!(crashed.len(), 1, "{status:?}: {crashed:?}");
    assert_eq!(crashed[0]["status"], "running", "{crashed:?}");
    let lost_id = crashed[0]["id"].as_str().unwrap_or_default().to_string();
    let show = json_of(&root, &["cron", "show", "beat"])?;
    assert_eq!(
        show["job"]["lock_run"],
        lost_id.as_str(),
        "the lock names the dead run: {show}"
    );
    let cp = json_of(&root, &["runs", "list"])?;
    assert!(
        cp.as_array().is_some_and(|rows| rows
            .iter()
            .any(|r| r["id"] == lost_id.as_str() && r["state"] == "running")),
        "the control plane still says running before the restart: {cp}"
    );

    let started = Instant::now();
    let mut second = common::ready_daemon(&root)?;
    wait_until("a run after the restart", WAIT, || {
        Ok(runs(&root, "beat")?.iter().any(|r| r["status"] == "ok"))
    })?;
    std::thread::sleep(Duration::from_millis(3000));
    let elapsed = started.elapsed().as_secs_f64();
    second.signal("TERM")?;
    assert_eq!(second.wait(WAIT)?.code(), Some(0));

    let all = runs(&root, "beat")?;
    let lost: Vec<&Value> = all.iter().filter(|r| r["id"] == lost_id.as_str()).collect();
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0]["status"], "lost", "never ok: {all:?}");
    assert!(lost[0]["finished_at"].is_string(), "{all:?}");
    assert_eq!(
        lost[0]["output"],
        Value::Null,
        "no result was stored: {all:?}"
    );
    let show = json_of(&root, &["cron", "show", "beat"])?;
    assert_ne!(
        show["job"]["lock_run"],
        lost_id.as_str(),
        "the stale lock is cleared: {show}"
    );
    // Runs after the restart follow the 2 s schedule: no burst re-running the lost one.
    let after: Vec<&Value> = all.iter().filter(|r| r["id"] != lost_id.as_str()).collect();
    assert!(!after.is_empty());
    assert!(
        after.len() as f64 <= elapsed / 2.0 + 1.0,
        "{} runs in {elapsed:.1} s: {all:?}",
        after.len()
    );
    assert!(after.iter().all(|r| r["trigger"] == "schedule"), "{all:?}");
    let mut starts: Vec<&str> = after
        .iter()
        .filter_map(|r| r["started_at"].as_str())
        .collect();
    starts.sort_unstable();
    starts.dedup_by(|a, b| a.get(..19) == b.get(..19));
    assert_eq!(
        starts.len(),
        after.len(),
        "no two runs in the same second: {all:?}"
    );
    // The control plane's row of the dead run is lost too.
    let cp = json_of(&root, &["runs", "list"])?;
    let row = cp
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["id"] == lost_id.as_str()).cloned());
    assert_eq!(row.map(|r| r["state"].clone()), Some(json!("lost")));
    Ok(())
}

#[test]
fn a_manual_run_during_a_scheduled_run_is_refused_naming_the_holder_state9() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&config(&fake, port, ""))?;
    // The first turn streams slowly (about 4 s).
    fake.push(FakeReply::Chat {
        text: (0..40).map(|i| format!("w{i} ")).collect(),
        calls: Vec::new(),
        usage: (10, 40),
        chunk_delay: Duration::from_millis(100),
    });
    let mut daemon = common::ready_daemon(&root)?;
    let out = root.run(
        bin(),
        &[
            "cron",
            "add",
            "slow",
            "--agent",
            "main",
            "--every",
            "1h",
            "--message",
            "go",
        ],
    )?;
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(
        text(&out).0.contains("scheduled by the running daemon"),
        "{:?}",
        text(&out)
    );
    // Start a run through the API, then try the CLI and the API again while it runs.
    let token = pair(&root, bin(), port, "ci")?;
    let api =
        std::thread::spawn(move || http(port, "POST", "/api/cron/slow/run", Some(&token), ""));
    wait_until("the run to hold the lock", WAIT, || {
        Ok(json_of(&root, &["cron", "show", "slow"])?["job"]["lock_run"].is_string())
    })?;
    let out = root.run(bin(), &["cron", "run", "slow"])?;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stderr.contains("already running") && stderr.contains(&format!("pid {}", daemon.pid())),
        "{stderr}"
    );
    let (status, first) = api.join().map_err(|_| "api thread")??;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["run"]["status"], "ok", "{first}");
    assert_eq!(first["run"]["trigger"], "manual", "{first}");
    assert_eq!(runs(&root, "slow")?.len(), 1, "the refused run left no row");
    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}

#[test]
fn a_job_whose_turn_needs_approval_fails_with_that_reason_and_never_runs_it_state9() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    root.write_config(&config(&fake, free_port()?, ""))?;
    fake.push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "c1",
            "file_write",
            json!({"path": "cron-wrote.md", "content": "x\n"}),
        )],
    ));
    fake.push(FakeReply::text("done"));
    let out = root.run(
        bin(),
        &[
            "cron",
            "add",
            "writer",
            "--agent",
            "careful",
            "--every",
            "1h",
            "--message",
            "write it",
        ],
    )?;
    assert!(out.status.success(), "{:?}", text(&out));
    // No daemon: `cron run` runs in this process under the same lock.
    let out = root.run(bin(), &["cron", "run", "writer"])?;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("failed") && stdout.contains("needs the operator's approval"),
        "{stdout}{stderr}"
    );
    let run = &runs(&root, "writer")?[0];
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["error"]
            .as_str()
            .is_some_and(|e| e.contains("'file_write' needs the operator's approval")),
        "{run}"
    );
    let workspace = root.path().join("agents").join("careful").join("workspace");
    assert!(
        !workspace.join("cron-wrote.md").exists(),
        "the write never ran"
    );
    Ok(())
}

#[test]
fn a_failed_webhook_delivery_is_recorded_on_the_run_state9() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    root.write_config(&config(&fake, free_port()?, ""))?;
    // Nothing listens on this port: every delivery attempt fails.
    let dead = free_port()?;
    let bad = root.run(
        bin(),
        &[
            "cron",
            "add",
            "hook",
            "--agent",
            "main",
            "--every",
            "1h",
            "--message",
            "hi",
            "--webhook",
            "http://example.com/hook",
        ],
    )?;
    assert!(
        !bad.status.success(),
        "plain http to a remote host is refused at creation"
    );
    assert!(text(&bad).1.contains("webhook"), "{:?}", text(&bad));
    let url = format!("http://127.0.0.1:{dead}/hook");
    let out = root.run(
        bin(),
        &[
            "cron",
            "add",
            "hook",
            "--agent",
            "main",
            "--every",
            "1h",
            "--message",
            "hi",
            "--webhook",
            &url,
        ],
    )?;
    assert!(out.status.success(), "{:?}", text(&out));
    let out = root.run(bin(), &["cron", "run", "hook"])?;
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "the run itself succeeded: {stdout}{stderr}"
    );
    assert!(
        stdout.contains("webhook delivery failed after 3 attempts"),
        "{stdout}"
    );
    let run = &runs(&root, "hook")?[0];
    assert_eq!(
        (run["status"].as_str(), run["delivery"].as_str()),
        (Some("ok"), Some("webhook_failed")),
        "{run}"
    );
    assert!(
        run["delivery_error"]
            .as_str()
            .is_some_and(|e| e.contains(&url)),
        "{run}"
    );
    Ok(())
}

#[test]
fn an_idle_heartbeat_makes_no_provider_call_and_one_when_its_check_fires_state9() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&config(
        &fake,
        port,
        "\n[agents.main.heartbeat]\nevery = \"1s\"\nfiles_changed = true\n",
    ))?;
    let workspace = root.path().join("agents").join("main").join("workspace");
    std::fs::create_dir_all(&workspace)?;
    std::fs::write(workspace.join("todo.md"), "nothing yet\n")?;
    let mut daemon = common::ready_daemon(&root)?;
    // Many idle ticks: no provider call, no run.
    std::thread::sleep(Duration::from_millis(4500));
    assert_eq!(fake.requests().len(), 0, "an idle heartbeat costs nothing");
    assert!(runs(&root, "heartbeat-main")?.is_empty());
    let listed = json_of(&root, &["cron", "list"])?;
    assert_eq!(listed[0]["job"]["source"], "heartbeat", "{listed}");
    // The check fires once: exactly one turn.
    std::fs::write(workspace.join("todo.md"), "ship the release\n")?;
    wait_until("the heartbeat run", WAIT, || {
        Ok(runs(&root, "heartbeat-main")?
            .iter()
            .any(|r| r["status"] == "ok"))
    })?;
    std::thread::sleep(Duration::from_millis(3000));
    assert_eq!(fake.requests().len(), 1, "one call when the check fired");
    let hb = runs(&root, "heartbeat-main")?;
    assert_eq!(hb.len(), 1, "{hb:?}");
    assert_eq!(hb[0]["session"], "heartbeat-main", "{hb:?}");
    let body = serde_json::to_string(&fake.requests()[0].body)?;
    assert!(body.contains("files changed in the workspace"), "{body}");
    // Its spend is shown apart, per agent, in `warren costs`.
    let costs = root.run(bin(), &["costs"])?;
    let costs = String::from_utf8_lossy(&costs.stdout).to_string();
    assert!(costs.contains("heartbeat of main: 1 request(s)"), "{costs}");
    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}

#[test]
fn agent_rename_delete_and_restore_carry_its_jobs_and_runs_life3_life4() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    root.write_config(&config(
        &fake,
        free_port()?,
        "\n[agents.ops]\nprovider = \"fake\"\nmodel = \"gpt-test\"\n\n[cron.jobs.nightly]\nagent = \"ops\"\ncron = \"0 3 * * *\"\ntz = \"Europe/Berlin\"\nmessage = \"nightly\"\n",
    ))?;
    let ok = |args: &[&str]| -> Result<String, Box<dyn std::error::Error>> {
        let out = root.run(bin(), args)?;
        let (stdout, stderr) = text(&out);
        if !out.status.success() {
            return Err(format!("warren {args:?}: {stdout}{stderr}").into());
        }
        Ok(stdout)
    };
    ok(&[
        "cron",
        "add",
        "digest",
        "--agent",
        "ops",
        "--every",
        "1h",
        "--message",
        "digest",
    ])?;
    ok(&["cron", "run", "digest"])?;
    let run_id = runs(&root, "digest")?[0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();

    // Rename: the job, its run and the declared job's agent follow.
    ok(&["agents", "rename", "ops", "ops2"])?;
    let show = json_of(&root, &["cron", "show", "digest"])?;
    assert_eq!(show["job"]["agent"], "ops2", "{show}");
    assert_eq!(show["runs"][0]["agent"], "ops2", "{show}");
    let config = root.read_config()?;
    assert!(
        config.contains("[cron.jobs.nightly]") && config.contains("agent = \"ops2\""),
        "{config}"
    );

    // Delete: archived, then removed (the declared job leaves config.toml).
    ok(&["agents", "delete", "ops2", "--yes"])?;
    let listed = json_of(&root, &["cron", "list"])?;
    assert_eq!(listed.as_array().map(Vec::len), Some(0), "{listed}");
    assert!(!root.read_config()?.contains("[cron.jobs.nightly]"));
    let deleted = root.path().join("data").join("agents").join("_deleted");
    let archive = std::fs::read_dir(&deleted)?
        .flatten()
        .next()
        .ok_or("no archive")?
        .path();
    let archived = std::fs::read_to_string(archive.join("stores").join("cron.json"))?;
    assert!(
        archived.contains("digest") && archived.contains(&run_id),
        "{archived}"
    );

    // Restore: back under the alias, disabled with a note, its run history with it.
    let name = archive
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    ok(&["agents", "restore", name])?;
    let show = json_of(&root, &["cron", "show", "digest"])?;
    assert_eq!(
        (
            show["job"]["agent"].as_str(),
            show["job"]["enabled"].as_bool()
        ),
        (Some("ops2"), Some(false)),
        "{show}"
    );
    assert!(
        show["job"]["paused_reason"]
            .as_str()
            .is_some_and(|r| r.contains("restored")),
        "{show}"
    );
    assert_eq!(show["runs"][0]["id"], run_id.as_str(), "{show}");
    ok(&["cron", "resume", "digest"])?;
    let show = json_of(&root, &["cron", "show", "digest"])?;
    assert_eq!(show["job"]["enabled"], true, "{show}");
    Ok(())
}

#[test]
fn a_reload_rebuilds_the_scheduler_the_running_run_finishes_and_new_config_applies_state19() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&config(
        &fake,
        port,
        "\n[cron.jobs.tick]\nagent = \"main\"\nevery = \"2s\"\nmessage = \"version one\"\n",
    ))?;
    // The first run streams for about 2 s: the reload happens while it runs.
    fake.push(FakeReply::Chat {
        text: (0..20).map(|i| format!("w{i} ")).collect(),
        calls: Vec::new(),
        usage: (10, 20),
        chunk_delay: Duration::from_millis(100),
    });
    let mut daemon = common::ready_daemon(&root)?;
    wait_until("the first run to start", WAIT, || {
        Ok(json_of(&root, &["cron", "show", "tick"])?["job"]["lock_run"].is_string())
    })?;
    let first = json_of(&root, &["cron", "show", "tick"])?["job"]["lock_run"].clone();
    let out = root.run(
        bin(),
        &["config", "set", "cron.jobs.tick.message", "version two"],
    )?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    // `config set` asks the daemon to reload over POST /admin/reload.
    assert!(
        stderr.contains("the running daemon reloaded"),
        "{stdout}{stderr}"
    );
    daemon.saw_or_wait_for("config reloaded", WAIT)?;
    wait_until("a run with the new message", WAIT, || {
        Ok(fake
            .requests()
            .iter()
            .any(|r| r.body.to_string().contains("version two")))
    })?;
    let all = runs(&root, "tick")?;
    let old = all
        .iter()
        .find(|r| r["id"] == first)
        .ok_or("first run gone")?;
    assert_eq!(old["status"], "ok", "the running run finished: {all:?}");
    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}

#[test]
fn failures_back_off_and_pause_the_job_with_the_reason_in_list_and_health_state9() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    let text_config = config(
        &fake,
        port,
        "\n[cron]\nmax_failures = 3\nbackoff_secs = 1\nbackoff_max_secs = 2\n",
    )
    .replace(
        "retry_backoff_ms = 1",
        "retry_backoff_ms = 1\nmax_retries = 0",
    );
    root.write_config(&text_config)?;
    for _ in 0..10 {
        fake.push(FakeReply::Status(500, "upstream down".into()));
    }
    let mut daemon = common::ready_daemon(&root)?;
    let out = root.run(
        bin(),
        &[
            "cron",
            "add",
            "flaky",
            "--agent",
            "main",
            "--every",
            "1s",
            "--message",
            "go",
        ],
    )?;
    assert!(out.status.success(), "{:?}", text(&out));
    wait_until("the job to pause", WAIT, || {
        Ok(json_of(&root, &["cron", "show", "flaky"])?["job"]["enabled"] == false)
    })?;
    let all = runs(&root, "flaky")?;
    assert_eq!(all.len(), 3, "paused after 3 failures: {all:?}");
    assert!(all.iter().all(|r| r["status"] == "failed"), "{all:?}");
    // Backoff: the failed runs are at least 1 s apart (the schedule alone says 1 s too, so
    // check the third, whose backoff is 2 s).
    let ms = |r: &Value| {
        r["started_at"]
            .as_str()
            .and_then(|s| s.get(17..23))
            .and_then(|s| s.parse::<f64>().ok())
    };
    let (second, third) = (ms(&all[1]), ms(&all[0]));
    if let (Some(a), Some(b)) = (second, third) {
        let gap = (b - a + 60.0) % 60.0;
        assert!(gap >= 1.9, "backoff doubled to 2 s: {gap} s: {all:?}");
    }
    let out = root.run(bin(), &["cron", "list"])?;
    let (stdout, _) = text(&out);
    assert!(
        stdout.contains("paused: paused after 3 consecutive failures"),
        "{stdout}"
    );
    let token = pair(&root, bin(), port, "ci")?;
    let (_, health) = http(port, "GET", "/api/health", Some(&token), "")?;
    let reason = health["components"]["cron"]["paused"][0]["reason"]
        .as_str()
        .unwrap_or("");
    assert!(reason.contains("consecutive failures"), "{health}");
    // No run after the pause.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(runs(&root, "flaky")?.len(), 3);
    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}

#[test]
fn runs_cancel_stops_a_running_run_of_the_daemon_state11() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&config(
        &fake,
        port,
        "\n[cron.jobs.long]\nagent = \"main\"\nevery = \"1s\"\nmessage = \"long\"\n",
    ))?;
    fake.push(FakeReply::Chat {
        text: (0..300).map(|i| format!("w{i} ")).collect(),
        calls: Vec::new(),
        usage: (10, 300),
        chunk_delay: Duration::from_millis(100),
    });
    let mut daemon = common::ready_daemon(&root)?;
    let mut id = String::new();
    wait_until("a running run in the control plane", WAIT, || {
        let listed = json_of(&root, &["runs", "list"])?;
        if let Some(r) = listed
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["state"] == "running"))
        {
            id = r["id"].as_str().unwrap_or_default().to_string();
        }
        Ok(!id.is_empty())
    })?;
    let out = root.run(bin(), &["runs", "cancel", &id])?;
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(
        text(&out).0.contains("cancel requested"),
        "{:?}",
        text(&out)
    );
    wait_until("the run to end cancelled", WAIT, || {
        Ok(runs(&root, "long")?
            .iter()
            .any(|r| r["id"] == id.as_str() && r["status"] == "cancelled"))
    })?;
    let listed = json_of(&root, &["runs", "list"])?;
    let row = listed
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["id"] == id.as_str()).cloned());
    assert_eq!(row.map(|r| r["state"].clone()), Some(json!("cancelled")));
    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}

#[test]
fn declared_jobs_are_validated_naming_the_key_state9() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    let cases = [
        (
            "agent = \"ghost\"\nevery = \"1m\"\nmessage = \"m\"",
            "cron.jobs.bad.agent",
            "unknown agent 'ghost'",
        ),
        (
            "agent = \"main\"\ncron = \"61 * * * *\"\nmessage = \"m\"",
            "cron.jobs.bad.cron",
            "bad cron expression",
        ),
        (
            "agent = \"main\"\ncron = \"0 3 * * *\"\ntz = \"Mars/Olympus\"\nmessage = \"m\"",
            "cron.jobs.bad.tz",
            "unknown time zone",
        ),
        (
            "agent = \"main\"\nevery = \"1m\"\nmessage = \"m\"\ncommand = \"true\"",
            "cron.jobs.bad",
            "exactly one of message",
        ),
        (
            "agent = \"main\"\nevery = \"1m\"",
            "cron.jobs.bad",
            "exactly one of message",
        ),
        (
            "agent = \"main\"\nevery = \"1m\"\nmessage = \"m\"\ndelivery = { webhook = \"http://example.com/x\" }",
            "cron.jobs.bad.delivery.webhook",
            "must use https",
        ),
    ];
    for (body, key, message) in cases {
        root.write_config(&config(
            &fake,
            port,
            &format!("\n[cron.jobs.bad]\n{body}\n"),
        ))?;
        let out = root.run(bin(), &["config", "validate"])?;
        let (stdout, stderr) = text(&out);
        assert!(!out.status.success(), "{body}: {stdout}");
        let all = format!("{stdout}{stderr}");
        assert!(all.contains(key) && all.contains(message), "{body}: {all}");
    }
    // The same rules at `warren cron add`, naming the flag's field.
    root.write_config(&config(&fake, port, ""))?;
    let out = root.run(
        bin(),
        &[
            "cron",
            "add",
            "x",
            "--agent",
            "main",
            "--cron",
            "0 3 * * *",
            "--tz",
            "Nowhere/City",
            "--message",
            "m",
        ],
    )?;
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains("unknown time zone 'Nowhere/City'"),
        "{:?}",
        text(&out)
    );
    assert!(
        !root
            .path()
            .join("data")
            .join("cron")
            .join("jobs.db")
            .exists()
            || runs(&root, "x").is_err(),
        "a refused job is not stored"
    );
    Ok(())
}

#[test]
fn missed_fire_times_follow_catch_up_once_or_skip_state9() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    root.write_config(&config(&fake, free_port()?, ""))?;
    let soon = (time::OffsetDateTime::now_utc() + Duration::from_secs(1))
        .format(&time::format_description::well_known::Rfc3339)?;
    for (name, policy) in [("late-once", "once"), ("late-skip", "skip")] {
        let out = root.run(
            bin(),
            &[
                "cron",
                "add",
                name,
                "--agent",
                "main",
                "--at",
                &soon,
                "--message",
                "m",
                "--catch-up",
                policy,
            ],
        )?;
        assert!(out.status.success(), "{:?}", text(&out));
    }
    // The fire time passes while no daemon runs.
    std::thread::sleep(Duration::from_millis(2500));
    let mut daemon = common::ready_daemon(&root)?;
    wait_until("the catch-up run", WAIT, || {
        Ok(runs(&root, "late-once")?
            .iter()
            .any(|r| r["status"] == "ok"))
    })?;
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(runs(&root, "late-once")?.len(), 1, "caught up once");
    assert!(runs(&root, "late-skip")?.is_empty(), "skipped");
    let skipped = json_of(&root, &["cron", "show", "late-skip"])?;
    assert_eq!(skipped["job"]["enabled"], false, "{skipped}");
    assert!(
        skipped["job"]["paused_reason"]
            .as_str()
            .is_some_and(|r| r.contains("passed while no daemon ran")),
        "{skipped}"
    );
    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}

#[test]
fn a_heartbeat_on_a_session_fires_on_new_messages_and_the_delete_plan_names_it_state9() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&config(
        &fake,
        port,
        "\n[agents.ops]\nprovider = \"fake\"\nmodel = \"gpt-test\"\n\n[agents.ops.heartbeat]\nevery = \"1s\"\nsession = \"inbox\"\n",
    ))?;
    let out = root.run(
        bin(),
        &["sessions", "append", "inbox", "--agent", "ops", "first"],
    )?;
    assert!(out.status.success(), "{:?}", text(&out));
    let mut daemon = common::ready_daemon(&root)?;
    std::thread::sleep(Duration::from_millis(3000));
    assert_eq!(fake.requests().len(), 0, "no new message: no call");
    let out = root.run(
        bin(),
        &["sessions", "append", "inbox", "--agent", "ops", "new mail"],
    )?;
    assert!(out.status.success(), "{:?}", text(&out));
    wait_until("the heartbeat run", WAIT, || {
        Ok(runs(&root, "heartbeat-ops")?
            .iter()
            .any(|r| r["status"] == "ok"))
    })?;
    let body = serde_json::to_string(&fake.requests()[0].body)?;
    assert!(body.contains("new message(s) in session inbox"), "{body}");
    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    // Deleting the agent names its heartbeat in the plan and removes it with the agent.
    let out = root.run(bin(), &["agents", "delete", "ops", "--dry-run"])?;
    let (stdout, stderr) = text(&out);
    assert!(stdout.contains("agents.ops.heartbeat"), "{stdout}{stderr}");
    Ok(())
}

#[test]
fn a_command_job_runs_as_the_agents_shell_tool_and_one_needing_approval_never_runs_state9() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    root.write_config(&config(&fake, free_port()?, ""))?;
    let ok = root.run(
        bin(),
        &[
            "cron",
            "add",
            "echo",
            "--agent",
            "main",
            "--every",
            "1h",
            "--command",
            "echo cron-ok",
        ],
    )?;
    assert!(ok.status.success(), "{:?}", text(&ok));
    let out = root.run(bin(), &["cron", "run", "echo"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("cron-ok"), "{stdout}");
    assert_eq!(fake.requests().len(), 0, "a command job calls no model");
    let workspace = root.path().join("agents").join("careful").join("workspace");
    std::fs::create_dir_all(&workspace)?;
    std::fs::write(workspace.join("keep.txt"), "x")?;
    let out = root.run(
        bin(),
        &[
            "cron",
            "add",
            "wipe",
            "--agent",
            "careful",
            "--every",
            "1h",
            "--command",
            "sed -i s/x/y/ keep.txt",
        ],
    )?;
    assert!(out.status.success(), "{:?}", text(&out));
    let out = root.run(bin(), &["cron", "run", "wipe"])?;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("approval"), "{stdout}{stderr}");
    assert_eq!(
        std::fs::read_to_string(workspace.join("keep.txt"))?,
        "x",
        "the command never ran"
    );
    Ok(())
}

#[test]
fn reads_create_no_store_the_api_is_documented_and_a_scheduler_that_is_off_never_says_scheduled_state9()
-> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&config(&fake, port, "\n[cron]\nenabled = false\n"))?;
    let data = root.path().join("data");
    let (jobs_db, plane_db) = (
        data.join("cron").join("jobs.db"),
        data.join("control_plane.db"),
    );
    let untouched = || !jobs_db.exists() && !plane_db.exists();
    // The CLI's reads, and changes to a job that does not exist, create neither store.
    assert_eq!(json_of(&root, &["cron", "list"])?, json!([]));
    assert_eq!(json_of(&root, &["runs", "list"])?, json!([]));
    for verb in ["show", "runs", "run", "pause", "resume", "remove"] {
        let out = root.run(bin(), &["cron", verb, "ghost"])?;
        let (stdout, stderr) = text(&out);
        assert!(!out.status.success(), "cron {verb}: {stdout}");
        assert!(
            stderr.contains("no cron job 'ghost'"),
            "cron {verb}: {stderr}"
        );
        assert!(
            !jobs_db.exists(),
            "`warren cron {verb} ghost` created {}",
            jobs_db.display()
        );
    }
    assert!(untouched(), "a read created a store");

    // A daemon with the scheduler off: the API's reads create nothing either (the control
    // plane is the daemon's own: its SOP runner opens it at start).
    let mut daemon = common::ready_daemon(&root)?;
    let plane_at_start = plane_db.exists();
    let token = pair(&root, bin(), port, "ci")?;
    let (status, listed) = http(port, "GET", "/api/cron", Some(&token), "")?;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(
        (&listed["scheduler"], &listed["jobs"]),
        (&json!("off"), &json!([])),
        "{listed}"
    );
    let (status, body) = http(port, "GET", "/api/runs", Some(&token), "")?;
    assert_eq!(status, 200, "{body}");
    let (status, body) = http(port, "GET", "/api/cron/ghost", Some(&token), "")?;
    assert_eq!(status, 404, "{body}");
    assert!(
        !jobs_db.exists() && plane_db.exists() == plane_at_start,
        "an API read created a store"
    );
    // The routes scripts rely on are in the OpenAPI document.
    let (status, doc) = http(port, "GET", "/api/openapi.json", Some(&token), "")?;
    assert_eq!(status, 200, "{doc}");
    for (path, method) in [
        ("/api/cron", "get"),
        ("/api/cron", "post"),
        ("/api/cron/{name}", "get"),
        ("/api/cron/{name}", "delete"),
        ("/api/cron/{name}/run", "post"),
        ("/api/cron/{name}/pause", "post"),
        ("/api/cron/{name}/resume", "post"),
        ("/api/cron/{name}/runs", "get"),
        ("/api/runs", "get"),
        ("/api/runs/{id}/cancel", "post"),
    ] {
        assert!(
            doc["paths"][path][method].is_object(),
            "{method} {path} missing from the OpenAPI document"
        );
    }

    // Adding a job is honest: stored, and neither the CLI nor the API says "scheduled".
    let out = root.run(
        bin(),
        &[
            "cron",
            "add",
            "quiet",
            "--agent",
            "main",
            "--every",
            "1s",
            "--message",
            "hi",
        ],
    )?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!(
            "stored; the running daemon (pid {}) has its scheduler off",
            daemon.pid()
        )) && !stdout.contains("scheduled"),
        "{stdout}"
    );
    let out = root.run(bin(), &["cron", "resume", "quiet"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("scheduler off") && !stdout.contains("scheduled"),
        "{stdout}"
    );
    let spec = json!({"name": "quiet2", "agent": "main", "every": "1s", "message": "hi"});
    let (status, body) = http(port, "POST", "/api/cron", Some(&token), &spec.to_string())?;
    assert_eq!(status, 201, "{body}");
    let said = body["status"].as_str().unwrap_or_default();
    assert!(
        said.contains("the scheduler is off") && !said.contains("scheduled"),
        "{body}"
    );
    // The API checks the webhook when the job is created.
    let spec = json!({"name": "hook", "agent": "main", "every": "1h", "message": "hi",
                      "webhook": "http://example.com/hook"});
    let (status, body) = http(port, "POST", "/api/cron", Some(&token), &spec.to_string())?;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("webhook"), "{body}");
    std::thread::sleep(Duration::from_millis(2500));
    assert!(runs(&root, "quiet")?.is_empty() && runs(&root, "quiet2")?.is_empty());
    assert_eq!(fake.requests().len(), 0, "nothing ran");
    let (_, listed) = http(port, "GET", "/api/cron", Some(&token), "")?;
    assert_eq!(listed["jobs"].as_array().map(Vec::len), Some(2), "{listed}");
    // The operator's `cron run` still runs the job, in the daemon (issue 34 §3: through its
    // control route), with the scheduler off; the API's manual run is refused then.
    let (status, body) = http(port, "POST", "/api/cron/quiet2/run", Some(&token), "")?;
    assert_eq!(status, 409, "{body}");
    let out = root.run(bin(), &["cron", "run", "quiet", "--json"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    let run: Value = serde_json::from_str(&stdout)?;
    assert_eq!(run["status"], "ok", "{run}");
    assert_eq!(
        fake.requests().len(),
        1,
        "the manual run called the model once"
    );
    let plane = json_of(&root, &["runs", "list"])?;
    assert!(
        plane.as_array().is_some_and(|rows| rows
            .iter()
            .any(|r| r["label"] == "cron:quiet" && r["owner_pid"] == daemon.pid())),
        "the daemon ran it: {plane}"
    );
    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}

#[test]
fn per_run_and_daily_budgets_fail_runs_with_the_reason_and_a_spent_day_calls_no_model_state9() -> R
{
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    root.write_config(&config(&fake, free_port()?, ""))?;
    // Each turn: 100 × $1000/M + 50 × $2000/M = $0.20.
    for _ in 0..5 {
        fake.push(FakeReply::text("spent").with_usage(100, 50));
    }
    let add = |name: &str, budget: &[&str]| -> R {
        let mut args = vec![
            "cron",
            "add",
            name,
            "--agent",
            "main",
            "--every",
            "1h",
            "--message",
            "m",
        ];
        args.extend_from_slice(budget);
        let out = root.run(bin(), &args)?;
        assert!(out.status.success(), "{:?}", text(&out));
        Ok(())
    };
    add("pricey", &["--budget-usd", "0.1"])?;
    let out = root.run(bin(), &["cron", "run", "pricey"])?;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("over the job's per-run budget of $0.1000"),
        "{stdout}{stderr}"
    );
    let run = &runs(&root, "pricey")?[0];
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        (run["cost_usd"].as_f64().unwrap_or(0.0) - 0.2).abs() < 1e-9,
        "the spend is still recorded: {run}"
    );

    add("daily", &["--daily-budget-usd", "0.3"])?;
    for _ in 0..2 {
        let out = root.run(bin(), &["cron", "run", "daily"])?;
        assert!(
            out.status.success(),
            "under the daily budget: {:?}",
            text(&out)
        );
    }
    let out = root.run(bin(), &["cron", "run", "daily"])?;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("daily budget reached: $0.4000 of $0.3000 spent today"),
        "{stdout}{stderr}"
    );
    assert_eq!(
        fake.requests().len(),
        3,
        "the run refused by the daily budget called no model"
    );
    let all = runs(&root, "daily")?;
    assert_eq!(
        all.iter().map(|r| r["status"].clone()).collect::<Vec<_>>(),
        vec![json!("failed"), json!("ok"), json!("ok")],
        "{all:?}"
    );
    Ok(())
}
