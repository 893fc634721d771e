//! The real daemon serves the agent loop over HTTP: chat through `warren daemon`, component
//! health with the session store, and a reload that swaps the cost rates in place while the
//! ledger keeps each old record's own rate (STATE-14, STATE-17..19; issue 7's rate reload).

use crate::common::bin;
use std::time::Duration;

use warren_testkit::{DaemonChild, TempRoot, free_port, http, pair, text};

type R = Result<(), Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(20);

const SCRIPT: &str = r#"{"turns": [[{"text": "First.", "usage": {"input_tokens": 1000000, "output_tokens": 0}}],
                                    [{"text": "Second.", "usage": {"input_tokens": 1000000, "output_tokens": 0}}]]}"#;

#[test]
fn the_daemon_serves_chat_and_a_reload_reprices_only_new_requests_state14_state19() -> R {
    let root = TempRoot::new()?;
    std::fs::create_dir_all(root.path())?;
    let script = root.path().join("script.json");
    std::fs::write(&script, SCRIPT)?;
    let port = free_port()?;
    root.write_config(&format!(
        "[providers.demo]\nkind = \"script\"\nscript = \"{}\"\n\n[agents.main]\nprovider = \"demo\"\n\n[cost.rates.script]\ninput_per_mtok = 1.0\noutput_per_mtok = 0.0\n\n[gateway]\nport = {port}\n",
        script.display()
    ))?;
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    let token = pair(&root, bin(), port, "ci")?;
    let token = Some(token.as_str());

    let (status, health) = http(port, "GET", "/api/health", token, "")?;
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["components"]["sessions"]["status"], "ok", "{health}");
    assert_eq!(
        health["components"]["agents"]["main"]["status"], "ok",
        "{health}"
    );

    let (status, first) = http(
        port,
        "POST",
        "/api/agents/main/chat",
        token,
        r#"{"message": "one", "session": "a"}"#,
    )?;
    assert_eq!(
        (status, first["reply"].clone()),
        (200, "First.".into()),
        "{first}"
    );

    // New rate, reload in place (same PID): only the new request is priced at it.
    let out = root.run(
        bin(),
        &["config", "set", "cost.rates.script.input_per_mtok", "100.0"],
    )?;
    assert!(out.status.success(), "{:?}", text(&out));
    let (status, reloaded) = http(port, "POST", "/admin/reload", token, "")?;
    assert_eq!(status, 200, "{reloaded}");
    daemon.wait_for("gateway listening", WAIT)?;
    let (status, second) = http(
        port,
        "POST",
        "/api/agents/main/chat",
        token,
        r#"{"message": "one", "session": "b"}"#,
    )?;
    assert_eq!(status, 200, "{second}");
    let (status, costs) = http(port, "GET", "/api/costs", token, "")?;
    assert_eq!(status, 200, "{costs}");
    let priced: Vec<f64> = costs["records"]
        .as_array()
        .ok_or("no records")?
        .iter()
        .filter_map(|r| r["cost_usd"].as_f64())
        .collect();
    assert_eq!(priced, vec![1.0, 100.0], "{costs}");
    let (status, s) = http(port, "GET", "/api/status", token, "")?;
    assert_eq!(status, 200);
    assert_eq!(s["pid"], daemon.pid());

    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}
