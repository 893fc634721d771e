//! Telegram through the real daemon (issue 38, BEYOND-14/15): the script provider answers, a
//! local server speaking the Bot API wire format ([`FakeTelegram`]) plays Telegram. A message
//! gets exactly one reply; a long answer arrives as ordered chunks within the limit with
//! balanced code fences; rejected markup is resent plain; a 429 is waited out; an unknown
//! sender gets no reply and the owner is asked, and a button press by the owner lets them in;
//! the token is never printed.

use std::time::Duration;

use crate::common::bin;
use warren_testkit::telegram::{FakeTelegram, Fault, Sent};
use warren_testkit::{DaemonChild, TempRoot, free_port, http, pair, text};

type R = Result<(), Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(30);
const OWNER: i64 = 7;

/// A daemon in `root` with agent `main` on a script answering `replies` in order (one per
/// user turn of a session), and channel `telegram.home` on `tg` owned by [`OWNER`].
fn start(
    root: &TempRoot,
    tg: &FakeTelegram,
    replies: &[&str],
    extra: &str,
) -> Result<DaemonChild, Box<dyn std::error::Error>> {
    let turns: Vec<serde_json::Value> = replies
        .iter()
        .map(|r| serde_json::json!([{"text": r}]))
        .collect();
    start_with(root, tg, &serde_json::json!({"turns": turns}), extra)
}

/// [`start`] with a whole script (`{"turns": [...]}`); `extra` continues the channel's table.
fn start_with(
    root: &TempRoot,
    tg: &FakeTelegram,
    script_json: &serde_json::Value,
    extra: &str,
) -> Result<DaemonChild, Box<dyn std::error::Error>> {
    std::fs::create_dir_all(root.path())?;
    let script = root.path().join("script.json");
    std::fs::write(&script, script_json.to_string())?;
    let port = free_port()?;
    root.write_config(&format!(
        "[providers.demo]\nkind = \"script\"\nscript = \"{}\"\n\n[agents.main]\nprovider = \"demo\"\n\n\
         [gateway]\nport = {port}\n\n[channels.telegram.home]\nagent = \"main\"\napi_base = \"{}\"\n\
         owners = [\"{OWNER}\"]\npoll_timeout_secs = 1\nhealth_window_secs = 3\n{extra}",
        script.display(),
        tg.api_base()
    ))?;
    let out = root.run(
        bin(),
        &["config", "set", "channels.telegram.home.token", tg.token()],
    )?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        !stdout.contains(tg.token()) && !stderr.contains(tg.token()),
        "the token was printed: {stdout}{stderr}"
    );
    assert!(
        !root.read_config()?.contains(tg.token()),
        "the token is stored in clear"
    );
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    Ok(daemon)
}

fn messages_to(tg: &FakeTelegram, chat: i64) -> Vec<Sent> {
    tg.sent()
        .into_iter()
        .filter(|s| s.method == "sendMessage" && s.chat_id == chat)
        .collect()
}

fn stop(mut daemon: DaemonChild) -> R {
    daemon.signal("TERM")?;
    daemon.wait(WAIT)?;
    Ok(())
}

#[test]
fn a_telegram_message_gets_exactly_one_reply_issue38() -> R {
    let tg = FakeTelegram::start()?;
    let root = TempRoot::new()?;
    let daemon = start(&root, &tg, &["Hello from main."], "")?;
    tg.push_text(OWNER, OWNER, "hi");
    tg.wait_sent(1, WAIT);
    // Time for a duplicate to show up, were there one.
    std::thread::sleep(Duration::from_secs(2));
    let replies = messages_to(&tg, OWNER);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(replies[0].text.as_deref(), Some("Hello from main."));
    assert_eq!(tg.pending_updates(), 0, "the update was confirmed");
    let logs = daemon.stderr_seen().join("\n");
    assert!(!logs.contains(tg.token()), "the token was logged");
    stop(daemon)
}

