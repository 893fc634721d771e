//! `warren restore SRC [--to DIR] [--force]`: the backup is verified first, then written into
//! `<DIR>.restoring-<pid>` beside the target and renamed into place. A running daemon on the
//! target is refused (its lock); a non-empty target is refused without `--force`, and with it
//! moved aside to `<DIR>.before-restore-<time>` (kept, never deleted) only once the restored
//! copy is complete. Any error (a full disk included) removes the staging directory and leaves
//! the target as it was.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use warren_config::InstallRoot;

use super::check::{private_dir, verify_keeping};
use super::create::{copy_big, create_file};
use super::manifest::{self, EntryKind};
use super::{BackupError, Progress};
use warren_runtime::lock::{DaemonStatus, probe};

/// What `restore` did (`--json` prints it).
#[derive(Debug, Clone, Serialize)]
pub struct RestoreReport {
    pub root: PathBuf,
    pub from: PathBuf,
    pub files: u64,
    pub bytes: u64,
    /// Where the previous install was moved (with `--force`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moved_aside: Option<PathBuf>,
}

/// Restores the backup `src` into `target` (see the module docs).
pub fn restore(
    src: &Path,
    target: &InstallRoot,
    force: bool,
    passphrase: Option<&str>,
    progress: &dyn Progress,
) -> Result<RestoreReport, BackupError> {
    let (report, (m, sealer)) = verify_keeping(src, passphrase)?;
    let root = std::path::absolute(target.root()).map_err(|e| BackupError::io(target.root(), e))?;
    if let Ok(DaemonStatus::Running { pid, .. }) = probe(target) {
        return Err(BackupError::Live { root, pid });
    }
    let occupied = match std::fs::read_dir(&root) {
        Ok(mut rd) => rd.next().is_some(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(BackupError::io(&root, e)),
    };
    if occupied && !force {
        return Err(BackupError::NotEmpty { root });
    }
    let parent = root.parent().unwrap_or(Path::new("/")).to_path_buf();
    private_dir(&parent)?;
    let name = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "warren".to_string());
    let staging = parent.join(format!(".{name}.restoring-{}", std::process::id()));
    let files_dir = src.join(manifest::FILES_DIR);
    progress.start(m.files, m.bytes);
    let written = (|| -> Result<(), BackupError> {
        private_dir(&staging)?;
        // Directory modes are applied last (a read-only directory must first be filled).
        let mut modes = Vec::new();
        for e in &m.entries {
            let out = staging.join(&e.path);
            match &e.kind {
                EntryKind::Dir { mode } => {
                    private_dir(&out)?;
                    modes.push((out, *mode));
                }
                EntryKind::Symlink { target } => {
                    if let Some(dir) = out.parent() {
                        private_dir(dir)?;
                    }
                    std::os::unix::fs::symlink(target, &out)
                        .map_err(|err| BackupError::io(&out, err))?;
                }
                EntryKind::File { mode, size, .. } => {
                    let stored = files_dir.join(&e.path);
                    let mut input =
                        File::open(&stored).map_err(|err| BackupError::io(&stored, err))?;
                    let file = create_file(&out, mode & 0o777)?;
                    let mut w = BufWriter::with_capacity(128 * 1024, file);
                    match &sealer {
                        Some(s) => {
                            s.unseal(&e.path, &mut input, &mut w)
                                .map_err(|err| match err {
                                    BackupError::DiskFull { what, .. } => BackupError::DiskFull {
                                        path: out.clone(),
                                        what,
                                    },
                                    BackupError::Io { cause, .. } => BackupError::io(&out, cause),
                                    other => other,
                                })?;
                        }
                        None => {
                            copy_big(&mut input, &mut w)
                                .map_err(|err| BackupError::io(&out, err))?;
                        }
                    }
                    w.flush().map_err(|err| BackupError::io(&out, err))?;
                    progress.file_done(&e.path, *size);
                }
            }
        }
        for (dir, mode) in modes.iter().rev() {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(*mode))
                .map_err(|err| BackupError::io(dir, err))?;
        }
        std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o700))
            .map_err(|err| BackupError::io(&staging, err))?;
        let f = File::open(&staging).map_err(|err| BackupError::io(&staging, err))?;
        rustix::fs::syncfs(&f).map_err(|err| BackupError::io(&staging, err.into()))?;
        Ok(())
    })();
    progress.finish();
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    // An empty target directory is replaced by the rename itself.
    let moved_aside = if occupied {
        let stamp = time::OffsetDateTime::now_utc().unix_timestamp();
        let aside = parent.join(format!("{name}.before-restore-{stamp}"));
        if let Err(e) = std::fs::rename(&root, &aside) {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(BackupError::io(&root, e));
        }
        Some(aside)
    } else {
        None
    };
    if let Err(e) = std::fs::rename(&staging, &root) {
        // Put the previous install back; the staging copy is removed.
        if let Some(aside) = &moved_aside {
            let _ = std::fs::rename(aside, &root);
        }
        let _ = std::fs::remove_dir_all(&staging);
        return Err(BackupError::io(&root, e));
    }
    warren_config::atomic::sync_dir(&parent).map_err(|e| BackupError::io(&parent, e))?;
    Ok(RestoreReport {
        root,
        from: src.to_path_buf(),
        files: report.files,
        bytes: report.bytes,
        moved_aside,
    })
}
