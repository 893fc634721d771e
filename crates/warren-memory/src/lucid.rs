//! The Lucid memory store (MEM-2): the SQLite store is the source of truth, and the external
//! `lucid` CLI an enrichment of it.
//!
//! - Every write goes to SQLite first; then `lucid store "<key>: <content>" --type=<type>
//!   --project=<dir>` runs (bounded by `store_timeout_ms`). Its failure never fails the write.
//! - A keyword recall answers from SQLite; when SQLite has fewer than `limit` hits, `lucid
//!   context "<query>" --budget=<n> --project=<dir>` adds the lines of its `<lucid-context>`
//!   block (`- [label] content`) after them. A failure (missing binary, non-zero exit, timeout)
//!   is recorded for `/api/health` and Lucid is skipped for [`COOLDOWN`]; the recall still
//!   answers from SQLite.
//! - Scope (MEM-2): each agent has its own Lucid project, `data/memory/lucid/<alias>/`. Only
//!   the bound agent's project and those of siblings granted ALL categories are asked (Lucid's
//!   labels do not keep Warren's categories, so a category-limited grant gets SQLite rows only).
//!   Recalls with a session or a time window are answered by SQLite alone (Lucid keeps neither).
//!
//! Every other operation (get, list, forget, lifecycle, history) is SQLite's.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use warren_config::schema::MemoryBackendKind;
use warren_config::schema::memory_backends::LucidConfig;
use warren_core::AgentAlias;

use crate::entry::{
    AgentId, ListQuery, MemoryEntry, MemoryVersion, NewEntry, Provenance, RecallHit, RecallQuery,
    ScopeRule, now,
};
use crate::sqlite::SqliteStore;
use crate::store::{MemFuture, MemoryStore};

/// How long Lucid is left alone after a failure.
pub const COOLDOWN: Duration = Duration::from_secs(15);
/// Largest output read from one `lucid` run.
const MAX_OUTPUT: u64 = 1024 * 1024;

/// SQLite plus the `lucid` enrichment.
pub struct LucidStore {
    sqlite: Arc<SqliteStore>,
    config: LucidConfig,
    projects: PathBuf,
    /// SQLite agent id → alias, learnt from `agent_id` (the scoped wrapper resolves every
    /// agent of a scope there before recalling).
    aliases: Mutex<HashMap<AgentId, AgentAlias>>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    last_error: Option<String>,
    failed_at: Option<Instant>,
}

impl LucidStore {
    /// `projects`: the directory holding one Lucid project per agent.
    pub fn new(sqlite: Arc<SqliteStore>, config: LucidConfig, projects: PathBuf) -> Self {
        Self {
            sqlite,
            config,
            projects,
            aliases: Mutex::new(HashMap::new()),
            state: Mutex::new(State::default()),
        }
    }

    fn project(&self, alias: &AgentAlias) -> PathBuf {
        self.projects.join(alias.as_str())
    }

    fn failed(&self, message: String) {
        tracing::warn!(command = %self.config.command, error = %message, "lucid failed; memory recall uses SQLite only");
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.last_error = Some(message);
        s.failed_at = Some(Instant::now());
    }

    fn succeeded(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.last_error = None;
        s.failed_at = None;
    }

    fn cooling_down(&self) -> bool {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.failed_at.is_some_and(|t| t.elapsed() < COOLDOWN)
    }

    /// `/api/health`'s view: `ok`, or `warning` (SQLite only) with the reason: the command is
    /// not found, or its last run failed.
    pub fn health(&self) -> Value {
        let mut v = json!({ "status": "ok", "command": self.config.command });
        let last = self
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .last_error
            .clone();
        let problem = match resolve(&self.config.command) {
            None => Some(format!(
                "'{}' is not found (memory.lucid.command); recall uses SQLite only",
                self.config.command
            )),
            Some(_) => last.map(|e| format!("{e}; recall uses SQLite only until it works again")),
        };
        if let Some(p) = problem {
            v["status"] = "warning".into();
            v["warning"] = p.into();
        }
        v
    }

    async fn lucid(&self, args: Vec<String>, timeout_ms: u64) -> Result<String, LucidError> {
        let command = self.config.command.clone();
        tokio::task::spawn_blocking(move || run(&command, &args, Duration::from_millis(timeout_ms)))
            .await
            .map_err(LucidError::Worker)?
    }

