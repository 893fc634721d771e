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

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use warren_config::InstallRoot;
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

/// One parsed line, with where it lives.
struct Line {
    file: PathBuf,
    entry: MemoryEntry,
}

impl MarkdownStore {
    pub fn new(root: InstallRoot) -> Self {
        Self {
            root,
            locks: Mutex::new(HashMap::new()),
        }
    }

    fn workspace(&self, agent: &AgentId) -> Result<PathBuf, MemoryError> {
        let alias = AgentAlias::new(agent.0.as_str()).map_err(|e| MemoryError::Corrupt {
            location: self.root.agents_dir().display().to_string(),
            message: e.to_string(),
        })?;
        Ok(self.root.agent_workspace(&alias))
    }

    fn agent_lock(&self, agent: &AgentId) -> Arc<Mutex<()>> {
        let mut map = match self.locks.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        Arc::clone(map.entry(agent.0.clone()).or_default())
    }

    /// Runs `f(workspace)` on the blocking pool under the agent's in-process and file locks.
    fn with_agent<T: Send + 'static>(
        &self,
        agent: &AgentId,
        write: bool,
        f: impl FnOnce(&Path, &str) -> Result<T, MemoryError> + Send + 'static,
    ) -> MemFuture<'_, T> {
        let ws = self.workspace(agent);
        let lock = self.agent_lock(agent);
        let alias = agent.0.clone();
        Box::pin(async move {
            let ws = ws?;
            tokio::task::spawn_blocking(move || {
                let _guard = match lock.lock() {
                    Ok(g) => g,
                    Err(p) => p.into_inner(),
                };
                let _file_lock = if write || ws.exists() {
                    Some(FileLock::take(&ws, write)?)
                } else {
                    None
                };
                f(&ws, &alias)
            })
            .await
            .map_err(|e| MemoryError::Worker(e.to_string()))?
        })
    }
}

/// `flock` on `<workspace>/.memory.lock`: exclusive for writers, shared for readers.
struct FileLock(File);

impl FileLock {
    fn take(ws: &Path, exclusive: bool) -> Result<Self, MemoryError> {
        let path = ws.join(".memory.lock");
        let io_err = |source| MemoryError::Io {
            path: path.clone(),
            source,
        };
        if exclusive {
            fs::create_dir_all(ws).map_err(io_err)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_err)?;
        if exclusive {
            file.lock().map_err(io_err)?;
        } else {
            file.lock_shared().map_err(io_err)?;
        }
        Ok(Self(file))
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
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
fn parse_line(
    line: &str,
    index: usize,
    file: &Path,
    alias: &str,
    core: bool,
) -> Option<MemoryEntry> {
    let trimmed = line.trim();
    if trimmed.is_empty() || trimmed.starts_with('#') {
        return None;
    }
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
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
        agent: alias.to_string(),
        key,
        content,
        category,
        session,
        created_at: created,
        updated_at: updated,
    })
}

/// How many entries the Markdown files of `alias` hold (MEM-9 probe; synchronous).
pub(crate) fn rows_of(root: &InstallRoot, alias: &AgentAlias) -> Result<u64, MemoryError> {
    Ok(read_all(&root.agent_workspace(alias), alias.as_str())?.len() as u64)
}

fn core_file(ws: &Path) -> PathBuf {
    ws.join("MEMORY.md")
}

fn daily_file(ws: &Path, at: OffsetDateTime) -> PathBuf {
    let d = at.date();
    ws.join("memory").join(format!(
        "{:04}-{:02}-{:02}.md",
        d.year(),
        u8::from(d.month()),
        d.day()
    ))
}

/// Every memory file of a workspace: `MEMORY.md` first, then `memory/*.md` by name.
fn files(ws: &Path) -> Result<Vec<(PathBuf, bool)>, MemoryError> {
    let mut out = vec![(core_file(ws), true)];
    let dir = ws.join("memory");
    match fs::read_dir(&dir) {
        Ok(rd) => {
            let mut daily: Vec<PathBuf> = rd
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "md") && p.is_file())
                .collect();
            daily.sort();
            out.extend(daily.into_iter().map(|p| (p, false)));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(MemoryError::Io { path: dir, source }),
    }
    Ok(out)
}

