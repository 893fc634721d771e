//! The gateway inside the real daemon, over real sockets: pairing through `warren pair`,
//! reload with a port change in the same process (STATE-19), an invalid reload keeps serving,
//! revoke through `warren tokens`, and neither the code nor the token reaches the logs
//! (STATE-15, STATE-21).

use crate::common::bin;
use std::time::Duration;

use pretty_assertions::assert_eq;
use warren_testkit::{DaemonChild, TempRoot, text};

type R = Result<(), Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(20);

use warren_testkit::{free_port, http};

#[test]
fn pair_reload_to_a_new_port_in_place_and_revoke_state15_state19_state21() -> R {
    let root = TempRoot::new()?;
    let (p1, p2) = (free_port()?, free_port()?);
    root.write_config(&format!("[agents.main]\n\n[gateway]\nport = {p1}\n"))?;
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for(&format!("gateway listening addr=127.0.0.1:{p1}"), WAIT)?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    assert_eq!(
        http(p1, "GET", "/health", None, "")?,
        (200, serde_json::json!({"status": "ok"}))
    );
    assert_eq!(http(p1, "GET", "/api/status", None, "")?.0, 401);

    // `warren pair` prints a one-time code; the device exchanges it for a token.
    let out = root.run(bin(), &["pair", "--json"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let code = serde_json::from_str::<serde_json::Value>(&stdout)?["code"]
        .as_str()
        .ok_or("no code")?
        .to_string();
    let (status, paired) = http(
        p1,
        "POST",
        "/pair",
        None,
        &serde_json::json!({"code": code, "device": "laptop"}).to_string(),
    )?;
    assert_eq!(status, 200, "{paired}");
    let token = paired["token"].as_str().ok_or("no token")?.to_string();
    let (status, s) = http(p1, "GET", "/api/status", Some(&token), "")?;
    assert_eq!(status, 200);
    assert_eq!(s["pid"], daemon.pid());

    // Reload with a port change: same PID, old port closed, new one answering. `warren config
    // set` asks the running daemon to reload (issue 15 §3).
    let out = root.run(bin(), &["config", "set", "gateway.port", &p2.to_string()])?;
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(
        text(&out).1.contains("the running daemon reloaded"),
        "{:?}",
        text(&out)
    );
    daemon.wait_for(&format!("gateway listening addr=127.0.0.1:{p2}"), WAIT)?;
    assert!(
        http(p1, "GET", "/health", None, "").is_err(),
        "old port closed"
    );
    let (status, s) = http(p2, "GET", "/api/status", Some(&token), "")?;
    assert_eq!(
        (status, s["pid"].clone()),
        (200, serde_json::json!(daemon.pid()))
    );
    let generation = s["daemon_generation"].clone();

    // An invalid config: the reload answers 400 naming the key, the old generation serves on.
    let good = root.read_config()?;
    std::fs::write(
        root.config_path(),
        good.replace(&format!("port = {p2}"), "port = \"x\""),
    )?;
    let (status, refused) = http(p2, "POST", "/admin/reload", Some(&token), "")?;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap_or("")
            .contains("gateway.port"),
        "{refused}"
    );
    let (status, s) = http(p2, "GET", "/api/status", Some(&token), "")?;
    assert_eq!((status, s["daemon_generation"].clone()), (200, generation));
    std::fs::write(root.config_path(), &good)?;

    // Revoke from the CLI: the running daemon reloads and the token stops working.
    let out = root.run(bin(), &["tokens", "list", "--json"])?;
    let listed: serde_json::Value = serde_json::from_str(&text(&out).0)?;
    assert_eq!(listed[0]["name"], "laptop");
    let id = listed[0]["id"].as_str().ok_or("no id")?.to_string();
    let out = root.run(bin(), &["tokens", "revoke", &id])?;
    assert!(out.status.success(), "{:?}", text(&out));
    daemon.wait_for("gateway listening", WAIT)?;
    assert_eq!(http(p2, "GET", "/api/status", Some(&token), "")?.0, 401);

    daemon.signal("TERM")?;
    daemon.wait_for("warren daemon stopped", WAIT)?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    // Neither the code nor the token ever reached the log (timestamps, which carry six-digit
    // fractions of a second, are left out of the search).
    let log = daemon
        .stderr_seen()
        .iter()
        .map(|l| l.split_once(' ').map_or(l.as_str(), |(_, rest)| rest))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(!log.contains(&code), "the pairing code was logged:\n{log}");
    assert!(!log.contains(&token[4..]), "the token was logged:\n{log}");
    assert!(
        !root.path().join("data/gateway.json").exists(),
        "endpoint removed on stop"
    );
    Ok(())
}

/// kill the daemon (SIGABRT at each config-save crash point) while it persists a paired
/// token's hash: the token was never returned, and the restarted daemon loads a whole config
/// whose token set matches its device list (STATE-15, CFG-4).
#[test]
fn a_crash_during_the_paired_token_save_never_hands_out_a_token_state15() -> R {
    for point in warren_config::failpoint::CONFIG_SAVE {
        let root = TempRoot::new()?;
        let port = free_port()?;
        root.write_config(&format!("[agents.main]\n\n[gateway]\nport = {port}\n"))?;
        let mut cmd = root.warren(bin(), &["daemon"]);
        cmd.env("FAILPOINTS", format!("{point}=return"));
        let mut daemon = DaemonChild::spawn(cmd)?;
        daemon.wait_for("warren daemon ready", WAIT)?;
        let out = root.run(bin(), &["pair", "--json"])?;
        let code = serde_json::from_str::<serde_json::Value>(&text(&out).0)?["code"]
            .as_str()
            .ok_or("no code")?
            .to_string();
        let body = serde_json::json!({"code": code, "device": "laptop"}).to_string();
        let answer = http(port, "POST", "/pair", None, &body);
        assert!(
            !matches!(&answer, Ok((200, _))),
            "{point}: a token was returned: {answer:?}"
        );
        daemon.wait_for(&format!("failpoint {point} reached"), WAIT)?;
        daemon.wait(WAIT)?;

        // Restart: the config is whole, and the registry follows the token set.
        let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
        daemon.wait_for("warren daemon ready", WAIT)?;
        let out = root.run(bin(), &["config", "validate"])?;
        assert!(out.status.success(), "{point}: {:?}", text(&out));
        let out = root.run(bin(), &["tokens", "list", "--json"])?;
        let listed: serde_json::Value = serde_json::from_str(&text(&out).0)?;
        let stored = root.read_config()?.matches("enc2:").count();
        assert_eq!(listed.as_array().map(Vec::len), Some(stored), "{point}");
        daemon.signal("TERM")?;
        daemon.wait(WAIT)?;
    }
    Ok(())
}

/// A second daemon on the same root is refused and the first one's gateway keeps answering
/// (LAYOUT-4); the published endpoint still names the first daemon.
#[test]
fn a_second_daemon_is_refused_and_the_first_gateway_keeps_serving_layout4() -> R {
    let root = TempRoot::new()?;
    let port = free_port()?;
    root.write_config(&format!("[agents.main]\n\n[gateway]\nport = {port}\n"))?;
    let mut first = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    first.wait_for("gateway listening", WAIT)?;
    let endpoint = std::fs::read_to_string(root.path().join("data/gateway.json"))?;
    let second = root.run(bin(), &["daemon"])?;
    assert_eq!(second.status.code(), Some(1), "{:?}", text(&second));
    assert_eq!(http(port, "GET", "/health", None, "")?.0, 200);
    assert_eq!(
        std::fs::read_to_string(root.path().join("data/gateway.json"))?,
        endpoint
    );
    let out = root.run(bin(), &["pair"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    let out = root.run(bin(), &["status", "--json"])?;
    let status: serde_json::Value = serde_json::from_str(&text(&out).0)?;
    assert_eq!(status["gateway"], format!("127.0.0.1:{port}"));
    assert!(!text(&out).0.contains("admin_key"));
    first.signal("TERM")?;
    assert_eq!(first.wait(WAIT)?.code(), Some(0));
    // With no daemon, `warren pair` says how to start one.
    let out = root.run(bin(), &["pair"])?;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("start `warren daemon` first"), "{stderr}");
    Ok(())
}
