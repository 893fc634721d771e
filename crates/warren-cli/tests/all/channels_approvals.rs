//! Approvals on the phone through the real daemon (issue 38 §4, BEYOND-16): the fake OpenAI
//! server asks for a `file_write` that the supervised risk profile sends for approval; the fake
//! Bot API ([`FakeTelegram`]) plays the owner's phone. An Approve press by the owner runs the
//! call (who approved is in the trace, the prompt shows the outcome without buttons); a press
//! by anyone else is refused and the approval stays pending; no answer by the timeout is a
//! deny; a cron job's approval reaches the phone too (`[approvals] notify`).

use std::time::Duration;

use serde_json::{Value, json};
use warren_testkit::fake_llm::{FakeCall, FakeOpenAi, FakeReply};
use warren_testkit::telegram::{FakeTelegram, Sent};
use warren_testkit::{DaemonChild, TempRoot, free_port, text};

use crate::common::{bin, fake_config, wait_until};

type R = Result<(), Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(30);
const OWNER: i64 = 7;

/// A daemon in `root`: agent `main` (supervised, approvals time out after `timeout` seconds)
/// on `fake`, channel `telegram.home` on `tg` owned by [`OWNER`], `[approvals] notify` to it,
/// and `extra` config.
fn start(
    root: &TempRoot,
    fake: &FakeOpenAi,
    tg: &FakeTelegram,
    timeout: u64,
    extra: &str,
) -> Result<DaemonChild, Box<dyn std::error::Error>> {
    let sections = format!(
        "risk_profile = \"careful\"\n\n[risk_profiles.careful]\nautonomy = \"supervised\"\napproval_timeout_secs = {timeout}\n"
    );
    let config = fake_config(
        fake,
        "sk-approve-secret",
        free_port()?,
        "",
        &format!(
            "\n[channels.telegram.home]\nagent = \"main\"\napi_base = \"{}\"\nowners = [\"{OWNER}\"]\nallow = [\"8\"]\n\
             poll_timeout_secs = 1\nhealth_window_secs = 10\n\n[approvals]\nnotify = [\"telegram.home\"]\n{extra}",
            tg.api_base()
        ),
    );
    // The agent's risk profile goes with [agents.main] (first in the template).
    let config = config.replacen(
        "model = \"gpt-test\"\n",
        &format!("model = \"gpt-test\"\n{sections}"),
        1,
    );
    std::fs::create_dir_all(root.path())?;
    root.write_config(&config)?;
    let out = root.run(
        bin(),
        &["config", "set", "channels.telegram.home.token", tg.token()],
    )?;
    assert!(out.status.success(), "{:?}", text(&out));
    tg.know_chat(OWNER);
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    Ok(daemon)
}

/// The model asks to write `path`, then says `done`.
fn push_write(fake: &FakeOpenAi, path: &str, done: &str) {
    fake.push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "w1",
            "file_write",
            json!({"path": path, "content": "from the phone\n"}),
        )],
    ));
    fake.push(FakeReply::text(done));
}

