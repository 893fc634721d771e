//! A local process cannot lock the operator out of pairing (issue 35 §9, STATE-21), against the
//! real daemon over real sockets: a flood of wrong pairing codes from loopback locks the
//! loopback address out of `POST /pair`, so the operator's own code is refused there (the
//! attack works against the code path); `warren pair --device NAME` still pairs, proven by the
//! admin key of `data/gateway.json`, and a paired bearer token cannot use that route.

use std::time::Duration;

use warren_testkit::{DaemonChild, TempRoot, free_port, http, text};

use crate::common::bin;

type R = Result<(), Box<dyn std::error::Error>>;

#[test]
fn a_flood_of_bad_pairing_codes_from_loopback_does_not_lock_the_operator_out_issue35() -> R {
    let root = TempRoot::new()?;
    let port = free_port()?;
    root.write_config(&format!("[agents.main]\n\n[gateway]\nport = {port}\n"))?;
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", Duration::from_secs(30))?;

    // The operator asks for a code; a local process floods wrong guesses from loopback.
    let out = root.run(bin(), &["pair", "--json"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let code = serde_json::from_str::<serde_json::Value>(&stdout)?["code"]
        .as_str()
        .ok_or("no code")?
        .to_string();
    let wrong = if code == "000000" { "111111" } else { "000000" };
    let guess = serde_json::json!({"code": wrong, "device": "x"}).to_string();
    let mut last = 0;
    for _ in 0..30 {
        last = http(port, "POST", "/pair", None, &guess)?.0;
    }
    assert_eq!(last, 429, "the flood locked loopback out");

    // Guard off (the code path alone): the operator's right code is refused now.
    let mine = serde_json::json!({"code": code, "device": "laptop"}).to_string();
    let (status, body) = http(port, "POST", "/pair", None, &mine)?;
    assert_eq!(status, 429, "the attack works on the code path: {body}");

    // Guard on: `warren pair --device` proves the operator by the admin key and pairs anyway.
    let out = root.run(bin(), &["pair", "--device", "laptop", "--json"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let paired: serde_json::Value = serde_json::from_str(&stdout)?;
    let token = paired["token"].as_str().ok_or("no token")?.to_string();
    assert_eq!(paired["device"]["name"], "laptop");
    let (status, _) = http(port, "GET", "/api/status", Some(&token), "")?;
    assert_eq!(status, 200, "the operator's token works");

    // The route needs the admin key itself: neither a bearer token nor nothing opens it.
    let device = serde_json::json!({"device": "evil"}).to_string();
    let (status, body) = http(port, "POST", "/admin/pair", Some(&token), &device)?;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"], "admin_key_required", "{body}");
    let (status, body) = http(port, "POST", "/admin/pair", None, &device)?;
    assert!(status == 401 || status == 403, "{status}: {body}");
    let out = root.run(bin(), &["tokens", "list", "--json"])?;
    let listed = text(&out).0;
    assert!(!listed.contains("evil"), "{listed}");
    drop(daemon);
    Ok(())
}
