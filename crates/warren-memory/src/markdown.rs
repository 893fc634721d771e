//! The Markdown memory backend (MEM-4): one directory per agent, human-readable files in the
//! agent's workspace: `MEMORY.md` (category `core`) and `memory/YYYY-MM-DD.md` (every other
//! category, by the entry's UTC creation date).
//!
//! One entry per line: `- **key**: content <!-- warren {json} -->`, the comment keeping
//! category, session and timestamps, so keys, sessions and times survive a round trip
//! (newlines in content are escaped, so an entry never splits). Lines written by hand become
//! entries with the synthetic key `<file stem>:<line>`. Every change rewrites the file
//! atomically (temp file, fsync, rename, directory fsync) under a per-agent lock that holds
//! across processes (`flock` on `.memory.lock` in the workspace). Recall is keyword matching
//! over the same words as the other backends. Category-limited grants are refused by the
//! validator and the factory; the scope is still applied here, defensively.
//!
//! The workspace is the agent's to write, so every file of it is reached through a
//! [`ConfinedDir`] handle on the workspace (PERM-6, issue 13): a symbolic link anywhere below it
//! (`MEMORY.md`, `memory/`, a daily file, the lock file) is refused by the kernel, never
//! followed out of the workspace; a memory file with more than one hard link is refused; temp
//! names are random and created `O_EXCL | O_NOFOLLOW`. A refused file is an error naming it,
//! except in the MEM-9 row count, which skips it (it is not memory this backend wrote) so a
//! planted link cannot stop the daemon from starting.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use warren_config::InstallRoot;
use warren_config::confined::{ConfinedDir, DirError, DirErrorKind, FileKind};
use warren_config::schema::MemoryBackendKind;
use warren_core::AgentAlias;

use crate::entry::{
    AgentId, CORE_CATEGORY, ListQuery, MemoryEntry, NewEntry, RecallHit, RecallQuery, ScopeRule,
    now,
};
use crate::error::MemoryError;
use crate::fts;
use crate::store::{MemFuture, MemoryStore};

const META_OPEN: &str = " <!-- warren ";
const META_CLOSE: &str = " -->";
/// The core file, the daily directory and the lock file, in the workspace.
const CORE_FILE: &str = "MEMORY.md";
const DAILY_DIR: &str = "memory";
const LOCK_FILE: &str = ".memory.lock";
/// Largest memory file read; a bigger one is refused, not loaded.
const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Serialize, Deserialize)]
struct Meta {
    category: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    session: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    created: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    updated: OffsetDateTime,
}

/// Markdown memory for every agent on this backend; the agent id is its alias.
pub struct MarkdownStore {
    root: InstallRoot,
    locks: Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

/// One memory file of a workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
enum MemFile {
    /// `MEMORY.md`.
    Core,
    /// `memory/<name>`.
    Daily(OsString),
}

impl MemFile {
    /// The file's path relative to the workspace.
    fn rel(&self) -> PathBuf {
        match self {
            Self::Core => PathBuf::from(CORE_FILE),
            Self::Daily(name) => Path::new(DAILY_DIR).join(name),
        }
    }

    fn stem(&self) -> String {
        self.rel()
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// One parsed line, with where it lives.
struct Line {
    file: MemFile,
    entry: MemoryEntry,
}

/// What a read does with a file the confined handle refuses (a link, a hard-linked or
/// oversized file, something that is not a regular file).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Refused {
    Fail,
    Skip,
}

fn dir_err(e: DirError) -> MemoryError {
    MemoryError::Io {
        path: e.path,
        source: e.kind.into_io(),
    }
}

impl MarkdownStore {
    pub fn new(root: InstallRoot) -> Self {
        Self {
            root,
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// The agent's alias (a Markdown [`AgentId`] is the alias text; it came from an
    /// [`AgentAlias`] in `agent_id`) and its workspace.
    fn workspace(&self, agent: &AgentId) -> Result<(AgentAlias, PathBuf), MemoryError> {
        let alias = AgentAlias::new(agent.0.as_str()).map_err(|e| MemoryError::Corrupt {
            location: self.root.agents_dir().display().to_string(),
            message: e.to_string(),
        })?;
        let ws = self.root.agent_workspace(&alias);
        Ok((alias, ws))
    }

    fn agent_lock(&self, agent: &AgentId) -> Arc<Mutex<()>> {
        let mut map = match self.locks.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        Arc::clone(map.entry(agent.0.clone()).or_default())
    }

    /// Runs `f(workspace)` on the blocking pool under the agent's in-process lock and the
    /// `flock` on `<workspace>/.memory.lock` (exclusive for writers, shared for readers).
    /// Readers get `None` when the workspace does not exist; writers create it.
    fn with_agent<T: Send + 'static>(
        &self,
        agent: &AgentId,
        write: bool,
        f: impl FnOnce(Option<&ConfinedDir>, &AgentAlias) -> Result<T, MemoryError> + Send + 'static,
    ) -> MemFuture<'_, T> {
        let ws = self.workspace(agent);
        let lock = self.agent_lock(agent);
        Box::pin(async move {
            let (alias, ws) = ws?;
            tokio::task::spawn_blocking(move || {
                let _guard = match lock.lock() {
                    Ok(g) => g,
                    Err(p) => p.into_inner(),
                };
                let dir = if write {
                    Some(ConfinedDir::create_root(&ws).map_err(dir_err)?)
                } else {
                    ConfinedDir::open_root(&ws).map_err(dir_err)?
                };
                let _file_lock = match &dir {
                    Some(dir) => Some(dir.lock(LOCK_FILE, write).map_err(dir_err)?),
                    None => None,
                };
                f(dir.as_ref(), &alias)
            })
            .await
            .map_err(|e| MemoryError::Worker(e.to_string()))?
        })
    }

