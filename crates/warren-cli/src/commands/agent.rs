//! `warren agent -a ALIAS [-m MESSAGE] [--session KEY]`: one turn (with `-m`) or a line REPL
//! (Ctrl-D exits). Streams the answer to stdout, shows tool calls and results compactly on
//! stderr, asks approval prompts on the terminal (no terminal = denied), and Ctrl-C cancels
//! the running turn. The session persists through the configured session backend and takes
//! its slot in the `SessionActorQueue`.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use warren_config::{ConfigStore, InstallRoot};
use warren_core::{AgentAlias, SessionKey};
use warren_memory::MemoryStores;
use warren_runtime::approval::{ApprovalDecision, ApprovalRequest, Approver, BoxFuture, DenyAll};
use warren_runtime::cancel::cancel_on_ctrl_c;
use warren_runtime::{AgentRunner, CancelToken, Services, TurnEvent, TurnEvents, TurnOutcome};
use warren_store::sessions::{SessionActorQueue, SessionHandle, open_chat_sessions};

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
    if config.agent(&alias).is_none() {
        bail!("agent '{alias}' is not configured (see `warren agents list`)");
    }
    let key = match &args.session {
        Some(k) => SessionKey::new(k.as_str())?,
        None => SessionKey::sanitize(&format!("cli-{alias}"))?,
    };
    let interactive = std::io::stdin().is_terminal();
    let approver: Arc<dyn Approver> = if interactive || std::fs::File::open("/dev/tty").is_ok() {
        Arc::new(TerminalApprover)
    } else {
        Arc::new(DenyAll)
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let services = Arc::new(
            Services::for_install(root, config, approver)
                .map_err(|e| anyhow::anyhow!("creating the receipt key: {e}"))?,
        );
        let stores = MemoryStores::new(root.clone());
        let runner = AgentRunner::build(config, root, &alias, &stores, services).await?;
        let chat = {
            let (root, channels) = (root.clone(), config.channels.clone());
            tokio::task::spawn_blocking(move || open_chat_sessions(&root, &channels))
                .await
                .context("opening sessions")??
        };
        if !chat.is_durable() {
            eprintln!("warning: sessions are not persisted in this run");
        }
        let sessions = SessionHandle::new(Arc::clone(chat.backend()));
        let queue = SessionActorQueue::new(8, Duration::from_secs(300));
        match args.message {
            Some(message) => {
                let outcome = turn(&runner, &sessions, &queue, &key, &message, json).await?;
                if json {
                    print_outcome(&outcome, &key)?;
                }
                Ok(ExitCode::SUCCESS)
            }
            None => repl(&runner, &sessions, &queue, &key, json).await,
        }
    })
}

async fn turn(
    runner: &AgentRunner,
    sessions: &SessionHandle,
    queue: &SessionActorQueue,
    key: &SessionKey,
    message: &str,
    json: bool,
) -> anyhow::Result<TurnOutcome> {
    let _slot = queue.acquire(key).await?;
    let cancel = CancelToken::new();
    let ctrl_c = cancel_on_ctrl_c(cancel.clone());
    let events = printer(json);
    let result = runner.chat(sessions, key, message, &cancel, events).await;
    ctrl_c.abort();
    let outcome = result?;
    if !json {
        if !outcome.reply.ends_with('\n') {
            println!();
        }
        std::io::stdout().flush()?;
    }
    Ok(outcome)
}

async fn repl(
    runner: &AgentRunner,
    sessions: &SessionHandle,
    queue: &SessionActorQueue,
    key: &SessionKey,
    json: bool,
) -> anyhow::Result<ExitCode> {
    eprintln!(
        "agent '{}', session '{key}'. Ctrl-C cancels a turn, Ctrl-D exits.",
        runner.alias()
    );
    loop {
        eprint!("> ");
        std::io::stderr().flush()?;
        let line = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .map(|n| (n, line))
        })
        .await??;
        let (n, line) = line;
        if n == 0 {
            eprintln!();
            return Ok(ExitCode::SUCCESS);
        }
        let message = line.trim();
        if message.is_empty() {
            continue;
        }
        match turn(runner, sessions, queue, key, message, json).await {
            Ok(outcome) if json => print_outcome(&outcome, key)?,
            Ok(_) => {}
            Err(e) => eprintln!("error: {e:#}"),
        }
    }
}

fn print_outcome(outcome: &TurnOutcome, key: &SessionKey) -> anyhow::Result<()> {
    super::print_json(&serde_json::json!({
        "session": key,
        "reply": outcome.reply,
        "provider_calls": outcome.provider_calls,
        "tool_calls": outcome.tool_calls,
        "input_tokens": outcome.usage.input_tokens,
        "output_tokens": outcome.usage.output_tokens,
        "hit_iteration_cap": outcome.hit_iteration_cap,
        "notices": outcome.notices,
        "receipts": outcome.receipts.iter().map(|(t, r)| serde_json::json!({"tool": t, "receipt": r})).collect::<Vec<_>>(),
    }))
}

/// Streams text to stdout and shows tools compactly on stderr (nothing streamed with --json).
fn printer(json: bool) -> TurnEvents {
    Arc::new(move |event| {
        if json {
            return;
        }
        match event {
            TurnEvent::TextDelta(t) => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(t.as_bytes());
                let _ = out.flush();
            }
            TurnEvent::Notice(n) => eprintln!("\nnote: {n}"),
            TurnEvent::ToolCall(c) => {
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
            let answer = tokio::task::spawn_blocking(|| {
                let mut line = String::new();
                match std::fs::File::open("/dev/tty") {
                    Ok(tty) => std::io::BufReader::new(tty).read_line(&mut line).ok(),
                    Err(_) => std::io::stdin().lock().read_line(&mut line).ok(),
                };
                line
            })
            .await
            .unwrap_or_default();
            if matches!(answer.trim(), "y" | "Y" | "yes") {
                ApprovalDecision::Approved
            } else {
                ApprovalDecision::Denied
            }
        })
    }
}
