//! `warren backup [DEST]`: a consistent copy of a live install (BEYOND-2, BAK-1).
//!
//! Two passes over the root, both through confined handles (no link followed): the plan lists
//! every entry with its size (for the progress bar), then each file is copied — databases
//! through SQLite's online backup API (each one the database as of one read transaction, while
//! the daemon goes on writing), JSONL ledgers up to the last complete line present when the
//! file was opened, everything else as read. Files are hashed as they are written; one
//! `syncfs` makes the copy durable before the manifest is written and the partial directory is
//! renamed to its name.

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use time::format_description::well_known::Rfc3339;
use warren_config::InstallRoot;
use warren_config::confined::{ConfinedDir, FileKind};
use warren_config::sqlite;

use super::bytes::{
    COPY_BUF, HashWriter, ReadErr, complete_lines, copy_big, create_file, hash_file,
};
use super::cap::Planned;
use super::crypt::Sealer;
use super::manifest::{self, Class, Entry, EntryKind, Manifest, Sparse};
use super::sparse::{self, ExtentReader};
use super::stores::{Treat, classify, is_sqlite_header};
use super::{BackupError, Progress};

/// What `warren backup` did (`--json` prints it).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub path: PathBuf,
    pub created_at: String,
    pub files: u64,
    pub bytes: u64,
    pub databases: u64,
    pub encrypted: bool,
    pub seconds: f64,
    pub mb_per_s: f64,
    pub warnings: Vec<String>,
}

/// Prefix of the private directory an encrypted backup stages database copies in (inside
/// `data/`, the same trust domain as the databases; removed at the end).
const STAGING_PREFIX: &str = ".backup-staging-";

/// Writes a backup of `root` to the new directory `dest`; with `passphrase`, every file is
/// encrypted ([`super::crypt`]); an agent workspace over `max_agent_bytes` is left out with a
/// warning ([`super::cap`]). On any error nothing is left at `dest` or beside it.
pub fn create(
    root: &InstallRoot,
    dest: &Path,
    passphrase: Option<&str>,
    max_agent_bytes: Option<u64>,
    progress: &dyn Progress,
) -> Result<Summary, BackupError> {
    let started = Instant::now();
    let dest = absolute(dest)?;
    if dest.symlink_metadata().is_ok() {
        return Err(BackupError::Exists { path: dest });
    }
    let parent = dest.parent().unwrap_or(Path::new("/")).to_path_buf();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&parent)
        .map_err(|e| BackupError::io(&parent, e))?;
    let canon_root = std::fs::canonicalize(root.root()).map_err(|e| BackupError::Read {
        path: root.root().to_path_buf(),
        cause: format!("cannot read the install root: {e}"),
    })?;
    let canon_parent = std::fs::canonicalize(&parent).map_err(|e| BackupError::io(&parent, e))?;
    if canon_parent.starts_with(&canon_root) {
        return Err(BackupError::InsideRoot {
            dest,
            root: root.root().to_path_buf(),
        });
    }
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "backup".to_string());
    let partial = parent.join(format!(".{name}.partial-{}", std::process::id()));
    let staging = root
        .data_dir()
        .join(format!("{STAGING_PREFIX}{}", std::process::id()));
    let result = write_backup(
        root,
        &partial,
        &staging,
        passphrase,
        max_agent_bytes,
        progress,
    );
    let result = result.and_then(|m| {
        std::fs::rename(&partial, &dest).map_err(|e| BackupError::io(&dest, e))?;
        warren_config::atomic::sync_dir(&parent).map_err(|e| BackupError::io(&parent, e))?;
        Ok(m)
    });
    let _ = std::fs::remove_dir_all(&staging);
    progress.finish();
    let manifest = match result {
        Ok(m) => m,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&partial);
            return Err(e);
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    Ok(Summary {
        path: dest,
        created_at: manifest.created_at.clone(),
        files: manifest.files,
        bytes: manifest.bytes,
        databases: manifest.schemas.len() as u64,
        encrypted: manifest.encryption.is_some(),
        seconds,
        mb_per_s: manifest.bytes as f64 / 1e6 / seconds.max(1e-9),
        warnings: manifest.warnings,
    })
}

