//! The JSONL session backend (SESS-1, SESS-2): `data/sessions/<key>.jsonl`, one message per
//! line, append-only.
//!
//! Every mutation holds the sessions-directory lock (in-process and cross-process) and first
//! checks the JSONL fence (MIG-4): once a migration committed a receipt, JSONL writes fail
//! with [`SessionError::JsonlFenced`] in every process. Reads are never fenced.
//!
//! A torn last line (a writer killed mid-append) is skipped and reported in
//! [`History::issues`]; the next append starts on a fresh line so it never glues onto the torn
//! one. With `session_durability = "turn"` each append is fsynced before it returns. An append
//! that fails (a full disk writes part of the line, then `ENOSPC`) is cut back to the file's
//! previous length, so it leaves no partial line.
//! A message's `seq` is its line's byte offset + 1. Name, state, channel and agent attribution
//! live in the sidecar `<key>.meta.json`, replaced atomically under the same lock (see
//! `jsonl_meta`).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use time::OffsetDateTime;
use warren_config::InstallRoot;
use warren_config::atomic::sync_dir;
use warren_config::failpoint::injected_error;
use warren_config::schema::SessionDurability;
use warren_core::{AgentAlias, SessionKey};

use super::jsonl_format::{self, Parsed};
use super::jsonl_meta::{self, Sidecar};
use super::lock::{self, DirGuard, DirLock};
use super::{
    History, NewMessage, Page, SearchHit, SessionBackend, SessionError, SessionInit, SessionMeta,
    SessionState, StoredMessage,
};
use crate::timefmt;

/// Appends `buf` (a failpoint can make it a full disk: half the line, then `ENOSPC`).
fn write_line(file: &mut File, buf: &[u8]) -> io::Result<()> {
    if injected_error(crate::failpoints::JSONL_APPEND_DISK_FULL_ERROR) {
        file.write_all(&buf[..buf.len() / 2])?;
        return Err(io::Error::from_raw_os_error(libc::ENOSPC));
    }
    file.write_all(buf)
}

/// File suffix of a live JSONL session.
pub const LIVE_SUFFIX: &str = ".jsonl";

#[derive(Debug)]
pub struct JsonlBackend {
    root: InstallRoot,
    dir: PathBuf,
    lock: DirLock,
    fsync: bool,
}

impl JsonlBackend {
    /// Opens the JSONL store. Restores the fence from persisted receipts first (MIG-4): a
    /// migrated store opens (reads work) but refuses writes; an unreadable receipt state fails.
    pub fn open(root: &InstallRoot, durability: SessionDurability) -> Result<Self, SessionError> {
        let lock = DirLock::open(root)?;
        {
            let _guard = lock.hold()?;
            lock::restore_fence_from_receipts(root)?;
        }
        Ok(Self {
            root: root.clone(),
            dir: root.sessions_dir(),
            lock,
            fsync: durability == SessionDurability::Turn,
        })
    }

    fn file(&self, key: &SessionKey) -> PathBuf {
        self.dir.join(format!("{key}{LIVE_SUFFIX}"))
    }

