//! `warren agent -a ALIAS [-m MESSAGE] [--session KEY]`: one turn (with `-m`) or a REPL: on a
//! terminal with line editing and history (`data/state/repl-history`, 0600; Ctrl-C clears the
//! line, Ctrl-D exits), over a pipe one message per line until end of input. Streams the answer to stdout, shows tool calls and results compactly on
//! stderr, asks approval prompts on the terminal (no terminal: a call that needs approval fails
//! at once with "needs approval: rerun in a terminal, or allow it in the profile"), and Ctrl-C cancels
//! the running turn. Every turn goes through the runtime's door (`AgentHost::submit`), which
//! derives the default session `Agent-<alias>-cli` (issue 35 §7), takes the session's slot in the
//! `SessionActorQueue` and refuses a session that belongs to another agent.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use rustyline::Editor;
use rustyline::error::ReadlineError;
use rustyline::history::FileHistory;
use warren_config::{ConfigStore, InstallRoot};
use warren_core::{AgentAlias, SessionKey};
use warren_runtime::approval::{
    ApprovalDecision, ApprovalRequest, Approver, BoxFuture, NoOperator,
};
use warren_runtime::cancel::cancel_on_ctrl_c;
use warren_runtime::{
    AgentHost, CancelToken, Channel, TurnEvent, TurnEvents, TurnOutcome, TurnRequest,
};

pub struct AgentArgs {
    pub alias: Option<String>,
    pub message: Option<String>,
    pub session: Option<String>,
}