    /// [`Self::with_agent`] for writers: the workspace exists (it was just created if needed).
    fn with_writer<T: Send + 'static>(
        &self,
        agent: &AgentId,
        f: impl FnOnce(&ConfinedDir, &AgentAlias) -> Result<T, MemoryError> + Send + 'static,
    ) -> MemFuture<'_, T> {
        self.with_agent(agent, true, move |dir, alias| match dir {
            Some(dir) => f(dir, alias),
            None => Err(MemoryError::Worker(format!(
                "the workspace of agent '{alias}' was not opened for writing"
            ))),
        })
    }
}

fn escape(s: &str, key: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '*' if key => out.push_str("\\*"),
            c => out.push(c),
        }
    }
    out
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

fn render(e: &MemoryEntry) -> String {
    let meta = Meta {
        category: e.category.clone(),
        session: e.session.clone(),
        created: e.created_at,
        updated: e.updated_at,
    };
    let meta = serde_json::to_string(&meta).unwrap_or_default();
    format!(
        "- **{}**: {}{META_OPEN}{meta}{META_CLOSE}",
        escape(&e.key, true),
        escape(&e.content, false)
    )
}

/// Parses one line of `file`; `None` for blank lines and headings.
fn parse_line(line: &str, index: usize, file: &MemFile, alias: &AgentAlias) -> Option<MemoryEntry> {
    let trimmed = line.trim();
    if trimmed.is_empty() || trimmed.starts_with('#') {
        return None;
    }
    let core = *file == MemFile::Core;
    let stem = file.stem();
    let file_date = time::Date::parse(
        &stem,
        time::macros::format_description!("[year]-[month]-[day]"),
    )
    .ok()
    .map(|d| d.midnight().assume_utc());
    let default_time = file_date.unwrap_or(OffsetDateTime::UNIX_EPOCH);
    let default_category = if core { CORE_CATEGORY } else { "daily" };
    let structured = (|| {
        let body = trimmed.strip_prefix("- **")?;
        let (key, rest) = body.split_once("**: ")?;
        let (content, meta) = match rest.rsplit_once(META_OPEN) {
            Some((c, m)) => (
                c,
                serde_json::from_str::<Meta>(m.strip_suffix(META_CLOSE)?).ok(),
            ),
            None => (rest, None),
        };
        Some((unescape(key), unescape(content), meta))
    })();
    let (key, content, meta) = match structured {
        Some(parts) => parts,
        None => (
            format!("{stem}:{index}"),
            trimmed.strip_prefix("- ").unwrap_or(trimmed).to_string(),
            None,
        ),
    };
    let (category, session, created, updated) = match meta {
        Some(m) => (m.category, m.session, m.created, m.updated),
        None => (
            default_category.to_string(),
            None,
            default_time,
            default_time,
        ),
    };
    Some(MemoryEntry {
        id: format!("{stem}:{key}"),
        agent: alias.clone(),
        key,
        content,
        category,
        session,
        created_at: created,
        updated_at: updated,
        version: 0,
        provenance: crate::entry::Provenance::default(),
    })
}

/// How many entries the Markdown files of `alias` hold (MEM-9 probe; synchronous). Files
/// the confined handle refuses are skipped with a warning: they are not memory this backend
/// wrote, and an agent must not be able to stop the daemon's start by planting one.
pub(crate) fn rows_of(root: &InstallRoot, alias: &AgentAlias) -> Result<u64, MemoryError> {
    let ws = ConfinedDir::open_root(&root.agent_workspace(alias)).map_err(dir_err)?;
    Ok(read_all_with(ws.as_ref(), alias, Refused::Skip)?.len() as u64)
}

