//! `http_request` and `warren security egress` end to end (issue 24): the real binary, the
//! fake OpenAI server driving the call, a plain-HTTP server on loopback as the allowed host,
//! and the secret stored through `warren config set --secret`.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use serde_json::json;
use warren_testkit::fake_llm::{FakeCall, FakeOpenAi, FakeReply};
use warren_testkit::{TempRoot, text};

use crate::common::{bin, json_of};

type R = Result<(), Box<dyn std::error::Error>>;

const SECRET: &str = "ghp_CliBrokeredToken_40417x";

/// A plain-HTTP server on loopback (the hosts of the egress tests here, in `subagent_http` and
/// in `mcp`): answers every request `200 {body}` and records its request head.
pub(crate) fn upstream(body: &'static str) -> std::io::Result<(u16, Arc<Mutex<Vec<String>>>)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&heads);
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let Ok(clone) = stream.try_clone() else {
                continue;
            };
            let mut reader = BufReader::new(clone);
            let mut head = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                head.push_str(&line);
            }
            if let Ok(mut h) = seen.lock() {
                h.push(head);
            }
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    Ok((port, heads))
}

/// The request lines of the heads `upstream` recorded.
pub(crate) fn request_lines(heads: &Arc<Mutex<Vec<String>>>) -> Vec<String> {
    heads
        .lock()
        .map(|h| {
            h.iter()
                .map(|head| head.lines().next().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn http_request_uses_a_brokered_secret_and_security_egress_shows_it_issue24() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let (port, heads) = upstream("ok")?;
    let host = format!("127.0.0.1:{port}");
    root.write_config(&format!(
        "[agents.main]\nprovider = \"fake\"\nmodel = \"gpt-test\"\nrisk_profile = \"hands\"\n\n[agents.main.network]\nallow = [\"{host}\"]\n\n[risk_profiles.hands]\nautonomy = \"full\"\n\n{}\n\n[secrets.gh]\nhosts = [\"http://{host}\"]\n",
        fake.provider_toml("fake", "sk-e2e-provider")
    ))?;
    // The value goes in through the one secrets mechanism (stdin, stored encrypted).
    let mut child = root
        .warren(bin(), &["config", "set", "secrets.gh.value", "--secret"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut input) = child.stdin.take() {
        input.write_all(format!("{SECRET}\n").as_bytes())?;
    }
    let out = child.wait_with_output()?;
    assert!(out.status.success(), "{}", text(&out).1);
    let config = root.read_config()?;
    assert!(
        !config.contains(SECRET) && config.contains("enc2:"),
        "{config}"
    );

    fake.push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "c1",
            "http_request",
            json!({"url": format!("http://{host}/user"),
                   "headers": {"Authorization": "token {{secret:gh}}"}}),
        )],
    ));
    fake.push(FakeReply::text("fetched"));
    let out = root.run(bin(), &["agent", "-a", "main", "-m", "who am i"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(!stdout.contains(SECRET) && !stderr.contains(SECRET));
    let got = heads.lock().map(|h| h.clone()).unwrap_or_default();
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].to_ascii_lowercase().contains(&format!(
            "authorization: token {}",
            SECRET.to_ascii_lowercase()
        )),
        "{}",
        got[0]
    );

    let v = json_of(&root, &["security", "egress", "main"])?;
    assert_eq!(v["allow"], json!([host]));
    // Plain HTTP on loopback: the entry names http:// (issue 35 §3), shown as written.
    assert_eq!(
        v["secrets"],
        json!([{"host": format!("http://{host}"), "secret": "gh"}])
    );
    let recent = v["recent"].as_array().cloned().unwrap_or_default();
    assert_eq!(recent.len(), 1, "{recent:?}");
    assert_eq!(
        (
            recent[0]["via"].clone(),
            recent[0]["method"].clone(),
            recent[0]["status"].clone()
        ),
        (json!("http_request"), json!("GET"), json!(200))
    );
    let out = root.run(bin(), &["security", "egress", "main"])?;
    let shown = text(&out).0;
    assert!(
        shown.contains(&format!("{{{{secret:gh}}}} usable at http://{host}")),
        "{shown}"
    );
    assert!(!shown.contains(SECRET));
    Ok(())
}