fn absolute(p: &Path) -> Result<PathBuf, BackupError> {
    std::path::absolute(p).map_err(|e| BackupError::io(p, e))
}

fn write_backup(
    root: &InstallRoot,
    partial: &Path,
    staging: &Path,
    passphrase: Option<&str>,
    max_agent_bytes: Option<u64>,
    progress: &dyn Progress,
) -> Result<Manifest, BackupError> {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(partial)
        .map_err(|e| BackupError::io(partial, e))?;
    // The tree is written under a fresh name in a directory marked as the top of a hierarchy,
    // and renamed to `files/` once complete (see [`spread_inodes`]).
    spread_inodes(partial);
    let files_dir = partial.join(format!(
        ".{}-{:016x}",
        manifest::FILES_DIR,
        warren_config::atomic::random_u64()
    ));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&files_dir)
        .map_err(|e| BackupError::io(&files_dir, e))?;
    let (sealer, encryption) = match passphrase {
        Some(p) => {
            let (s, params) = Sealer::create(p)?;
            (Some(s), Some(params))
        }
        None => (None, None),
    };
    let created_at = time::OffsetDateTime::now_utc()
        .format(&Rfc3339)
        .unwrap_or_default();
    let top = ConfinedDir::open_root(root.root())
        .map_err(|e| BackupError::Read {
            path: root.root().to_path_buf(),
            cause: e.to_string(),
        })?
        .ok_or_else(|| BackupError::Read {
            path: root.root().to_path_buf(),
            cause: "no install root here".to_string(),
        })?;
    let mut warnings = remote_stores(root);
    let mut plan = Vec::new();
    walk(root, &top, PathBuf::new(), &mut plan, &mut warnings)?;
    if let Some(cap) = max_agent_bytes {
        warnings.extend(super::cap::apply(root, &mut plan, cap));
    }
    let total: u64 = plan.iter().map(|p| p.size).sum();
    let file_count = plan.iter().filter(|p| p.kind == FileKind::File).count() as u64;
    progress.start(file_count, total);

    let mut m = Manifest {
        format: manifest::FORMAT.to_string(),
        version: manifest::VERSION,
        warren_version: env!("CARGO_PKG_VERSION").to_string(),
        created_at,
        source_root: root.root().to_path_buf(),
        encryption,
        schemas: Default::default(),
        entries: Vec::new(),
        files: 0,
        bytes: 0,
        warnings: Vec::new(),
    };
    let copier = Copier {
        root,
        top: &top,
        files_dir: &files_dir,
        staging,
        sealer: sealer.as_ref(),
    };
    let (mut copied, copy_warnings) = copy_files(&copier, &plan, progress)?;
    warnings.extend(copy_warnings);
    for (index, item) in plan.into_iter().enumerate() {
        let rel = rel_string(&item.rel);
        match item.kind {
            FileKind::Dir => {
                let out = files_dir.join(&item.rel);
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&out)
                    .map_err(|e| BackupError::io(&out, e))?;
                m.entries.push(Entry {
                    path: rel,
                    kind: EntryKind::Dir { mode: item.mode },
                });
            }
            FileKind::Symlink => {
                let (dir, name) = copier.parent_of(&item.rel)?;
                let target = dir.read_link(name).map_err(|e| BackupError::Read {
                    path: root.root().join(&item.rel),
                    cause: e.kind.to_string(),
                })?;
                m.entries.push(Entry {
                    path: rel,
                    kind: EntryKind::Symlink {
                        target: target.to_string_lossy().into_owned(),
                    },
                });
            }
            FileKind::File => {
                if let Some((class, size, sha256, schema, mode, sparse)) =
                    copied.get_mut(index).and_then(Option::take).flatten()
                {
                    if sparse.is_some() {
                        m.version = manifest::VERSION_SPARSE;
                    }
                    if let Some(v) = schema {
                        m.schemas.insert(rel.clone(), v);
                    }
                    m.files += 1;
                    m.bytes += size;
                    m.entries.push(Entry {
                        path: rel.clone(),
                        kind: EntryKind::File {
                            mode,
                            class,
                            size,
                            sha256,
                            sparse,
                        },
                    });
                }
            }
            FileKind::Other => {}
        }
    }
    m.warnings = warnings;
    let final_files = partial.join(manifest::FILES_DIR);
    std::fs::rename(&files_dir, &final_files).map_err(|e| BackupError::io(&final_files, e))?;
    // One flush of everything written, then the manifest, then the rename by the caller.
    let f = File::open(partial).map_err(|e| BackupError::io(partial, e))?;
    rustix::fs::syncfs(f.as_fd()).map_err(|e| BackupError::io(partial, e.into()))?;
    let mpath = partial.join(manifest::FILE);
    let text = serde_json::to_vec_pretty(&m).map_err(|e| BackupError::Io {
        path: mpath.clone(),
        cause: std::io::Error::other(e),
    })?;
    let mut out = create_file(&mpath, 0o600)?;
    out.write_all(&text)
        .and_then(|()| out.sync_all())
        .map_err(|e| BackupError::io(&mpath, e))?;
    warren_config::atomic::sync_dir(partial).map_err(|e| BackupError::io(partial, e))?;
    Ok(m)
}

