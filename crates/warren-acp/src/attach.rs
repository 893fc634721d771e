//! `warren acp` with a daemon running (issue 19 §5): the daemon serves ACP on a local socket,
//! `data/daemon.sock` (0600, in the 0700 `data/`), with its generation's host, so the turn
//! shares the daemon's session queue, cost ledger, trace and action window. `warren acp` itself
//! becomes a relay between the editor's stdio and the socket, and holds the live marker.
//!
//! Who may connect (issue 35 §1): the peer's uid was not enough, since a child of an agent with
//! `sandbox = "landlock"` has the daemon's uid and reaches the socket by path. The daemon now
//! applies [`warren_security::control_socket::Guard`]: the peer's uid, the peer check (a process
//! carrying more seccomp filters than the daemon is a sandboxed child and is refused before the
//! handshake is read) and the key the daemon writes to `data/daemon.key` at start, which the
//! relay reads and no sandbox can (see that module for why each holds).
//!
//! The connection opens with one handshake line each way: `{"agent": ALIAS, "key": KEY}` from
//! the relay, `{"ok": true}` or `{"error": ...}` from the daemon; then ACP JSON-RPC lines flow as
//! on stdio.

use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use agent_client_protocol::Lines;
use anyhow::Context;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;
use warren_config::InstallRoot;
use warren_core::AgentAlias;
use warren_daemon::{Generation, GenerationHook, HookError, RunningSubsystem, StartFuture};
use warren_runtime::AgentHost;
use warren_security::control_socket::{ControlKey, ControlKeyError, Guard};
use warren_store::acp::{AcpLive, AcpSessionStore};

use crate::server::{Hosts, Server, serve};

/// The daemon's ACP socket.
pub fn socket_path(root: &InstallRoot) -> PathBuf {
    root.data_dir().join("daemon.sock")
}

/// The daemon subsystem that serves ACP on `data/daemon.sock`, rebound every generation. It
/// keeps the current generation's host: a connection's turns always go to the generation that
/// runs now (an older one cancels its turns after the reload grace).
#[derive(Default)]
pub struct AcpHook {
    current: Mutex<Option<Arc<Mutex<Arc<AgentHost>>>>>,
    /// The socket's key, drawn once per daemon process and published at every generation.
    key: OnceLock<Result<ControlKey, Arc<ControlKeyError>>>,
}

impl AcpHook {
    pub fn new() -> Self {
        Self::default()
    }

    fn key(&self) -> Result<ControlKey, HookError> {
        self.key
            .get_or_init(|| ControlKey::generate().map_err(Arc::new))
            .clone()
            .map_err(HookError::subsystem)
    }

    /// The shared "current host" cell, pointed at `host`.
    fn point_at(&self, host: &Arc<AgentHost>) -> Arc<Mutex<Arc<AgentHost>>> {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        match current.as_ref() {
            Some(cell) => {
                *cell.lock().unwrap_or_else(|p| p.into_inner()) = Arc::clone(host);
                Arc::clone(cell)
            }
            None => {
                let cell = Arc::new(Mutex::new(Arc::clone(host)));
                *current = Some(Arc::clone(&cell));
                cell
            }
        }
    }
}

impl std::fmt::Debug for AcpHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcpHook").finish_non_exhaustive()
    }
}

impl GenerationHook for AcpHook {
    fn name(&self) -> &'static str {
        "acp"
    }

    fn start<'a>(&'a self, generation: &'a Generation) -> StartFuture<'a> {
        let hosts = self.point_at(&generation.host);
        let key = self.key();
        Box::pin(async move { start(generation, hosts, key?).await })
    }
}

async fn start(
    generation: &Generation,
    hosts: Arc<Mutex<Arc<AgentHost>>>,
    key: ControlKey,
) -> Result<RunningSubsystem, HookError> {
    let path = socket_path(&generation.root);
    // The key goes first: a relay that finds the socket finds its key.
    let key_path = generation.root.daemon_socket_key();
    key.publish(&key_path).map_err(HookError::subsystem)?;
    // A socket left by an earlier (crashed or reloaded) generation is ours to replace: the
    // daemon lock says no other daemon owns this root.
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(HookError::io("remove", &path, e)),
    }
    let listener = UnixListener::bind(&path).map_err(|e| HookError::io("bind", &path, e))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| HookError::io("chmod", &path, e))?;
    let owner = std::fs::metadata(&path)
        .map_err(|e| HookError::io("stat", &path, e))?
        .uid();
    tracing::info!(socket = %path.display(), "ACP socket listening");
    let (stop, mut stopped) = oneshot::channel::<()>();
    let root = generation.root.clone();
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let (hosts, root, key) = (Arc::clone(&hosts), root.clone(), key.clone());
                        tokio::spawn(async move {
                            if let Err(e) = connection(stream, owner, &key, hosts, root).await {
                                tracing::warn!("ACP socket connection: {e:#}");
                            }
                        });
                    }
                    Err(e) => tracing::warn!("ACP socket accept: {e}"),
                },
                _ = &mut stopped => break,
            }
        }
        // The next generation binds a new socket (and publishes the key again); connections
        // already open keep their turns.
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(&key_path);
    });
    Ok(RunningSubsystem::new("acp", stop, task))
}

