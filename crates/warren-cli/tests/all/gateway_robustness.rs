//! The gateway of the real daemon under hostile or unlucky clients (issue 15): slow and idle
//! clients are cut off and the connection cap is logged (§4), request bodies are strict and
//! every error is JSON (§9), config edits made beside the daemon are picked up instead of
//! refused (§3), and reloads drop no connection (§5). Real sockets, real `warren` binary.

use crate::common::bin;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use warren_testkit::fake_llm::FakeOpenAi;
use warren_testkit::{DaemonChild, TempRoot, free_port, http, pair, text};

type R = Result<(), Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(20);

fn connect(port: u16) -> io::Result<TcpStream> {
    let stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Reads until the server closes the connection; returns how long that took from `since`
/// (a reset counts as closed).
fn closed_after(stream: &mut TcpStream, since: Instant) -> io::Result<Duration> {
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(since.elapsed()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(since.elapsed()),
            Err(e) => return Err(e),
        }
    }
}

/// A keep-alive HTTP/1.1 connection: many requests, one socket.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn open(port: u16) -> io::Result<Self> {
        Ok(Self {
            stream: connect(port)?,
            buf: Vec::new(),
        })
    }

    /// One request; an `Err` is a connection that closed or reset without a whole response.
    fn request(
        &mut self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: &str,
    ) -> io::Result<(u16, Value)> {
        let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
        // One write: a request split over several small segments waits for delayed ACKs.
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        self.stream.write_all(request.as_bytes())?;
        let head_end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            self.fill()?;
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).to_ascii_lowercase();
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| io::Error::other(format!("no content-length in {head}")))?;
        while self.buf.len() < head_end + length {
            self.fill()?;
        }
        let body: Vec<u8> = self.buf.drain(..head_end + length).skip(head_end).collect();
        Ok((status, serde_json::from_slice(&body).unwrap_or_default()))
    }

    fn fill(&mut self) -> io::Result<()> {
        let mut chunk = [0u8; 8192];
        let n = self.stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed without a whole response",
            ));
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }
}

