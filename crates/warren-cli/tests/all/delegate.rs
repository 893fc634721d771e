//! Background delegation against a live `warren daemon` and the fake OpenAI server (issue 18
//! §3, PERM-7, STATE-11): a `delegate` call with `background = true` returns a task id at once,
//! the child's result record lands in `<workspace>/delegate_results/<id>.json` and the control
//! plane lists the run; the record survives a daemon restart as `ok`; a child whose daemon is
//! SIGKILLed mid-run reads `lost` after the restart; `warren runs cancel` cancels a running
//! child; a child cannot widen its parent's grants, tools, budget or iterations (each axis
//! named, nothing started); a `delegate_results` link the agent planted is not followed.

use crate::common::{bin, tool_result};
use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use warren_testkit::fake_llm::{FakeCall, FakeOpenAi, FakeReply};
use warren_testkit::{DaemonChild, TempRoot, free_port, http, pair, text};

type R = Result<(), Box<dyn std::error::Error>>;
type Res<T> = Result<T, Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(30);
/// The child's task text: the fake answers the child's request by it (the parent's requests
/// end with other messages), so the concurrent parent and child get their own replies.
const CHILD_TASK: &str = "CHILD-TASK: count the files";

fn config(fake: &FakeOpenAi, port: u16) -> String {
    format!(
        r#"
[agents.main]
provider = "fake"
model = "gpt-test"
risk_profile = "lead"
runtime_profile = "rt"

[risk_profiles.lead]
autonomy = "full"
allowed_tools = ["file_read", "file_write", "delegate"]
max_cost_per_day_usd = 5.0

[runtime_profiles.rt]
delegation_depth = 1
max_tool_iterations = 4

{provider}
max_retries = 0

[gateway]
port = {port}
"#,
        provider = fake.provider_toml("fake", "sk-delegate-secret")
    )
}

fn workspace(root: &TempRoot) -> PathBuf {
    root.path().join("agents").join("main").join("workspace")
}

fn results(root: &TempRoot) -> PathBuf {
    workspace(root).join("delegate_results")
}

fn runs_list(root: &TempRoot) -> Res<Vec<Value>> {
    let out = root.run(bin(), &["--json", "runs", "list"])?;
    let (stdout, stderr) = text(&out);
    if !out.status.success() {
        return Err(format!("warren runs list failed: {stdout}{stderr}").into());
    }
    Ok(serde_json::from_str::<Value>(&stdout)?
        .as_array()
        .cloned()
        .unwrap_or_default())
}

fn delegate_rows(root: &TempRoot) -> Res<Vec<Value>> {
    Ok(runs_list(root)?
        .into_iter()
        .filter(|r| r["kind"] == "delegate")
        .collect())
}

fn record(root: &TempRoot, id: &str) -> Res<Value> {
    let text = std::fs::read_to_string(results(root).join(format!("{id}.json")))?;
    Ok(serde_json::from_str(&text)?)
}

fn wait_until(what: &str, mut check: impl FnMut() -> Res<bool>) -> R {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if check()? {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("timed out waiting for {what}").into())
}

fn chat(port: u16, token: &str, message: &str) -> Res<Value> {
    let body = json!({"message": message, "session": "s"}).to_string();
    let (status, reply) = http(port, "POST", "/api/agents/main/chat", Some(token), &body)?;
    if status != 200 {
        return Err(format!("chat: {status} {reply}").into());
    }
    Ok(reply)
}

/// The JSON a tool answered (the receipt line after it is left off).
fn tool_json(fake: &FakeOpenAi, call_id: &str) -> Res<Value> {
    let content = tool_result(fake, call_id)?;
    let first = serde_json::Deserializer::from_str(&content)
        .into_iter::<Value>()
        .next()
        .ok_or_else(|| format!("no JSON in {content}"))??;
    Ok(first)
}

fn delegate_call(id: &str) -> FakeReply {
    FakeReply::calls(
        "",
        vec![FakeCall::new(
            id,
            "delegate",
            json!({"task": CHILD_TASK, "background": true, "tools": ["file_read"]}),
        )],
    )
}

/// Starts a daemon on `root` and pairs a client.
fn start(root: &TempRoot, port: u16) -> Res<(DaemonChild, String)> {
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    let token = pair(root, bin(), port, "ci")?;
    Ok((daemon, token))
}

