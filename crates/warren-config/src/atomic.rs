//! Atomic, durable file replacement (SPEC CFG-4, CFG-5).
//!
//! Order: temp file in the same directory (created 0600, `O_EXCL`, never through a symlink) →
//! write → keep the previous file as `<name>.bak` (a hard link to the old inode, so no bytes are
//! copied) → fsync the temp file → fsync the directory → rename over the target → fsync the
//! directory.
//! The writer holds an `flock` on its temp file from creation until after the rename, so
//! [`sweep_stale_temps`] can tell a live writer's temp file from one a crashed writer left.
//! A failure before the rename removes the temp file and leaves the target untouched. A
//! directory-sync failure after the rename still returns `Ok`, with a warning: `Ok` means "the
//! replacement is visible", not "the rename is durable"; `.bak` stays for recovery.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::failpoint::crash_point;

/// Prefix of temp files, so a later save can sweep the ones a crash left behind.
const TEMP_MARK: &str = ".tmp-";

/// A failed durable write; the target file is unchanged. The io error is part of the message
/// and not also its `source()`, so a printed chain names it once.
#[derive(Debug, thiserror::Error)]
#[error("cannot save {path}: {step}: {cause}")]
pub struct AtomicWriteError {
    pub path: PathBuf,
    pub step: &'static str,
    pub cause: io::Error,
}

/// What a successful write wants the caller to know.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WriteOutcome {
    /// Non-fatal problems (a directory sync after the rename failed, ...).
    pub warnings: Vec<String>,
}

/// Crash-point names for the four steps of one kind of file.
#[derive(Debug, Clone, Copy)]
pub struct CrashPoints {
    pub after_temp_write: &'static str,
    pub after_temp_fsync: &'static str,
    pub after_rename: &'static str,
    pub after_dir_sync: &'static str,
    /// Error injection: pretend the directory sync after the rename failed.
    pub dir_sync_error: &'static str,
}

impl CrashPoints {
    pub const CONFIG: Self = Self {
        after_temp_write: crate::failpoint::CONFIG_SAVE[0],
        after_temp_fsync: crate::failpoint::CONFIG_SAVE[1],
        after_rename: crate::failpoint::CONFIG_SAVE[2],
        after_dir_sync: crate::failpoint::CONFIG_SAVE[3],
        dir_sync_error: crate::failpoint::CONFIG_DIR_SYNC_ERROR,
    };

    /// A scrubbed `config.toml.bak` written before the save (issue 35 §9).
    pub const CONFIG_BACKUP: Self = Self {
        after_temp_write: crate::failpoint::CONFIG_BACKUP_SAVE[0],
        after_temp_fsync: crate::failpoint::CONFIG_BACKUP_SAVE[1],
        after_rename: crate::failpoint::CONFIG_BACKUP_SAVE[2],
        after_dir_sync: crate::failpoint::CONFIG_BACKUP_SAVE[3],
        dir_sync_error: "config-backup-dir-sync-error",
    };
}

/// Replaces `target` with `bytes` durably (see the module docs). Keeps `<target>.bak` when a
/// previous file existed. `mode` applies to the new file.
pub fn write_durable(
    target: &Path,
    bytes: &[u8],
    mode: u32,
    points: CrashPoints,
) -> Result<WriteOutcome, AtomicWriteError> {
    replace(target, bytes, mode, points, true)
}

/// [`write_durable`] without the `.bak`: for files whose previous version is not worth
/// keeping (journal records, archive exports, a rewritten ledger).
pub fn write_durable_no_backup(
    target: &Path,
    bytes: &[u8],
    mode: u32,
    points: CrashPoints,
) -> Result<WriteOutcome, AtomicWriteError> {
    replace(target, bytes, mode, points, false)
}