    /// Takes the directory lock for a mutation and checks the fence.
    fn mutation(&self) -> Result<DirGuard<'_>, SessionError> {
        let guard = self.lock.hold()?;
        if lock::is_fenced(&self.root) {
            return Err(SessionError::JsonlFenced {
                dir: self.dir.clone(),
                marker: self.root.sessions_jsonl_fence(),
            });
        }
        Ok(guard)
    }

    fn read(&self, path: &Path) -> Result<Option<(Parsed, fs::Metadata)>, SessionError> {
        let mut file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(SessionError::io(path, "open a session")(e)),
        };
        let meta = file
            .metadata()
            .map_err(SessionError::io(path, "stat a session"))?;
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.read_to_end(&mut bytes)
            .map_err(SessionError::io(path, "read a session"))?;
        let parsed = jsonl_format::parse(&bytes);
        if !parsed.issues.is_empty() {
            tracing::warn!(
                "{}: skipped {} unreadable line(s): {:?}",
                path.display(),
                parsed.issues.len(),
                parsed.issues
            );
        }
        Ok(Some((parsed, meta)))
    }

    fn meta_of(
        &self,
        key: SessionKey,
        parsed: &Parsed,
        fs_meta: &fs::Metadata,
    ) -> Result<SessionMeta, SessionError> {
        let mtime = fs_meta
            .modified()
            .map(OffsetDateTime::from)
            .unwrap_or_else(|_| timefmt::now());
        let side_path = jsonl_meta::sidecar_path(&self.file(&key));
        let side = jsonl_meta::read(&side_path)?.unwrap_or_default();
        Ok(SessionMeta {
            name: side.name.clone(),
            agent: match side.agent(&side_path)? {
                Some(a) => Some(a),
                None => parsed.messages.iter().find_map(|m| m.agent.clone()),
            },
            channel: side.channel.clone(),
            state: side.state(&side_path)?,
            key,
            created_at: parsed
                .messages
                .first()
                .and_then(|m| m.created_at)
                .unwrap_or(mtime),
            updated_at: mtime,
            message_count: parsed.messages.len() as u64,
        })
    }

    /// Changes the sidecar of an existing session under the directory lock.
    fn update_meta(
        &self,
        key: &SessionKey,
        change: impl FnOnce(&mut Sidecar),
    ) -> Result<(), SessionError> {
        let live = self.file(key);
        let _guard = self.mutation()?;
        if !live.exists() {
            return Err(SessionError::NotFound { key: key.clone() });
        }
        change_sidecar(&jsonl_meta::sidecar_path(&live), change)
    }

    fn keys(&self) -> Result<Vec<SessionKey>, SessionError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(SessionError::io(&self.dir, "list sessions")(e)),
        };
        let mut keys: Vec<SessionKey> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                SessionKey::new(name.strip_suffix(LIVE_SUFFIX)?).ok()
            })
            .collect();
        keys.sort();
        Ok(keys)
    }
}

fn stored(m: NewMessage, offset: u64) -> StoredMessage {
    StoredMessage {
        seq: offset + 1,
        role: m.role,
        content: m.content,
        agent: m.agent,
        created_at: m.created_at.unwrap_or(OffsetDateTime::UNIX_EPOCH),
    }
}