/// Asks `delegate_status` about `id` in a new turn and returns what the tool answered.
fn status_through_a_turn(
    fake: &FakeOpenAi,
    port: u16,
    token: &str,
    id: &str,
    n: u32,
) -> Res<Value> {
    let call = format!("st{n}");
    fake.push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            &call,
            "delegate_status",
            json!({"task_id": id}),
        )],
    ));
    fake.push(FakeReply::text("checked"));
    chat(port, token, "how is it going?")?;
    tool_json(fake, &call)
}

#[test]
fn a_background_delegate_writes_its_result_is_listed_and_survives_a_restart_as_ok() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&config(&fake, port))?;
    let (mut daemon, token) = start(&root, port)?;

    fake.push(delegate_call("d1"));
    fake.push_when(CHILD_TASK, FakeReply::text("there are 3 files"));
    fake.push(FakeReply::text("delegated"));
    let reply = chat(port, &token, "delegate the count")?;
    assert_eq!(reply["reply"], "delegated", "{reply}");
    // The call returned a task id at once.
    let started: Value = tool_json(&fake, "d1")?;
    assert_eq!(started["status"], "running", "{started}");
    let id = started["task_id"].as_str().unwrap_or_default().to_string();
    assert!(id.starts_with("dlg-"), "{started}");

    wait_until("the child's result", || {
        Ok(record(&root, &id).is_ok_and(|r| r["status"] == "ok"))
    })?;
    let rec = record(&root, &id)?;
    assert_eq!(rec["reply"], "there are 3 files", "{rec}");
    assert_eq!(rec["task"], CHILD_TASK, "{rec}");
    assert_eq!(rec["agent"], "main", "{rec}");
    // The control plane lists it, owned by the daemon, ended ok.
    wait_until("the run to end ok in the control plane", || {
        Ok(delegate_rows(&root)?
            .iter()
            .any(|r| r["id"] == id.as_str() && r["state"] == "ok"))
    })?;
    let rows = delegate_rows(&root)?;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["owner_pid"], daemon.pid(), "{rows:?}");
    assert_eq!(rows[0]["agent"], "main", "{rows:?}");
    let listed = text(&root.run(bin(), &["runs", "list"])?).0;
    assert!(
        listed.contains(&id) && listed.contains("delegate"),
        "{listed}"
    );

    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    let (mut daemon, token) = start(&root, port)?;
    let status = status_through_a_turn(&fake, port, &token, &id, 1)?;
    assert_eq!(status["status"], "ok", "{status}");
    fake.push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "r1",
            "delegate_result",
            json!({"task_id": id}),
        )],
    ));
    fake.push(FakeReply::text("read"));
    chat(port, &token, "the result?")?;
    let result: Value = tool_json(&fake, "r1")?;
    assert_eq!(
        (result["status"].clone(), result["reply"].clone()),
        (json!("ok"), json!("there are 3 files")),
        "{result}"
    );
    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}

/// A child whose reply streams slowly (it is still running when the daemon dies).
fn slow_child() -> FakeReply {
    FakeReply::Chat {
        text: (0..300).map(|i| format!("w{i} ")).collect(),
        calls: Vec::new(),
        usage: (10, 300),
        chunk_delay: Duration::from_millis(100),
    }
}

/// Starts a slow background child and waits until it runs; returns its task id.
fn start_slow_child(root: &TempRoot, fake: &FakeOpenAi, port: u16, token: &str) -> Res<String> {
    fake.push(delegate_call("d1"));
    fake.push_when(CHILD_TASK, slow_child());
    fake.push(FakeReply::text("delegated"));
    chat(port, token, "delegate the count")?;
    let started: Value = tool_json(fake, "d1")?;
    let id = started["task_id"].as_str().unwrap_or_default().to_string();
    wait_until("the child's request", || {
        Ok(fake.requests().iter().any(|r| {
            r.body["messages"].to_string().contains(CHILD_TASK)
                && r.body["messages"].as_array().map(Vec::len) == Some(2)
        }))
    })?;
    assert_eq!(record(root, &id)?["status"], "running");
    Ok(id)
}