#[test]
fn a_long_answer_arrives_as_ordered_chunks_with_balanced_fences_issue38() -> R {
    let tg = FakeTelegram::start()?;
    let root = TempRoot::new()?;
    let mut long = String::from("Here it is.\n\n```rust\n");
    let mut n = 0;
    while long.len() < 10_000 {
        long.push_str(&format!("let line_{n} = \"{}\";\n", "x".repeat(40)));
        n += 1;
    }
    long.push_str("```\n\nDone.");
    let daemon = start(&root, &tg, &[&long], "")?;
    tg.push_text(OWNER, OWNER, "the long one");
    let wait_until = std::time::Instant::now() + WAIT;
    let mut chunks = Vec::new();
    while std::time::Instant::now() < wait_until {
        chunks = messages_to(&tg, OWNER);
        let joined: String = chunks.iter().filter_map(|c| c.text.clone()).collect();
        if joined.contains("Done.") {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        chunks.len() >= 3,
        "10,000 characters in {} message(s)",
        chunks.len()
    );
    for c in &chunks {
        let t = c.text.clone().unwrap_or_default();
        assert!(t.encode_utf16().count() <= 4096, "a chunk over the limit");
        assert_eq!(
            t.matches("```").count() % 2,
            0,
            "unbalanced fence in {t:.80}"
        );
    }
    assert!(
        chunks[0]
            .text
            .as_deref()
            .unwrap_or_default()
            .starts_with("Here it is.")
    );
    assert!(
        chunks
            .last()
            .and_then(|c| c.text.clone())
            .unwrap_or_default()
            .ends_with("Done.")
    );
    stop(daemon)
}

#[test]
fn rejected_markup_is_resent_plain_and_a_429_is_waited_out_issue38() -> R {
    let tg = FakeTelegram::start()?;
    let root = TempRoot::new()?;
    let daemon = start(&root, &tg, &["*bold", "Second."], "")?;
    tg.fail_next("sendMessage", Fault::BadMarkup);
    tg.push_text(OWNER, OWNER, "one");
    tg.wait_sent(1, WAIT);
    let first = messages_to(&tg, OWNER);
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(
        (first[0].text.as_deref(), first[0].parse_mode.as_deref()),
        (Some("*bold"), None)
    );

    tg.fail_next("sendMessage", Fault::RetryAfter(2));
    let asked = std::time::Instant::now();
    tg.push_text(OWNER, OWNER, "two");
    tg.wait_sent(2, WAIT);
    assert!(
        asked.elapsed() >= Duration::from_secs(2),
        "retry_after was not honoured"
    );
    let all = messages_to(&tg, OWNER);
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all[1].text.as_deref(), Some("Second."));
    stop(daemon)
}

#[test]
fn an_unknown_sender_gets_no_reply_and_the_owner_decides_issue38() -> R {
    let tg = FakeTelegram::start()?;
    let root = TempRoot::new()?;
    let stranger = 99;
    let daemon = start(&root, &tg, &["Welcome."], "")?;
    tg.know_chat(OWNER);
    tg.push_text(stranger, stranger, "let me in");
    tg.wait_sent(1, WAIT);
    let prompt = messages_to(&tg, OWNER);
    assert_eq!(prompt.len(), 1, "{prompt:?}");
    let text_of = prompt[0].text.clone().unwrap_or_default();
    assert!(text_of.contains("wants to talk to main"), "{text_of}");
    let markup = prompt[0]
        .reply_markup
        .clone()
        .unwrap_or_default()
        .to_string();
    assert!(
        markup.contains("allow:99") && markup.contains("block:99"),
        "{markup}"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        messages_to(&tg, stranger).is_empty(),
        "a stranger got a reply"
    );

    // A press by the stranger is refused; the owner's press lets them in.
    tg.push_callback(stranger, stranger, 1, "allow:99");
    std::thread::sleep(Duration::from_secs(1));
    tg.push_text(stranger, stranger, "still me");
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        messages_to(&tg, stranger).is_empty(),
        "a stranger let themself in"
    );
    tg.push_callback(OWNER, OWNER, 1, "allow:99");
    std::thread::sleep(Duration::from_secs(1));
    tg.push_text(stranger, stranger, "hello now");
    let deadline = std::time::Instant::now() + WAIT;
    while messages_to(&tg, stranger).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let replies = messages_to(&tg, stranger);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(replies[0].text.as_deref(), Some("Welcome."));
    stop(daemon)
}

