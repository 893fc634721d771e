//! Disk limits (issue 35 §8): one agent cannot stop the others through the disk.
//!
//! Two bounds, both read from the sealed [`SecurityPolicy`]:
//! - each agent workspace holds at most its risk profile's `max_workspace_mb` (allocated bytes,
//!   `.tmp` included; a write into a granted sibling counts against the sibling's limit);
//! - agents never eat into `[runtime] disk_reserve_mb` of free space on the filesystem of a root
//!   they write, so the daemon's own stores (sessions, config saves) keep room there.
//!
//! The file tools ask [`SecurityPolicy::admit_write`] before writing; the sandbox sets every
//! child's `RLIMIT_FSIZE` to [`SecurityPolicy::write_room`] (the kernel stops one file from
//! growing past what remains: `EFBIG`/`SIGXFSZ`), and the shell tool polls
//! [`SecurityPolicy::disk_check`] while a command runs (the watchdog kills its process group
//! once a limit is passed) and after it. What is and is not bounded: docs/security.md, "Disk".
//!
//! Usage is measured by walking the workspace with confined handles
//! ([`crate::confined_dir::ConfinedDir`]: `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, one
//! name at a time, never `std::fs` on a joined path), counting each inode once and staying on
//! the workspace's filesystem; the result is cached per policy (shared by its narrowed copies)
//! for [`CACHE_TTL`], and admitted file writes are added to it at once.

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::fs::AtFlags;
use warren_config::confined::{ConfinedDir, DirError, DirErrorKind, FileKind};
use warren_core::AgentAlias;

use crate::paths::{Resolved, Tier};
use crate::policy::SecurityPolicy;

/// How long a measured usage answers admissions before the workspace is walked again.
pub const CACHE_TTL: Duration = Duration::from_secs(5);

const MIB: u64 = 1 << 20;

/// Why a write is refused, or a running command stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    #[error(transparent)]
    OverLimit(Box<OverLimit>),
    #[error(
        "agent '{writer}': the filesystem of {root} has {free_mib} MiB free, and {reserve_mib} MiB are kept for the daemon's own stores ([runtime] disk_reserve_mb); {write} more bytes are refused until space is freed"
    )]
    Reserve {
        writer: String,
        root: PathBuf,
        free_mib: u64,
        reserve_mib: u64,
        write: u64,
    },
    #[error(
        "agent '{writer}': cannot measure the workspace of agent '{owner}' ({reason}); writes are refused until it can be measured"
    )]
    Unmeasurable {
        writer: String,
        owner: String,
        reason: String,
    },
}

/// A workspace past (or about to pass) its `max_workspace_mb`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "agent '{writer}': the workspace of agent '{owner}' ({root}) holds {usage} bytes ({usage_mib} MiB) of its {limit_mib} MiB limit; {detail} (max_workspace_mb in [risk_profiles.{profile}]). Delete files there, or raise the limit"
)]
pub struct OverLimit {
    pub writer: String,
    pub owner: String,
    pub profile: String,
    pub root: PathBuf,
    pub usage: u64,
    pub usage_mib: u64,
    pub limit_mib: u64,
    /// The growth refused (`0`: a running command passed the limit).
    pub write: u64,
    /// `{write} more bytes would pass it`, or that it is past it.
    pub detail: String,
}

/// One workspace's limit, as the policy knows it.
#[derive(Debug)]
pub(crate) struct RootQuota {
    pub owner: AgentAlias,
    pub profile: String,
    /// The owner's workspace (configured form; canonicalised when used).
    pub root: PathBuf,
    /// `None`: `max_workspace_mb = 0`, no limit.
    pub limit: Option<u64>,
    usage: Mutex<Option<Measured>>,
}

#[derive(Debug, Clone, Copy)]
struct Measured {
    bytes: u64,
    at: Instant,
}

/// The disk limits of a policy and the cache of measured usage (shared by narrowed copies).
#[derive(Debug, Default)]
pub(crate) struct DiskLimits {
    pub quotas: Vec<RootQuota>,
    pub reserve: u64,
}

impl PartialEq for DiskLimits {
    fn eq(&self, other: &Self) -> bool {
        self.reserve == other.reserve
            && self.quotas.len() == other.quotas.len()
            && self
                .quotas
                .iter()
                .zip(&other.quotas)
                .all(|(a, b)| (&a.owner, &a.root, a.limit) == (&b.owner, &b.root, b.limit))
    }
}

impl DiskLimits {
    pub(crate) fn new(reserve_mb: u64) -> Self {
        Self {
            quotas: Vec::new(),
            reserve: reserve_mb.saturating_mul(MIB),
        }
    }