#[test]
fn a_delegate_whose_daemon_is_sigkilled_mid_run_reads_lost_after_the_restart() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&config(&fake, port))?;
    let (daemon, token) = start(&root, port)?;
    let id = start_slow_child(&root, &fake, port, &token)?;
    let rows = delegate_rows(&root)?;
    assert_eq!(rows[0]["state"], "running", "{rows:?}");

    daemon.signal("KILL")?;
    let mut daemon = daemon;
    daemon.wait(WAIT)?;
    // The file still says running: nothing could write the end.
    assert_eq!(record(&root, &id)?["status"], "running");

    let (mut daemon, token) = start(&root, port)?;
    let status = status_through_a_turn(&fake, port, &token, &id, 1)?;
    assert_eq!(status["status"], "lost", "{status}");
    assert!(
        status["error"]
            .as_str()
            .is_some_and(|e| e.contains("exited")),
        "{status}"
    );
    let rows = delegate_rows(&root)?;
    assert_eq!(rows[0]["state"], "lost", "{rows:?}");
    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}

#[test]
fn runs_cancel_cancels_a_running_background_delegate() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&config(&fake, port))?;
    let (mut daemon, _token) = start(&root, port)?;
    let token = pair(&root, bin(), port, "ci2")?;
    let id = start_slow_child(&root, &fake, port, &token)?;
    let out = root.run(bin(), &["runs", "cancel", &id])?;
    assert!(out.status.success(), "{:?}", text(&out));
    wait_until("the child to end cancelled", || {
        Ok(record(&root, &id)?["status"] == "cancelled")
    })?;
    wait_until("the row to end cancelled", || {
        Ok(delegate_rows(&root)?
            .iter()
            .any(|r| r["id"] == id.as_str() && r["state"] == "cancelled"))
    })?;
    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}

#[test]
fn a_child_cannot_widen_grants_tools_budget_or_iterations_perm7() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&config(&fake, port))?;
    let (mut daemon, token) = start(&root, port)?;
    // Each axis over the parent's policy: a grant outside its roots, a tool its profile lacks,
    // a cost cap over its 5 USD, more rounds than its 4.
    let cases = [
        (
            "grants",
            json!({"read_write": ["/etc"]}),
            "read-write root /etc",
        ),
        (
            "tools",
            json!({"tools": ["file_read", "shell"]}),
            "tool 'shell'",
        ),
        (
            "budget",
            json!({"max_cost_usd": 50.0}),
            "max_cost_per_day_usd 50 exceeds the parent's 5",
        ),
        (
            "iterations",
            json!({"max_iterations": 9}),
            "max_tool_iterations 9 exceeds the parent's 4",
        ),
    ];
    let calls = cases
        .iter()
        .map(|(axis, extra, _)| {
            let mut args = json!({"task": CHILD_TASK, "background": true});
            if let (Some(a), Some(e)) = (args.as_object_mut(), extra.as_object()) {
                a.extend(e.clone());
            }
            FakeCall::new(axis, "delegate", args)
        })
        .collect();
    fake.push(FakeReply::calls("", calls));
    fake.push(FakeReply::text("refused"));
    chat(port, &token, "delegate widely")?;
    for (axis, _, named) in cases {
        let content = tool_result(&fake, axis)?;
        assert!(
            content.contains("subagent refused") && content.contains(named),
            "{axis}: {content}"
        );
    }
    assert!(
        !fake
            .requests()
            .iter()
            .any(|r| r.body["messages"].as_array().map(Vec::len) == Some(2)
                && r.body["messages"].to_string().contains(CHILD_TASK)),
        "no child turn started"
    );
    assert!(delegate_rows(&root)?.is_empty(), "nothing registered");
    let files = std::fs::read_dir(results(&root))
        .map(Iterator::count)
        .unwrap_or(0);
    assert_eq!(files, 0, "no result record");
    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}