fn daily_file(at: OffsetDateTime) -> MemFile {
    let d = at.date();
    MemFile::Daily(
        format!(
            "{:04}-{:02}-{:02}.md",
            d.year(),
            u8::from(d.month()),
            d.day()
        )
        .into(),
    )
}

/// The `*.md` names in `memory/` (anything but a directory: a link or another kind of file is
/// listed, and refused when read), sorted.
fn daily_names(daily: &ConfinedDir) -> Result<Vec<OsString>, MemoryError> {
    let mut names: Vec<OsString> = daily
        .entries()
        .map_err(dir_err)?
        .into_iter()
        .filter(|(name, kind)| {
            *kind != FileKind::Dir && Path::new(name).extension().is_some_and(|x| x == "md")
        })
        .map(|(name, _)| name)
        .collect();
    names.sort();
    Ok(names)
}

/// Whether `e` is the handle refusing a file (as opposed to an I/O failure).
fn is_refusal(e: &DirError) -> bool {
    !matches!(e.kind, DirErrorKind::Io(_))
}

/// Every memory file of a workspace with its text: `MEMORY.md` first, then `memory/*.md` by
/// name. Absent files are left out.
fn read_files(
    ws: &ConfinedDir,
    on_refused: Refused,
) -> Result<Vec<(MemFile, String)>, MemoryError> {
    let read = |dir: &ConfinedDir, name: &std::ffi::OsStr| match dir.read(name, MAX_FILE_BYTES) {
        Ok(bytes) => Ok(bytes.map(|b| String::from_utf8_lossy(&b).into_owned())),
        Err(e) if on_refused == Refused::Skip && is_refusal(&e) => {
            tracing::warn!("markdown memory: skipped {e}");
            Ok(None)
        }
        Err(e) => Err(dir_err(e)),
    };
    let mut out = Vec::new();
    if let Some(text) = read(ws, CORE_FILE.as_ref())? {
        out.push((MemFile::Core, text));
    }
    let daily = match ws.open_dir(DAILY_DIR, false) {
        Ok(daily) => daily,
        Err(e) if on_refused == Refused::Skip && is_refusal(&e) => {
            tracing::warn!("markdown memory: skipped {e}");
            None
        }
        Err(e) => return Err(dir_err(e)),
    };
    if let Some(daily) = daily {
        for name in daily_names(&daily)? {
            if let Some(text) = read(&daily, &name)? {
                out.push((MemFile::Daily(name), text));
            }
        }
    }
    Ok(out)
}

fn read_all(ws: Option<&ConfinedDir>, alias: &AgentAlias) -> Result<Vec<Line>, MemoryError> {
    read_all_with(ws, alias, Refused::Fail)
}

fn read_all_with(
    ws: Option<&ConfinedDir>,
    alias: &AgentAlias,
    on_refused: Refused,
) -> Result<Vec<Line>, MemoryError> {
    let Some(ws) = ws else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (file, text) in read_files(ws, on_refused)? {
        for (i, line) in text.lines().enumerate() {
            if let Some(entry) = parse_line(line, i + 1, &file, alias) {
                out.push(Line {
                    file: file.clone(),
                    entry,
                });
            }
        }
    }
    Ok(out)
}

/// Rewrites `file` with `entries` (in order), atomically, under the workspace handle.
fn rewrite(ws: &ConfinedDir, file: &MemFile, entries: &[&MemoryEntry]) -> Result<(), MemoryError> {
    let heading = match file {
        MemFile::Core => "# Long-term memory".to_string(),
        MemFile::Daily(_) => format!("# Daily log {}", file.stem()),
    };
    let mut text = format!("{heading}\n\n");
    for e in entries {
        text.push_str(&render(e));
        text.push('\n');
    }
    match file {
        MemFile::Core => ws.write_atomic(CORE_FILE, text.as_bytes()),
        MemFile::Daily(name) => match ws.open_dir(DAILY_DIR, true) {
            Ok(Some(daily)) => daily.write_atomic(name, text.as_bytes()),
            Ok(None) => Err(DirError {
                path: ws.path().join(DAILY_DIR),
                kind: DirErrorKind::NotADirectory,
            }),
            Err(e) => Err(e),
        },
    }
    .map_err(dir_err)
}