    async fn store_in_lucid(&self, entry: &MemoryEntry) {
        if self.cooling_down() {
            return;
        }
        let project = self.project(&entry.agent);
        if let Err(e) = std::fs::create_dir_all(&project) {
            self.failed(format!("cannot create {}: {e}", project.display()));
            return;
        }
        let args = vec![
            "store".to_string(),
            format!("{}: {}", entry.key, entry.content),
            format!("--type={}", lucid_type(&entry.category)),
            format!("--project={}", project.display()),
        ];
        match self.lucid(args, self.config.store_timeout_ms).await {
            Ok(_) => self.succeeded(),
            Err(e) => self.failed(e.to_string()),
        }
    }

    /// Lucid's lines for `query` from `alias`'s project.
    async fn context(&self, alias: &AgentAlias, query: &str) -> Option<Vec<(String, String)>> {
        let project = self.project(alias);
        if !project.is_dir() {
            return Some(Vec::new());
        }
        let args = vec![
            "context".to_string(),
            query.to_string(),
            format!("--budget={}", self.config.budget),
            format!("--project={}", project.display()),
        ];
        match self.lucid(args, self.config.recall_timeout_ms).await {
            Ok(out) => {
                self.succeeded();
                Some(parse_context(&out))
            }
            Err(e) => {
                self.failed(e.to_string());
                None
            }
        }
    }
}

/// The program `command` names: a path, or the first match on `PATH`.
fn resolve(command: &str) -> Option<PathBuf> {
    let executable = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if command.contains('/') {
        let p = PathBuf::from(command);
        return executable(&p).then_some(p);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(command))
            .find(|p| executable(p))
    })
}

/// Why a `lucid` run failed: the command (and its subcommand) and the cause. Shown in the
/// backend's health and logged; recall falls back to SQLite.
#[derive(Debug, thiserror::Error)]
enum LucidError {
    #[error("cannot run '{command}': {cause}")]
    Spawn {
        command: String,
        cause: std::io::Error,
    },
    #[error("'{command} {sub}' took longer than {ms} ms and was killed")]
    Timeout {
        command: String,
        sub: String,
        ms: u128,
    },
    #[error("waiting for '{command}': {cause}")]
    Wait {
        command: String,
        cause: std::io::Error,
    },
    #[error("'{command} {sub}' failed ({status}): {detail}")]
    Failed {
        command: String,
        sub: String,
        status: std::process::ExitStatus,
        detail: String,
    },
    #[error("lucid worker failed: {0}")]
    Worker(tokio::task::JoinError),
}

/// Runs `command args`, killing it after `timeout`; its stdout on exit 0, else the error.
fn run(command: &str, args: &[String], timeout: Duration) -> Result<String, LucidError> {
    let sub = || args.first().cloned().unwrap_or_default();
    let mut child = Command::new(command)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|cause| LucidError::Spawn {
            command: command.into(),
            cause,
        })?;
    let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.take(MAX_OUTPUT).read_to_end(&mut s);
        }
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(e) = err.as_mut() {
            let _ = e.take(4096).read_to_end(&mut s);
        }
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(LucidError::Timeout {
                    command: command.into(),
                    sub: sub(),
                    ms: timeout.as_millis(),
                });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(cause) => {
                return Err(LucidError::Wait {
                    command: command.into(),
                    cause,
                });
            }
        }
    };
    let stdout = reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    if !status.success() {
        let detail: String = String::from_utf8_lossy(&stderr)
            .trim()
            .chars()
            .take(300)
            .collect();
        return Err(LucidError::Failed {
            command: command.into(),
            sub: sub(),
            status,
            detail,
        });
    }
    Ok(String::from_utf8_lossy(&stdout).into_owned())
}

/// Warren category → Lucid `--type`.
fn lucid_type(category: &str) -> &'static str {
    match category {
        "core" => "decision",
        "daily" => "context",
        "conversation" => "conversation",
        _ => "learning",
    }
}

/// Lucid label → Warren category.
fn category_of(label: &str) -> String {
    let l = label.to_ascii_lowercase();
    if l.contains("visual") {
        return "visual".into();
    }
    match l.as_str() {
        "decision" | "learning" | "solution" => "core".into(),
        "context" | "conversation" => "conversation".into(),
        "bug" => "daily".into(),
        _ => label.to_string(),
    }
}