/// Issue 15 §4: a client that sends nothing, one that trickles its header a byte at a time
/// (each byte well inside the timeout) and an idle keep-alive connection are all closed; the
/// idle one only after the longer idle timeout. At the connection cap a new client waits
/// (its request is answered once a slot frees) and the daemon says so in its log.
#[test]
fn slow_and_idle_clients_are_cut_off_and_the_cap_is_logged_issue15() -> R {
    let root = TempRoot::new()?;
    let port = free_port()?;
    root.write_config(&format!(
        "[agents.main]\n\n[gateway]\nport = {port}\nheader_read_timeout_secs = 1\nidle_timeout_secs = 3\nmax_connections = 4\n"
    ))?;
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", WAIT)?;

    // Sends nothing: closed after the header timeout.
    let started = Instant::now();
    let mut silent = connect(port)?;
    let silent_closed = closed_after(&mut silent, started)?;

    // Trickles a header that never ends, a byte every 200 ms.
    let mut slow = connect(port)?;
    let started = Instant::now();
    let trickled = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut slow_closed = None;
    for byte in trickled {
        if slow.write_all(&[*byte]).is_err() {
            slow_closed = Some(started.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let slow_closed = match slow_closed {
        Some(at) => at,
        None => closed_after(&mut slow, started)?,
    };

    // Keep-alive, then idle: open past the header timeout, closed at the idle timeout.
    let mut idle = Conn::open(port)?;
    assert_eq!(idle.request("GET", "/health", None, "")?.0, 200);
    let started = Instant::now();
    let idle_closed = closed_after(&mut idle.stream, started)?;

    eprintln!(
        "silent client closed after {silent_closed:?}, trickling client after {slow_closed:?}, idle keep-alive after {idle_closed:?}"
    );
    assert!(
        silent_closed >= Duration::from_millis(900) && silent_closed < Duration::from_secs(3),
        "silent client closed after {silent_closed:?} (header timeout 1 s)"
    );
    assert!(
        slow_closed < Duration::from_secs(4),
        "trickling client still open after {slow_closed:?} (header timeout 1 s)"
    );
    assert!(
        idle_closed >= Duration::from_millis(2900) && idle_closed < Duration::from_secs(6),
        "idle keep-alive closed after {idle_closed:?} (idle timeout 3 s)"
    );

    // The cap: 4 silent connections hold every slot; a fifth client's request is answered
    // only once the header timeout frees one, and the cap is logged.
    let holders = (0..4)
        .map(|_| connect(port))
        .collect::<io::Result<Vec<_>>>()?;
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let (status, body) = http(port, "GET", "/health", None, "")?;
    let waited = started.elapsed();
    eprintln!("the fifth client waited {waited:?} at the cap");
    assert_eq!((status, body), (200, json!({"status": "ok"})));
    assert!(
        waited >= Duration::from_millis(500),
        "served after {waited:?}: the cap did not hold"
    );
    daemon.wait_for(
        "gateway connection limit reached ([gateway] max_connections = 4)",
        WAIT,
    )?;
    drop(holders);
    assert_eq!(http(port, "GET", "/health", None, "")?.0, 200);
    Ok(())
}

/// Issue 15 §9: a body with bytes after its JSON value is refused with 400 naming the
/// position (and nothing is created); a body over the limit, a bad path parameter and a
/// wrong method answer in the documented JSON error shape; a config.toml that is not UTF-8
/// is refused naming line and column, once.
#[test]
fn request_bodies_are_strict_and_every_error_is_json_issue15() -> R {
    let root = TempRoot::new()?;
    let port = free_port()?;
    root.write_config(&format!("[agents.main]\n\n[gateway]\nport = {port}\n"))?;
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    let token = pair(&root, bin(), port, "ci")?;
    let token = Some(token.as_str());

    let (status, refused) = http(
        port,
        "POST",
        "/api/agents",
        token,
        r#"{"alias": "extra"} "trailing""#,
    )?;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"], "invalid_request", "{refused}");
    let message = refused["message"].as_str().unwrap_or("");
    assert!(message.contains("line 1 column 20"), "{refused}");
    assert!(
        !root.read_config()?.contains("extra"),
        "the agent was created from a body with trailing data"
    );

    let (status, refused) = http(
        port,
        "PATCH",
        "/api/config",
        token,
        r#"{"log.level": "debug"}}}}garbage"#,
    )?;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap_or("")
            .contains("line 1 column 23"),
        "{refused}"
    );

    let huge = format!(r#"{{"log.level": "{}"}}"#, "x".repeat(100 * 1024));
    let (status, refused) = http(port, "PATCH", "/api/config", token, &huge)?;
    assert_eq!(status, 413);
    assert_eq!(refused["error"], "payload_too_large", "{refused}");

    let (status, refused) = http(port, "GET", "/api/agents/main/sessions/%FF", token, "")?;
    assert_eq!(status, 400);
    assert_eq!(refused["error"], "invalid_request", "{refused}");

    let (status, refused) = http(port, "PUT", "/health", None, "")?;
    assert_eq!(status, 405);
    assert_eq!(refused["error"], "method_not_allowed", "{refused}");
    drop(daemon);

    // config.toml with a byte that is not UTF-8 on line 3, column 5.
    let mut bad = b"[agents.main]\n\n# caf".to_vec();
    bad.extend_from_slice(b"\xe9 au lait\n");
    std::fs::write(root.config_path(), &bad)?;
    let out = root.run(bin(), &["config", "validate"])?;
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("config.toml:3:6"), "{stderr}");
    assert_eq!(
        stderr.matches("invalid UTF-8").count(),
        1,
        "said once: {stderr}"
    );
    Ok(())
}

/// Issue 15 §3: a hand edit made while the daemon runs is picked up by the next PATCH,
/// pairing and agent add (the daemon reloads and retries instead of answering 409); `warren
/// config set` makes the running daemon reload; an invalid hand edit keeps the old
/// generation serving, is reported in `/api/health` and the log, and a pairing refused
/// because of it does not consume the code.
#[test]
fn config_edits_beside_the_daemon_are_picked_up_issue15() -> R {
    let root = TempRoot::new()?;
    let port = free_port()?;
    root.write_config(&format!("[agents.main]\n\n[gateway]\nport = {port}\n"))?;
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    let token = pair(&root, bin(), port, "ci")?;
    let token = Some(token.as_str());

    // The CLI's write reaches the running daemon without a manual reload.
    let out = root.run(bin(), &["config", "set", "cost.monthly_limit_usd", "41"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    let (status, config) = http(port, "GET", "/api/config", token, "")?;
    assert_eq!(status, 200);
    assert_eq!(
        config["config"]["cost"]["monthly_limit_usd"], 41.0,
        "{config}"
    );

    // A hand edit, then a PATCH: both land.
    let edited = root
        .read_config()?
        .replace("[agents.main]", "[agents.main]\nmodel = \"hand-edit\"");
    std::fs::write(root.config_path(), &edited)?;
    let (status, patched) = http(
        port,
        "PATCH",
        "/api/config",
        token,
        r#"{"cost.monthly_limit_usd": 42}"#,
    )?;
    assert_eq!(status, 200, "{patched}");
    let on_disk = root.read_config()?;
    assert!(
        on_disk.contains("hand-edit") && on_disk.contains("42"),
        "{on_disk}"
    );

    // A hand edit, then an agent add.
    std::fs::write(
        root.config_path(),
        on_disk.replace("hand-edit", "hand-edit-2"),
    )?;
    let (status, added) = http(port, "POST", "/api/agents", token, r#"{"alias": "helper"}"#)?;
    assert_eq!(status, 201, "{added}");

    // A hand edit, then a pairing.
    let on_disk = root.read_config()?;
    std::fs::write(
        root.config_path(),
        on_disk.replace("hand-edit-2", "hand-edit-3"),
    )?;
    let out = root.run(bin(), &["pair", "--json"])?;
    let code = serde_json::from_str::<Value>(&text(&out).0)?["code"]
        .as_str()
        .ok_or("no code")?
        .to_string();
    let pair_body = json!({"code": code, "device": "second"}).to_string();
    // An invalid hand edit first: the pairing is refused naming the problem, the code stays.
    let good = root.read_config()?;
    std::fs::write(
        root.config_path(),
        good.replace(&format!("port = {port}"), "port = \"x\""),
    )?;
    let (status, refused) = http(port, "POST", "/pair", None, &pair_body)?;
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap_or("")
            .contains("gateway.port"),
        "{refused}"
    );
    let (status, health) = http(port, "GET", "/api/health", token, "")?;
    assert_eq!(status, 200);
    assert_eq!(
        health["components"]["config"]["status"], "error",
        "{health}"
    );
    assert!(
        health["components"]["config"]["error"]
            .as_str()
            .unwrap_or("")
            .contains("gateway.port"),
        "{health}"
    );
    daemon.wait_for("keeping the running generation", WAIT)?;
    // Fixed: the same code pairs.
    std::fs::write(root.config_path(), &good)?;
    let (status, paired) = http(port, "POST", "/pair", None, &pair_body)?;
    assert_eq!(status, 200, "{paired}");
    let (status, health) = http(port, "GET", "/api/health", token, "")?;
    assert_eq!(
        (status, health["components"]["config"]["status"].clone()),
        (200, json!("ok")),
        "{health}"
    );
    let on_disk = root.read_config()?;
    assert!(
        on_disk.contains("hand-edit-3") && on_disk.contains("[agents.helper]"),
        "{on_disk}"
    );

    // `warren agents add` makes the running daemon serve the new agent at once.
    let out = root.run(bin(), &["agents", "add", "third"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    let (status, agents) = http(port, "GET", "/api/agents", token, "")?;
    assert_eq!(status, 200);
    let served: Vec<&str> = agents["agents"]
        .as_array()
        .ok_or("no agents")?
        .iter()
        .filter_map(|a| a["alias"].as_str())
        .collect();
    assert!(served.contains(&"third"), "{agents}");
    Ok(())
}

/// Issue 15 §5: 100 reloads (45 `POST /admin/reload`, 45 SIGHUP, 10 agent renames through the
/// lifecycle API) while one client hammers
/// `/health` on a keep-alive connection,
/// another on fresh connections, and a third chats on a keep-alive connection: every request
/// gets a whole response (0 resets, 0 closes without an answer), each a 200.
#[test]
fn reloads_drop_no_connection_issue15() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&format!(
        "[agents.main]\nprovider = \"fake\"\nmodel = \"gpt-test\"\n\n[agents.spare]\nprovider = \"fake\"\nmodel = \"gpt-test\"\n\n{}\n\n[gateway]\nport = {port}\n",
        fake.provider_toml("fake", "sk-test")
    ))?;
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    let token = pair(&root, bin(), port, "ci")?;

    let done = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let spawn = |name: &'static str, work: Box<dyn Fn(usize) -> Result<(), String> + Send>| {
        let (done, failures) = (Arc::clone(&done), Arc::clone(&failures));
        let count = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&count);
        let handle = std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let n = counted.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = work(n)
                    && let Ok(mut f) = failures.lock()
                {
                    f.push(format!("{name} request {n}: {e}"));
                }
            }
        });
        (name, count, handle)
    };
    let keep_alive = |port: u16| std::sync::Mutex::new(Conn::open(port).ok());
    let request = move |conn: &std::sync::Mutex<Option<Conn>>,
                        method: &str,
                        path: &str,
                        token: Option<&str>,
                        body: &str|
          -> Result<(), String> {
        let mut guard = conn.lock().map_err(|e| e.to_string())?;
        let outcome = match guard.as_mut() {
            Some(c) => c.request(method, path, token, body),
            None => Err(io::Error::other("no connection")),
        };
        match outcome {
            Ok((200, _)) => Ok(()),
            Ok((status, body)) => Err(format!("status {status}: {body}")),
            Err(e) => {
                *guard = Conn::open(port).ok(); // the next request on a new connection
                Err(e.to_string())
            }
        }
    };
    let health_conn = keep_alive(port);
    let chat_conn = keep_alive(port);
    let chat_token = token.clone();
    let workers = vec![
        spawn(
            "keep-alive /health",
            Box::new(move |_| request(&health_conn, "GET", "/health", None, "")),
        ),
        spawn(
            "fresh-connection /health",
            Box::new(move |_| match http(port, "GET", "/health", None, "") {
                Ok((200, _)) => Ok(()),
                Ok((status, body)) => Err(format!("status {status}: {body}")),
                Err(e) => Err(e.to_string()),
            }),
        ),
        spawn(
            "keep-alive chat",
            Box::new(move |n| {
                let body =
                    json!({"message": format!("hello {n}"), "session": format!("s{}", n % 8)});
                request(
                    &chat_conn,
                    "POST",
                    "/api/agents/main/chat",
                    Some(&chat_token),
                    &body.to_string(),
                )
            }),
        ),
    ];

    // Every tenth reload is a lifecycle call's (an agent rename, back and forth); of the rest,
    // half go through the API and half by SIGHUP (as `kill -HUP` and the issue's run). Each
    // reload ends in one "warren daemon ready" line; a SIGHUP's reload has finished once the
    // log holds one such line per reload so far.
    let started = Instant::now();
    let mut readies = 0;
    let mut spare = ["spare", "spare2"];
    for i in 0..100 {
        if i % 10 == 9 {
            let (status, body) = http(
                port,
                "POST",
                &format!("/api/agents/{}/rename", spare[0]),
                Some(&token),
                &json!({"to": spare[1]}).to_string(),
            )?;
            assert_eq!(status, 200, "rename {i}: {body}");
            assert!(body["reloaded_generation"].is_u64(), "reload {i}: {body}");
            spare.reverse();
        } else if i % 2 == 0 {
            let (status, body) = http(port, "POST", "/admin/reload", Some(&token), "")?;
            assert_eq!(status, 200, "reload {i}: {body}");
        } else {
            daemon.signal("HUP")?;
            while readies <= i {
                daemon.wait_for("warren daemon ready", WAIT)?;
                readies += 1;
            }
        }
    }
    let elapsed = started.elapsed();
    std::thread::sleep(Duration::from_millis(200));
    done.store(true, Ordering::Relaxed);
    let mut counts = Vec::new();
    for (name, count, handle) in workers {
        handle.join().map_err(|_| format!("{name} panicked"))?;
        counts.push(format!("{name}: {}", count.load(Ordering::Relaxed)));
    }
    let failures = failures.lock().map_err(|e| e.to_string())?.clone();
    eprintln!(
        "100 reloads in {elapsed:?}; requests {}; failures {}",
        counts.join(", "),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}