/// Rewrites every file in `touched` from `lines` (hand-written lines are kept as entries).
fn write_back(ws: &ConfinedDir, lines: &[Line], touched: &[MemFile]) -> Result<(), MemoryError> {
    for file in touched {
        let keep: Vec<&MemoryEntry> = lines
            .iter()
            .filter(|l| &l.file == file)
            .map(|l| &l.entry)
            .collect();
        rewrite(ws, file, &keep)?;
    }
    Ok(())
}

/// Whether a workspace holds memory files: `MEMORY.md` (any kind of entry) or a daily file.
fn has_memory(ws: &ConfinedDir) -> Result<bool, MemoryError> {
    if ws.stat(CORE_FILE).map_err(dir_err)?.is_some() {
        return Ok(true);
    }
    match ws.open_dir(DAILY_DIR, false).map_err(dir_err)? {
        Some(daily) => Ok(!daily_names(&daily)?.is_empty()),
        None => Ok(false),
    }
}

fn matches_filters(e: &MemoryEntry, q: &RecallQuery) -> bool {
    q.session
        .as_ref()
        .is_none_or(|s| e.session.as_ref() == Some(s))
        && q.since.is_none_or(|t| e.created_at >= t)
        && q.until.is_none_or(|t| e.created_at <= t)
}

/// Fraction of query words found among the entry's words (prefix words match a word start).
fn keyword_score(e: &MemoryEntry, words: &[fts::Word]) -> f64 {
    let text = format!("{} {}", e.key, e.content);
    let tokens: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
        .collect();
    let hits = words
        .iter()
        .filter(|w| {
            tokens
                .iter()
                .any(|t| t == &w.text || (w.prefix && t.starts_with(&w.text)))
        })
        .count();
    hits as f64 / words.len().max(1) as f64
}

fn newest_first(a: &MemoryEntry, b: &MemoryEntry) -> std::cmp::Ordering {
    b.updated_at
        .cmp(&a.updated_at)
        .then_with(|| a.key.cmp(&b.key))
}

impl MemoryStore for MarkdownStore {
    fn kind(&self) -> MemoryBackendKind {
        MemoryBackendKind::Markdown
    }

    fn location(&self) -> String {
        format!(
            "{}/<alias>/workspace/MEMORY.md and memory/*.md",
            self.root.agents_dir().display()
        )
    }

