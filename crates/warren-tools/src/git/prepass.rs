//! The read pre-pass and its cache (GIT-6, PERM-3): what keeps a read at one sandboxed spawn.
//!
//! Every read needs the `-c` overrides blanking each filter and diff driver the repository's
//! configuration defines, and a check that no repository-scoped config file or configured path
//! lies outside the agent's grants ([`exec::list_config`] lists the config with git itself, in
//! the sandbox; [`exec::decide`] decides). That listing is a second sandboxed spawn per read; this module
//! remembers its outcome per repository and reuses it while **every config file git reads, or
//! would read if it existed, is in exactly the state it was in when the listing ran**.
//!
//! Why a cache and not a config parser in the daemon: git stays the only parser of git config.
//! A second parser (quoting, escapes, continuation lines, subsection case rules, include
//! conditions, each new git release) could disagree with git on one crafted file, and any
//! disagreement is a filter that runs. The cache never interprets a config file: it only decides
//! whether the files are unchanged, and falls back to the listing whenever it cannot tell.
//!
//! What is watched (each by `lstat` through [`ConfinedDir`] handles walked from `/` without
//! following a link, never `std::fs` on an agent-writable path): the system config
//! (`/etc/gitconfig`), the global ones (`$HOME/.gitconfig`, `$HOME/.config/git/config`), the
//! repository's `config` and `config.worktree` (present or not), every file the listing names
//! as an origin, and the target of every `include.path` / `includeIf.*.path` the listing shows,
//! present or absent, the condition true or false. A file's state is its device, inode, type,
//! size, mtime and ctime, or "absent".
//!
//! Why that is enough: any change an agent can make to a file (write, truncate, `chmod`,
//! `utimensat`, a hard link, a rename onto it) sets its ctime to the current time, and no
//! unprivileged call can set ctime back; a different file at the same path has a different
//! inode (or device); a file created where one was absent is no longer absent. The one gap is
//! the timestamp granularity: a change within the same clock tick as the one recorded could keep
//! the ctime. So a listing is cached only when every watched file's ctime lies more than
//! [`SETTLED`] before the listing started: then any later change lands on a later tick and
//! differs. (The listing of a repository whose config changed less than [`SETTLED`] ago simply
//! runs again. A daemon running as root hands the workspace to the sandbox user at the first
//! sandboxed spawn: a `chown` of every root-owned file, `.git/config` included, which is a
//! change like any other, so the reads of the following second list the config again; the
//! `git_status` bench therefore measures after that hand-over has settled.) The grant checks
//! the listing implied (include origins, configured paths) are cheap and are repeated on every
//! read, cached or not, so a changed grant or a symlink swapped under a configured path is seen
//! at once.
//!
//! Not cached (the listing runs every time): an include path starting with `~` or `%(prefix)`,
//! with a `.` or `..` component or a symlink anywhere on it; an `includeIf` condition other than
//! `gitdir:`, `gitdir/i:` and `hasconfig:remote.*.url:` (`onbranch:` depends on `HEAD`, not on a
//! config file); a watched path that is a symlink, or more than [`MAX_WATCHED`] watched files.
//! The cache is per agent (its grants decided the checks) and holds at most [`MAX_REPOS`]
//! repositories.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use rustix::fs::{AtFlags, FileType};
use warren_config::confined::ConfinedDir;
use warren_security::sandbox::Sandbox;

use super::exec::{self, ConfigEntry, Recheck};
use super::repo::Repo;
use crate::tool::ToolError;

/// How long before the listing started every watched file must have last changed (ctime) for
/// the listing to be cached: well above any local file system's timestamp granularity.
pub(super) const SETTLED: Duration = Duration::from_secs(1);
/// Most watched files per repository; more and the listing is not cached.
const MAX_WATCHED: usize = 64;
/// Most repositories remembered per agent; the cache is emptied when full.
const MAX_REPOS: usize = 64;

/// The state of one watched file: `None` when absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FileState {
    dev: u64,
    ino: u64,
    mode: u32,
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileState {
    /// Whether the file last changed more than [`SETTLED`] before `start`: any later change
    /// then gives it another ctime.
    pub(super) fn settled_before(&self, start: SystemTime) -> bool {
        start
            .checked_sub(SETTLED)
            .is_some_and(|settled| self.ctime() < settled)
    }

    fn ctime(&self) -> SystemTime {
        let (secs, nanos) = self.ctime;
        let secs = u64::try_from(secs).unwrap_or(0);
        let nanos = u32::try_from(nanos).unwrap_or(0);
        SystemTime::UNIX_EPOCH + Duration::new(secs, nanos)
    }
}

