//! The control-socket probe of `warren security selftest` (issue 35 §1): from inside the agent's
//! sandbox, read the daemon's socket key or the gateway's admin key, and open an ACP session as
//! another agent on a control socket.
//!
//! The judge serves a socket of its own beside `data/daemon.sock`, with a key of its own beside
//! `data/daemon.key`, guarded by exactly the daemon's [`Guard`]; the verdict is the judge's (a
//! handshake it admitted), not the child's word. The child also tries the real `data/daemon.sock`
//! when a daemon runs (its answer then comes from the daemon itself) and every key file.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::Sandbox;
use super::selftest::{Outcome, Probe, ProbeSpec, Targets, Unprobed, nanos, succeeded};
use super::selftest_stage::Refused;
use crate::control_socket::{ControlKey, Guard};

/// What the child aims at (the probe's target, as JSON).
#[derive(Debug, Serialize, Deserialize)]
struct Aim {
    /// The judge's socket and key.
    socket: String,
    key: String,
    /// The daemon's own socket, its key and the gateway's admin key.
    daemon_socket: String,
    daemon_key: String,
    gateway_admin: String,
    /// The agent the child claims to be.
    other: String,
}

/// The agent the probe impersonates: a sibling it has a grant on, or a name that is not its own.
fn other_agent(sandbox: &Sandbox) -> String {
    let p = sandbox.policy();
    p.read_write_roots()
        .iter()
        .chain(p.read_only_roots())
        .chain(p.write_only_roots())
        .map(|g| g.alias.to_string())
        .next()
        .unwrap_or_else(|| format!("not-{}", p.alias()))
}

/// Runs the probe against a socket served with `guard`.
pub(super) fn judge(
    sandbox: &Sandbox,
    t: &Targets,
    guard: Guard,
) -> Result<(Outcome, String), Unprobed> {
    let data = t
        .daemon_socket
        .parent()
        .ok_or(Unprobed::Missing("the daemon socket's directory"))?;
    // `data/` as the daemon makes it (0700), for an install root no daemon ran on yet.
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
        .create(data)
        .map_err(|source| Unprobed::Path {
            path: data.to_path_buf(),
            source,
        })?;
    let stem = format!("selftest-{}-{}", std::process::id(), nanos());
    let (socket, key_file) = (
        data.join(format!("{stem}.sock")),
        data.join(format!("{stem}.key")),
    );
    let key = ControlKey::generate()?;
    key.publish(&key_file)?;
    let served = serve(sandbox, t, guard, &socket, &key_file, &key);
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(&key_file);
    let (admitted, line) = served?;
    let escaped = !admitted.is_empty() || succeeded(&line);
    let detail = if admitted.is_empty() {
        line
    } else {
        format!("{line}; the socket admitted: {}", admitted.join(", "))
    };
    Ok((
        if escaped {
            Outcome::Escape
        } else {
            Outcome::Held
        },
        detail,
    ))
}

/// Binds the judge's socket (0600, like the daemon's), starts the child and answers its
/// connections with `guard` until it exits. Returns what the guard admitted and the child's line.
fn serve(
    sandbox: &Sandbox,
    t: &Targets,
    guard: Guard,
    socket: &Path,
    key_file: &Path,
    key: &ControlKey,
) -> Result<(Vec<String>, String), Unprobed> {
    let at = |source| Unprobed::Path {
        path: socket.to_path_buf(),
        source,
    };
    let listener = UnixListener::bind(socket).map_err(at)?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600)).map_err(at)?;
    listener.set_nonblocking(true).map_err(at)?;
    let owner = std::fs::metadata(socket).map_err(at)?.uid();
    let text = |p: &Path| p.display().to_string();
    let aim = Aim {
        socket: text(socket),
        key: text(key_file),
        daemon_socket: text(&t.daemon_socket),
        daemon_key: text(&t.daemon_key),
        gateway_admin: text(&t.gateway_admin),
        other: other_agent(sandbox),
    };
    let spec = ProbeSpec {
        probe: Probe::ControlSocket,
        target: serde_json::to_string(&aim).map_err(Unprobed::Aim)?,
    };
    let mut child = sandbox.spawn_probe_child(&spec)?;
    let mut admitted = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Some(agent) = answer(stream, guard, owner, key) {
                    admitted.push(format!("a session as agent '{agent}'"));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if !matches!(child.try_wait(), Ok(None)) || Instant::now() > deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(source) => {
                return Err(Unprobed::Host {
                    what: "accept on the judge's socket",
                    source,
                });
            }
        }
    }
    Ok((admitted, finish(child)))
}

