//! Workspace moves and archive checksums. Every step is idempotent: a move re-run after a
//! crash finishes what the first run started (markers beside the target record a cross-
//! filesystem copy in progress or complete).

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use warren_config::atomic::sync_dir;
use warren_config::failpoint::crash_point;

/// What a move did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// Nothing at the source and nothing at the target.
    Nothing,
    /// Moved now (or finished an interrupted move).
    Moved,
    /// The source is gone and the target exists: done earlier.
    AlreadyThere,
}

/// Crash points of a move across filesystems, in order: the `copying` marker written, the
/// copy fsynced, the marker renamed to `copied`, the source removed.
pub const WORKSPACE_COPY_CRASH_POINTS: [&str; 4] = [
    "lifecycle-workspace-after-copying-marker",
    "lifecycle-workspace-after-copy",
    "lifecycle-workspace-after-copied-marker",
    "lifecycle-workspace-after-source-removed",
];

fn marker(dst: &Path, what: &str) -> PathBuf {
    let name = dst
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dst.with_file_name(format!(".{name}.{what}"))
}

fn exists(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok()
}

fn is_empty_dir(p: &Path) -> bool {
    fs::read_dir(p).is_ok_and(|mut d| d.next().is_none())
}

fn ctx(path: &Path, what: &str) -> impl FnOnce(io::Error) -> io::Error {
    let msg = format!("{what} {}", path.display());
    move |e| io::Error::new(e.kind(), format!("{msg}: {e}"))
}

/// Moves directory `src` to `dst` (which must be absent or empty). Same filesystem: one
/// `rename`. Across filesystems (EXDEV, or the injected `lifecycle-force-exdev`): copy with
/// fsync, mark complete, then remove the source.
pub fn move_dir(src: &Path, dst: &Path) -> io::Result<Moved> {
    let copying = marker(dst, "copying");
    let copied = marker(dst, "copied");
    if exists(&copied) {
        // The copy completed; removing the source was interrupted.
        if exists(src) {
            fs::remove_dir_all(src).map_err(ctx(src, "remove moved source"))?;
        }
        fs::remove_file(&copied).map_err(ctx(&copied, "remove marker"))?;
        sync_parent(src);
        sync_parent(dst);
        return Ok(Moved::Moved);
    }
    if exists(&copying) {
        // A copy was interrupted: the target is partial, the source complete.
        if exists(dst) {
            fs::remove_dir_all(dst).map_err(ctx(dst, "remove partial copy"))?;
        }
        fs::remove_file(&copying).map_err(ctx(&copying, "remove marker"))?;
    }
    if !exists(src) {
        return Ok(if exists(dst) {
            Moved::AlreadyThere
        } else {
            Moved::Nothing
        });
    }
    if let Some(parent) = dst.parent() {
        fs::create_dir_all(parent).map_err(ctx(parent, "create"))?;
    }
    if exists(dst) {
        if is_empty_dir(dst) {
            fs::remove_dir(dst).map_err(ctx(dst, "remove empty target"))?;
        } else {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "cannot move {} to {}: the target exists and is not empty",
                    src.display(),
                    dst.display()
                ),
            ));
        }
    }
    let forced = warren_config::failpoint::injected_error("lifecycle-force-exdev");
    let renamed = if forced {
        Err(io::Error::from_raw_os_error(libc::EXDEV))
    } else {
        fs::rename(src, dst)
    };
    match renamed {
        Ok(()) => {
            sync_parent(src);
            sync_parent(dst);
            Ok(Moved::Moved)
        }
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            fs::write(&copying, b"").map_err(ctx(&copying, "write marker"))?;
            sync_parent(&copying);
            crash_point(WORKSPACE_COPY_CRASH_POINTS[0]);
            copy_tree(src, dst)?;
            crash_point(WORKSPACE_COPY_CRASH_POINTS[1]);
            fs::rename(&copying, &copied).map_err(ctx(&copied, "write marker"))?;
            sync_parent(&copied);
            crash_point(WORKSPACE_COPY_CRASH_POINTS[2]);
            fs::remove_dir_all(src).map_err(ctx(src, "remove moved source"))?;
            crash_point(WORKSPACE_COPY_CRASH_POINTS[3]);
            fs::remove_file(&copied).map_err(ctx(&copied, "remove marker"))?;
            sync_parent(src);
            sync_parent(dst);
            Ok(Moved::Moved)
        }
        Err(e) => Err(ctx(src, &format!("move to {}: rename", dst.display()))(e)),
    }
}

fn sync_parent(p: &Path) {
    if let Some(parent) = p.parent() {
        let _ = sync_dir(parent);
    }
}