    /// Adds `owner`'s workspace with a limit of `limit_mb` MiB (`0` = none), once per owner.
    pub(crate) fn add(&mut self, owner: &AgentAlias, profile: &str, root: PathBuf, limit_mb: u64) {
        if self.quotas.iter().any(|q| &q.owner == owner) {
            return;
        }
        self.quotas.push(RootQuota {
            owner: owner.clone(),
            profile: profile.to_string(),
            root,
            limit: (limit_mb > 0).then(|| limit_mb.saturating_mul(MIB)),
            usage: Mutex::new(None),
        });
    }
}

/// Bytes allocated below `root` (the directory itself included), walked with confined handles:
/// links are never followed, other filesystems are not entered, each inode counts once.
pub fn measure(root: &Path) -> Result<u64, DirError> {
    let Some(top) = ConfinedDir::open_root(root)? else {
        return Ok(0);
    };
    let st = rustix::fs::fstat(&top).map_err(|e| dir_err(root, e))?;
    let dev = st.st_dev;
    let mut total = allocated(&st);
    let mut seen: HashSet<u64> = HashSet::new();
    let mut pending: Vec<(Arc<ConfinedDir>, OsString)> = Vec::new();
    let mut dir = Arc::new(top);
    loop {
        for (name, kind) in dir.entries()? {
            let st = match rustix::fs::statat(&*dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(dir_err(&dir.path().join(&name), e)),
            };
            if st.st_dev != dev {
                continue;
            }
            #[allow(clippy::useless_conversion)] // `nlink_t` differs by target
            let shared = u64::from(st.st_nlink) > 1 && kind != FileKind::Dir;
            if !shared || seen.insert(st.st_ino) {
                total = total.saturating_add(allocated(&st));
            }
            if kind == FileKind::Dir {
                pending.push((Arc::clone(&dir), name));
            }
        }
        // The next directory: opened beneath its parent's handle, without following a link.
        loop {
            let Some((parent, name)) = pending.pop() else {
                return Ok(total);
            };
            match parent.open_dir(&name, false) {
                Ok(Some(next)) => {
                    dir = Arc::new(next);
                    break;
                }
                // Removed meanwhile, or swapped for a link (counted as the link it now is).
                Ok(None) => {}
                Err(DirError {
                    kind: DirErrorKind::Symlink | DirErrorKind::NotADirectory,
                    ..
                }) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

fn allocated(st: &rustix::fs::Stat) -> u64 {
    u64::try_from(st.st_blocks).unwrap_or(0).saturating_mul(512)
}

fn dir_err(path: &Path, e: rustix::io::Errno) -> DirError {
    DirError {
        path: path.to_path_buf(),
        kind: DirErrorKind::Io(e.into()),
    }
}

/// Bytes an unprivileged writer may still allocate on the filesystem of `path`.
fn free_bytes(path: &Path) -> Option<u64> {
    let st = rustix::fs::statvfs(path).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

impl SecurityPolicy {
    /// The agent's own `max_workspace_mb` in bytes (`None`: no limit).
    pub fn max_workspace_bytes(&self) -> Option<u64> {
        let own = self.alias();
        self.inner
            .disk
            .quotas
            .iter()
            .find(|q| &q.owner == own)
            .and_then(|q| q.limit)
    }

    /// `[runtime] disk_reserve_mb` in bytes: free space agents never take.
    pub fn disk_reserve_bytes(&self) -> u64 {
        self.inner.disk.reserve
    }

    /// The workspace quota whose root holds `path` (canonical forms compared).
    fn quota_of(&self, path: &Path) -> Option<&RootQuota> {
        self.inner
            .disk
            .quotas
            .iter()
            .find(|q| path.starts_with(self.canonical_root(&q.root)) || path.starts_with(&q.root))
    }

    /// `q`'s usage, walked again when older than `max_age`.
    fn usage(&self, q: &RootQuota, max_age: Duration) -> Result<u64, QuotaError> {
        let mut cached = q.usage.lock().unwrap_or_else(|p| p.into_inner());
        self.usage_locked(q, &mut cached, max_age)
    }

    /// [`Self::usage`] with `q`'s cache already locked by the caller.
    fn usage_locked(
        &self,
        q: &RootQuota,
        cached: &mut Option<Measured>,
        max_age: Duration,
    ) -> Result<u64, QuotaError> {
        if let Some(m) = *cached
            && m.at.elapsed() < max_age
        {
            return Ok(m.bytes);
        }
        let bytes =
            measure(&self.canonical_root(&q.root)).map_err(|e| QuotaError::Unmeasurable {
                writer: self.alias().to_string(),
                owner: q.owner.to_string(),
                reason: e.to_string(),
            })?;
        *cached = Some(Measured {
            bytes,
            at: Instant::now(),
        });
        Ok(bytes)
    }

    fn over_limit(&self, q: &RootQuota, usage: u64, limit: u64, write: u64) -> QuotaError {
        QuotaError::OverLimit(Box::new(OverLimit {
            writer: self.alias().to_string(),
            owner: q.owner.to_string(),
            profile: q.profile.clone(),
            root: q.root.clone(),
            usage,
            usage_mib: usage / MIB,
            limit_mib: limit / MIB,
            write,
            detail: if write > 0 {
                format!("{write} more bytes would pass it")
            } else {
                "a running command took it past the limit".into()
            },
        }))
    }

    fn reserve_check(&self, root: &Path, write: u64) -> Result<(), QuotaError> {
        let reserve = self.inner.disk.reserve;
        if reserve == 0 {
            return Ok(());
        }
        // A filesystem that cannot be asked is not refused on that account.
        let Some(free) = free_bytes(root) else {
            return Ok(());
        };
        if free < reserve.saturating_add(write) {
            return Err(QuotaError::Reserve {
                writer: self.alias().to_string(),
                root: root.to_path_buf(),
                free_mib: free / MIB,
                reserve_mib: reserve / MIB,
                write,
            });
        }
        Ok(())
    }

    /// Whether a file tool may replace a file of `old_len` bytes at `resolved` with `new_len`
    /// bytes. A write that does not grow the file is always admitted (an agent over its limit
    /// can still shrink files); one that grows it must fit the owning workspace's limit and
    /// leave the reserve free. An admitted growth is added to the cached usage at once, so
    /// concurrent writes see each other.
    pub fn admit_write(
        &self,
        resolved: &Resolved,
        old_len: u64,
        new_len: u64,
    ) -> Result<(), QuotaError> {
        if resolved.tier == Tier::Device || new_len <= old_len {
            return Ok(());
        }
        let growth = new_len - old_len;
        // The atomic write holds the new file beside the old one until the rename.
        self.reserve_check(&resolved.root, new_len)?;
        let Some(q) = self.quota_of(&resolved.path) else {
            return Ok(());
        };
        let Some(limit) = q.limit else {
            return Ok(());
        };
        // Checked and counted under one lock: concurrent admissions cannot both take the room.
        let mut cached = q.usage.lock().unwrap_or_else(|p| p.into_inner());
        let usage = self.usage_locked(q, &mut cached, CACHE_TTL)?;
        if usage.saturating_add(growth) > limit {
            return Err(self.over_limit(q, usage, limit, growth));
        }
        if let Some(m) = cached.as_mut() {
            m.bytes = m.bytes.saturating_add(growth);
        }
        Ok(())
    }

    /// The roots a child of this agent can write: the workspace and the write grants.
    fn writable_roots(&self) -> impl Iterator<Item = &Path> {
        std::iter::once(self.workspace())
            .chain(self.read_write_roots().iter().map(|g| g.root.as_path()))
            .chain(self.write_only_roots().iter().map(|g| g.root.as_path()))
    }

    /// The most bytes one file of a child may hold (its `RLIMIT_FSIZE`, besides
    /// `max_file_size_mb`): what remains of every writable workspace's limit and of the free
    /// space above the reserve on each writable root's filesystem. `0` when a limit is passed
    /// or a workspace cannot be measured: the child can still read, list and delete.
    pub fn write_room(&self) -> u64 {
        let mut room = u64::MAX;
        let reserve = self.inner.disk.reserve;
        for root in self.writable_roots() {
            if reserve > 0
                && let Some(free) = free_bytes(root)
            {
                room = room.min(free.saturating_sub(reserve));
            }
            let Some(q) = self.quota_of(&self.canonical_root(root)) else {
                continue;
            };
            if let Some(limit) = q.limit {
                room = match self.usage(q, CACHE_TTL) {
                    Ok(usage) => room.min(limit.saturating_sub(usage)),
                    Err(_) => 0,
                };
            }
        }
        room
    }

    /// The usage of every limited workspace a child of this agent can write (measured at most
    /// `max_age` ago) and the free bytes of each writable root's filesystem (now).
    pub fn disk_sample(&self, max_age: Duration) -> Result<DiskSample, QuotaError> {
        self.sample(None, max_age)
    }

    /// [`Self::disk_sample`]; with `since`, a workspace is walked again only when the free
    /// space of a root reaching it fell by half or more of the room its limit had left then
    /// (a workspace cannot grow by more than its filesystem's free space fell, save for what
    /// others freed meanwhile; at worst the cached usage, at most [`CACHE_TTL`] old, answers).
    fn sample(
        &self,
        since: Option<&DiskSample>,
        max_age: Duration,
    ) -> Result<DiskSample, QuotaError> {
        let free: Vec<Option<u64>> = self.writable_roots().map(free_bytes).collect();
        let roots: Vec<PathBuf> = self
            .writable_roots()
            .map(|r| self.canonical_root(r))
            .collect();
        let mut usage = Vec::new();
        for (i, q) in self.inner.disk.quotas.iter().enumerate() {
            let reaching: Vec<usize> = (0..roots.len())
                .filter(|&j| self.quota_of(&roots[j]).is_some_and(|w| std::ptr::eq(w, q)))
                .collect();
            let Some(limit) = q.limit.filter(|_| !reaching.is_empty()) else {
                usage.push(None);
                continue;
            };
            let age = match since {
                None => max_age,
                Some(s) => {
                    let before = s.usage.get(i).copied().flatten();
                    let room = limit.saturating_sub(before.unwrap_or(0));
                    let fell = reaching
                        .iter()
                        .map(|&j| match (s.free.get(j).copied().flatten(), free[j]) {
                            (Some(then), Some(now)) => then.saturating_sub(now),
                            _ => u64::MAX,
                        })
                        .max()
                        .unwrap_or(u64::MAX);
                    if before.is_none() || fell.saturating_mul(2) >= room {
                        Duration::ZERO
                    } else {
                        max_age
                    }
                }
            };
            usage.push(Some(self.usage(q, age)?));
        }
        Ok(DiskSample { usage, free })
    }

    /// Whether every root a child of this agent can write is within its limit and above the
    /// reserve (see [`DiskCheck`] for how each is measured and what counts). Returns the new
    /// sample.
    pub fn disk_check(&self, check: DiskCheck<'_>) -> Result<DiskSample, QuotaError> {
        let (sample, since) = match check {
            DiskCheck::Now => (self.sample(None, Duration::ZERO)?, None),
            DiskCheck::Watch(start) => (self.sample(None, Duration::ZERO)?, Some(start)),
            DiskCheck::After(start) => (self.sample(Some(start), CACHE_TTL)?, None),
        };
        let reserve = self.inner.disk.reserve;
        for (i, root) in self.writable_roots().enumerate() {
            let before = since.and_then(|s| s.free.get(i).copied().flatten());
            if let Some(free) = sample.free.get(i).copied().flatten()
                && free < reserve
                && before.is_none_or(|b| free < b)
            {
                return Err(QuotaError::Reserve {
                    writer: self.alias().to_string(),
                    root: root.to_path_buf(),
                    free_mib: free / MIB,
                    reserve_mib: reserve / MIB,
                    write: 0,
                });
            }
        }
        for (i, q) in self.inner.disk.quotas.iter().enumerate() {
            let (Some(limit), Some(usage)) = (q.limit, sample.usage.get(i).copied().flatten())
            else {
                continue;
            };
            let before = since.and_then(|s| s.usage.get(i).copied().flatten());
            if usage > limit && before.is_none_or(|b| usage > b) {
                return Err(self.over_limit(q, usage, limit, 0));
            }
        }
        Ok(sample)
    }
}

/// How [`SecurityPolicy::disk_check`] measures, and what counts.
#[derive(Debug, Clone, Copy)]
pub enum DiskCheck<'a> {
    /// Every workspace walked now; any limit passed counts.
    Now,
    /// The shell's watchdog, with the sample taken when the command started: every workspace
    /// walked now; only what is past a limit AND grew since counts, so a cleanup run while
    /// over the limit is not killed.
    Watch(&'a DiskSample),
    /// After a command, with the sample taken when it started: a workspace is walked only when
    /// the free space fell by half or more of the room its limit had left (else its cached
    /// usage, at most [`CACHE_TTL`] old, answers: space others freed meanwhile can hide growth
    /// until then); any limit passed counts.
    After(&'a DiskSample),
}

/// What [`SecurityPolicy::disk_check`] measured: the usage of each limited workspace the agent
/// can write and the free bytes of each writable root's filesystem.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiskSample {
    usage: Vec<Option<u64>>,
    free: Vec<Option<u64>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn measure_counts_each_inode_once_and_follows_no_link() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let ws = tmp.path().join("ws");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(ws.join("a/b/c")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir_all(&outside).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(outside.join("big"), vec![1u8; 4 << 20]).unwrap_or_else(|e| panic!("{e}"));
        let empty = measure(&ws).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(ws.join("a/b/c/f"), vec![1u8; 1 << 20]).unwrap_or_else(|e| panic!("{e}"));
        std::fs::hard_link(ws.join("a/b/c/f"), ws.join("a/g")).unwrap_or_else(|e| panic!("{e}"));
        // Links out of the workspace are not followed: the 4 MiB outside never count.
        symlink(&outside, ws.join("a/out")).unwrap_or_else(|e| panic!("{e}"));
        symlink(outside.join("big"), ws.join("big")).unwrap_or_else(|e| panic!("{e}"));
        let used = measure(&ws).unwrap_or_else(|e| panic!("{e}"));
        let grown = used - empty;
        assert!((1 << 20..(1 << 20) + 64 * 1024).contains(&grown), "{grown}");
        assert_eq!(measure(&tmp.path().join("absent")).ok(), Some(0));
    }
}