fn replace(
    target: &Path,
    bytes: &[u8],
    mode: u32,
    points: CrashPoints,
    backup: bool,
) -> Result<WriteOutcome, AtomicWriteError> {
    let err = |step: &'static str| {
        move |cause: io::Error| AtomicWriteError {
            path: target.to_path_buf(),
            step,
            cause,
        }
    };
    let dir = parent_dir(target);
    let name = target
        .file_name()
        .ok_or_else(|| err("target has no file name")(io::ErrorKind::InvalidInput.into()))?
        .to_string_lossy()
        .into_owned();

    let (temp, mut file) = create_locked_temp(dir, &name, mode).map_err(err("create temp file"))?;
    let result = (|| {
        file.write_all(bytes).map_err(err("write temp file"))?;
        crash_point(points.after_temp_write);
        // Link .bak before the fsync: on journaling filesystems the file fsync then commits the
        // new directory entries too, and the directory sync below has little left to do.
        if backup {
            keep_backup(target).map_err(err("keep .bak"))?;
        }
        file.sync_all().map_err(err("fsync temp file"))?;
        crash_point(points.after_temp_fsync);
        sync_dir(dir).map_err(err("sync directory before rename"))?;
        fs::rename(&temp, target).map_err(err("rename temp file over target"))
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&temp);
        return Err(e);
    }
    // Closing the temp file (now the target) releases its lock only after the rename.
    drop(file);
    crash_point(points.after_rename);
    let mut outcome = WriteOutcome::default();
    let synced = if crate::failpoint::injected_error(points.dir_sync_error) {
        Err(io::Error::other("injected directory sync failure"))
    } else {
        sync_dir(dir)
    };
    if let Err(e) = synced {
        let kept = if backup {
            format!("; {} keeps it", backup_path(target).display())
        } else {
            String::new()
        };
        let warning = format!(
            "{} was replaced but its directory could not be synced ({e}); after a crash the previous \
             version may reappear{kept}",
            target.display(),
        );
        tracing::warn!("{warning}");
        outcome.warnings.push(warning);
    }
    crash_point(points.after_dir_sync);
    Ok(outcome)
}

/// Creates `.<name>.tmp-<pid>-<random>` in `dir` (0600 or `mode`, `O_EXCL`, never through a
/// symlink) and locks it. A sweeper that took the lock between our create and our lock may have
/// removed the name: then the file we hold is no longer at it, and a new name is tried.
fn create_locked_temp(dir: &Path, name: &str, mode: u32) -> io::Result<(PathBuf, File)> {
    loop {
        let temp = dir.join(format!(
            ".{name}{TEMP_MARK}{}-{:016x}",
            std::process::id(),
            random_u64()
        ));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temp)?;
        file.lock()?;
        let held = file.metadata()?;
        match fs::symlink_metadata(&temp) {
            Ok(now) if now.dev() == held.dev() && now.ino() == held.ino() => {
                return Ok((temp, file));
            }
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        }
    }
}

/// `<target>.bak`.
pub fn backup_path(target: &Path) -> PathBuf {
    let mut name = target
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".bak");
    target.with_file_name(name)
}

/// Makes `<target>.bak` another name of the current target (no copy, atomic replace).
fn keep_backup(target: &Path) -> io::Result<()> {
    let bak = backup_path(target);
    // Drop the older backup, then make `.bak` a second name of the current file. A crash in
    // between leaves no `.bak` for a moment, never a wrong one; the target is untouched.
    match fs::remove_file(&bak) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    match fs::hard_link(target, &bak) {
        // No previous file: nothing to keep.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Opens (creating, 0600) a lock file for `flock`, never through a symlink. Every lock file of
/// the install (config writes, daemon, sessions) is opened here.
pub fn open_lock_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// fsyncs a directory so renames and creations inside it are durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Removes temp files a crashed writer left beside `target`. Never touches a live writer's
/// temp file: one named after this process or after a running process is left alone, and so is
/// one whose `flock` is held (a writer holds it from creation until after its rename; the
/// sweeper removes a file only while holding that lock itself).
pub fn sweep_stale_temps(target: &Path) {
    let dir = parent_dir(target);
    let Some(name) = target.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return;
    };
    let prefix = format!(".{name}{TEMP_MARK}");
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let file_name = file_name.to_string_lossy();
        let Some(rest) = file_name.strip_prefix(prefix.as_str()) else {
            continue;
        };
        if writer_may_be_running(rest) {
            continue;
        }
        let path = entry.path();
        let Ok(file) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(&path)
        else {
            continue;
        };
        // Held: a live writer (perhaps in another PID namespace) owns it.
        if file.try_lock().is_ok() {
            let _ = fs::remove_file(&path);
        }
    }
}