/// `(label, content)` of each `- [label] content` line inside `<lucid-context>`.
pub fn parse_context(output: &str) -> Vec<(String, String)> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in output.lines() {
        let t = line.trim();
        if t == "<lucid-context>" {
            inside = true;
            continue;
        }
        if t == "</lucid-context>" {
            inside = false;
            continue;
        }
        if !inside {
            continue;
        }
        let Some(rest) = t.strip_prefix("- [") else {
            continue;
        };
        let Some((label, content)) = rest.split_once(']') else {
            continue;
        };
        let content = content.trim();
        if !label.trim().is_empty() && !content.is_empty() {
            out.push((label.trim().to_string(), content.to_string()));
        }
    }
    out
}

impl MemoryStore for LucidStore {
    fn kind(&self) -> MemoryBackendKind {
        MemoryBackendKind::Lucid
    }

    fn location(&self) -> String {
        format!(
            "{} (enriched by '{}', projects in {})",
            self.sqlite.location(),
            self.config.command,
            self.projects.display()
        )
    }

    fn agent_id(&self, alias: &AgentAlias, create: bool) -> MemFuture<'_, Option<AgentId>> {
        let alias = alias.clone();
        Box::pin(async move {
            let id = self.sqlite.agent_id(&alias, create).await?;
            if let Some(id) = &id {
                self.aliases
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(id.clone(), alias);
            }
            Ok(id)
        })
    }

    fn store_with_agent(&self, agent: AgentId, entry: NewEntry) -> MemFuture<'_, MemoryEntry> {
        Box::pin(async move {
            let stored = self.sqlite.store_with_agent(agent, entry).await?;
            self.store_in_lucid(&stored).await;
            Ok(stored)
        })
    }

    fn get_for_agent(&self, agent: AgentId, key: String) -> MemFuture<'_, Option<MemoryEntry>> {
        self.sqlite.get_for_agent(agent, key)
    }

    fn recall_for_agents(
        &self,
        scope: Vec<ScopeRule>,
        query: RecallQuery,
        query_vector: Option<Vec<f32>>,
    ) -> MemFuture<'_, Vec<RecallHit>> {
        Box::pin(async move {
            let mut hits = self
                .sqlite
                .recall_for_agents(scope.clone(), query.clone(), query_vector)
                .await?;
            if query.is_recent()
                || hits.len() >= query.limit
                || query.session.is_some()
                || query.since.is_some()
                || query.until.is_some()
                || self.cooling_down()
            {
                return Ok(hits);
            }
            let agents: Vec<AgentAlias> = {
                let map = self.aliases.lock().unwrap_or_else(|p| p.into_inner());
                scope
                    .iter()
                    .filter(|r| r.categories.is_none())
                    .filter_map(|r| map.get(&r.agent).cloned())
                    .collect()
            };
            let mut seen: Vec<String> = hits
                .iter()
                .flat_map(|h| {
                    [
                        h.entry.content.to_lowercase(),
                        format!("{}: {}", h.entry.key, h.entry.content).to_lowercase(),
                    ]
                })
                .collect();
            let at = now();
            for alias in agents {
                let Some(lines) = self.context(&alias, &query.text).await else {
                    break;
                };
                for (n, (label, content)) in lines.into_iter().enumerate() {
                    if hits.len() >= query.limit {
                        return Ok(hits);
                    }
                    let lower = content.to_lowercase();
                    if seen.contains(&lower) {
                        continue;
                    }
                    seen.push(lower);
                    hits.push(RecallHit {
                        entry: MemoryEntry {
                            id: format!("lucid:{alias}:{n}"),
                            agent: alias.clone(),
                            key: format!("lucid_{n}"),
                            content,
                            category: category_of(&label),
                            session: None,
                            created_at: at,
                            updated_at: at,
                            version: 0,
                            provenance: Provenance::default(),
                        },
                        score: (1.0 - 0.05 * n as f64).max(0.1),
                    });
                }
            }
            Ok(hits)
        })
    }

    fn list_for_agent(&self, agent: AgentId, query: ListQuery) -> MemFuture<'_, Vec<MemoryEntry>> {
        self.sqlite.list_for_agent(agent, query)
    }

    fn forget_for_agent(&self, agent: AgentId, key: String) -> MemFuture<'_, bool> {
        self.sqlite.forget_for_agent(agent, key)
    }

    fn history_for_agent(&self, agent: AgentId, key: String) -> MemFuture<'_, Vec<MemoryVersion>> {
        self.sqlite.history_for_agent(agent, key)
    }

    fn undo_for_agent(
        &self,
        agent: AgentId,
        key: String,
        to: Option<u64>,
    ) -> MemFuture<'_, MemoryEntry> {
        self.sqlite.undo_for_agent(agent, key, to)
    }

    fn attach_receipt(
        &self,
        agent: AgentId,
        key: String,
        version: u64,
        receipt: String,
    ) -> MemFuture<'_, bool> {
        self.sqlite.attach_receipt(agent, key, version, receipt)
    }

    fn export_history(&self, agent: AgentId) -> MemFuture<'_, Vec<MemoryVersion>> {
        self.sqlite.export_history(agent)
    }

    fn import_history(
        &self,
        alias: AgentAlias,
        versions: Vec<MemoryVersion>,
    ) -> MemFuture<'_, u64> {
        self.sqlite.import_history(alias, versions)
    }

    fn count_for_agent(&self, agent: AgentId) -> MemFuture<'_, u64> {
        self.sqlite.count_for_agent(agent)
    }

    fn export_agent(&self, agent: AgentId) -> MemFuture<'_, Vec<MemoryEntry>> {
        self.sqlite.export_agent(agent)
    }

    /// Purges the SQLite rows and the agent's Lucid project, so a later agent of the same
    /// alias does not inherit the enrichment.
    fn purge_agent(&self, agent: AgentId) -> MemFuture<'_, u64> {
        Box::pin(async move {
            let alias = self
                .aliases
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&agent);
            let n = self.sqlite.purge_agent(agent).await?;
            if let Some(alias) = alias {
                let project = self.project(&alias);
                if project.is_dir()
                    && let Err(e) = std::fs::remove_dir_all(&project)
                {
                    self.failed(format!("removing {}: {e}", project.display()));
                }
            }
            Ok(n)
        })
    }

    fn rename_agent(&self, from: AgentAlias, to: AgentAlias) -> MemFuture<'_, bool> {
        Box::pin(async move {
            let renamed = self.sqlite.rename_agent(from.clone(), to.clone()).await?;
            if renamed {
                // The enrichment follows the rows; losing it loses nothing SQLite holds.
                let (old, new) = (self.project(&from), self.project(&to));
                if old.is_dir()
                    && !new.exists()
                    && let Err(e) = std::fs::rename(&old, &new)
                {
                    self.failed(format!(
                        "moving {} to {}: {e}",
                        old.display(),
                        new.display()
                    ));
                }
                let mut map = self.aliases.lock().unwrap_or_else(|p| p.into_inner());
                map.retain(|_, a| *a != from);
            }
            Ok(renamed)
        })
    }

    fn import_agent(&self, alias: AgentAlias, entries: Vec<MemoryEntry>) -> MemFuture<'_, u64> {
        self.sqlite.import_agent(alias, entries)
    }

    fn set_embedder_identity(&self, identity: String) -> MemFuture<'_, bool> {
        self.sqlite.set_embedder_identity(identity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_block_is_parsed_and_labels_map_to_categories() {
        let out = "noise\n<lucid-context>\n- [decision] use tabs\n- [bug] flaky test\n  - [visual-ui] red button\nnot a line\n- [] empty label\n</lucid-context>\n- [decision] outside\n";
        let lines = parse_context(out);
        assert_eq!(
            lines,
            vec![
                ("decision".to_string(), "use tabs".to_string()),
                ("bug".to_string(), "flaky test".to_string()),
                ("visual-ui".to_string(), "red button".to_string()),
            ]
        );
        assert_eq!(category_of("decision"), "core");
        assert_eq!(category_of("bug"), "daily");
        assert_eq!(category_of("visual-ui"), "visual");
        assert_eq!(category_of("context"), "conversation");
        assert_eq!(category_of("other"), "other");
        assert_eq!(lucid_type("core"), "decision");
        assert_eq!(lucid_type("notes"), "learning");
    }
}