/// What a cached listing decided, and what it watched.
#[derive(Debug, Clone)]
struct Entry {
    watched: Vec<(PathBuf, Option<FileState>)>,
    drivers: Vec<String>,
    rechecks: Vec<Recheck>,
}

/// The pre-pass outcomes of one agent's repositories.
#[derive(Debug, Default)]
pub struct PrepassCache {
    entries: Mutex<HashMap<(PathBuf, PathBuf, PathBuf), Entry>>,
    listings: AtomicU64,
}

impl PrepassCache {
    /// The `-c` overrides for a read of `repo`: from the cache when every watched file is
    /// unchanged, else from a fresh listing (cached when it qualifies). The grant checks run
    /// either way.
    pub async fn drivers(&self, sandbox: &Sandbox, repo: &Repo) -> Result<Vec<String>, ToolError> {
        let key = (
            repo.work_tree.clone(),
            repo.git_dir.clone(),
            repo.common_dir.clone(),
        );
        let cached = self.lock().get(&key).cloned();
        if let Some(entry) = cached
            && entry
                .watched
                .iter()
                .all(|(path, state)| matches!(file_state(path), Ok(now) if now == *state))
        {
            exec::recheck(sandbox.policy(), &entry.rechecks)?;
            return Ok(entry.drivers);
        }
        let started = SystemTime::now();
        self.listings.fetch_add(1, Ordering::Relaxed);
        let listing = exec::list_config(sandbox, repo).await?;
        let (drivers, rechecks) = exec::decide(sandbox.policy(), repo, &listing)?;
        if let Some(watched) = watch(repo, &listing, started) {
            let mut entries = self.lock();
            if entries.len() >= MAX_REPOS {
                entries.clear();
            }
            entries.insert(
                key,
                Entry {
                    watched,
                    drivers: drivers.clone(),
                    rechecks,
                },
            );
        } else {
            self.lock().remove(&key);
        }
        Ok(drivers)
    }

