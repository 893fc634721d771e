//! The channel layer across kills (issue 38 §Tests, BEYOND-14): the daemon is killed (SIGABRT)
//! at each named failpoint between receive, commit, turn, send and record, then started again
//! on the same fake Telegram. Each time: the inbound message is not lost (one inbox row, its
//! update confirmed), its turn ran at most once (the session holds at most one answer), and it
//! got its reply (or, for a turn the kill interrupted, a notice saying it was not run again)
//! exactly once — twice only when the kill fell between a send and its record.

use std::time::{Duration, Instant};

use crate::common::{bin, json_of};
use warren_store::channels::{self, ChannelStore};
use warren_testkit::telegram::FakeTelegram;
use warren_testkit::{DaemonChild, TempRoot, free_port, text};

type R = Result<(), Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(30);
const OWNER: i64 = 7;
const ANSWER: &str = "The one answer.";

fn configure(root: &TempRoot, tg: &FakeTelegram) -> R {
    std::fs::create_dir_all(root.path())?;
    let script = root.path().join("script.json");
    std::fs::write(
        &script,
        serde_json::json!({"turns": [[{"text": ANSWER}]]}).to_string(),
    )?;
    root.write_config(&format!(
        "[providers.demo]\nkind = \"script\"\nscript = \"{}\"\n\n[agents.main]\nprovider = \"demo\"\n\n\
         [gateway]\nport = {}\n\n[channels.telegram.home]\nagent = \"main\"\napi_base = \"{}\"\n\
         owners = [\"{OWNER}\"]\npoll_timeout_secs = 1\nhealth_window_secs = 3\n",
        script.display(),
        free_port()?,
        tg.api_base()
    ))?;
    let out = root.run(
        bin(),
        &["config", "set", "channels.telegram.home.token", tg.token()],
    )?;
    assert!(out.status.success(), "{:?}", text(&out));
    Ok(())
}

fn replies(tg: &FakeTelegram) -> Vec<String> {
    tg.sent()
        .into_iter()
        .filter(|s| s.method == "sendMessage" && s.chat_id == OWNER)
        .filter_map(|s| s.text)
        .collect()
}

fn one_kill(point: &str) -> R {
    let tg = FakeTelegram::start()?;
    let root = TempRoot::new()?;
    configure(&root, &tg)?;
    let mut cmd = root.warren(bin(), &["daemon"]);
    cmd.env("FAILPOINTS", format!("{point}=return"));
    let mut first = DaemonChild::spawn(cmd)?;
    first.wait_for("warren daemon ready", WAIT)?;
    let update = tg.push_text(OWNER, OWNER, "hi");
    let seen = first.saw_or_wait_for(point, WAIT);
    let status = first.wait(WAIT)?;
    let stderr = format!("{seen:?}\n{}", first.stderr_seen().join("\n"));
    assert!(
        std::os::unix::process::ExitStatusExt::signal(&status) == Some(6) && stderr.contains(point),
        "{point}: expected a crash there; got {status:?}: {stderr}"
    );

    let mut second = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    second.wait_for("warren daemon ready", WAIT)?;
    let deadline = Instant::now() + WAIT;
    while replies(&tg).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    // Time for a second reply or a second turn to show up, were there one.
    std::thread::sleep(Duration::from_secs(2));
    second.signal("TERM")?;
    second.wait(WAIT)?;

    let got = replies(&tg);
    let interrupted = point == channels::TURN_AFTER_START;
    let expected = if interrupted {
        "restarted while answering"
    } else {
        ANSWER
    };
    let max = if point == channels::SEND_AFTER_SEND {
        2
    } else {
        1
    };
    assert!(
        !got.is_empty() && got.len() <= max && got.iter().all(|t| t.contains(expected)),
        "{point}: replies {got:?}"
    );
    assert!(
        tg.confirmed_offset() > update,
        "{point}: the update was never confirmed"
    );

    let store = ChannelStore::open(&root.path().join("data/channels/channels.db"))?;
    let rows = store.inbox("telegram.home", None, 10)?;
    assert_eq!(
        rows.len(),
        1,
        "{point}: inbound lost or stored twice: {rows:?}"
    );
    let state = if interrupted { "interrupted" } else { "done" };
    assert_eq!(rows[0].state, state, "{point}: {rows:?}");

    let session = json_of(&root, &["sessions", "show", "tg_home_7_7"]);
    let answers = session
        .ok()
        .and_then(|s| s["messages"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .count();
    assert_eq!(
        answers,
        usize::from(!interrupted),
        "{point}: the turn ran {answers} times"
    );
    Ok(())
}

#[test]
fn no_message_is_lost_or_answered_twice_across_kills_at_every_failpoint_issue38() -> R {
    for point in channels::FAILPOINTS {
        one_kill(point)?;
    }
    Ok(())
}