/// Every 5xx the daemon answers is one log line naming method, path, status and error code
/// (issue 15 §8): a chat whose provider is unreachable answers 502 `provider_error`, and the
/// daemon's log says so.
#[test]
fn every_5xx_the_daemon_answers_is_logged_issue15() -> R {
    let root = TempRoot::new()?;
    let port = free_port()?;
    let dead = free_port()?; // nothing listens there
    root.write_config(&format!(
        "[agents.main]\nprovider = \"dead\"\nmodel = \"m\"\n\n\
         [providers.dead]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:{dead}/v1\"\n\
         api_key = \"sk-unused\"\nretry_backoff_ms = 1\n\n[gateway]\nport = {port}\n"
    ))?;
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    let token = pair(&root, bin(), port, "ci")?;
    let token = Some(token.as_str());

    let (status, body) = http(port, "GET", "/api/agents/nobody/sessions", token, "")?;
    assert_eq!(status, 404, "{body}");
    let (status, body) = http(
        port,
        "POST",
        "/api/agents/main/chat",
        token,
        r#"{"message": "hi"}"#,
    )?;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"], "provider_error", "{body}");
    let line = daemon.wait_for("answered 502", WAIT)?;
    assert!(
        line.contains("POST /api/agents/main/chat answered 502: provider_error"),
        "{line}"
    );
    assert!(!line.contains("sk-unused"), "no secret in the log: {line}");

    daemon.signal("TERM")?;
    let out = daemon.wait(WAIT)?;
    assert_eq!(out.code(), Some(0));
    Ok(())
}