/// Copies a tree (files fsynced, modes kept, symlinks copied as links).
pub fn copy_tree(src: &Path, dst: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(src).map_err(ctx(src, "stat"))?;
    if meta.file_type().is_symlink() {
        let target = fs::read_link(src).map_err(ctx(src, "read link"))?;
        std::os::unix::fs::symlink(target, dst).map_err(ctx(dst, "create link"))?;
    } else if meta.is_dir() {
        fs::create_dir(dst).map_err(ctx(dst, "create"))?;
        for entry in fs::read_dir(src).map_err(ctx(src, "read"))? {
            let entry = entry.map_err(ctx(src, "read"))?;
            copy_tree(&entry.path(), &dst.join(entry.file_name()))?;
        }
        fs::set_permissions(dst, fs::Permissions::from_mode(meta.permissions().mode()))
            .map_err(ctx(dst, "chmod"))?;
        sync_dir(dst).map_err(ctx(dst, "sync"))?;
    } else {
        fs::copy(src, dst).map_err(ctx(src, "copy"))?;
        fs::File::open(dst)
            .and_then(|f| f.sync_all())
            .map_err(ctx(dst, "fsync"))?;
    }
    Ok(())
}

/// SHA-256 of every regular file under `dir` (relative path → hex), skipping `skip` names at
/// the top level. Symlinks are recorded by their target text.
pub fn checksums(dir: &Path, skip: &[&str]) -> io::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    walk(dir, dir, skip, &mut out)?;
    Ok(out)
}

fn walk(
    base: &Path,
    dir: &Path,
    skip: &[&str],
    out: &mut BTreeMap<String, String>,
) -> io::Result<()> {
    for entry in fs::read_dir(dir).map_err(ctx(dir, "read"))? {
        let entry = entry.map_err(ctx(dir, "read"))?;
        let path = entry.path();
        let rel = path
            .strip_prefix(base)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        if dir == base && skip.contains(&rel.as_str()) {
            continue;
        }
        let meta = fs::symlink_metadata(&path).map_err(ctx(&path, "stat"))?;
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&path).map_err(ctx(&path, "read link"))?;
            out.insert(rel, format!("link:{}", target.to_string_lossy()));
        } else if meta.is_dir() {
            walk(base, &path, skip, out)?;
        } else {
            let mut hasher = Sha256::new();
            let mut f = fs::File::open(&path).map_err(ctx(&path, "open"))?;
            std::io::copy(&mut f, &mut hasher).map_err(ctx(&path, "read"))?;
            out.insert(rel, warren_core::hex::encode(&hasher.finalize()));
        }
    }
    Ok(())
}

/// SHA-256 of `bytes` as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    warren_core::hex::encode(&Sha256::digest(bytes))
}

/// Whether workspace `ws` holds something of its own, so a rename or restore must not move an
/// agent's workspace onto it. Empty, or holding only an empty `.tmp` (the agent's private temp
/// directory, which the daemon creates whenever it builds an agent: a generation still
/// running under the old name can recreate it after a rename moved the workspace away), is
/// nothing: that `.tmp` is removed (`remove_dir` never follows a link nor removes content).
pub fn holds_content(ws: &Path) -> bool {
    let Ok(entries) = fs::read_dir(ws) else {
        return false;
    };
    let names: Vec<_> = entries.flatten().map(|e| e.file_name()).collect();
    match names.as_slice() {
        [] => false,
        [only] if only == ".tmp" => fs::remove_dir(ws.join(".tmp")).is_err(),
        _ => true,
    }
}

/// Removes `dir` if it is an empty directory (e.g. `agents/<old>/` after its workspace moved).
pub fn remove_if_empty(dir: &Path) {
    if is_empty_dir(dir) {
        let _ = fs::remove_dir(dir);
        sync_parent(dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rename or restore target holding only the daemon's empty `.tmp` is free (the `.tmp`
    /// goes); anything else in it, a file in `.tmp` or a link named `.tmp` too, is content.
    #[test]
    fn only_an_empty_private_temp_dir_is_not_content() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let ws = dir.path().join("workspace");
        assert!(!holds_content(&ws), "absent");
        fs::create_dir_all(ws.join(".tmp")).unwrap_or_else(|e| panic!("{e}"));
        assert!(!holds_content(&ws));
        assert!(!ws.join(".tmp").exists(), "the empty .tmp is removed");
        fs::create_dir_all(ws.join(".tmp")).unwrap_or_else(|e| panic!("{e}"));
        fs::write(ws.join(".tmp/x"), b"x").unwrap_or_else(|e| panic!("{e}"));
        assert!(holds_content(&ws), "a file in .tmp");
        fs::remove_dir_all(ws.join(".tmp")).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(dir.path(), ws.join(".tmp")).unwrap_or_else(|e| panic!("{e}"));
        assert!(holds_content(&ws), "a link named .tmp");
        assert!(dir.path().exists(), "its target is untouched");
        fs::remove_file(ws.join(".tmp")).unwrap_or_else(|e| panic!("{e}"));
        fs::write(ws.join("notes.md"), b"n").unwrap_or_else(|e| panic!("{e}"));
        assert!(holds_content(&ws));
    }
}
