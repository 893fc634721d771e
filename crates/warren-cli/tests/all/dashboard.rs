//! The dashboard in a real headless browser (issue 21; LIFE-1, STATE-13, STATE-17): Debian's
//! chromium, driven through chromedriver ([`warren_testkit::browser`]), against the real
//! `warren daemon` and the fake OpenAI server. An operator logs in with a pairing code, chats
//! and approves a tool call inline, watches a live event arrive, renames and deletes an agent
//! (plan first, typed confirmation), and every page renders with no console error at desktop
//! and phone width. Screenshots of each page land in `target/dashboard-screenshots/`.
//!
//! Fails (never skips) without chromium and chromium-driver: `.ci/prepare` installs them.

use crate::common::{bin, wait_until};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use warren_testkit::browser::Browser;
use warren_testkit::fake_llm::{FakeCall, FakeOpenAi, FakeReply};
use warren_testkit::{DaemonChild, TempRoot, free_port, http, text};

type R = Result<(), Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(20);

const PAGES: &[&str] = &[
    "overview",
    "agents",
    "chat",
    "sessions",
    "memory",
    "approvals",
    "costs",
    "logs",
    "cron",
    "sops",
];

/// `target/dashboard-screenshots/` of this workspace (the CI artifact directory).
fn screenshots() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/dashboard-screenshots")
        .components()
        .collect()
}

/// One GET on a fresh connection: (status line, lower-cased headers, body).
fn raw_get(port: u16, path: &str) -> std::io::Result<(String, String, Vec<u8>)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(raw.len());
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let (status, headers) = head.split_once("\r\n").unwrap_or((&head, ""));
    Ok((
        status.to_string(),
        headers.to_ascii_lowercase(),
        raw.get(split + 4..).unwrap_or_default().to_vec(),
    ))
}

/// The console messages since the last call, failing on any error or warning.
fn no_console_errors(b: &Browser, page: &str) -> R {
    let bad: Vec<_> = b
        .console()?
        .into_iter()
        .filter(|(level, _)| level == "SEVERE" || level == "WARNING")
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!("console errors on {page}: {bad:?}").into())
    }
}

/// Navigates to `#/<route>` and waits until the page has rendered.
fn open(b: &Browser, base: &str, route: &str) -> R {
    b.goto(&format!("{base}/#/{route}"))?;
    let page = route.split('/').next().unwrap_or(route);
    b.wait_for(&format!("html[data-page=\"{page}\"]"), None, WAIT)?;
    Ok(())
}

/// Serves `html` to every request on a new loopback port (another origin than the daemon's).
fn serve_page(html: String) -> std::io::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut head = [0u8; 4096];
            let _ = stream.read(&mut head);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{html}",
                html.len()
            );
        }
    });
    Ok(port)
}

fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
        if path.is_dir()
            && let Some(found) = find_file(&path, name)
        {
            return Some(found);
        }
    }
    None
}