pub fn run(root: &InstallRoot, args: AgentArgs, json: bool) -> anyhow::Result<ExitCode> {
    let store = ConfigStore::load(root.clone())?;
    let snapshot = store.snapshot();
    let config = snapshot.config();
    let alias = match &args.alias {
        Some(a) => AgentAlias::new(a.as_str())?,
        None => config
            .default_agent()
            .context("no default agent; pass -a ALIAS")?,
    };
    let session = args.session.map(SessionKey::new).transpose()?;
    let interactive = std::io::stdin().is_terminal();
    // No terminal to ask on: a call that needs approval fails at once, naming the way out.
    let approver: Arc<dyn Approver> = if interactive || std::fs::File::open("/dev/tty").is_ok() {
        Arc::new(TerminalApprover)
    } else {
        Arc::new(NoOperator)
    };
    // A one-shot `-m` turn runs wholly inside `block_on`, so it needs no worker threads (each
    // one costs a stack and a malloc arena: issue 26). The REPL keeps two, so background tasks
    // (tool timeouts, MCP servers) go on while it waits for a line.
    let mut builder = if args.message.is_some() {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut multi = tokio::runtime::Builder::new_multi_thread();
        multi.worker_threads(2);
        multi
    };
    let runtime = builder
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // Spans leave as the daemon's do when `[telemetry] otlp_endpoint` is set; the exporter is
    // stopped (its last batch sent) before the command returns, whatever the turn's outcome.
    let export = runtime.block_on(async { warren_runtime::telemetry::start_for_process(config) });
    let agent = runtime.block_on(async {
        let host = Arc::new(
            AgentHost::for_process_with(
                root,
                Arc::clone(&snapshot),
                Arc::clone(super::stores(root)),
            )
            .map_err(|e| anyhow::anyhow!("creating the receipt key: {e}"))?,
        );
        // The agent and the sessions are made ready before the first turn, so a broken agent
        // or session store fails the command at once (the REPL does not start).
        host.runner(&alias).await?;
        host.chat_sessions().await.map_err(anyhow::Error::msg)?;
        if host.sessions_durable() == Some(false) {
            eprintln!("warning: sessions are not persisted in this run");
        }
        anyhow::Ok(Agent {
            host,
            alias,
            session,
            approver,
            json,
        })
    });
    let result = agent.and_then(|agent| match args.message {
        Some(message) => {
            let (key, outcome) = runtime.block_on(agent.turn(&message))?;
            if json {
                print_outcome(&outcome, &key)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        None if interactive => repl_terminal(&runtime, &agent, &root.repl_history()),
        None => runtime.block_on(repl_lines(&agent)),
    });
    if let Some(export) = export {
        runtime.block_on(export.stop(EXPORT_GRACE));
    }
    result
}

/// How long the last span export may take at exit (one OTLP POST times out after 10 s).
const EXPORT_GRACE: std::time::Duration = std::time::Duration::from_secs(12);

/// What a turn of this command needs.
struct Agent {
    host: Arc<AgentHost>,
    alias: AgentAlias,
    /// `None` = the door's default for the CLI (`Agent-<alias>-cli`, or an owned legacy
    /// `cli-<alias>`).
    session: Option<SessionKey>,
    approver: Arc<dyn Approver>,
    json: bool,
}

impl Agent {
    /// One turn through the runtime's door; Ctrl-C (SIGINT) cancels it (LOOP-7).
    async fn turn(&self, message: &str) -> anyhow::Result<(SessionKey, TurnOutcome)> {
        let cancel = CancelToken::new();
        let ctrl_c = cancel_on_ctrl_c(cancel.clone());
        let request = TurnRequest {
            max_output_tokens: None,
            agent: self.alias.clone(),
            session: self.session.clone(),
            channel: Channel::Cli,
            input: message.to_string(),
            approver: Arc::clone(&self.approver),
            cancel,
            events: printer(self.json),
        };
        let result = async {
            let turn = self.host.submit(request).await?;
            let key = turn.session().clone();
            Ok::<_, warren_runtime::TurnError>((key, turn.finish().await?))
        }
        .await;
        ctrl_c.abort();
        let (key, outcome) = result?;
        if !self.json {
            if !outcome.reply.ends_with('\n') {
                println!();
            }
            std::io::stdout().flush()?;
        }
        Ok((key, outcome))
    }

    /// A REPL turn: errors (a cancelled turn included) are reported and the REPL goes on.
    async fn repl_turn(&self, message: &str) -> anyhow::Result<()> {
        match self.turn(message).await {
            Ok((key, outcome)) if self.json => print_outcome(&outcome, &key)?,
            Ok(_) => {}
            Err(e) => eprintln!("error: {}", crate::chain_text(&e)),
        }
        Ok(())
    }

    async fn banner(&self) {
        let session = match &self.session {
            Some(key) => key.to_string(),
            None => self
                .host
                .default_session(Channel::Cli, &self.alias)
                .await
                .map(|k| k.to_string())
                .unwrap_or_default(),
        };
        eprintln!(
            "agent '{}', session '{session}'. Ctrl-C cancels a turn, Ctrl-D exits.",
            self.alias
        );
    }
}

/// The interactive REPL on a terminal: line editing and a history file (`history`, 0600) from
/// rustyline. At the prompt the terminal is in raw mode, so Ctrl-C clears the line and
/// Ctrl-D (on an empty line) exits; during a turn it is back in cooked mode and Ctrl-C is a
/// SIGINT that cancels the turn.
fn repl_terminal(
    runtime: &tokio::runtime::Runtime,
    agent: &Agent,
    history: &Path,
) -> anyhow::Result<ExitCode> {
    let config = rustyline::Config::builder()
        .max_history_size(HISTORY_LINES)
        .context("configuring the line editor")?
        .history_ignore_dups(true)
        .context("configuring the line editor")?
        .history_ignore_space(true)
        .build();
    let mut editor: Editor<(), FileHistory> =
        Editor::with_config(config).context("starting the line editor")?;
    let history_ok = match private_file(history) {
        Ok(()) => {
            // A missing or unreadable history only means starting without one.
            let _ = editor.load_history(history);
            true
        }
        Err(e) => {
            eprintln!(
                "warning: no REPL history: cannot create {}: {e}",
                history.display()
            );
            false
        }
    };
    runtime.block_on(agent.banner());
    loop {
        match editor.readline("> ") {
            Ok(line) => {
                let message = line.trim();
                if message.is_empty() {
                    continue;
                }
                if editor.add_history_entry(message).unwrap_or(false)
                    && history_ok
                    && let Err(e) = editor.append_history(history)
                {
                    eprintln!(
                        "warning: REPL history not saved to {}: {e}",
                        history.display()
                    );
                }
                runtime.block_on(agent.repl_turn(message))?;
            }
            // Ctrl-C at the prompt: the line is dropped, the REPL goes on.
            Err(ReadlineError::Interrupted) => {}
            Err(ReadlineError::Eof) => {
                eprintln!();
                return Ok(ExitCode::SUCCESS);
            }
            Err(e) => return Err(e).context("reading the terminal"),
        }
    }
}

/// History entries kept.
const HISTORY_LINES: usize = 1000;

/// Creates `path` (and its directory) readable by the owner only, or makes an existing one so.
fn private_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
}

/// The REPL over a pipe or file: one message per line, no line editing, no history; end of
/// input exits.
async fn repl_lines(agent: &Agent) -> anyhow::Result<ExitCode> {
    agent.banner().await;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<String>>(1);
    // Lines are read on their own thread (stdin blocks) and handed over one at a time.
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let stop = line.is_err();
            if tx.blocking_send(line).is_err() || stop {
                return;
            }
        }
    });
    while let Some(line) = rx.recv().await {
        let line = line.context("reading stdin")?;
        let message = line.trim();
        if !message.is_empty() {
            agent.repl_turn(message).await?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_outcome(outcome: &TurnOutcome, key: &SessionKey) -> anyhow::Result<()> {
    super::print_json(&outcome.to_json(key))
}

/// Streams text to stdout and shows tools compactly on stderr (nothing streamed with --json).
/// Text streamed before and after a tool call are separate paragraphs: the first delta after a
/// call starts on a new line of stdout.
fn printer(json: bool) -> TurnEvents {
    use std::sync::atomic::{AtomicU8, Ordering};
    // 0 = no text yet or it ended with a newline; 1 = text ends mid-line; 2 = a tool call came
    // after text that ended mid-line (the next delta starts with a newline).
    let line = Arc::new(AtomicU8::new(0));
    Arc::new(move |event| {
        if json {
            return;
        }
        match event {
            TurnEvent::TextDelta(t) => {
                if t.is_empty() {
                    return;
                }
                let mut out = std::io::stdout().lock();
                if line.load(Ordering::Relaxed) == 2 {
                    let _ = out.write_all(b"\n");
                }
                let _ = out.write_all(t.as_bytes());
                let _ = out.flush();
                line.store(u8::from(!t.ends_with('\n')), Ordering::Relaxed);
            }
            TurnEvent::Notice(n) => eprintln!("\nnote: {n}"),
            TurnEvent::ToolCall(c) => {
                let _ = line.compare_exchange(1, 2, Ordering::Relaxed, Ordering::Relaxed);
                eprintln!("\n→ {} {}", c.name, clip(&c.arguments.to_string(), 120));
            }
            TurnEvent::ToolResult {
                call, ok, content, ..
            } => {
                let mark = if ok { "✓" } else { "✗" };
                eprintln!(
                    "{mark} {}: {}",
                    call.name,
                    clip(&content.replace('\n', " "), 120)
                );
            }
            // The terminal prompt asks in place; nothing to announce.
            TurnEvent::ApprovalPending { .. } => {}
        }
    })
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    s.chars().take(max).collect::<String>() + "…"
}

/// Asks on the terminal (`/dev/tty`, else stdin): y = approve, anything else = deny.
struct TerminalApprover;

impl Approver for TerminalApprover {
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision> {
        Box::pin(async move {
            eprintln!(
                "\napprove {} {}? ({})\n[y/N] ",
                request.tool,
                clip(&request.arguments.to_string(), 200),
                request.reason
            );
            let answer = match read_tty_line().await {
                Some(line) => line,
                None => tokio::task::spawn_blocking(|| {
                    let mut line = String::new();
                    std::io::stdin().lock().read_line(&mut line).ok();
                    line
                })
                .await
                .unwrap_or_default(),
            };
            if matches!(answer.trim(), "y" | "Y" | "yes") {
                ApprovalDecision::Approved
            } else {
                ApprovalDecision::Denied
            }
        })
    }
}

/// One line from `/dev/tty`, read without blocking a thread, so a cancelled turn or a timed-out
/// approval drops the read instead of leaving a reader that would steal the REPL's next line.
/// `None` when there is no terminal to open; an empty answer at end of input.
async fn read_tty_line() -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // A fresh open file description: O_NONBLOCK here leaves stdin's blocking mode alone.
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/tty")
        .ok()?;
    // `AsyncFd::new` is deprecated because a borrowed descriptor could be closed under it; a
    // `File` it owns stays open, on the same description, until the `AsyncFd` drops (the
    // condition `AsyncFd::register` states), so the safe constructor is sound here.
    #[allow(deprecated)]
    let tty = tokio::io::unix::AsyncFd::new(tty).ok()?;
    let mut line = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        let Ok(mut ready) = tty.readable().await else {
            break;
        };
        match ready.try_io(|fd| fd.get_ref().read(&mut buf)) {
            Ok(Ok(0)) => break,
            Ok(Ok(n)) => {
                line.extend_from_slice(&buf[..n]);
                if line.contains(&b'\n') {
                    break;
                }
            }
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Ok(Err(_)) => break,
            Err(_would_block) => {}
        }
    }
    Some(String::from_utf8_lossy(&line).into_owned())
}