    /// How many config listings ran (every other read was served by the cache).
    pub fn listings(&self) -> u64 {
        self.listings.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(PathBuf, PathBuf, PathBuf), Entry>> {
        // A poisoned map holds only complete entries (inserted whole): keep using it.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The watched files of a listing and their states now, or `None` when the listing must not be
/// cached (see the module doc).
fn watch(
    repo: &Repo,
    listing: &[ConfigEntry],
    started: SystemTime,
) -> Option<Vec<(PathBuf, Option<FileState>)>> {
    let paths = watched_paths(repo, listing)?;
    let mut out = Vec::with_capacity(paths.len());
    for path in paths {
        let state = file_state(&path).ok()?;
        if let Some(s) = &state
            && !s.settled_before(started)
        {
            return None;
        }
        out.push((path, state));
    }
    Some(out)
}

/// Every file whose content can change what the listing says (see the module doc).
fn watched_paths(repo: &Repo, listing: &[ConfigEntry]) -> Option<Vec<PathBuf>> {
    let mut paths: Vec<PathBuf> = vec![
        PathBuf::from("/etc/gitconfig"),
        repo.common_dir.join("config"),
        repo.git_dir.join("config.worktree"),
        repo.common_dir.join("config.worktree"),
    ];
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
        paths.push(home.join(".gitconfig"));
        paths.push(home.join(".config/git/config"));
    }
    for entry in listing {
        let origin = entry.origin.strip_prefix("file:");
        if let Some(file) = origin {
            paths.push(exec::origin_path(repo, file));
        }
        let key = entry.key.to_ascii_lowercase();
        let condition = if key == "include.path" {
            None
        } else if let Some(rest) = entry
            .key
            .get("includeif.".len()..entry.key.len().saturating_sub(".path".len()))
            .filter(|_| key.starts_with("includeif.") && key.ends_with(".path"))
        {
            Some(rest)
        } else {
            continue;
        };
        if let Some(c) = condition
            && !["gitdir:", "gitdir/i:", "hasconfig:remote.*.url:"]
                .iter()
                .any(|kind| c.starts_with(kind))
        {
            return None;
        }
        let value = entry.value.as_deref().unwrap_or_default();
        if value.is_empty() {
            continue;
        }
        if value.starts_with('~') || value.starts_with("%(prefix)") {
            return None;
        }
        let target = if value.starts_with('/') {
            PathBuf::from(value)
        } else {
            // Relative to the directory of the file that holds the directive (git's rule).
            let including = exec::origin_path(repo, origin?);
            including.parent()?.join(value)
        };
        paths.push(target);
    }
    paths.sort();
    paths.dedup();
    (paths.len() <= MAX_WATCHED).then_some(paths)
}

/// Why a path cannot be watched (it then counts as changed).
#[derive(Debug)]
pub(super) struct Unwatchable;

/// `lstat` of `path` through directory handles opened from `/` one component at a time without
/// following a link. A path that is not plain (a `.`/`..` component, a doubled or trailing
/// slash), a symlink on the way or at the end, or any other error is [`Unwatchable`].
pub(super) fn file_state(path: &Path) -> Result<Option<FileState>, Unwatchable> {
    let plain: PathBuf = path.components().collect();
    if plain.as_os_str() != path.as_os_str()
        || path
            .components()
            .any(|c| matches!(c, Component::CurDir | Component::ParentDir))
    {
        return Err(Unwatchable);
    }
    let rel = path.strip_prefix("/").map_err(|_| Unwatchable)?;
    let (Some(name), Some(parent)) = (rel.file_name(), rel.parent()) else {
        return Err(Unwatchable);
    };
    let root = ConfinedDir::open_root(Path::new("/"))
        .ok()
        .flatten()
        .ok_or(Unwatchable)?;
    let dir = if parent.as_os_str().is_empty() {
        root
    } else {
        match root.open_dir(parent, false) {
            Ok(Some(dir)) => dir,
            Ok(None) => return Ok(None),
            Err(_) => return Err(Unwatchable),
        }
    };
    stat_in(&dir, name)
}

fn stat_in(dir: &ConfinedDir, name: &OsStr) -> Result<Option<FileState>, Unwatchable> {
    if name.as_bytes().contains(&b'/') {
        return Err(Unwatchable);
    }
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => {
            if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
                return Err(Unwatchable);
            }
            #[allow(clippy::useless_conversion)] // field widths differ between targets
            Ok(Some(FileState {
                dev: u64::from(st.st_dev),
                ino: u64::from(st.st_ino),
                mode: u32::from(st.st_mode),
                size: i64::from(st.st_size),
                mtime: (
                    i64::from(st.st_mtime),
                    i64::try_from(st.st_mtime_nsec).unwrap_or(0),
                ),
                ctime: (
                    i64::from(st.st_ctime),
                    i64::try_from(st.st_ctime_nsec).unwrap_or(0),
                ),
            }))
        }
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(_) => Err(Unwatchable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(scope: &str, origin: &str, key: &str, value: &str) -> ConfigEntry {
        ConfigEntry {
            scope: scope.into(),
            origin: origin.into(),
            key: key.into(),
            value: Some(value.into()),
        }
    }

    fn repo() -> Repo {
        Repo {
            work_tree: "/w/r".into(),
            git_dir: "/w/r/.git".into(),
            common_dir: "/w/r/.git".into(),
            grant_root: "/w".into(),
        }
    }

    #[test]
    fn include_targets_are_watched_whatever_their_condition() {
        let listing = [
            entry(
                "local",
                "file:/w/r/.git/config",
                "include.path",
                "extra.cfg",
            ),
            entry(
                "local",
                "file:/w/r/.git/extra.cfg",
                "includeIf.gitdir:/x/.path",
                "/w/other.cfg",
            ),
            entry("local", "file:/w/r/.git/extra.cfg", "core.bare", "false"),
        ];
        let paths = watched_paths(&repo(), &listing).expect("cacheable");
        for p in [
            "/w/r/.git/config",
            "/w/r/.git/extra.cfg",
            "/w/other.cfg",
            "/w/r/.git/config.worktree",
            "/etc/gitconfig",
        ] {
            assert!(paths.contains(&PathBuf::from(p)), "{p} in {paths:?}");
        }
    }

    #[test]
    fn includes_the_cache_cannot_follow_disable_it() {
        for (key, value) in [
            ("include.path", "~/x.cfg"),
            ("include.path", "%(prefix)/etc/x"),
            ("includeIf.onbranch:main.path", "x.cfg"),
            ("includeIf.future:thing.path", "x.cfg"),
        ] {
            let listing = [entry("local", "file:/w/r/.git/config", key, value)];
            assert!(
                watched_paths(&repo(), &listing).is_none(),
                "{key}={value} must not be cached"
            );
        }
        let listing = [entry(
            "local",
            "file:/w/r/.git/config",
            "include.path",
            "../x/./y",
        )];
        let paths = watched_paths(&repo(), &listing).expect("listed");
        assert!(
            paths
                .iter()
                .any(|p| matches!(file_state(p), Err(Unwatchable))),
            "a path with . or .. is unwatchable: {paths:?}"
        );
    }
}