fn read_all(ws: &Path, alias: &str) -> Result<Vec<Line>, MemoryError> {
    let mut out = Vec::new();
    for (file, core) in files(ws)? {
        let text = match fs::read(&file) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(source) => return Err(MemoryError::Io { path: file, source }),
        };
        for (i, line) in text.lines().enumerate() {
            if let Some(entry) = parse_line(line, i + 1, &file, alias, core) {
                out.push(Line {
                    file: file.clone(),
                    entry,
                });
            }
        }
    }
    Ok(out)
}

/// Rewrites `file` with `lines` of `all` (in order), atomically; removes it when empty.
fn rewrite(file: &Path, core: bool, entries: &[&MemoryEntry]) -> Result<(), MemoryError> {
    let io_err = |source| MemoryError::Io {
        path: file.to_path_buf(),
        source,
    };
    let dir = file.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io_err)?;
    let heading = if core {
        "# Long-term memory".to_string()
    } else {
        format!(
            "# Daily log {}",
            file.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        )
    };
    let mut text = format!("{heading}\n\n");
    for e in entries {
        text.push_str(&render(e));
        text.push('\n');
    }
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = File::create(&temp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        fs::rename(&temp, file)?;
        warren_config::atomic::sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result.map_err(io_err)
}

/// Rewrites every file in `touched` from `lines` (hand-written lines are kept as entries).
fn write_back(lines: &[Line], touched: &[PathBuf]) -> Result<(), MemoryError> {
    for file in touched {
        let core = file.file_name().is_some_and(|n| n == "MEMORY.md");
        let keep: Vec<&MemoryEntry> = lines
            .iter()
            .filter(|l| &l.file == file)
            .map(|l| &l.entry)
            .collect();
        rewrite(file, core, &keep)?;
    }
    Ok(())
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
        self.with_agent(&agent, true, move |ws, alias| {
            let mut lines = read_all(ws, alias)?;
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
                core_file(ws)
            } else {
                daily_file(ws, created)
            };
            let stem = file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let stored = MemoryEntry {
                id: format!("{stem}:{}", entry.key),
                agent: alias.to_string(),
                key: entry.key,
                content: entry.content,
                category: entry.category,
                session: entry.session,
                created_at: created,
                updated_at: at,
            };
            lines.push(Line {
                file: file.clone(),
                entry: stored.clone(),
            });
            if !touched.contains(&file) {
                touched.push(file);
            }
            write_back(&lines, &touched)?;
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
                    if !rule.allows(&AgentId(e.agent.clone()), &e.category)
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
        self.with_agent(&agent, true, move |ws, alias| {
            let mut lines = read_all(ws, alias)?;
            let Some(pos) = lines.iter().position(|l| l.entry.key == key) else {
                return Ok(false);
            };
            let old = lines.remove(pos);
            write_back(&lines, &[old.file])?;
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
        self.with_agent(&agent, true, |ws, alias| {
            let n = read_all(ws, alias)?.len() as u64;
            for (file, _) in files(ws)? {
                match fs::remove_file(&file) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(source) => return Err(MemoryError::Io { path: file, source }),
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
                let present = |ws: &Path| -> Result<bool, MemoryError> {
                    Ok(files(ws)?.iter().any(|(p, _)| p.exists()))
                };
                if !present(&old_ws)? {
                    return Ok(false);
                }
                if present(&new_ws)? {
                    return Err(MemoryError::Lifecycle {
                        agent: from.to_string(),
                        message: format!(
                            "cannot move markdown memory into {}: it already holds memory files",
                            new_ws.display()
                        ),
                    });
                }
                let io = |path: &Path| {
                    let path = path.to_path_buf();
                    move |source| MemoryError::Io { path, source }
                };
                fs::create_dir_all(&new_ws).map_err(io(&new_ws))?;
                let core = core_file(&old_ws);
                if core.exists() {
                    fs::rename(&core, core_file(&new_ws)).map_err(io(&core))?;
                }
                let daily = old_ws.join("memory");
                if daily.exists() {
                    fs::rename(&daily, new_ws.join("memory")).map_err(io(&daily))?;
                }
                Ok(true)
            })
            .await
            .map_err(|e| MemoryError::Worker(e.to_string()))?
        })
    }
}