/// One connection, judged as the daemon judges it; the agent it was admitted as, if it was.
fn answer(stream: UnixStream, guard: Guard, owner: u32, key: &ControlKey) -> Option<String> {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(3)));
    let mut writer = stream.try_clone().ok()?;
    let refuse = |mut w: &UnixStream, e: String| {
        let _ = writeln!(w, "{}", serde_json::json!({ "error": e }));
        None
    };
    if let Err(e) = guard.admit_peer(stream.as_fd(), owner) {
        return refuse(&writer, e.to_string());
    }
    let mut hello = String::new();
    BufReader::new(&stream).read_line(&mut hello).ok()?;
    let hello: serde_json::Value = serde_json::from_str(&hello).ok()?;
    if let Err(e) = guard.admit_key(key, hello["key"].as_str()) {
        return refuse(&writer, e.to_string());
    }
    let _ = writeln!(writer, "{{\"ok\":true}}");
    hello["agent"].as_str().map(str::to_string)
}

fn finish(child: Child) -> String {
    child
        .wait_with_output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| format!("refused: waiting for the probe: {e}"))
}

/// Inside the sandbox: read every key, then handshake as another agent on both sockets.
pub(super) fn attempt(target: &str) -> Result<String, Refused> {
    let aim: Aim = serde_json::from_str(target)?;
    let mut got = Vec::new();
    let mut refused = Vec::new();
    let mut read = |path: &str| match std::fs::read_to_string(path) {
        Ok(text) => {
            got.push(format!("read {path}"));
            Some(text.trim().to_string())
        }
        Err(e) => {
            refused.push(format!("{path}: {e}"));
            None
        }
    };
    let own_key = read(&aim.key);
    let daemon_key = read(&aim.daemon_key);
    let _ = read(&aim.gateway_admin);
    let mut try_socket = |path: &str, key: Option<String>, judged_outside: bool| match handshake(
        path,
        &aim.other,
        key.as_deref(),
    ) {
        Ok(reply) if reply.contains("\"ok\":true") && !judged_outside => {
            got.push(format!("opened a session as '{}' on {path}", aim.other));
        }
        Ok(reply) => refused.push(format!("{path}: {reply}")),
        Err(e) => refused.push(format!("{path}: {e}")),
    };
    // The judge's socket: its verdict is taken from the judge, not from this reply.
    try_socket(&aim.socket, own_key, true);
    if Path::new(&aim.daemon_socket).exists() {
        try_socket(&aim.daemon_socket, daemon_key, false);
    }
    if got.is_empty() {
        Err(Refused(refused.join("; ")))
    } else {
        Ok(got.join(", "))
    }
}

/// Connects to `path` and sends the relay's handshake; the daemon's one-line answer.
fn handshake(path: &str, agent: &str, key: Option<&str>) -> std::io::Result<String> {
    let stream = UnixStream::connect(path)?;
    stream.set_read_timeout(Some(Duration::from_secs(3)))?;
    let hello = serde_json::json!({ "agent": agent, "key": key.unwrap_or_default() });
    // A daemon that refuses the peer answers before reading the handshake and closes: its
    // answer is still there to read after a failed write.
    let wrote = writeln!(&stream, "{hello}");
    let mut reply = String::new();
    match BufReader::new(&stream).read_line(&mut reply) {
        Ok(n) if n > 0 => Ok(reply.trim().to_string()),
        read => Err(match (wrote, read) {
            (Err(e), _) | (Ok(()), Err(e)) => e,
            (Ok(()), Ok(_)) => std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed without an answer",
            ),
        }),
    }
}