#[test]
fn dashboard_in_chromium_pairs_chats_approves_renames_deletes_and_streams_life1_state13() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&format!(
        "{}\n\n\
         [risk_profiles.sup]\nautonomy = \"supervised\"\napproval_timeout_secs = 120\n\n\
         [agents.main]\nprovider = \"fake\"\nmodel = \"gpt-test\"\nrisk_profile = \"sup\"\n\n\
         [agents.helper]\nprovider = \"fake\"\nmodel = \"gpt-test\"\n\n\
         [cost.rates.\"gpt-test\"]\ninput_per_mtok = 100.0\noutput_per_mtok = 200.0\n\n\
         [gateway]\nport = {port}\n",
        fake.provider_toml("fake", "sk-test")
    ))?;
    // An SOP whose one step is an approval gate (its runs wait for the operator).
    let sops = root.path().join("shared/sops");
    std::fs::create_dir_all(&sops)?;
    std::fs::write(
        sops.join("release.toml"),
        "description = \"Ship a release\"\nagent = \"main\"\n\n[[steps]]\nid = \"ship\"\n\
         kind = \"approval\"\nmessage = \"Ship {{input.version}}?\"\n",
    )?;
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    let base = format!("http://127.0.0.1:{port}");
    let shots = screenshots();

    // The page and its assets: strict CSP, right types, cache rules; nothing inline.
    let (status, headers, body) = raw_get(port, "/")?;
    assert!(status.contains(" 200 "), "{status}");
    for want in [
        "content-type: text/html; charset=utf-8",
        "content-security-policy: default-src 'self'; script-src 'self'; style-src 'self'",
        "cache-control: no-cache",
        "x-content-type-options: nosniff",
        "x-frame-options: deny",
    ] {
        assert!(headers.contains(want), "GET / lacks '{want}':\n{headers}");
    }
    let html = String::from_utf8(body)?;
    assert!(
        !html.contains("<script>") && !html.contains("style="),
        "inline code in the page:\n{html}"
    );
    let build = html
        .split("/assets/")
        .nth(1)
        .and_then(|s| s.split('/').next())
        .ok_or("no asset path in the page")?
        .to_string();
    for (file, mime) in [
        ("app.js", "text/javascript"),
        ("pages.js", "text/javascript"),
        ("api.js", "text/javascript"),
        ("style.css", "text/css"),
        ("icon.svg", "image/svg+xml"),
    ] {
        let (status, headers, _) = raw_get(port, &format!("/assets/{build}/{file}"))?;
        assert!(status.contains(" 200 "), "{file}: {status}");
        assert!(
            headers.contains(&format!("content-type: {mime}")),
            "{file}:\n{headers}"
        );
        assert!(
            headers.contains("cache-control: public, max-age=31536000, immutable"),
            "{file}:\n{headers}"
        );
    }
    let (status, _, _) = raw_get(port, "/assets/000000000000/app.js")?;
    assert!(
        status.contains(" 404 "),
        "an old build's asset is not served: {status}"
    );

    let b = Browser::start(1280, 800)?;

    // Log in with a pairing code from `warren pair`.
    b.goto(&format!("{base}/"))?;
    b.wait_for("#pair-form", None, WAIT)?;
    no_console_errors(&b, "login")?;
    b.screenshot(&shots.join("login.png"))?;
    let out = root.run(bin(), &["pair", "--json"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    let code = serde_json::from_str::<Value>(&text(&out).0)?["code"]
        .as_str()
        .ok_or("no code")?
        .to_string();
    // A wrong code first: the page shows the API's refusal as it says it.
    let wrong = if code == "000000" { "111111" } else { "000000" };
    let input = b.find("#pair-code")?;
    b.type_text(&input, wrong)?;
    b.click(&b.find("#pair-form button[type=submit]")?)?;
    b.wait_for("main .error", Some("403 invalid_code: "), WAIT)?;
    let logged = b.console()?;
    assert!(
        logged
            .iter()
            .all(|(_, m)| m.contains("/pair") && m.contains("status of 403")),
        "only the refused request is logged: {logged:?}"
    );
    b.clear(&input)?;
    b.type_text(&input, &code)?;
    b.click(&b.find("#pair-form button[type=submit]")?)?;
    b.wait_for("html[data-page=\"overview\"]", None, WAIT)?;
    let token = b.eval("return sessionStorage.getItem('warren.token')", json!([]))?;
    let token = token
        .as_str()
        .ok_or("no token in sessionStorage")?
        .to_string();
    assert!(token.starts_with("wrn_"), "{token}");
    assert!(
        !b.url()?.contains(&token),
        "the token is never in a URL: {}",
        b.url()?
    );
    let cookies = b.eval("return document.cookie", json!([]))?;
    assert_eq!(cookies, "", "no cookies");
    let (status, _) = http(port, "GET", "/api/status", Some(&token), "")?;
    assert_eq!(
        status, 200,
        "the dashboard's token is a paired device token"
    );

    // Chat with main over the fake OpenAI server: a supervised file_write waits for the
    // operator, who approves it from the page. The reply tries markup: it shows as text.
    fake.push(FakeReply::calls(
        "I will write it.",
        vec![FakeCall::new(
            "call_1",
            "file_write",
            json!({"path": "out.md", "content": "hi from the dashboard"}),
        )],
    ));
    fake.push(FakeReply::text(
        "<img src=x onerror=\"window.__pwned=1\">Written.",
    ));
    open(&b, &base, "chat/main")?;
    let input = b.find("#chat-input")?;
    b.type_text(&input, "please write out.md")?;
    b.click(&b.find("#chat-send")?)?;
    let approve = b.wait_for("#transcript button.approve", None, WAIT)?;
    b.screenshot(&shots.join("chat-approval.png"))?;
    assert_eq!(
        find_file(root.path(), "out.md"),
        None,
        "nothing is written before the approval"
    );
    b.click(&approve)?;
    let done = b.wait_for(".msg.assistant[data-done=\"true\"]", None, WAIT)?;
    let shown = b.text(&done)?;
    assert!(
        shown.contains("<img src=x onerror=\"window.__pwned=1\">Written."),
        "{shown}"
    );
    assert!(
        shown.contains("file_write ok"),
        "the tool result is shown: {shown}"
    );
    let injected = b.eval(
        "return [window.__pwned === undefined, document.querySelectorAll('#transcript img').length]",
        json!([]),
    )?;
    assert_eq!(
        injected,
        json!([true, 0]),
        "a reply's markup is never parsed"
    );
    let written = find_file(root.path(), "out.md").ok_or("out.md was not written")?;
    assert_eq!(std::fs::read_to_string(written)?, "hi from the dashboard");
    no_console_errors(&b, "chat")?;
    b.screenshot(&shots.join("chat.png"))?;

    // The turn's session is listed, found by search, and its history page shows the turn.
    let key = b.eval(
        "return document.getElementById('chat-session').value",
        json!([]),
    )?;
    let key = key.as_str().ok_or("no session key")?.to_string();
    assert!(!key.is_empty(), "the chat page shows the session it used");
    open(&b, &base, "sessions/main")?;
    let search = b.find("#session-search")?;
    b.type_text(&search, "no-such-session")?;
    b.wait_for("main table", Some("none"), WAIT)?;
    b.clear(&search)?;
    b.type_text(&search, &key)?;
    b.click(&b.wait_for(&format!("a[href=\"#/sessions/main/{key}\"]"), None, WAIT)?)?;
    b.wait_for("#history", Some("please write out.md"), WAIT)?;
    b.wait_for("#history", Some("Written."), WAIT)?;
    no_console_errors(&b, "sessions")?;
    b.screenshot(&shots.join("sessions-history.png"))?;

    // A live event arrives on the logs page while it is open.
    open(&b, &base, "logs")?;
    b.wait_for("#live-status[data-live=\"true\"]", None, WAIT)?;
    let before = b.eval(
        "return document.querySelectorAll('#log-rows tr.live').length",
        json!([]),
    )?;
    assert_eq!(before, 0);
    let (status, answer) = http(
        port,
        "POST",
        "/api/agents/helper/chat",
        Some(&token),
        r#"{"message": "ping from elsewhere"}"#,
    )?;
    assert_eq!(status, 200, "{answer}");
    b.wait_for("#log-rows tr.live", Some("helper"), WAIT)?;
    no_console_errors(&b, "logs")?;
    b.screenshot(&shots.join("logs-live.png"))?;

    // The approvals queue is live: a call another client's turn waits on appears on the open
    // page and is approved there; the turn then ends.
    open(&b, &base, "approvals")?;
    fake.push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "call_2",
            "file_write",
            json!({"path": "queued.md", "content": "approved from the queue"}),
        )],
    ));
    fake.push(FakeReply::text("Queued write done."));
    let (status, accepted) = http(
        port,
        "POST",
        "/api/agents/main/chat",
        Some(&token),
        r#"{"message": "write queued.md", "session": "from-curl"}"#,
    )?;
    assert_eq!(status, 202, "{accepted}");
    let id = accepted["approval"]["id"]
        .as_str()
        .ok_or("no approval id")?;
    let turn = accepted["turn"].as_str().ok_or("no turn id")?;
    let button = b.wait_for(
        &format!("#approvals button.approve[data-approval=\"{id}\"]"),
        None,
        WAIT,
    )?;
    b.screenshot(&shots.join("approvals-live.png"))?;
    b.click(&button)?;
    // `?wait` answers at each change of status: running after the approval, then done.
    let mut ended = Value::Null;
    wait_until("the approved turn to end", WAIT, || {
        let (status, now) = http(
            port,
            "GET",
            &format!("/api/turns/{turn}?wait=5"),
            Some(&token),
            "",
        )?;
        assert_eq!(status, 200, "{now}");
        let done = now["status"] == "done";
        ended = now;
        Ok(done)
    })?;
    assert_eq!(ended["result"]["reply"], "Queued write done.", "{ended}");
    b.wait_for("#approvals", Some("0 waiting"), WAIT)?;
    no_console_errors(&b, "approvals")?;

    // Memory: a recall hit opens the entry with its provenance and history; Forget removes
    // it, a refusal shows as the API says it, and Undo brings the kept version back.
    for content in ["launch is on tuesday", "launch moved to friday"] {
        let out = root.run(
            bin(),
            &["memory", "store", "--agent", "main", "launch", content],
        )?;
        assert!(out.status.success(), "{:?}", text(&out));
    }
    open(&b, &base, "memory/main")?;
    b.click(&b.wait_for("main button[data-key=\"launch\"]", None, WAIT)?)?;
    b.wait_for("#memory-entry[data-version=\"2\"]", None, WAIT)?;
    let live = b.text(&b.find("#memory-entry pre.memory-content")?)?;
    assert_eq!(live, "launch moved to friday");
    let facts = b.text(&b.find("#memory-entry dl.facts")?)?;
    assert!(
        facts.contains("Trust") && facts.contains("operator") && facts.contains("via cli"),
        "the entry's provenance is shown: {facts}"
    );
    let entry = b.text(&b.find("#memory-entry")?)?;
    assert!(
        entry.contains("History of launch")
            && entry.contains("launch is on tuesday")
            && entry.contains("replaced"),
        "provenance and history are shown: {entry}"
    );
    b.screenshot(&shots.join("memory-entry.png"))?;
    b.click(&b.find("#memory-forget")?)?;
    b.wait_for("#memory-entry[data-version=\"forgotten\"]", None, WAIT)?;
    let path = "/api/agents/main/memory/launch";
    let (status, answer) = http(port, "GET", path, Some(&token), "")?;
    assert_eq!(status, 404, "forgotten through the page: {answer}");
    b.click(&b.find("#memory-undo")?)?;
    b.wait_for("#memory-entry[data-version=\"3\"]", None, WAIT)?;
    let live = b.text(&b.find("#memory-entry pre.memory-content")?)?;
    assert_eq!(
        live, "launch moved to friday",
        "undo shows the restored entry"
    );
    let (status, answer) = http(port, "GET", path, Some(&token), "")?;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["entry"]["content"], "launch moved to friday");
    // Forgotten behind the page's back: the page's Forget shows the API's 404 naming the key.
    let (status, answer) = http(port, "DELETE", path, Some(&token), "")?;
    assert_eq!(status, 200, "{answer}");
    b.click(&b.find("#memory-forget")?)?;
    b.wait_for(
        "#memory-entry .error",
        Some("404 unknown_memory: DELETE /api/agents/{alias}/memory/{key}: agent 'main' has no memory with key 'launch'"),
        WAIT,
    )?;
    let logged = b.console()?;
    assert!(
        logged
            .iter()
            .all(|(_, m)| m.contains("/memory/launch") && m.contains("status of 404")),
        "only the forgotten key's 404s are logged: {logged:?}"
    );
    b.click(&b.find("#memory-undo")?)?;
    b.wait_for("#memory-entry[data-version=\"4\"]", None, WAIT)?;
    let (status, _) = http(port, "GET", path, Some(&token), "")?;
    assert_eq!(status, 200, "undo brought it back");
    no_console_errors(&b, "memory")?;

    // Rename helper → helper2 through the UI.
    open(&b, &base, "agents")?;
    b.click(&b.find("button[data-action=rename][data-alias=helper]")?)?;
    let to = b.wait_for("#rename-to", None, WAIT)?;
    b.clear(&to)?;
    b.type_text(&to, "helper2")?;
    b.click(&b.find("#rename-form button[type=submit]")?)?;
    b.wait_for("#agent-result", Some("Renamed helper"), WAIT)?;
    let config = root.read_config()?;
    assert!(
        config.contains("[agents.helper2]") && !config.contains("[agents.helper]"),
        "{config}"
    );

    // Delete helper2: the plan is shown first, the button waits for the typed alias.
    b.click(&b.wait_for("button[data-action=delete][data-alias=helper2]", None, WAIT)?)?;
    let plan = b.wait_for("#delete-plan", Some("Records archived per store"), WAIT)?;
    let plan_text = b.text(&plan)?;
    assert!(plan_text.contains("Delete helper2: plan"), "{plan_text}");
    let go_disabled = "return document.getElementById('delete-go').disabled";
    assert_eq!(b.eval(go_disabled, json!([]))?, true);
    let confirm = b.find("#delete-confirm")?;
    b.type_text(&confirm, "helper")?;
    assert_eq!(
        b.eval(go_disabled, json!([]))?,
        true,
        "a wrong alias does not arm the button"
    );
    b.type_text(&confirm, "2")?;
    assert_eq!(b.eval(go_disabled, json!([]))?, false);
    b.screenshot(&shots.join("agents-delete-plan.png"))?;
    b.click(&b.find("#delete-go")?)?;
    b.wait_for("#agent-result", Some("Deleted helper2"), WAIT)?;
    let config = root.read_config()?;
    assert!(!config.contains("[agents.helper2]"), "{config}");
    let archives = root.path().join("data/agents/_deleted");
    let archive = std::fs::read_dir(&archives)?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("helper2-"))
        .ok_or("no helper2 archive")?;
    assert!(archives.join(&archive).join("manifest.json").is_file());
    b.wait_for(&format!("button[data-archive=\"{archive}\"]"), None, WAIT)?;
    let (_, agents) = http(port, "GET", "/api/agents", Some(&token), "")?;
    assert_eq!(agents["count"], 1, "the daemon serves main only: {agents}");
    no_console_errors(&b, "agents")?;
    b.screenshot(&shots.join("agents.png"))?;

    // Restore it from the archive list, under a new alias.
    let restore = b.find(&format!("button[data-archive=\"{archive}\"]"))?;
    b.type_text(
        &b.find(&format!("input[data-archive-as=\"{archive}\"]"))?,
        "helper3",
    )?;
    b.click(&restore)?;
    b.wait_for("#agent-result", Some("Restored"), WAIT)?;
    let config = root.read_config()?;
    assert!(config.contains("[agents.helper3]"), "{config}");
    assert!(archives.join(&archive).join("restored.json").is_file());
    b.wait_for("button[data-action=rename][data-alias=helper3]", None, WAIT)?;
    no_console_errors(&b, "agents (restore)")?;

    // An error is shown as the API says it (the failed request is the only console error).
    let (status, refused) = http(
        port,
        "POST",
        "/api/agents/main/rename",
        Some(&token),
        r#"{"to": "Bad Alias!"}"#,
    )?;
    assert_eq!(status, 400, "{refused}");
    b.click(&b.find("button[data-action=rename][data-alias=main]")?)?;
    let to = b.wait_for("#rename-to", None, WAIT)?;
    b.clear(&to)?;
    b.type_text(&to, "Bad Alias!")?;
    b.click(&b.find("#rename-form button[type=submit]")?)?;
    let message = refused["message"].as_str().ok_or("no message")?;
    b.wait_for("#agent-panel .error", Some(message), WAIT)?;
    let logged = b.console()?;
    assert!(
        logged
            .iter()
            .all(|(_, m)| m.contains("status of 400") && m.contains("/rename")),
        "{logged:?}"
    );

    // Cron: a job added over the API is listed; "Run" on the page runs it now, and its run
    // shows on the job's page.
    let (status, added) = http(
        port,
        "POST",
        "/api/cron",
        Some(&token),
        r#"{"name": "digest", "agent": "main", "every": "1h", "message": "Summarise the day"}"#,
    )?;
    assert_eq!(status, 201, "{added}");
    open(&b, &base, "cron")?;
    let run = b.wait_for("button[data-job=digest]", Some("Run"), WAIT)?;
    b.click(&run)?;
    let mut run_id = String::new();
    wait_until("the digest run", WAIT, || {
        let (_, runs) = http(port, "GET", "/api/cron/digest/runs", Some(&token), "")?;
        run_id = runs["runs"][0]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        Ok(!run_id.is_empty())
    })?;
    open(&b, &base, "cron/digest")?;
    b.wait_for("main", Some(&run_id), WAIT)?;
    no_console_errors(&b, "cron")?;
    b.screenshot(&shots.join("cron-runs.png"))?;

    // SOPs: a run waiting at its gate is listed on the SOP's page, opens on its own page
    // (the gate's step filled in) and is approved there; the run then ends ok.
    let (status, started) = http(
        port,
        "POST",
        "/api/sops/release/run",
        Some(&token),
        r#"{"input": {"version": "1.2"}}"#,
    )?;
    assert_eq!(status, 202, "{started}");
    let sop_run = started["run"]["id"]
        .as_str()
        .ok_or("no run id")?
        .to_string();
    wait_until("the run to wait at its gate", WAIT, || {
        let (_, run) = http(
            port,
            "GET",
            &format!("/api/sops/runs/{sop_run}"),
            Some(&token),
            "",
        )?;
        Ok(run["run"]["status"] == "waiting")
    })?;
    open(&b, &base, "sops/release")?;
    b.click(&b.wait_for(&format!("a[href=\"#/sops/run/{sop_run}\"]"), None, WAIT)?)?;
    b.wait_for("#sop-step", None, WAIT)?;
    assert_eq!(
        b.eval(
            "return document.getElementById('sop-step').value",
            json!([])
        )?,
        "ship",
        "the step the run waits at is filled in"
    );
    b.screenshot(&shots.join("sops-run.png"))?;
    b.click(&b.find("button[data-sop-decision=approve]")?)?;
    wait_until("the approved SOP run to end", WAIT, || {
        let (_, run) = http(
            port,
            "GET",
            &format!("/api/sops/runs/{sop_run}"),
            Some(&token),
            "",
        )?;
        Ok(run["run"]["status"] == "ok")
    })?;
    b.wait_for("main", Some("approved ship"), WAIT)?;
    no_console_errors(&b, "sops")?;

    // Every page: rendered, no error box, every control labelled, no console error; a
    // screenshot at 1280x800 and at phone width (390x844) without sideways scrolling.
    for (width, height, suffix) in [(1280, 800, ""), (390, 844, "-phone")] {
        b.resize(width, height)?;
        for page in PAGES {
            open(&b, &base, page)?;
            let state = b.eval(
                "return {errors: [...document.querySelectorAll('main .error')].map(e => e.textContent),
                         unlabelled: [...document.querySelectorAll('input, select, textarea')]
                            .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))
                            .map(e => e.outerHTML),
                         overflow: document.documentElement.scrollWidth - window.innerWidth}",
                json!([]),
            )?;
            assert_eq!(state["errors"], json!([]), "{page}{suffix}: {state}");
            assert_eq!(state["unlabelled"], json!([]), "{page}{suffix}: {state}");
            assert!(
                state["overflow"].as_i64().is_some_and(|o| o <= 0),
                "{page}{suffix} scrolls sideways: {state}"
            );
            no_console_errors(&b, page)?;
            b.screenshot(&shots.join(format!("{page}{suffix}.png")))?;
        }
    }
    b.resize(1280, 800)?;

    // Costs: the chart draws the day's spend at the configured rates (one day: the longest
    // bar), and the overview's "costs today" is the same sum, both as the API counts it.
    let (_, costs) = http(port, "GET", "/api/costs?limit=1000", Some(&token), "")?;
    let total = costs["total_usd"].as_f64().ok_or("no total_usd")?;
    assert!(total > 0.0, "the turns cost something: {costs}");
    let spent = format!("${total:.4}");
    open(&b, &base, "costs")?;
    let bars = b.eval(
        "return [...document.querySelectorAll('svg.chart rect.bar')]
           .map(r => [r.getAttribute('width'), r.querySelector('title').textContent])",
        json!([]),
    )?;
    let bars = bars.as_array().cloned().unwrap_or_default();
    assert_eq!(bars.len(), 1, "{bars:?}");
    assert_eq!(
        bars[0][0], "340",
        "the only day is the longest bar: {bars:?}"
    );
    assert!(
        bars[0][1]
            .as_str()
            .is_some_and(|t| t.ends_with(&format!(": {spent}"))),
        "{bars:?} vs {spent}"
    );
    open(&b, &base, "overview")?;
    assert_eq!(b.text(&b.find("#costs-today")?)?, spent);

    // Keyboard: the skip link comes first, and a focused nav link opens its page with Enter.
    b.goto("about:blank")?;
    open(&b, &base, "overview")?;
    b.keys("\u{E004}")?;
    let first = b.eval("return document.activeElement.outerHTML", json!([]))?;
    assert!(
        first.as_str().is_some_and(|f| f.contains("class=\"skip\"")),
        "Tab reaches the skip link first: {first}"
    );
    b.keys("\u{E007}")?;
    let main = b.eval("return document.activeElement.id", json!([]))?;
    assert_eq!(main, "main", "the skip link moves focus to the page");
    assert_eq!(
        b.eval("return location.hash", json!([]))?,
        "#/overview",
        "and stays on it"
    );
    b.eval(
        "document.querySelector('#nav a[href=\"#/costs\"]').focus()",
        json!([]),
    )?;
    b.keys("\u{E007}")?;
    b.wait_for("html[data-page=\"costs\"]", None, WAIT)?;

    // The policy is enforced: an injected inline script does not run (it would without CSP).
    let ran = b.eval(
        "const s = document.createElement('script'); s.textContent = 'window.__inline = 1';
         document.body.append(s); return window.__inline === undefined",
        json!([]),
    )?;
    assert_eq!(ran, true, "an inline script ran");
    let logged = b.console()?;
    assert!(
        logged
            .iter()
            .any(|(_, m)| m.contains("Content Security Policy")),
        "{logged:?}"
    );

    // Log out: the tab forgets the token; the device stays paired.
    b.click(&b.find("#logout")?)?;
    b.wait_for("#pair-form", None, WAIT)?;
    let kept = b.eval("return sessionStorage.getItem('warren.token')", json!([]))?;
    assert_eq!(kept, Value::Null);
    let (status, _) = http(port, "GET", "/api/status", Some(&token), "")?;
    assert_eq!(status, 200, "logging out revokes nothing");

    // Another origin cannot frame the dashboard (clickjacking; `frame-ancestors 'none'`), while
    // it can frame a route without that header (/health): the attack works without the guard.
    let evil = serve_page(format!(
        "<!doctype html><iframe src=\"{base}/health\"></iframe><iframe src=\"{base}/\"></iframe>"
    ))?;
    b.goto(&format!("http://127.0.0.1:{evil}/"))?;
    let framed = |index| -> Result<String, Box<dyn std::error::Error>> {
        b.frame(Some(index))?;
        let url = b.eval("return location.href", json!([]))?;
        b.frame(None)?;
        Ok(url.as_str().unwrap_or_default().to_string())
    };
    wait_until("the unguarded frame to load", WAIT, || {
        Ok(framed(0)? == format!("{base}/health"))
    })?;
    // Chromium shows its error page in a refused frame (the frame does not stay about:blank).
    wait_until("the dashboard's frame to be refused", WAIT, || {
        let url = framed(1)?;
        assert_ne!(
            url,
            format!("{base}/"),
            "the dashboard loaded inside a frame"
        );
        Ok(url.starts_with("chrome-error://"))
    })?;

    wait_until("no pending approval", WAIT, || {
        Ok(http(port, "GET", "/api/approvals", Some(&token), "")?.1["count"] == 0)
    })?;
    drop(b);
    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}
