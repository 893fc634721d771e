//! `warren sessions migrate|list|show|search|delete|append` (SESS-1, MIG-1..7): thin wrappers
//! over `warren_store::sessions`.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use anyhow::{Context, bail};
use warren_config::schema::{ChannelsConfig, SessionBackendKind, SessionDurability};
use warren_config::{ConfigError, ConfigStore, InstallRoot};
use warren_core::{AgentAlias, Role, SessionKey};
use warren_store::sessions::migrate::{self, MigrationReport, Progress};
use warren_store::sessions::{
    NewMessage, Page, SessionBackend, SessionError, SqliteBackend, open_chat_sessions_for_reading,
    open_chat_sessions_reporting,
};
use warren_store::timefmt;

use crate::cli::SessionsCommand;

pub fn run(root: &InstallRoot, cmd: SessionsCommand, json: bool) -> anyhow::Result<ExitCode> {
    let channels = channels(root)?;
    match cmd {
        SessionsCommand::Migrate { dry_run } => migrate_cmd(root, &channels, dry_run, json),
        SessionsCommand::List => {
            let backend = open_reading(root, &channels)?;
            let sessions = backend.list()?;
            if json {
                return print(serde_json::to_value(&sessions)?);
            }
            if sessions.is_empty() {
                println!("no sessions");
            }
            let mut table =
                crate::output::Table::new(&["KEY", "AGENT", ">MESSAGES", "UPDATED", "NAME"]);
            for s in sessions {
                table.row(vec![
                    s.key.to_string(),
                    s.agent.as_ref().map_or("-", |a| a.as_str()).to_string(),
                    s.message_count.to_string(),
                    timefmt::format(s.updated_at),
                    s.name.unwrap_or_default(),
                ]);
            }
            if !table.is_empty() {
                table.print();
            }
            Ok(ExitCode::SUCCESS)
        }
        SessionsCommand::Show { key, last } => {
            let key = SessionKey::new(key)?;
            let backend = open_reading(root, &channels)?;
            let Some(meta) = backend.meta(&key)? else {
                bail!("session '{key}' does not exist");
            };
            let page = last.map_or(Page::All, Page::Last);
            let history = backend.load(&key, page)?;
            for issue in &history.issues {
                eprintln!(
                    "warning: {key}: line {} skipped: {:?}",
                    issue.line, issue.kind
                );
            }
            if json {
                return print(serde_json::json!({
                    "session": meta, "messages": history.messages, "issues": history.issues,
                }));
            }
            println!(
                "{}  agent: {}  channel: {}  state: {}  messages: {}",
                meta.key,
                meta.agent.as_ref().map_or("-", |a| a.as_str()),
                meta.channel.as_deref().unwrap_or("-"),
                meta.state,
                meta.message_count
            );
            for m in history.messages {
                let by = m.agent.map(|a| format!(" ({a})")).unwrap_or_default();
                println!(
                    "[{}] {}{by}: {}",
                    timefmt::format(m.created_at),
                    m.role,
                    m.content
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        SessionsCommand::Search { text, limit } => {
            let backend = open_reading(root, &channels)?;
            let hits = backend.search(&text, limit)?;
            if json {
                return print(serde_json::to_value(&hits)?);
            }
            for h in hits {
                println!("{} #{} {}: {}", h.key, h.seq, h.role, one_line(&h.content));
            }
            Ok(ExitCode::SUCCESS)
        }
        SessionsCommand::Delete { key, agent } => {
            let key = SessionKey::new(key)?;
            let agent = AgentAlias::new(agent)?;
            let backend = open(root, &channels)?;
            let Some(meta) = backend.meta(&key)? else {
                bail!("session '{key}' does not exist");
            };
            if meta.agent.as_ref() != Some(&agent) {
                return Err(SessionError::WrongAgent {
                    key,
                    expected: agent,
                    actual: meta
                        .agent
                        .map_or_else(|| "(none)".into(), |a| a.to_string()),
                }
                .into());
            }
            backend.delete(&key)?;
            if json {
                return print(serde_json::json!({ "deleted": key }));
            }
            println!("deleted session {key}");
            Ok(ExitCode::SUCCESS)
        }
        SessionsCommand::Append {
            key,
            role,
            agent,
            text,
        } => {
            let key = SessionKey::new(key)?;
            let mut message = NewMessage::new(role.parse::<Role>()?, text);
            if let Some(a) = agent {
                message = message.by(AgentAlias::new(a)?);
            }
            let backend = open(root, &channels)?;
            let stored = backend.append(&key, &message)?;
            if json {
                return print(serde_json::to_value(&stored)?);
            }
            println!("appended #{} to {key}", stored.seq);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `[channels]` from config.toml; the defaults when there is no config yet.
fn channels(root: &InstallRoot) -> anyhow::Result<ChannelsConfig> {
    match ConfigStore::load(root.clone()) {
        Ok(store) => Ok(store.snapshot().channels.clone()),
        Err(ConfigError::Missing { .. }) => Ok(ChannelsConfig::default()),
        Err(e) => Err(e.into()),
    }
}

/// The configured backend through the one factory (and its construction policy). A legacy file
/// the import left out is one warning line; the command goes on with the rest of the store.
fn open(
    root: &InstallRoot,
    channels: &ChannelsConfig,
) -> anyhow::Result<std::sync::Arc<dyn SessionBackend>> {
    let (sessions, skipped) =
        open_chat_sessions_reporting(root, channels).context("opening the session store")?;
    for e in &skipped {
        eprintln!("warning: {e}");
    }
    if !sessions.is_durable() {
        eprintln!("warning: session persistence is off for this command");
    }
    Ok(sessions.backend().clone())
}

/// [`open`] for a command that only reads: on a full disk the SQLite store opens read-only
/// (one warning line) instead of failing (issue 15 §8).
fn open_reading(
    root: &InstallRoot,
    channels: &ChannelsConfig,
) -> anyhow::Result<std::sync::Arc<dyn SessionBackend>> {
    let (sessions, skipped, notice) =
        open_chat_sessions_for_reading(root, channels).context("opening the session store")?;
    for e in &skipped {
        eprintln!("warning: {e}");
    }
    if let Some(notice) = notice {
        eprintln!("warning: {notice}");
    }
    if !sessions.is_durable() {
        eprintln!("warning: session persistence is off for this command");
    }
    Ok(sessions.backend().clone())
}

fn migrate_cmd(
    root: &InstallRoot,
    channels: &ChannelsConfig,
    dry_run: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut bar = ProgressLine::new(!json);
    let report = if dry_run {
        migrate::dry_run(root, &mut |p| bar.show(p))?
    } else {
        // The import itself always commits under full sync (MIG-3); the durability setting is
        // the runtime one restored afterwards.
        let durability = match channels.session_backend {
            SessionBackendKind::Sqlite => channels.session_durability,
            SessionBackendKind::Jsonl => SessionDurability::Turn,
        };
        let backend = SqliteBackend::open(root, durability)?;
        migrate::import(&backend, &mut |p| bar.show(p))?
    };
    bar.finish();
    if json {
        print(serde_json::json!({
            "dry_run": report.dry_run,
            "files": report.files,
            "errors": report.errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "jsonl_fenced": report.fenced,
        }))?;
    } else {
        print_report(&report);
        if !dry_run && report.changed() > 0 && channels.session_backend == SessionBackendKind::Jsonl
        {
            eprintln!(
                "warning: [channels] session_backend is \"jsonl\", but JSONL writes are now off; set it to \"sqlite\""
            );
        }
    }
    for e in &report.errors {
        eprintln!("error: {e}");
    }
    Ok(if report.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_report(report: &MigrationReport) {
    let verb = if report.dry_run {
        "would import"
    } else {
        "imported"
    };
    let work: Vec<_> = report
        .files
        .iter()
        .filter(|f| f.step != migrate::Step::Done)
        .collect();
    if work.is_empty() && report.errors.is_empty() {
        println!("nothing to migrate");
        return;
    }
    for f in &work {
        println!(
            "{verb} {} -> session {} ({} messages, {} bytes{})",
            f.source_name,
            f.key,
            f.messages,
            f.bytes,
            if f.issues.is_empty() {
                String::new()
            } else {
                format!(", {} line(s) skipped", f.issues.len())
            }
        );
    }
    let messages: u64 = work.iter().map(|f| f.messages).sum();
    println!(
        "{} file(s), {messages} message(s) {verb}; {} error(s)",
        work.len(),
        report.errors.len()
    );
}

/// A one-line progress display on stderr (files, bytes, messages); redrawn in place on a
/// terminal, printed once at the end otherwise.
struct ProgressLine {
    enabled: bool,
    tty: bool,
    last: Option<Progress>,
}

impl ProgressLine {
    fn new(enabled: bool) -> Self {
        Self {
            enabled,
            tty: std::io::stderr().is_terminal(),
            last: None,
        }
    }

    fn text(p: &Progress) -> String {
        let mb = |b: u64| b as f64 / 1_000_000.0;
        let pct = (p.bytes_done.min(p.bytes_total) * 100)
            .checked_div(p.bytes_total)
            .unwrap_or(100);
        let width = 24usize;
        let filled = (pct as usize * width / 100).min(width);
        format!(
            "[{}{}] {pct:>3}%  {}/{} files  {:.1}/{:.1} MB  {} messages",
            "#".repeat(filled),
            "-".repeat(width - filled),
            p.files_done,
            p.files_total,
            mb(p.bytes_done),
            mb(p.bytes_total),
            p.messages
        )
    }

    fn show(&mut self, p: &Progress) {
        self.last = Some(*p);
        if self.enabled && self.tty {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r{}", Self::text(p));
            let _ = err.flush();
        }
    }

    fn finish(&self) {
        if let (true, Some(p)) = (self.enabled, &self.last) {
            if self.tty {
                eprintln!();
            } else if p.files_total > 0 {
                eprintln!("{}", Self::text(p));
            }
        }
    }
}

fn one_line(s: &str) -> String {
    let flat = s.replace('\n', " ");
    match flat.char_indices().nth(120) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}

fn print(value: serde_json::Value) -> anyhow::Result<ExitCode> {
    super::print_json(&value)?;
    Ok(ExitCode::SUCCESS)
}
