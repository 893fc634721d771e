//! `warren restore SRC [--to DIR] [--force]`: the backup is verified first, then written into
//! `<DIR>.restoring-<pid>` beside the target and renamed into place. A running daemon on the
//! target is refused (its lock); a non-empty target is refused without `--force`, and with it
//! moved aside to `<DIR>.before-restore-<time>` (kept, never deleted) only once the restored
//! copy is complete. Any error (a full disk included) removes the staging directory and leaves
//! the target as it was.
//!
//! Every entry is created beneath the staging directory through [`Beneath`] (no link followed
//! at any component, modes applied through the opened handle and masked by
//! [`super::beneath::restored_mode`]; issue 35 §2), and a sparse file gets its holes back
//! ([`super::sparse`]).

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};
use warren_config::InstallRoot;

use super::beneath::{Beneath, set_file_mode};
use super::bytes::copy_big;
use super::check::{private_dir, verify_keeping};
use super::crypt::Sealer;
use super::manifest::{self, EntryKind, Manifest};
use super::sparse::ExtentWriter;
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
        let stored = Beneath::open(&files_dir)?;
        write_entries(
            &Beneath::open(&staging)?,
            &staging,
            &stored,
            &m,
            sealer.as_ref(),
            progress,
        )?;
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

/// Writes the manifest's entries beneath `out` (the staging directory): directories, links,
/// then each file's bytes (unsealed, if encrypted) with its mode; directory modes last, deepest
/// first (a read-only directory must first be filled).
fn write_entries(
    out: &Beneath,
    staging: &Path,
    stored: &Beneath,
    m: &Manifest,
    sealer: Option<&Sealer>,
    progress: &dyn Progress,
) -> Result<(), BackupError> {
    let mut modes = Vec::new();
    for e in &m.entries {
        let path = staging.join(&e.path);
        match &e.kind {
            EntryKind::Dir { mode } => {
                out.make_dir(&e.path)?;
                modes.push((e.path.as_str(), *mode));
            }
            EntryKind::Symlink { target } => out.symlink(&e.path, target)?,
            EntryKind::File {
                mode,
                size,
                sparse,
                sha256,
                ..
            } => {
                // Hashed again as read: a stored file swapped after the verify is not restored.
                let mut input = Hashing::new(stored.open_stored(&e.path)?);
                let file = out.create_file(&e.path)?;
                match sparse {
                    None => fill(&mut input, &file, &e.path, &path, sealer)?,
                    Some(layout) => {
                        let mut holes = ExtentWriter::new(&file, layout);
                        fill(&mut input, &mut holes, &e.path, &path, sealer)?;
                        holes.finish().map_err(|(got, want)| BackupError::Extents {
                            path: path.clone(),
                            got,
                            want,
                        })?;
                    }
                }
                if input.digest() != (*size, sha256.clone()) {
                    return Err(BackupError::Verify {
                        path: path.clone(),
                        cause: "its stored file changed after the backup was verified".to_string(),
                    });
                }
                set_file_mode(&file, &path, *mode)?;
                progress.file_done(&e.path, *size);
            }
        }
    }
    for (dir, mode) in modes.iter().rev() {
        out.set_dir_mode(dir, *mode)?;
    }
    Ok(())
}

/// Copies the stored bytes of `rel` (unsealed, if encrypted) into `sink`.
fn fill(
    input: &mut impl Read,
    sink: impl Write,
    rel: &str,
    path: &Path,
    sealer: Option<&Sealer>,
) -> Result<(), BackupError> {
    let mut w = BufWriter::with_capacity(128 * 1024, sink);
    match sealer {
        Some(s) => {
            s.unseal(rel, input, &mut w).map_err(|err| match err {
                BackupError::DiskFull { what, .. } => BackupError::DiskFull {
                    path: path.to_path_buf(),
                    what,
                },
                BackupError::Io { cause, .. } => BackupError::io(path, cause),
                other => other,
            })?;
        }
        None => {
            copy_big(input, &mut w).map_err(|err| BackupError::io(path, err))?;
        }
    }
    w.flush().map_err(|err| BackupError::io(path, err))
}

/// A reader that counts and hashes (SHA-256) what passes through.
struct Hashing<R> {
    inner: R,
    sha: Sha256,
    n: u64,
}

impl<R: Read> Hashing<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            sha: Sha256::new(),
            n: 0,
        }
    }

    /// Bytes read and their SHA-256 (hex) so far.
    fn digest(&self) -> (u64, String) {
        let sha = self.sha.clone().finalize();
        (self.n, warren_core::hex::encode(&sha))
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.sha.update(&buf[..n]);
        self.n += n as u64;
        Ok(n)
    }
}
