//! SOPs against a live `warren daemon` and the fake OpenAI server (STATE-10): a three-step
//! SOP with an approval gate runs end to end (outputs flow forward, the operator approves or
//! denies through the CLI); a daemon killed at the named failpoint between a step's receipt and
//! the step being marked done restarts, does not repeat the step and completes the run; runs
//! kept in memory (the durable store cannot be created) say so in the log, `/api/health` and
//! every run started; the MQTT trigger (the real Mosquitto broker at 127.0.0.1:1883) and the
//! webhook trigger start runs; `warren sop validate` names the file and key at fault.

use crate::common::{self, bin, json_of, wait_until};
use std::time::Duration;

use serde_json::Value;
use warren_testkit::fake_llm::{FakeOpenAi, FakeReply};
use warren_testkit::{DaemonChild, TempRoot, free_port, http, pair, text};

type R = Result<(), Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(30);

fn config(fake: &FakeOpenAi, port: u16, extra: &str) -> String {
    common::fake_config(fake, "sk-sop-secret", port, "", extra)
}

/// The three-step SOP: a turn, an approval gate, a turn using the first step's output.
const TRIAGE: &str = r#"
description = "Triage a ticket"
agent = "main"

[[steps]]
id = "fetch"
kind = "turn"
prompt = "Summarise ticket {{input.ticket}}"

[[steps]]
id = "gate"
kind = "approval"
message = "Act on: {{steps.fetch.output}}"

[[steps]]
id = "act"
kind = "turn"
prompt = "Act on this summary: {{steps.fetch.output}}"
"#;

fn write_sop(root: &TempRoot, name: &str, text: &str) -> R {
    let dir = root.path().join("shared").join("sops");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join(format!("{name}.toml")), text)?;
    Ok(())
}

fn runs(root: &TempRoot, sop: &str) -> Result<Vec<Value>, Box<dyn std::error::Error>> {
    Ok(json_of(root, &["sop", "runs", sop, "--limit", "100"])?
        .as_array()
        .cloned()
        .unwrap_or_default())
}

fn run_status(root: &TempRoot, id: &str) -> Result<Value, Box<dyn std::error::Error>> {
    json_of(root, &["sop", "status", id])
}

fn requests_containing(fake: &FakeOpenAi, needle: &str) -> usize {
    fake.requests()
        .iter()
        .filter(|r| {
            r.body["messages"]
                .as_array()
                .and_then(|m| m.last())
                .is_some_and(|m| m["content"].to_string().contains(needle))
        })
        .count()
}

fn start_run(
    root: &TempRoot,
    sop: &str,
    input: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    let started = json_of(root, &["sop", "run", sop, "--input", input])?;
    Ok(started["run"]["id"]
        .as_str()
        .ok_or_else(|| format!("no run id in {started}"))?
        .to_string())
}

fn wait_status(root: &TempRoot, id: &str, status: &str) -> R {
    wait_until(&format!("run {id} to be {status}"), WAIT, || {
        Ok(run_status(root, id)?["run"]["status"] == status)
    })
}