    fn agent_id(&self, alias: &AgentAlias, _create: bool) -> MemFuture<'_, Option<AgentId>> {
        let id = AgentId(alias.to_string());
        Box::pin(async move { Ok(Some(id)) })
    }

    fn store_with_agent(&self, agent: AgentId, entry: NewEntry) -> MemFuture<'_, MemoryEntry> {
        self.with_writer(&agent, move |ws, alias| {
            let mut lines = read_all(Some(ws), alias)?;
            let at = now();
            let mut touched = Vec::new();
            let mut created = at;
            if let Some(pos) = lines.iter().position(|l| l.entry.key == entry.key) {
                let old = lines.remove(pos);
                created = old.entry.created_at;
                touched.push(old.file);
            }
            let core = entry.category == CORE_CATEGORY;
            let file = if core {
                MemFile::Core
            } else {
                daily_file(created)
            };
            let stem = file.stem();
            let stored = MemoryEntry {
                id: format!("{stem}:{}", entry.key),
                agent: alias.clone(),
                key: entry.key,
                content: entry.content,
                category: entry.category,
                session: entry.session,
                created_at: created,
                updated_at: at,
                version: 0,
                provenance: crate::entry::Provenance::default(),
            };
            lines.push(Line {
                file: file.clone(),
                entry: stored.clone(),
            });
            if !touched.contains(&file) {
                touched.push(file);
            }
            write_back(ws, &lines, &touched)?;
            Ok(stored)
        })
    }

    fn get_for_agent(&self, agent: AgentId, key: String) -> MemFuture<'_, Option<MemoryEntry>> {
        self.with_agent(&agent, false, move |ws, alias| {
            Ok(read_all(ws, alias)?
                .into_iter()
                .map(|l| l.entry)
                .find(|e| e.key == key))
        })
    }

    fn recall_for_agents(
        &self,
        scope: Vec<ScopeRule>,
        query: RecallQuery,
        _query_vector: Option<Vec<f32>>,
    ) -> MemFuture<'_, Vec<RecallHit>> {
        Box::pin(async move {
            let words = if query.is_recent() {
                None
            } else {
                let label = scope.first().map(|r| r.agent.0.clone()).unwrap_or_default();
                Some(fts::words(&label, &query.text)?)
            };
            let mut hits: Vec<RecallHit> = Vec::new();
            for rule in scope {
                let all = self.with_agent(&rule.agent, false, read_all).await?;
                for line in all {
                    let e = line.entry;
                    if !rule.allows(&AgentId(e.agent.to_string()), &e.category)
                        || !matches_filters(&e, &query)
                    {
                        continue;
                    }
                    let score = match &words {
                        None => 1.0,
                        Some(w) => keyword_score(&e, w),
                    };
                    if score > 0.0 {
                        hits.push(RecallHit { entry: e, score });
                    }
                }
            }
            hits.sort_by(|a, b| {
                b.score
                    .total_cmp(&a.score)
                    .then_with(|| newest_first(&a.entry, &b.entry))
            });
            hits.truncate(query.limit);
            Ok(hits)
        })
    }

    fn list_for_agent(&self, agent: AgentId, query: ListQuery) -> MemFuture<'_, Vec<MemoryEntry>> {
        self.with_agent(&agent, false, move |ws, alias| {
            let mut all: Vec<MemoryEntry> = read_all(ws, alias)?
                .into_iter()
                .map(|l| l.entry)
                .filter(|e| query.category.as_ref().is_none_or(|c| &e.category == c))
                .collect();
            all.sort_by(newest_first);
            Ok(all
                .into_iter()
                .skip(query.offset)
                .take(query.limit)
                .collect())
        })
    }

    fn forget_for_agent(&self, agent: AgentId, key: String) -> MemFuture<'_, bool> {
        self.with_writer(&agent, move |ws, alias| {
            let mut lines = read_all(Some(ws), alias)?;
            let Some(pos) = lines.iter().position(|l| l.entry.key == key) else {
                return Ok(false);
            };
            let old = lines.remove(pos);
            write_back(ws, &lines, &[old.file])?;
            Ok(true)
        })
    }

    fn count_for_agent(&self, agent: AgentId) -> MemFuture<'_, u64> {
        self.with_agent(&agent, false, |ws, alias| {
            Ok(read_all(ws, alias)?.len() as u64)
        })
    }

    fn export_agent(&self, agent: AgentId) -> MemFuture<'_, Vec<MemoryEntry>> {
        self.with_agent(&agent, false, |ws, alias| {
            let mut all: Vec<MemoryEntry> =
                read_all(ws, alias)?.into_iter().map(|l| l.entry).collect();
            all.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.key.cmp(&b.key)));
            Ok(all)
        })
    }

    fn purge_agent(&self, agent: AgentId) -> MemFuture<'_, u64> {
        self.with_writer(&agent, |ws, alias| {
            // Refuses (before removing anything) a workspace whose memory files are links.
            let n = read_all(Some(ws), alias)?.len() as u64;
            ws.remove(CORE_FILE).map_err(dir_err)?;
            if let Some(daily) = ws.open_dir(DAILY_DIR, false).map_err(dir_err)? {
                for name in daily_names(&daily)? {
                    daily.remove(&name).map_err(dir_err)?;
                }
            }
            Ok(n)
        })
    }

    /// Markdown attribution is the directory: the lifecycle moves the whole workspace first.
    /// What is still under `from`'s workspace afterwards (the move was refused or the agent is
    /// being converged after a crash) is moved here: `MEMORY.md` and `memory/`. Refuses to merge
    /// into a workspace that already holds memory files. Returns whether anything moved.
    fn rename_agent(&self, from: AgentAlias, to: AgentAlias) -> MemFuture<'_, bool> {
        let (old_ws, new_ws) = (
            self.root.agent_workspace(&from),
            self.root.agent_workspace(&to),
        );
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let Some(old) = ConfinedDir::open_root(&old_ws).map_err(dir_err)? else {
                    return Ok(false);
                };
                if !has_memory(&old)? {
                    return Ok(false);
                }
                let new = ConfinedDir::open_root(&new_ws).map_err(dir_err)?;
                if new.as_ref().map(has_memory).transpose()? == Some(true) {
                    return Err(MemoryError::Lifecycle {
                        agent: from.to_string(),
                        message: format!(
                            "cannot move markdown memory into {}: it already holds memory files",
                            new_ws.display()
                        ),
                    });
                }
                let new = match new {
                    Some(new) => new,
                    None => ConfinedDir::create_root(&new_ws).map_err(dir_err)?,
                };
                // The entries themselves move (a link would move as a link, never its target).
                old.rename(CORE_FILE, &new, CORE_FILE).map_err(dir_err)?;
                old.rename(DAILY_DIR, &new, DAILY_DIR).map_err(dir_err)?;
                Ok(true)
            })
            .await
            .map_err(|e| MemoryError::Worker(e.to_string()))?
        })
    }
}