/// Marks `dir` as the top of a directory hierarchy (`chattr +T`), best effort. ext4 then
/// places each new subdirectory in a block group with few directories and above-average free
/// inodes, chosen from a hash of the subdirectory's name, instead of the parent's group; the
/// files of a directory go to that directory's group. Why it matters: on ext4 without a
/// journal, each new inode skips, one by one, every inode of its group deleted in the last
/// 60 s (5 min while its table block is dirty), so creating the backup's thousands of files in
/// a group where a previous backup (or a test run) was just deleted costs creations x deletions
/// lookups: 2000 4 KiB files took 2.8-3.9 s with `cp -r` there and 0.12-0.14 s in a fresh
/// group (2.1 s once when the hash fell on a busy group). The subdirectory's name is random for
/// the same reason (a fixed `files` would hash to the same group every time).
fn spread_inodes(dir: &Path) {
    use rustix::fs::{IFlags, ioctl_getflags, ioctl_setflags};
    let Ok(f) = File::open(dir) else { return };
    if let Ok(flags) = ioctl_getflags(&f) {
        let _ = ioctl_setflags(&f, flags | IFlags::TOPDIR);
    }
}

/// Agents whose memory lives in a server, not in the root: the backup cannot hold it.
fn remote_stores(root: &InstallRoot) -> Vec<String> {
    use warren_config::schema::MemoryBackendKind as K;
    let Ok(store) = warren_config::ConfigStore::load(root.clone()) else {
        return Vec::new();
    };
    let config = store.snapshot();
    config
        .agents
        .iter()
        .filter_map(|(alias, agent)| match config.memory_backend_of(agent) {
            k @ (K::Postgres | K::Qdrant) => Some(format!(
                "agent '{alias}' keeps its memory in {k:?} (a server): it is not in this backup; back that service up with its own tools"
            )),
            _ => None,
        })
        .collect()
}

/// Bytes of a database the backup reads through a memory map (SQLite caps it at ~2 GB).
const DB_MMAP: i64 = 1 << 31;

/// Threads copying files: the copy is hashing and I/O, and a second core nearly halves it.
const WORKERS: usize = 2;