/// One relay's connection: the peer check, the handshake (with the key), then ACP until it
/// closes.
async fn connection(
    stream: UnixStream,
    owner: u32,
    key: &ControlKey,
    hosts: Arc<Mutex<Arc<AgentHost>>>,
    root: InstallRoot,
) -> anyhow::Result<()> {
    let host = Arc::clone(&hosts.lock().unwrap_or_else(|p| p.into_inner()));
    let admitted = Guard::FULL.admit_peer(stream.as_fd(), owner);
    let (read, mut write) = stream.into_split();
    if let Err(e) = admitted {
        let reply = json!({"error": e.to_string()}).to_string() + "\n";
        let _ = write.write_all(reply.as_bytes()).await;
        anyhow::bail!("{e}");
    }
    let mut lines = BufReader::new(read).lines();
    let hello = lines.next_line().await?.unwrap_or_default();
    let hello = serde_json::from_str::<serde_json::Value>(&hello).unwrap_or_default();
    if let Err(e) = Guard::FULL.admit_key(key, hello["key"].as_str()) {
        let reply = json!({"error": e.to_string()}).to_string() + "\n";
        let _ = write.write_all(reply.as_bytes()).await;
        anyhow::bail!("{e}");
    }
    let setup = async {
        let agent = hello["agent"]
            .as_str()
            .map(str::to_string)
            .context("the handshake names no agent")?;
        let alias = AgentAlias::new(agent.as_str())?;
        let runner = host.runner(&alias).await?;
        host.open_sessions().await;
        host.chat_sessions().await.map_err(anyhow::Error::msg)?;
        let store = AcpSessionStore::open(&root)?;
        anyhow::Ok(Server::new(
            Hosts::Current(Arc::clone(&hosts)),
            alias,
            runner.kit().policy().clone(),
            store,
        ))
    };
    let server = match setup.await {
        Ok(server) => server,
        Err(e) => {
            let reply = json!({"error": format!("{e:#}")}).to_string() + "\n";
            write.write_all(reply.as_bytes()).await?;
            return Ok(());
        }
    };
    write.write_all(b"{\"ok\":true}\n").await?;
    let incoming = futures::stream::unfold(lines, |mut lines| async move {
        match lines.next_line().await {
            Ok(Some(line)) => Some((Ok(line), lines)),
            Ok(None) => None,
            Err(e) => Some((Err(e), lines)),
        }
    });
    let outgoing = futures::sink::unfold(write, |mut write, line: String| async move {
        write.write_all(line.as_bytes()).await?;
        write.write_all(b"\n").await?;
        write.flush().await?;
        Ok::<_, std::io::Error>(write)
    });
    serve(server, Lines::new(Box::pin(outgoing), Box::pin(incoming))).await
}

/// The relay: `warren acp` next to a running daemon (daemon `pid`).
pub async fn relay(root: &InstallRoot, alias: &AgentAlias, pid: &str) -> anyhow::Result<()> {
    let path = socket_path(root);
    let stream = UnixStream::connect(&path).await.with_context(|| {
        format!(
            "a warren daemon (pid {pid}) runs on {} but its ACP socket {} does not answer",
            root.root().display(),
            path.display()
        )
    })?;
    let key = ControlKey::read(&root.daemon_socket_key())?;
    let (read, mut write) = stream.into_split();
    write
        .write_all((json!({"agent": alias, "key": key.as_str()}).to_string() + "\n").as_bytes())
        .await?;
    let mut from_daemon = BufReader::new(read);
    let mut reply = String::new();
    from_daemon.read_line(&mut reply).await?;
    let reply: serde_json::Value = serde_json::from_str(reply.trim()).with_context(|| {
        format!(
            "the daemon's ACP socket {} answered no handshake",
            path.display()
        )
    })?;
    if let Some(e) = reply["error"].as_str() {
        anyhow::bail!("the daemon (pid {pid}) refused `warren acp -a {alias}`: {e}");
    }
    let _live = AcpLive::hold(root, alias)?;
    let up = async {
        tokio::io::copy(&mut tokio::io::stdin(), &mut write).await?;
        write.shutdown().await
    };
    let down = async {
        let mut stdout = tokio::io::stdout();
        tokio::io::copy(&mut from_daemon, &mut stdout).await?;
        stdout.flush().await
    };
    // The session ends when either side closes.
    tokio::select! {
        r = up => r?,
        r = down => r?,
    }
    Ok(())
}