#[test]
fn a_hung_poll_turns_the_channel_down_and_it_recovers_without_a_daemon_restart_issue38() -> R {
    let tg = FakeTelegram::start()?;
    let root = TempRoot::new()?;
    let daemon = start(&root, &tg, &["Back."], "")?;
    let port: u16 = root
        .read_config()?
        .lines()
        .find_map(|l| {
            l.strip_prefix("port = ")
                .and_then(|p| p.trim().parse().ok())
        })
        .ok_or("no port")?;
    let token = pair(&root, bin(), port, "ci")?;
    let channel = |health: &serde_json::Value| {
        health["components"]["channels"]["channels"]["telegram.home"].clone()
    };
    let health = || -> Result<serde_json::Value, Box<dyn std::error::Error>> {
        let (status, body) = http(port, "GET", "/api/health", Some(&token), "")?;
        assert_eq!(status, 200, "{body}");
        Ok(body)
    };
    let deadline = std::time::Instant::now() + WAIT;
    while channel(&health()?)["status"] != "ok" {
        assert!(
            std::time::Instant::now() < deadline,
            "never ok: {}",
            health()?
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The connection of the next poll dies silently: no answer, no error, ever.
    tg.fail_next("getUpdates", Fault::HangForever);
    let mut saw_down = None;
    let deadline = std::time::Instant::now() + WAIT;
    while std::time::Instant::now() < deadline {
        let h = health()?;
        if channel(&h)["status"] == "down" {
            saw_down = Some(h);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let down = saw_down.ok_or("the hung channel never turned down")?;
    assert_eq!(down["status"], "degraded", "{down}");
    assert_eq!(down["components"]["channels"]["status"], "down", "{down}");
    // /metrics says so too (its gauge is set by the channel's watchdog, a tick later).
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    loop {
        let metrics = warren_testkit::http_text(port, "GET", "/metrics", Some(&token), "")?.body;
        if metrics.contains("warren_channel_up{channel=\"telegram.home\"} 0") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{metrics}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // It restarts alone and answers again; the daemon is the same process.
    let deadline = std::time::Instant::now() + WAIT;
    while channel(&health()?)["status"] != "ok" {
        assert!(
            std::time::Instant::now() < deadline,
            "never recovered: {}",
            health()?
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let h = health()?;
    assert!(channel(&h)["restarts"].as_u64() >= Some(1), "{h}");
    assert_eq!(h["pid"], daemon.pid());
    tg.push_text(OWNER, OWNER, "still there?");
    let replies = tg.wait_sent(1, WAIT);
    assert_eq!(replies[0].text.as_deref(), Some("Back."));
    stop(daemon)
}

#[test]
fn the_operator_lists_checks_and_decides_senders_from_the_cli_and_the_api_issue38() -> R {
    let tg = FakeTelegram::start()?;
    let root = TempRoot::new()?;
    let daemon = start(&root, &tg, &["Welcome.", "Again."], "")?;
    let port: u16 = root
        .read_config()?
        .lines()
        .find_map(|l| {
            l.strip_prefix("port = ")
                .and_then(|p| p.trim().parse().ok())
        })
        .ok_or("no port")?;
    let stranger = 99;
    tg.push_text(stranger, stranger, "let me in");
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let senders = crate::common::json_of(&root, &["channels", "senders", "home"])?;
        if senders["senders"].to_string().contains("\"99\"") {
            assert!(senders.to_string().contains("pending"), "{senders}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{senders}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let status = crate::common::json_of(&root, &["channels", "status", "telegram.home"])?;
    assert_eq!(status["refused"][0]["sender_id"], "99", "{status}");
    let out = root.run(bin(), &["channels", "status"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("telegram.home  agent main  ok"), "{stdout}");
    let out = root.run(bin(), &["channels", "test", "home"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("bot @warren_test_bot"), "{stdout}");
    assert!(!stdout.contains(tg.token()) && !stderr.contains(tg.token()));

    let out = root.run(bin(), &["channels", "allow", "home", "99"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    tg.push_text(stranger, stranger, "hello now");
    let deadline = std::time::Instant::now() + WAIT;
    while messages_to(&tg, stranger).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the allowed sender got no reply"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        messages_to(&tg, stranger)[0].text.as_deref(),
        Some("Welcome.")
    );

    // The API: the same views and decisions; a token is needed; unknown channels are 404.
    let token = pair(&root, bin(), port, "ci")?;
    let (code, _) = http(port, "GET", "/api/channels", None, "")?;
    assert_eq!(code, 401);
    let (code, list) = http(port, "GET", "/api/channels", Some(&token), "")?;
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["channels"][0]["health"]["status"], "ok", "{list}");
    assert!(list["channels"][0]["health"]["lag_ms"].is_u64(), "{list}");
    assert!(
        list["channels"][0]["health"]["last_send_ok"].is_string(),
        "{list}"
    );
    assert!(!list.to_string().contains(tg.token()), "{list}");
    let (code, blocked) = http(
        port,
        "POST",
        "/api/channels/home/senders/99/block",
        Some(&token),
        "",
    )?;
    assert_eq!(
        (code, blocked["status"].clone()),
        (200, "blocked".into()),
        "{blocked}"
    );
    let (code, _) = http(port, "GET", "/api/channels/nope", Some(&token), "")?;
    assert_eq!(code, 404);
    let (code, _) = http(
        port,
        "POST",
        "/api/channels/home/senders/bob/allow",
        Some(&token),
        "",
    )?;
    assert_eq!(code, 400);
    tg.push_text(stranger, stranger, "and now?");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        messages_to(&tg, stranger).len(),
        1,
        "a blocked sender was answered"
    );
    let senders = crate::common::json_of(&root, &["channels", "senders", "home"])?;
    assert!(senders.to_string().contains("blocked"), "{senders}");
    stop(daemon)
}

#[test]
fn a_non_owners_message_taints_the_turn_so_side_effects_are_refused_issue38() -> R {
    let tg = FakeTelegram::start()?;
    let root = TempRoot::new()?;
    let write = serde_json::json!({"turns": [[
        {"text": "", "tool_calls": [{"name": "file_write", "arguments": {"path": "note.md", "content": "x"}}]},
        {"text": "Done."}
    ]]});
    // Autonomy full: the owner's call runs unasked; the allowed stranger's needs approval.
    let daemon = start_with(
        &root,
        &tg,
        &write,
        "allow = [\"55\"]\n\n[risk_profiles.default]\nautonomy = \"full\"\n",
    )?;
    let note = root.path().join("agents/main/workspace/note.md");
    tg.know_chat(OWNER);
    tg.push_text(55, 55, "please write the note");
    // The tainted call waits for the owners' approval (issue 38 §4); the owner denies it.
    let prompt = tg.wait_sent(1, WAIT);
    assert_eq!(prompt[0].chat_id, OWNER, "{prompt:?}");
    assert!(
        !note.exists(),
        "a non-owner's turn wrote a file without approval"
    );
    let deny = prompt[0].reply_markup.clone().unwrap_or_default()["inline_keyboard"][0][1]
        ["callback_data"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(deny.starts_with("deny:"), "{prompt:?}");
    tg.push_callback(
        OWNER,
        OWNER,
        prompt[0].message_id.unwrap_or_default(),
        &deny,
    );
    let sent = tg.wait_sent(2, WAIT);
    assert_eq!(sent[1].chat_id, 55, "{sent:?}");
    assert!(!note.exists(), "a denied call wrote the file");
    tg.push_text(OWNER, OWNER, "please write the note");
    tg.wait_sent(3, WAIT);
    assert!(
        note.exists(),
        "the owner's identical turn did not write (the test proves nothing)"
    );
    stop(daemon)
}

#[test]
fn conflicts_server_errors_and_dropped_connections_are_outlasted_issue38() -> R {
    let tg = FakeTelegram::start()?;
    let root = TempRoot::new()?;
    let daemon = start(&root, &tg, &["Made it."], "")?;
    // Another poller on the token twice, a 502, a connection cut: the poller never gives up.
    tg.fail_next("getUpdates", Fault::Conflict409);
    tg.fail_next("getUpdates", Fault::Conflict409);
    tg.fail_next("getUpdates", Fault::ServerError(502));
    tg.fail_next("getUpdates", Fault::DropConnection);
    // And the reply's first attempt meets a 500.
    tg.fail_next("sendMessage", Fault::ServerError(500));
    tg.push_text(OWNER, OWNER, "are you there?");
    let replies = tg.wait_sent(1, Duration::from_secs(60));
    assert_eq!(replies[0].text.as_deref(), Some("Made it."));
    let refused = tg.refused();
    assert!(
        refused
            .iter()
            .filter(|r| r.0.eq_ignore_ascii_case("getUpdates"))
            .count()
            >= 3
            && refused.iter().any(|r| r.0 == "sendMessage" && r.1 == 500),
        "the faults were not met: {refused:?}"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        messages_to(&tg, OWNER).len(),
        1,
        "the 500 led to a second reply"
    );
    stop(daemon)
}

#[test]
fn a_reload_stops_and_restarts_the_channel_without_losing_or_repeating_issue38() -> R {
    let tg = FakeTelegram::start()?;
    let root = TempRoot::new()?;
    let mut daemon = start(&root, &tg, &["One.", "Two."], "")?;
    tg.push_text(OWNER, OWNER, "first");
    tg.wait_sent(1, WAIT);
    // A config change reloads the daemon in place: the new generation's channel takes over.
    let out = root.run(
        bin(),
        &["config", "set", "channels.telegram.home.allow", "[\"5\"]"],
    )?;
    assert!(out.status.success(), "{:?}", text(&out));
    daemon.saw_or_wait_for("generation=2", WAIT)?;
    tg.push_text(OWNER, OWNER, "second");
    tg.wait_sent(2, WAIT);
    std::thread::sleep(Duration::from_secs(2));
    let replies: Vec<Option<String>> = messages_to(&tg, OWNER)
        .into_iter()
        .map(|s| s.text)
        .collect();
    assert_eq!(
        replies,
        vec![Some("One.".to_string()), Some("Two.".to_string())]
    );
    let conflicts = tg.refused().into_iter().filter(|r| r.1 == 409).count();
    assert_eq!(conflicts, 0, "two pollers on one token after the reload");
    stop(daemon)
}