/// What [`copy_files`] gives back: per plan index, the stored file (if copied), and warnings.
type Copied = (Vec<Option<Option<Stored>>>, Vec<String>);

/// Copies the plan's files on [`WORKERS`] threads; the first error stops them all.
fn copy_files(
    copier: &Copier<'_>,
    plan: &[Planned],
    progress: &dyn Progress,
) -> Result<Copied, BackupError> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|p| p.into_inner())
    }
    // Largest first: the databases (and big files) start at once, so the other thread copies
    // the small files beside them instead of one thread finishing a big one alone at the end.
    let mut files: Vec<usize> = (0..plan.len())
        .filter(|&i| plan[i].kind == FileKind::File)
        .collect();
    files.sort_by_key(|&i| std::cmp::Reverse(plan[i].size));
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let results: Mutex<Vec<Option<Option<Stored>>>> = Mutex::new(vec![None; plan.len()]);
    let warnings = Mutex::new(Vec::new());
    let first_error: Mutex<Option<BackupError>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..WORKERS {
            scope.spawn(|| {
                let mut local = Vec::new();
                while !failed.load(Ordering::Relaxed) {
                    let Some(&i) = files.get(next.fetch_add(1, Ordering::Relaxed)) else {
                        break;
                    };
                    let item = &plan[i];
                    let rel = rel_string(&item.rel);
                    match copier.copy(item, &rel, &mut local) {
                        Ok(stored) => {
                            lock(&results)[i] = Some(stored);
                            progress.file_done(&rel, item.size);
                        }
                        Err(e) => {
                            failed.store(true, Ordering::Relaxed);
                            lock(&first_error).get_or_insert(e);
                        }
                    }
                }
                lock(&warnings).extend(local);
            });
        }
    });
    if let Some(e) = lock(&first_error).take() {
        return Err(e);
    }
    let mut warnings = std::mem::take(&mut *lock(&warnings));
    warnings.sort();
    let results = std::mem::take(&mut *lock(&results));
    Ok((results, warnings))
}

fn rel_string(rel: &Path) -> String {
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

fn mode_of(fd: impl AsFd) -> u32 {
    rustix::fs::fstat(fd).map_or(0o600, |st| st.st_mode & 0o7777)
}

/// Lists every entry below `dir` (depth first, parents before children, sorted by name).
fn walk(
    root: &InstallRoot,
    dir: &ConfinedDir,
    rel: PathBuf,
    plan: &mut Vec<Planned>,
    warnings: &mut Vec<String>,
) -> Result<(), BackupError> {
    let read_err = |path: PathBuf, e: warren_config::confined::DirError| BackupError::Read {
        path,
        cause: e.kind.to_string(),
    };
    let mut names = dir
        .entries()
        .map_err(|e| read_err(dir.path().to_path_buf(), e))?;
    names.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, kind) in names {
        let child = rel.join(&name);
        let abs = root.root().join(&child);
        if name.to_string_lossy().starts_with(STAGING_PREFIX) {
            continue;
        }
        let header = kind == FileKind::File
            && abs.starts_with(root.data_dir())
            && dir
                .read_prefix(&name, 16)
                .ok()
                .flatten()
                .is_some_and(|b| is_sqlite_header(&b));
        if classify(root, &abs, header) == Treat::Skip {
            continue;
        }
        match kind {
            FileKind::Dir => {
                let Some(sub) = dir
                    .open_dir(&name, false)
                    .map_err(|e| read_err(abs.clone(), e))?
                else {
                    continue;
                };
                plan.push(Planned {
                    rel: child.clone(),
                    kind,
                    size: 0,
                    allocated: 0,
                    mode: mode_of(&sub),
                });
                walk(root, &sub, child, plan, warnings)?;
            }
            FileKind::File => {
                let meta = dir.stat(&name).map_err(|e| read_err(abs.clone(), e))?;
                let Some(meta) = meta else { continue };
                plan.push(Planned {
                    rel: child,
                    kind,
                    size: meta.len,
                    allocated: super::cap::on_disk(dir, &name, meta.len),
                    mode: 0,
                });
            }
            FileKind::Symlink => plan.push(Planned {
                rel: child,
                kind,
                size: 0,
                allocated: 0,
                mode: 0,
            }),
            // The daemon's own sockets in data/ are process-local; elsewhere, say so.
            FileKind::Other if abs.starts_with(root.data_dir()) => {}
            FileKind::Other => warnings.push(format!(
                "{}: not a file, directory or link (a socket or pipe): left out",
                abs.display()
            )),
        }
    }
    Ok(())
}