#[test]
fn a_three_step_sop_with_an_approval_gate_runs_end_to_end_state10() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&config(&fake, port, ""))?;
    write_sop(&root, "triage", TRIAGE)?;
    fake.push_when("Summarise ticket 42", FakeReply::text("printer on fire"));
    fake.push_when(
        "Act on this summary: printer on fire",
        FakeReply::text("called the fire brigade"),
    );
    fake.push_when("Summarise ticket 43", FakeReply::text("paper jam"));

    let validated = root.run(bin(), &["sop", "validate"])?;
    assert!(validated.status.success(), "{:?}", text(&validated));
    assert!(
        text(&validated).0.contains("ok: triage"),
        "{:?}",
        text(&validated)
    );

    let _daemon = common::ready_daemon(&root)?;

    let id = start_run(&root, "triage", r#"{"ticket": "42"}"#)?;
    wait_status(&root, &id, "waiting")?;
    let waiting = run_status(&root, &id)?;
    assert_eq!(waiting["steps"][0]["step_id"], "fetch", "{waiting}");
    assert_eq!(
        waiting["steps"][0]["output"], "printer on fire",
        "{waiting}"
    );
    assert_eq!(
        requests_containing(&fake, "Act on this summary"),
        0,
        "nothing past the gate runs before approval"
    );
    // The wrong step is refused, naming where the run waits.
    let wrong = root.run(bin(), &["sop", "approve", &id, "act"])?;
    assert!(!wrong.status.success());
    assert!(
        text(&wrong).1.contains("waiting at step 'gate'"),
        "{:?}",
        text(&wrong)
    );

    let approved = root.run(bin(), &["sop", "approve", &id, "gate"])?;
    assert!(approved.status.success(), "{:?}", text(&approved));
    wait_status(&root, &id, "ok")?;
    let done = run_status(&root, &id)?;
    let outputs: Vec<&str> = done["steps"]
        .as_array()
        .map(|s| s.iter().filter_map(|x| x["output"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(outputs.len(), 3, "{done}");
    assert_eq!(outputs[2], "called the fire brigade", "{done}");
    assert!(outputs[1].starts_with("approved by cli:"), "{done}");
    let events: Vec<String> = done["events"]
        .as_array()
        .map(|e| {
            e.iter()
                .map(|x| {
                    format!(
                        "{} {}",
                        x["who"].as_str().unwrap_or(""),
                        x["what"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("cli:") && e.ends_with("approved gate")),
        "{events:?}"
    );
    assert_eq!(requests_containing(&fake, "Summarise ticket 42"), 1);
    assert_eq!(
        requests_containing(&fake, "Act on this summary: printer on fire"),
        1
    );

    // A denial ends the run `denied`; the step after the gate never runs.
    let id = start_run(&root, "triage", r#"{"ticket": "43"}"#)?;
    wait_status(&root, &id, "waiting")?;
    let denied = root.run(
        bin(),
        &["sop", "deny", &id, "gate", "--reason", "not today"],
    )?;
    assert!(denied.status.success(), "{:?}", text(&denied));
    wait_status(&root, &id, "denied")?;
    let run = run_status(&root, &id)?;
    assert!(
        run["run"]["error"]
            .as_str()
            .unwrap_or("")
            .contains("not today"),
        "{run}"
    );
    assert_eq!(
        requests_containing(&fake, "Act on this summary: paper jam"),
        0
    );
    // The runs appear in the control plane (`warren runs list`).
    let listed = json_of(&root, &["runs", "list"])?;
    assert!(listed.to_string().contains("sop:triage"), "{listed}");
    Ok(())
}

#[test]
fn a_daemon_killed_after_a_steps_receipt_does_not_repeat_the_step_state10() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&config(&fake, port, ""))?;
    write_sop(&root, "triage", TRIAGE)?;
    fake.push_when("Summarise ticket 7", FakeReply::text("disk full"));
    fake.push_when(
        "Summarise ticket 7",
        FakeReply::text("SECOND CALL: must not happen"),
    );
    fake.push_when(
        "Act on this summary: disk full",
        FakeReply::text("cleaned up"),
    );

    // The first daemon dies right after the first step's receipt is stored.
    let mut cmd = root.warren(bin(), &["daemon"]);
    cmd.env("FAILPOINTS", "sop-step-recorded=return");
    let mut first = DaemonChild::spawn(cmd)?;
    first.wait_for("warren daemon ready", WAIT)?;
    // The daemon may die before its answer reaches the CLI: the run is found in the store.
    let _ = root.run(
        bin(),
        &["sop", "run", "triage", "--input", r#"{"ticket": "7"}"#],
    )?;
    let status = first.wait(WAIT)?;
    let id = runs(&root, "triage")?
        .first()
        .and_then(|r| r["id"].as_str().map(str::to_string))
        .ok_or("no run stored")?;
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(6),
        "killed at the failpoint: {status:?}"
    );
    let crashed = run_status(&root, &id)?;
    assert_eq!(crashed["run"]["status"], "running", "{crashed}");
    assert_eq!(
        crashed["run"]["step_index"], 0,
        "not marked done: {crashed}"
    );
    assert_eq!(crashed["steps"][0]["status"], "recorded", "{crashed}");
    assert_eq!(requests_containing(&fake, "Summarise ticket 7"), 1);

    let _second = common::ready_daemon(&root)?;
    wait_status(&root, &id, "waiting")?;
    let approved = root.run(bin(), &["sop", "approve", &id, "gate"])?;
    assert!(approved.status.success(), "{:?}", text(&approved));
    wait_status(&root, &id, "ok")?;
    assert_eq!(
        requests_containing(&fake, "Summarise ticket 7"),
        1,
        "the step with a receipt is not repeated"
    );
    let done = run_status(&root, &id)?;
    assert_eq!(done["steps"][2]["output"], "cleaned up", "{done}");
    let listed = json_of(&root, &["runs", "list"])?;
    let row = listed
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["id"] == id.as_str()).cloned());
    assert_eq!(
        row.map(|r| r["state"].clone()),
        Some(serde_json::json!("ok")),
        "the control plane follows the continued run: {listed}"
    );
    assert!(
        done.to_string().contains("resumed"),
        "the takeover is an event: {done}"
    );
    Ok(())
}

#[test]
fn runs_on_the_in_memory_fallback_warn_everywhere_state10() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&config(&fake, port, ""))?;
    write_sop(
        &root,
        "quick",
        "agent = \"main\"\n[[steps]]\nid = \"one\"\nkind = \"turn\"\nprompt = \"quick {{input.n}}\"\n",
    )?;
    fake.push_when("quick 1", FakeReply::text("done 1"));
    // data/sop cannot be a directory: the durable store cannot be created.
    std::fs::create_dir_all(root.path().join("data"))?;
    std::fs::write(root.path().join("data").join("sop"), "not a directory")?;
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    let line = daemon.wait_for("IN MEMORY ONLY", WAIT)?;
    assert!(line.contains("runs.db"), "the log names the store: {line}");
    daemon.wait_for("warren daemon ready", WAIT)?;

    let out = root.run(bin(), &["sop", "run", "quick", "--input", r#"{"n": 1}"#])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("IN MEMORY ONLY"), "the CLI warns: {stderr}");
    daemon.wait_for("SOP run started: SOP runs are kept IN MEMORY ONLY", WAIT)?;

    let token = pair(&root, bin(), port, "ci")?;
    let (code, health) = http(port, "GET", "/api/health", Some(&token), "")?;
    assert_eq!(code, 200);
    assert_eq!(health["components"]["sop"]["durable"], false, "{health}");
    assert!(
        health["components"]["sop"]["warning"]
            .as_str()
            .unwrap_or("")
            .contains("IN MEMORY ONLY"),
        "{health}"
    );
    // The runs live in the daemon's memory: the API reads them there.
    wait_until("the first run to end", WAIT, || {
        let (_, body) = http(port, "GET", "/api/sops/quick/runs", Some(&token), "")?;
        Ok(body["runs"][0]["status"] == "ok" && body["runs"][0]["durable"] == false)
    })?;
    fake.push_when("quick 2", FakeReply::text("done 2"));
    let (code, started) = http(
        port,
        "POST",
        "/api/sops/quick/run",
        Some(&token),
        r#"{"input": {"n": 2}}"#,
    )?;
    assert_eq!(code, 202, "{started}");
    assert!(
        started["warning"]
            .as_str()
            .unwrap_or("")
            .contains("IN MEMORY ONLY"),
        "{started}"
    );
    // The CLI decides a gate of a run the daemon keeps in memory (through the daemon).
    write_sop(
        &root,
        "gated",
        "agent = \"main\"\n[[steps]]\nid = \"gate\"\nkind = \"approval\"\n",
    )?;
    let (code, started) = http(port, "POST", "/api/sops/gated/run", Some(&token), "{}")?;
    assert_eq!(code, 202, "{started}");
    let id = started["run"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let path = format!("/api/sops/runs/{id}");
    wait_until("the gate", WAIT, || {
        Ok(http(port, "GET", &path, Some(&token), "")?.1["run"]["status"] == "waiting")
    })?;
    let out = root.run(bin(), &["sop", "approve", &id, "gate"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    wait_until("the approved run to end", WAIT, || {
        Ok(http(port, "GET", &path, Some(&token), "")?.1["run"]["status"] == "ok")
    })?;
    Ok(())
}

#[test]
fn the_webhook_trigger_starts_a_run_with_its_body_as_input_state10() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&config(&fake, port, ""))?;
    write_sop(
        &root,
        "hook",
        "agent = \"main\"\n[trigger]\nkind = \"webhook\"\n[[steps]]\nid = \"one\"\nkind = \"turn\"\nprompt = \"alert {{input.host}}\"\n",
    )?;
    write_sop(&root, "triage", TRIAGE)?;
    fake.push_when("alert db1", FakeReply::text("looked at db1"));
    let _daemon = common::ready_daemon(&root)?;
    let (code, _) = http(
        port,
        "POST",
        "/api/sops/hook/webhook",
        None,
        r#"{"host": "db1"}"#,
    )?;
    assert_eq!(code, 401, "the webhook needs a token");
    let token = pair(&root, bin(), port, "ci")?;
    let (code, body) = http(port, "POST", "/api/sops/triage/webhook", Some(&token), "{}")?;
    assert_eq!(code, 409, "a manual SOP has no webhook: {body}");
    let (code, body) = http(
        port,
        "POST",
        "/api/sops/hook/webhook",
        Some(&token),
        r#"{"host": "db1"}"#,
    )?;
    assert_eq!(code, 202, "{body}");
    let id = body["run"]["id"].as_str().unwrap_or_default().to_string();
    assert_eq!(body["run"]["trigger"], "webhook", "{body}");
    wait_status(&root, &id, "ok")?;
    assert_eq!(
        run_status(&root, &id)?["steps"][0]["output"],
        "looked at db1"
    );
    let (code, doc) = http(port, "GET", "/api/openapi.json", Some(&token), "")?;
    assert_eq!(code, 200, "{doc}");
    assert!(
        doc["paths"]["/api/sops/{name}/webhook"].is_object(),
        "the route is documented"
    );
    Ok(())
}

fn broker_up() -> bool {
    if std::net::TcpStream::connect(("127.0.0.1", 1883)).is_ok() {
        return true;
    }
    let _ = std::process::Command::new("mosquitto").arg("-d").status();
    std::thread::sleep(Duration::from_millis(500));
    std::net::TcpStream::connect(("127.0.0.1", 1883)).is_ok()
}

#[test]
fn an_mqtt_message_starts_a_run_against_the_real_broker_state10() -> R {
    assert!(
        broker_up(),
        "Mosquitto must listen on 127.0.0.1:1883 (`mosquitto -d`)"
    );
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&config(&fake, port, ""))?;
    let topic = format!("warren-test/{}/alerts", std::process::id());
    write_sop(
        &root,
        "mqtt_alert",
        &format!(
            "agent = \"main\"\n[trigger]\nkind = \"mqtt\"\nurl = \"mqtt://127.0.0.1:1883\"\ntopic = \"{topic}\"\n[[steps]]\nid = \"one\"\nkind = \"turn\"\nprompt = \"sensor {{{{input.sensor}}}} says {{{{input.value}}}}\"\n"
        ),
    )?;
    fake.push_when("sensor boiler says 97", FakeReply::text("boiler checked"));
    let mut daemon = common::ready_daemon(&root)?;
    daemon.saw_or_wait_for("SOP MQTT trigger listening", WAIT)?;
    let published = std::process::Command::new("mosquitto_pub")
        .args(["-h", "127.0.0.1", "-p", "1883", "-q", "1", "-t", &topic])
        .args(["-m", r#"{"sensor": "boiler", "value": 97}"#])
        .status()?;
    assert!(published.success());
    wait_until("an mqtt run to finish", WAIT, || {
        Ok(runs(&root, "mqtt_alert")?
            .iter()
            .any(|r| r["trigger"] == "mqtt" && r["status"] == "ok"))
    })?;
    assert_eq!(requests_containing(&fake, "sensor boiler says 97"), 1);
    Ok(())
}

#[test]
fn validate_names_the_file_and_the_key_at_fault_state10() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    root.write_config(&config(&fake, free_port()?, ""))?;
    write_sop(
        &root,
        "broken",
        "agent = \"ghost\"\n[[steps]]\nid = \"a\"\nkind = \"turn\"\nprompt = \"{{steps.later.output}}\"\n[[steps]]\nid = \"later\"\nkind = \"condition\"\ncontains = \"x\"\non_miss = \"goto:nowhere\"\n",
    )?;
    let out = root.run(bin(), &["sop", "validate"])?;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("broken.toml: steps[0].prompt:"), "{stderr}");
    assert!(stderr.contains("names no earlier step 'later'"), "{stderr}");
    assert!(
        stderr.contains("broken.toml: steps[1].on_miss: goto:nowhere"),
        "{stderr}"
    );
    write_sop(
        &root,
        "broken",
        "agent = \"ghost\"\n[[steps]]\nid = \"a\"\nkind = \"turn\"\nprompt = \"hi\"\n",
    )?;
    let out = root.run(bin(), &["sop", "validate"])?;
    let (_, stderr) = text(&out);
    assert!(
        stderr.contains("broken.toml: agent: agent 'ghost' does not exist"),
        "{stderr}"
    );
    Ok(())
}

#[test]
fn an_sop_blocks_its_agents_delete_and_follows_its_rename_life3_life4() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    let extra = "\n[agents.ops]\nprovider = \"fake\"\nmodel = \"gpt-test\"\n";
    root.write_config(&config(&fake, port, extra))?;
    let text_of = TRIAGE.replace("agent = \"main\"", "agent = \"ops\"");
    write_sop(&root, "triage", &format!("# keep this comment\n{text_of}"))?;
    let out = root.run(bin(), &["agents", "delete", "ops", "--yes"])?;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(
        format!("{stdout}{stderr}").contains("SOP 'triage'")
            && format!("{stdout}{stderr}").contains("triage.toml"),
        "the refusal names the SOP and its file: {stdout}{stderr}"
    );

    let out = root.run(bin(), &["agents", "rename", "ops", "opsnew"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    let file = std::fs::read_to_string(root.path().join("shared/sops/triage.toml"))?;
    assert!(file.contains("agent = \"opsnew\""), "{file}");
    assert!(file.contains("# keep this comment"), "layout kept: {file}");
    let validated = root.run(bin(), &["sop", "validate", "triage"])?;
    assert!(validated.status.success(), "{:?}", text(&validated));
    Ok(())
}

#[test]
fn a_condition_stops_the_run_or_skips_ahead_on_the_previous_output_state10() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&config(&fake, port, ""))?;
    write_sop(
        &root,
        "branch",
        r#"
agent = "main"
max_concurrent = 2
[[steps]]
id = "look"
kind = "turn"
prompt = "Look at {{input.host}}"
[[steps]]
id = "urgent"
kind = "condition"
regex = "^URGENT"
on_match = "goto:page"
on_miss = "stop"
[[steps]]
id = "log"
kind = "turn"
prompt = "Log {{steps.look.output}}"
[[steps]]
id = "page"
kind = "turn"
prompt = "Page about {{steps.look.output}}"
"#,
    )?;
    fake.push_when("Look at db1", FakeReply::text("URGENT disk full"));
    fake.push_when("Page about URGENT disk full", FakeReply::text("paged"));
    fake.push_when("Look at db2", FakeReply::text("all fine"));
    let _daemon = common::ready_daemon(&root)?;

    let urgent = start_run(&root, "branch", r#"{"host": "db1"}"#)?;
    let fine = start_run(&root, "branch", r#"{"host": "db2"}"#)?;
    wait_status(&root, &urgent, "ok")?;
    wait_status(&root, &fine, "ok")?;
    let ran = |id: &str| -> Result<Vec<String>, Box<dyn std::error::Error>> {
        Ok(run_status(&root, id)?["steps"]
            .as_array()
            .map(|s| {
                s.iter()
                    .filter_map(|x| x["step_id"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default())
    };
    assert_eq!(
        ran(&urgent)?,
        ["look", "urgent", "page"],
        "goto skipped 'log'"
    );
    assert_eq!(ran(&fine)?, ["look", "urgent"], "stop ended the run");
    assert_eq!(requests_containing(&fake, "Log "), 0);
    assert_eq!(requests_containing(&fake, "Page about all fine"), 0);
    assert_eq!(requests_containing(&fake, "Page about URGENT disk full"), 1);
    Ok(())
}

#[test]
fn a_shell_tool_step_that_exits_non_zero_fails_the_run_like_a_cron_command_state10() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&config(&fake, port, ""))?;
    write_sop(
        &root,
        "shelly",
        r#"
agent = "main"
[[steps]]
id = "hello"
kind = "tool"
tool = "shell"
args = { command = "echo sop-{{input.word}}" }
[[steps]]
id = "bad"
kind = "tool"
tool = "shell"
args = { command = "test -e no-such-file" }
[[steps]]
id = "after"
kind = "tool"
tool = "shell"
args = { command = "echo never" }
"#,
    )?;
    let _daemon = common::ready_daemon(&root)?;
    let id = start_run(&root, "shelly", r#"{"word": "ok"}"#)?;
    wait_status(&root, &id, "failed")?;
    let status = run_status(&root, &id)?;
    let error = status["run"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("exited with status 1"), "{status}");
    let steps = status["steps"].as_array().cloned().unwrap_or_default();
    let ran: Vec<&str> = steps.iter().filter_map(|s| s["step_id"].as_str()).collect();
    assert_eq!(
        ran,
        ["hello"],
        "the failed step and the rest never completed: {status}"
    );
    assert!(
        steps[0]["output"].to_string().contains("sop-ok"),
        "{status}"
    );
    assert_eq!(fake.requests().len(), 0, "tool steps call no model");
    Ok(())
}