/// The first approval prompt sent to the owner: its message id and its Approve / Deny data.
fn prompt(tg: &FakeTelegram) -> Result<(Sent, String, String), Box<dyn std::error::Error>> {
    let mut found = None;
    wait_until("an approval prompt on the owner's phone", WAIT, || {
        found = tg.sent().into_iter().find(|s| {
            s.method == "sendMessage"
                && s.chat_id == OWNER
                && s.reply_markup
                    .as_ref()
                    .is_some_and(|m| m.to_string().contains("approve:"))
        });
        Ok(found.is_some())
    })?;
    let sent = found.ok_or("no prompt")?;
    let buttons = sent.reply_markup.clone().unwrap_or(Value::Null)["inline_keyboard"][0].clone();
    let data = |i: usize| {
        buttons[i]["callback_data"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(buttons[0]["text"], "Approve", "{buttons}");
    assert_eq!(buttons[1]["text"], "Deny", "{buttons}");
    let (approve, deny) = (data(0), data(1));
    Ok((sent, approve, deny))
}

fn replies(tg: &FakeTelegram, chat: i64) -> Vec<String> {
    tg.sent()
        .into_iter()
        .filter(|s| s.method == "sendMessage" && s.chat_id == chat && s.reply_markup.is_none())
        .filter_map(|s| s.text)
        .collect()
}

fn toasts(tg: &FakeTelegram) -> Vec<String> {
    tg.sent()
        .into_iter()
        .filter(|s| s.method == "answerCallbackQuery")
        .filter_map(|s| s.text)
        .collect()
}

/// The edit that settled the prompt `message_id`.
fn settled_edit(
    tg: &FakeTelegram,
    message_id: Option<i64>,
) -> Result<Sent, Box<dyn std::error::Error>> {
    let mut found = None;
    wait_until("the prompt edited with the outcome", WAIT, || {
        found = tg
            .sent()
            .into_iter()
            .find(|s| s.method == "editMessageText" && s.message_id == message_id);
        Ok(found.is_some())
    })?;
    let edit = found.ok_or("no edit")?;
    let keyboard = edit.reply_markup.clone().unwrap_or(json!({}));
    assert_eq!(
        keyboard["inline_keyboard"],
        json!([]),
        "the buttons are dropped: {keyboard}"
    );
    Ok(edit)
}

fn workspace(root: &TempRoot) -> std::path::PathBuf {
    root.path().join("agents").join("main").join("workspace")
}

fn stop(mut daemon: DaemonChild) -> R {
    daemon.signal("TERM")?;
    daemon.wait(WAIT)?;
    Ok(())
}

#[test]
fn an_approval_answered_by_button_runs_the_call_and_names_the_approver_issue38() -> R {
    let (root, fake, tg) = (
        TempRoot::new()?,
        FakeOpenAi::start()?,
        FakeTelegram::start()?,
    );
    let daemon = start(&root, &fake, &tg, 60, "")?;
    push_write(&fake, "phone.md", "Written.");
    tg.push_text(OWNER, OWNER, "write the note");
    let (sent, approve, _) = prompt(&tg)?;
    let body = sent.text.clone().unwrap_or_default();
    for part in [
        "Agent: main",
        "Tool: file_write",
        "phone.md",
        "Asked by: tg_home_",
        "Why: ",
    ] {
        assert!(
            body.contains(part),
            "{part} missing from the prompt: {body}"
        );
    }
    assert!(
        !workspace(&root).join("phone.md").exists(),
        "nothing runs before the answer"
    );
    tg.push_callback(OWNER, OWNER, sent.message_id.unwrap_or_default(), &approve);
    wait_until("the reply after the approved call", WAIT, || {
        Ok(replies(&tg, OWNER).iter().any(|r| r == "Written."))
    })?;
    assert_eq!(
        std::fs::read_to_string(workspace(&root).join("phone.md"))?,
        "from the phone\n"
    );
    assert!(
        toasts(&tg).iter().any(|t| t == "Approved."),
        "{:?}",
        toasts(&tg)
    );
    let edit = settled_edit(&tg, sent.message_id)?;
    assert!(edit.text.unwrap_or_default().contains("Approved by 7"));
    // Who approved is in the trace.
    let out = root.run(bin(), &["logs", "--json"])?;
    let (logs, _) = text(&out);
    assert!(logs.contains("\"by\":\"telegram.home:7\""), "{logs}");
    stop(daemon)
}

#[test]
fn a_press_by_a_non_approver_is_refused_and_the_approval_stays_pending_issue38() -> R {
    let (root, fake, tg) = (
        TempRoot::new()?,
        FakeOpenAi::start()?,
        FakeTelegram::start()?,
    );
    let daemon = start(&root, &fake, &tg, 60, "")?;
    push_write(&fake, "guarded.md", "Guarded.");
    tg.push_text(OWNER, OWNER, "write it");
    let (sent, approve, _) = prompt(&tg)?;
    // Sender 8 may talk to the bot (allow) but is not an approver.
    tg.push_callback(OWNER, 8, sent.message_id.unwrap_or_default(), &approve);
    wait_until("the refusal toast", WAIT, || {
        Ok(toasts(&tg)
            .iter()
            .any(|t| t.contains("Only this bot's approvers")))
    })?;
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        !workspace(&root).join("guarded.md").exists(),
        "a stranger's press ran the call"
    );
    assert!(
        replies(&tg, OWNER).is_empty(),
        "the turn still waits: {:?}",
        replies(&tg, OWNER)
    );
    // Still pending: the owner's press decides it.
    tg.push_callback(OWNER, OWNER, sent.message_id.unwrap_or_default(), &approve);
    wait_until("the reply after the owner's approval", WAIT, || {
        Ok(replies(&tg, OWNER).iter().any(|r| r == "Guarded."))
    })?;
    assert!(workspace(&root).join("guarded.md").exists());
    stop(daemon)
}

#[test]
fn no_answer_by_the_timeout_is_a_deny_issue38() -> R {
    let (root, fake, tg) = (
        TempRoot::new()?,
        FakeOpenAi::start()?,
        FakeTelegram::start()?,
    );
    let daemon = start(&root, &fake, &tg, 2, "")?;
    push_write(&fake, "late.md", "Not written.");
    tg.push_text(OWNER, OWNER, "write it");
    let (sent, approve, _) = prompt(&tg)?;
    let edit = settled_edit(&tg, sent.message_id)?;
    assert!(edit.text.unwrap_or_default().contains("No answer in time"));
    wait_until("the reply after the denied call", WAIT, || {
        Ok(replies(&tg, OWNER).iter().any(|r| r == "Not written."))
    })?;
    assert!(
        !workspace(&root).join("late.md").exists(),
        "a timed-out call ran"
    );
    let denied = crate::common::tool_result(&fake, "w1")?;
    assert!(denied.contains("no approval arrived in time"), "{denied}");
    // A press after the timeout decides nothing.
    tg.push_callback(OWNER, OWNER, sent.message_id.unwrap_or_default(), &approve);
    wait_until("the expired toast", WAIT, || {
        Ok(toasts(&tg)
            .iter()
            .any(|t| t.contains("already decided or has expired")))
    })?;
    assert!(!workspace(&root).join("late.md").exists());
    stop(daemon)
}

#[test]
fn a_cron_jobs_approval_reaches_the_phone_issue38() -> R {
    let (root, fake, tg) = (
        TempRoot::new()?,
        FakeOpenAi::start()?,
        FakeTelegram::start()?,
    );
    push_write(&fake, "cron.md", "Cron wrote it.");
    let daemon = start(
        &root,
        &fake,
        &tg,
        60,
        "\n[cron.jobs.writer]\nagent = \"main\"\nevery = \"2s\"\nmessage = \"write the cron note\"\n",
    )?;
    let (sent, approve, _) = prompt(&tg)?;
    let body = sent.text.clone().unwrap_or_default();
    assert!(body.contains("Asked by: cron"), "{body}");
    tg.push_callback(OWNER, OWNER, sent.message_id.unwrap_or_default(), &approve);
    wait_until("the cron job's approved write", WAIT, || {
        Ok(workspace(&root).join("cron.md").exists())
    })?;
    settled_edit(&tg, sent.message_id)?;
    stop(daemon)
}