impl SessionBackend for JsonlBackend {
    fn kind(&self) -> &'static str {
        "jsonl"
    }

    fn ensure(&self, key: &SessionKey, init: &SessionInit) -> Result<SessionMeta, SessionError> {
        let path = self.file(key);
        let side_path = jsonl_meta::sidecar_path(&path);
        let wants_meta = init.agent.is_some() || init.channel.is_some() || init.name.is_some();
        // Like the SQLite backend: fill in what is not set yet, never overwrite.
        let fill = |side: &mut Sidecar| {
            side.agent = side
                .agent
                .take()
                .or_else(|| init.agent.as_ref().map(|a| a.as_str().to_string()));
            side.channel = side.channel.take().or_else(|| init.channel.clone());
            side.name = side.name.take().or_else(|| init.name.clone());
        };
        // A session whose sidecar already says all this (every later turn) takes no lock:
        // sidecars are replaced atomically, so an unlocked read sees a whole one.
        let settled = || -> Result<bool, SessionError> {
            let side = jsonl_meta::read(&side_path)?.unwrap_or_default();
            let mut filled = side.clone();
            fill(&mut filled);
            Ok(filled == side)
        };
        if !path.exists() || (wants_meta && !settled()?) {
            let _guard = self.mutation()?;
            if !path.exists() {
                OpenOptions::new()
                    .append(true)
                    .create(true)
                    .mode(0o600)
                    .open(&path)
                    .and_then(|f| f.sync_all())
                    .and_then(|()| sync_dir(&self.dir))
                    .map_err(SessionError::io(&path, "create a session"))?;
            }
            if wants_meta {
                change_sidecar(&side_path, fill)?;
            }
        }
        self.meta(key)?
            .ok_or_else(|| SessionError::NotFound { key: key.clone() })
    }

    fn append(
        &self,
        key: &SessionKey,
        message: &NewMessage,
    ) -> Result<StoredMessage, SessionError> {
        let path = self.file(key);
        let created_at = message.created_at.unwrap_or_else(timefmt::now);
        let line = jsonl_format::encode(
            message.role,
            &message.content,
            message.agent.as_ref(),
            created_at,
        );
        let _guard = self.mutation()?;
        let io_err = |op| SessionError::io(&path, op);
        let mut file = OpenOptions::new()
            .append(true)
            .read(true)
            .create(true)
            .mode(0o600)
            .open(&path)
            .map_err(io_err("open for append"))?;
        let len = file.metadata().map_err(io_err("stat"))?.len();
        let mut buf = Vec::with_capacity(line.len() + 1);
        let mut offset = len;
        if len > 0 {
            let mut last = [0u8; 1];
            file.read_exact_at(&mut last, len - 1)
                .map_err(io_err("read the last byte"))?;
            if last[0] != b'\n' {
                // A torn line from a crashed writer: end it, so this message is its own line.
                buf.push(b'\n');
                offset += 1;
            }
        }
        buf.extend_from_slice(line.as_bytes());
        let written = write_line(&mut file, &buf)
            .map_err(io_err("append"))
            .and_then(|()| {
                if self.fsync {
                    file.sync_data().map_err(io_err("fsync"))?;
                    if len == 0 {
                        sync_dir(&self.dir).map_err(io_err("sync the sessions directory"))?;
                    }
                }
                Ok(())
            });
        if let Err(e) = written {
            // A failed append (a full disk writes part of the line, then fails) leaves nothing:
            // the file goes back to its previous length, so no partial line stays behind.
            if let Err(t) = file.set_len(len).and_then(|()| file.sync_data()) {
                tracing::error!(
                    "{}: could not cut a failed append back to {len} bytes ({t}); the next read \
                     skips the partial line",
                    path.display()
                );
            }
            return Err(e);
        }
        Ok(StoredMessage {
            seq: offset + 1,
            role: message.role,
            content: message.content.clone(),
            agent: message.agent.clone(),
            created_at: timefmt::parse(&timefmt::format(created_at)).unwrap_or(created_at),
        })
    }

    fn load(&self, key: &SessionKey, page: Page) -> Result<History, SessionError> {
        let Some((parsed, _)) = self.read(&self.file(key))? else {
            return Ok(History::default());
        };
        let issues = parsed.issues;
        let all = parsed
            .messages
            .into_iter()
            .zip(parsed.offsets)
            .map(|(m, o)| stored(m, o));
        let messages: Vec<StoredMessage> = match page {
            Page::All => all.collect(),
            Page::After { after, limit } => all.filter(|m| m.seq > after).take(limit).collect(),
            Page::Last(n) => {
                let v: Vec<_> = all.collect();
                let skip = v.len().saturating_sub(n);
                v.into_iter().skip(skip).collect()
            }
        };
        Ok(History { messages, issues })
    }

    fn list(&self) -> Result<Vec<SessionMeta>, SessionError> {
        let mut out = Vec::new();
        for key in self.keys()? {
            if let Some((parsed, meta)) = self.read(&self.file(&key))? {
                out.push(self.meta_of(key, &parsed, &meta)?);
            }
        }
        out.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(a.key.cmp(&b.key)));
        Ok(out)
    }

    fn meta(&self, key: &SessionKey) -> Result<Option<SessionMeta>, SessionError> {
        self.read(&self.file(key))?
            .map(|(parsed, meta)| self.meta_of(key.clone(), &parsed, &meta))
            .transpose()
    }

    fn rename(&self, from: &SessionKey, to: &SessionKey) -> Result<(), SessionError> {
        let (src, dst) = (self.file(from), self.file(to));
        let _guard = self.mutation()?;
        // No clobber: link fails if `to` exists.
        match fs::hard_link(&src, &dst) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(SessionError::AlreadyExists { key: to.clone() });
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(SessionError::NotFound { key: from.clone() });
            }
            Err(e) => return Err(SessionError::io(&src, "rename a session")(e)),
        }
        // The metadata moves with the messages (a stale sidecar at the new name, left by no
        // live session, is replaced).
        let (src_meta, dst_meta) = (
            jsonl_meta::sidecar_path(&src),
            jsonl_meta::sidecar_path(&dst),
        );
        match fs::rename(&src_meta, &dst_meta) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let _ = fs::remove_file(&dst_meta);
            }
            Err(e) => return Err(SessionError::io(&src_meta, "rename session metadata")(e)),
        }
        fs::remove_file(&src)
            .and_then(|()| sync_dir(&self.dir))
            .map_err(SessionError::io(&src, "rename a session"))
    }

    fn delete(&self, key: &SessionKey) -> Result<bool, SessionError> {
        let path = self.file(key);
        let _guard = self.mutation()?;
        // The sidecar first: a crash in between leaves a session without metadata, never
        // metadata that a later session of the same key would inherit.
        let side = jsonl_meta::sidecar_path(&path);
        if path.exists() {
            match fs::remove_file(&side) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(SessionError::io(&side, "delete session metadata")(e)),
            }
        }
        match fs::remove_file(&path) {
            Ok(()) => {
                sync_dir(&self.dir).map_err(SessionError::io(&self.dir, "sync after delete"))?;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(SessionError::io(&path, "delete a session")(e)),
        }
    }

    fn clear(&self, key: &SessionKey) -> Result<u64, SessionError> {
        let path = self.file(key);
        let _guard = self.mutation()?;
        let Some((parsed, _)) = self.read(&path)? else {
            return Err(SessionError::NotFound { key: key.clone() });
        };
        OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
            .and_then(|f| f.sync_all())
            .map_err(SessionError::io(&path, "clear a session"))?;
        Ok(parsed.messages.len() as u64)
    }

    fn set_name(&self, key: &SessionKey, name: Option<&str>) -> Result<(), SessionError> {
        let name = name
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_string);
        self.update_meta(key, |s| s.name = name)
    }

    fn set_state(&self, key: &SessionKey, state: SessionState) -> Result<(), SessionError> {
        // `idle` is the default and is stored as absent.
        let state = (state != SessionState::Idle).then(|| state.as_str().to_string());
        self.update_meta(key, |s| s.state = state)
    }

    fn set_agent(&self, key: &SessionKey, agent: Option<&AgentAlias>) -> Result<(), SessionError> {
        let agent = agent.map(|a| a.as_str().to_string());
        self.update_meta(key, |s| s.agent = agent)
    }

    /// Rewrites the message lines (temp file, fsync, rename, directory fsync) and the sidecar.
    /// A message's `seq` is its byte offset, so the seqs of a rewritten session shift.
    fn rename_agent(&self, from: &AgentAlias, to: &AgentAlias) -> Result<u64, SessionError> {
        let _guard = self.mutation()?;
        let mut owners = 0;
        for key in self.keys()? {
            let live = self.file(&key);
            let bytes = match fs::read(&live) {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(SessionError::io(&live, "read a session")(e)),
            };
            let first_agent = jsonl_format::parse(&bytes)
                .messages
                .iter()
                .find_map(|m| m.agent.clone());
            if let Some(rewritten) = jsonl_format::rename_agent(&bytes, from.as_str(), to.as_str())
            {
                replace_file(&self.dir, &live, &rewritten, "rewrite a session")?;
            }
            let side_path = jsonl_meta::sidecar_path(&live);
            let mut side = jsonl_meta::read(&side_path)?.unwrap_or_default();
            match side.agent(&side_path)? {
                Some(a) if a == *from => {
                    side.agent = Some(to.as_str().to_string());
                    jsonl_meta::write(&side_path, &side)?;
                    owners += 1;
                }
                None if first_agent.as_ref() == Some(from) => owners += 1,
                _ => {}
            }
        }
        Ok(owners)
    }

    fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, SessionError> {
        let words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
        if words.is_empty() {
            return Err(SessionError::EmptySearch);
        }
        let mut hits = Vec::new();
        for key in self.keys()? {
            for m in self.load(&key, Page::All)?.messages {
                let lower = m.content.to_lowercase();
                if words.iter().all(|w| lower.contains(w.as_str())) {
                    hits.push(SearchHit {
                        key: key.clone(),
                        seq: m.seq,
                        role: m.role,
                        content: m.content,
                    });
                    if hits.len() >= limit {
                        return Ok(hits);
                    }
                }
            }
        }
        Ok(hits)
    }
}

/// Applies `change` to the sidecar at `path`, writing it only when something changed (the
/// caller holds the directory lock).
fn change_sidecar(path: &Path, change: impl FnOnce(&mut Sidecar)) -> Result<(), SessionError> {
    let mut side = jsonl_meta::read(path)?.unwrap_or_default();
    let before = side.clone();
    change(&mut side);
    if side == before {
        return Ok(());
    }
    jsonl_meta::write(path, &side)
}

/// Replaces `path` with `bytes` durably: a hidden temp file in `dir`, fsynced, renamed over,
/// then the directory fsynced. A crash leaves the old or the new file.
pub(crate) fn replace_file(
    dir: &Path,
    path: &Path,
    bytes: &[u8],
    what: &'static str,
) -> Result<(), SessionError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(format!(".{name}.tmp"));
    let write = || -> io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&temp, path)?;
        sync_dir(dir)
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&temp);
        SessionError::io(path, what)(e)
    })
}