#[test]
fn a_delegate_results_link_planted_by_the_agent_is_not_followed() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&config(&fake, port))?;
    let (mut daemon, token) = start(&root, port)?;
    // The agent (which can write its workspace) replaces the results directory by a link to a
    // directory outside it.
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&outside)?;
    std::fs::create_dir_all(workspace(&root))?;
    symlink(&outside, results(&root))?;

    // Guard off: a plain write of a record, as a writer without the confined handle does,
    // follows the link and lands outside the workspace.
    std::fs::write(results(&root).join("dlg-probe.json"), b"{}")?;
    assert!(
        outside.join("dlg-probe.json").exists(),
        "the attack works unguarded"
    );
    std::fs::remove_file(outside.join("dlg-probe.json"))?;

    // Through Warren: refused, naming the link; nothing lands outside, nothing starts.
    fake.push(delegate_call("d1"));
    fake.push(FakeReply::text("could not"));
    chat(port, &token, "delegate the count")?;
    let content = tool_result(&fake, "d1")?;
    assert!(
        content.starts_with("Error:") && content.contains("symbolic link"),
        "{content}"
    );
    assert_eq!(
        std::fs::read_dir(&outside)?.count(),
        0,
        "nothing written outside"
    );
    assert!(delegate_rows(&root)?.is_empty(), "nothing registered");

    // Reading through the link is refused too, and a path as a task id never forms a path.
    std::fs::write(outside.join("dlg-planted.json"), br#"{"status":"ok"}"#)?;
    let call = |id: &str, task: &str| {
        FakeReply::calls(
            "",
            vec![FakeCall::new(
                id,
                "delegate_result",
                json!({"task_id": task}),
            )],
        )
    };
    fake.push(call("p1", "dlg-planted"));
    fake.push(call("p2", "../../../outside/dlg-planted"));
    fake.push(FakeReply::text("done"));
    chat(port, &token, "read them")?;
    let planted = tool_result(&fake, "p1")?;
    assert!(planted.contains("symbolic link"), "{planted}");
    let traversal = tool_result(&fake, "p2")?;
    assert!(traversal.contains("invalid task_id"), "{traversal}");
    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}

/// A `sleep 30` child, killed and waited for when dropped (also when the test fails).
struct Sleeper(std::process::Child);

impl Sleeper {
    fn spawn() -> Res<Self> {
        Ok(Self(std::process::Command::new("sleep").arg("30").spawn()?))
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_delegate_whose_owner_pid_was_reused_reads_lost_and_runs_cancel_reaps_it_issue17() -> R {
    use warren_runtime::delegate;
    use warren_store::control_plane::{ControlPlane, Owner};

    let root = TempRoot::new()?;
    root.write_config("[agents.main]\n")?;
    let db = root.path().join("data").join("control_plane.db");
    let ws = workspace(&root);
    let id = "dlg-reused-pid";
    // A `warren agent` that started a background delegate (its record and its row) and was
    // then SIGKILLed: neither ever ends.
    let crashed = Sleeper::spawn()?;
    let owner = Owner {
        pid: crashed.pid(),
        ..Owner::current()
    };
    let dir = delegate::results_dir(&ws, true)?.ok_or("no results dir")?;
    let running = delegate::ResultRecord::running(id, &"main".parse()?, "count", &owner);
    delegate::write_record(&dir, &running)?;
    ControlPlane::open(&db)?.register(id, "delegate", "main", "delegate: count", &owner)?;
    drop(crashed);
    // An unrelated process, started later, now holds the dead owner's PID: the row and the
    // record are pointed at it, as the kernel's reuse would leave them.
    std::thread::sleep(Duration::from_millis(50));
    let reused = Sleeper::spawn()?;
    rusqlite::Connection::open(&db)?.execute(
        "UPDATE runs SET owner_pid = ?1 WHERE id = ?2",
        rusqlite::params![reused.pid(), id],
    )?;
    let mut file = record(&root, id)?;
    file["owner_pid"] = json!(reused.pid());
    std::fs::write(
        results(&root).join(format!("{id}.json")),
        serde_json::to_vec(&file)?,
    )?;

    // delegate_status: the dead owner's run is lost, with the control plane and without it.
    let opened = ControlPlane::open(&db)?;
    for plane in [Some(&opened), None] {
        let status = delegate::read_status(&ws, plane, id)?;
        assert_eq!(
            status.status,
            "lost",
            "control plane {}: {status:?}",
            plane.is_some()
        );
    }
    // `warren runs cancel` reaps it instead of asking a process that is not its owner.
    let out = root.run(bin(), &["runs", "cancel", id])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("marked lost"), "{stdout}{stderr}");
    let rows = delegate_rows(&root)?;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["state"], "lost", "{rows:?}");
    Ok(())
}