/// A stored file: its class, stored size, SHA-256, (databases) schema version, mode and (a
/// sparse file) the layout of its data.
type Stored = (Class, u64, String, Option<i64>, u32, Option<Sparse>);

struct Copier<'a> {
    root: &'a InstallRoot,
    top: &'a ConfinedDir,
    files_dir: &'a Path,
    staging: &'a Path,
    sealer: Option<&'a Sealer>,
}

impl Copier<'_> {
    /// The confined handle of `rel`'s directory and its last component.
    fn parent_of<'p>(
        &self,
        rel: &'p Path,
    ) -> Result<(ParentDir<'_>, &'p std::ffi::OsStr), BackupError> {
        let name = rel.file_name().unwrap_or_default();
        let parent = rel.parent().unwrap_or(Path::new(""));
        if parent.as_os_str().is_empty() {
            return Ok((ParentDir::Top(self.top), name));
        }
        let dir = self
            .top
            .open_dir(parent, false)
            .map_err(|e| BackupError::Read {
                path: self.root.root().join(parent),
                cause: e.kind.to_string(),
            })?
            .ok_or_else(|| BackupError::Read {
                path: self.root.root().join(parent),
                cause: "vanished during the backup".to_string(),
            })?;
        Ok((ParentDir::Sub(dir), name))
    }

    /// Copies one planned file; `None` when it vanished or was refused (with a warning).
    fn copy(
        &self,
        item: &Planned,
        rel: &str,
        warnings: &mut Vec<String>,
    ) -> Result<Option<Stored>, BackupError> {
        let abs = self.root.root().join(&item.rel);
        let out_path = self.files_dir.join(&item.rel);
        let (dir, name) = self.parent_of(&item.rel)?;
        let opened = match dir.open_file(name) {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(None),
            Err(e) => {
                warnings.push(format!("{e}: left out"));
                return Ok(None);
            }
        };
        let (mut file, meta) = opened;
        let mode = mode_of(&file);
        let mut prefix = [0u8; 16];
        let header = abs.starts_with(self.root.data_dir())
            && file.read_exact(&mut prefix).is_ok()
            && is_sqlite_header(&prefix);
        file.seek(SeekFrom::Start(0))
            .map_err(|e| BackupError::Read {
                path: abs.clone(),
                cause: e.to_string(),
            })?;
        match classify(self.root, &abs, header) {
            Treat::Skip => Ok(None),
            Treat::Read(Class::Sqlite) => {
                drop(file);
                self.copy_db(&abs, &out_path, rel)
                    .map(|(c, n, h, v)| Some((c, n, h, v, mode, None)))
            }
            Treat::Read(class) => {
                let len = if class == Class::Ledger {
                    complete_lines(&mut file, meta.len).map_err(|e| BackupError::Read {
                        path: abs.clone(),
                        cause: e.to_string(),
                    })?
                } else {
                    meta.len
                };
                // A file with holes: only its data is stored (issue 35 §8).
                if let Some(layout) = (class == Class::Plain)
                    .then(|| sparse::layout(&file, len))
                    .flatten()
                {
                    let mut input = ReadErr {
                        inner: ExtentReader::new(&file, layout),
                        path: abs,
                    };
                    let (size, sha) = self.store(&mut input, &out_path, rel)?;
                    let layout = Some(input.inner.read_layout());
                    return Ok(Some((class, size, sha, None, mode, layout)));
                }
                let mut input = ReadErr {
                    inner: file.take(len),
                    path: abs,
                };
                let (size, sha) = self.store(&mut input, &out_path, rel)?;
                Ok(Some((class, size, sha, None, mode, None)))
            }
        }
    }

    /// Writes `input` (sealed if encrypting) to `out_path`, hashing what is stored.
    fn store(
        &self,
        input: &mut impl Read,
        out_path: &Path,
        rel: &str,
    ) -> Result<(u64, String), BackupError> {
        let file = create_file(out_path, 0o600)?;
        match self.sealer {
            Some(s) => {
                // Sealed chunks are 64 KiB + tag: gathered into larger writes.
                let mut out = HashWriter::new(BufWriter::with_capacity(COPY_BUF, file));
                s.seal(rel, input, &mut out)
                    .map_err(|e| relabel(e, out_path))?;
                out.finish().map_err(|e| BackupError::io(out_path, e))
            }
            None => {
                let mut out = HashWriter::new(file);
                copy_big(input, &mut out).map_err(|e| BackupError::io(out_path, e))?;
                out.finish().map_err(|e| BackupError::io(out_path, e))
            }
        }
    }

    /// A database through SQLite's online backup API: into the backup directly, or (when
    /// encrypting) into the private staging directory and then sealed.
    fn copy_db(
        &self,
        src: &Path,
        out_path: &Path,
        rel: &str,
    ) -> Result<(Class, u64, String, Option<i64>), BackupError> {
        if let Some(dir) = out_path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| BackupError::io(dir, e))?;
        }
        let conn = sqlite::open_for_snapshot(src).map_err(|e| BackupError::Db {
            path: src.to_path_buf(),
            cause: format!("open to copy: {e}"),
        })?;
        // Pages read through a memory map, not one pread per page (4 KiB: ~100k calls for a
        // 400 MB database). Best effort: without it the copy is the same, only slower.
        let _ = conn.pragma_update(None, "mmap_size", DB_MMAP);
        let target = match self.sealer {
            None => out_path.to_path_buf(),
            Some(_) => {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(self.staging)
                    .map_err(|e| BackupError::io(self.staging, e))?;
                self.staging.join(rel.replace('/', "%"))
            }
        };
        sqlite::snapshot_into(&conn, &target).map_err(|e| BackupError::db(&target, &e))?;
        drop(conn);
        let schema = sqlite::open_read_only(&target)
            .and_then(|c| sqlite::schema_version(&c))
            .map_err(|e| BackupError::Db {
                path: target.clone(),
                cause: e.to_string(),
            })?;
        let (size, sha) = match self.sealer {
            None => hash_file(&target)?,
            Some(_) => {
                let mut f = File::open(&target).map_err(|e| BackupError::io(&target, e))?;
                let r = self.store(&mut f, out_path, rel);
                let _ = std::fs::remove_file(&target);
                r?
            }
        };
        Ok((Class::Sqlite, size, sha, Some(schema)))
    }
}

/// An error of the sealer about the output file, relabelled with the output path.
fn relabel(e: BackupError, out_path: &Path) -> BackupError {
    match e {
        BackupError::DiskFull { what, .. } => BackupError::DiskFull {
            path: out_path.to_path_buf(),
            what,
        },
        BackupError::Io { cause, .. } => BackupError::io(out_path, cause),
        other => other,
    }
}

enum ParentDir<'a> {
    Top(&'a ConfinedDir),
    Sub(ConfinedDir),
}

impl std::ops::Deref for ParentDir<'_> {
    type Target = ConfinedDir;
    fn deref(&self) -> &ConfinedDir {
        match self {
            Self::Top(d) => d,
            Self::Sub(d) => d,
        }
    }
}