/// Whether the writer named in a temp file's `<pid>-<random>` tail may still run: this process
/// (another thread), or a pid that `/proc` lists. Without `/proc` only the file lock decides.
fn writer_may_be_running(tail: &str) -> bool {
    let Some(pid) = tail.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
        return false;
    };
    pid == std::process::id() || Path::new("/proc").join(pid.to_string()).exists()
}

/// A random number for a private temp or staging name (not a secret).
pub fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    // A failed RNG only weakens the uniqueness of a name that is also O_EXCL-protected.
    let _ = getrandom::fill(&mut buf);
    u64::from_ne_bytes(buf) ^ u64::from(std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const NO_POINTS: CrashPoints = CrashPoints::CONFIG;

    #[test]
    fn replaces_keeps_backup_and_sets_mode() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let target = dir.path().join("config.toml");
        write_durable(&target, b"one", 0o600, NO_POINTS)?;
        assert!(
            !backup_path(&target).exists(),
            "no .bak without a previous file"
        );
        write_durable(&target, b"two", 0o600, NO_POINTS)?;
        assert_eq!(fs::read(&target)?, b"two");
        assert_eq!(fs::read(backup_path(&target))?, b"one");
        assert_eq!(fs::metadata(&target)?.permissions().mode() & 0o777, 0o600);
        let leftovers: Vec<_> = fs::read_dir(dir.path())?
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(TEMP_MARK))
            .collect();
        assert!(leftovers.is_empty(), "temp files left: {leftovers:?}");
        Ok(())
    }

    #[test]
    fn failure_before_rename_leaves_target_untouched() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let target = dir.path().join("config.toml");
        fs::write(&target, "old")?;
        // A directory in place of the .bak name makes the backup step fail before the rename.
        fs::create_dir(backup_path(&target))?;
        fs::write(backup_path(&target).join("x"), "")?;
        let err = write_durable(&target, b"new", 0o600, NO_POINTS);
        assert!(err.is_err());
        assert_eq!(fs::read_to_string(&target)?, "old");
        Ok(())
    }

    #[test]
    fn sweeps_temp_files_a_crashed_writer_left() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let target = dir.path().join("config.toml");
        // No process can have this pid (Linux caps pids at 2^22).
        let stale = dir
            .path()
            .join(format!(".config.toml{TEMP_MARK}{DEAD_PID}-00"));
        fs::write(&stale, "torn")?;
        sweep_stale_temps(&target);
        write_durable(&target, b"fresh", 0o600, NO_POINTS)?;
        assert!(!stale.exists(), "stale temp swept");
        assert_eq!(fs::read_to_string(&target)?, "fresh");
        Ok(())
    }

    const DEAD_PID: u32 = 4_294_967_000;

    #[test]
    fn the_sweep_never_removes_a_live_writers_temp_file_cfg4()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let target = dir.path().join("config.toml");
        // A writer this process runs (another thread), a writer in a running process (pid 1),
        // and a writer whose pid we cannot see (another PID namespace) but whose lock is held.
        let ours = dir
            .path()
            .join(format!(".config.toml{TEMP_MARK}{}-01", std::process::id()));
        let running = dir.path().join(format!(".config.toml{TEMP_MARK}1-02"));
        let (held, held_file) = create_locked_temp(dir.path(), "config.toml", 0o600)?;
        let unseen = dir
            .path()
            .join(format!(".config.toml{TEMP_MARK}{DEAD_PID}-03"));
        fs::rename(&held, &unseen)?;
        for path in [&ours, &running] {
            fs::write(path, "live")?;
        }
        sweep_stale_temps(&target);
        for path in [&ours, &running, &unseen] {
            assert!(
                path.exists(),
                "{} was swept under its writer",
                path.display()
            );
        }
        drop(held_file);
        sweep_stale_temps(&target);
        assert!(!unseen.exists(), "swept once its writer is gone");
        Ok(())
    }
}
