//! An append-only line file kept open between appends: the cost ledger (STATE-14) and the
//! runtime trace (STATE-13). Each append costs one `stat` of the path (has another process or
//! a rename replaced or rotated the file?) and one `write`; the handle is reopened only when
//! the path no longer names the file it refers to. Lines are written whole with `O_APPEND`,
//! so appends from several processes never interleave inside a line.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// The file at a path and, once written, an open append handle with the identity
/// `(dev, ino)` of the file it refers to.
#[derive(Debug)]
pub(crate) struct AppendFile {
    path: PathBuf,
    open: Option<(File, (u64, u64))>,
    /// Written since the last [`AppendFile::sync`].
    dirty: bool,
}

/// Where an append landed: the length of the file just before it (as `stat` saw it) and the
/// inode written to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Appended {
    pub before: u64,
    pub ino: u64,
}

impl AppendFile {
    pub(crate) fn new(path: PathBuf) -> Self {
        Self {
            path,
            open: None,
            dirty: false,
        }
    }

    /// Whether the file can be appended to (opened now if need be; nothing is written): a
    /// writer asks before it commits to work whose record must land here (issue 36 §7).
    pub(crate) fn writable(&mut self) -> std::io::Result<()> {
        let current = std::fs::metadata(&self.path).ok();
        self.handle(current.as_ref()).map(drop)
    }

    /// The append handle of the file `current` describes (`None`: no file yet), reopened
    /// when the path names another file than the one held.
    fn handle(
        &mut self,
        current: Option<&std::fs::Metadata>,
    ) -> std::io::Result<&mut (File, (u64, u64))> {
        let id = current.map(|m| (m.dev(), m.ino()));
        if self.open.as_ref().map(|(_, held)| *held) != id {
            self.open = None;
        }
        if self.open.is_none() {
            if let Some(dir) = self.path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?;
            let m = f.metadata()?;
            self.open = Some((f, (m.dev(), m.ino())));
        }
        self.open
            .as_mut()
            .ok_or_else(|| std::io::Error::other("the append handle did not open"))
    }

    /// Appends `line` (a complete line, newline included). With `rotate_at`, a file that has
    /// reached that many bytes is first renamed to `<path>.1` (replacing an older one).
    pub(crate) fn append(
        &mut self,
        line: &[u8],
        rotate_at: Option<u64>,
    ) -> std::io::Result<Appended> {
        let mut current = std::fs::metadata(&self.path).ok();
        if let (Some(m), Some(limit)) = (&current, rotate_at)
            && m.len() >= limit
        {
            let mut rotated = self.path.clone().into_os_string();
            rotated.push(".1");
            std::fs::rename(&self.path, rotated)?;
            current = None;
        }
        let ino = {
            let (file, (_, ino)) = self.handle(current.as_ref())?;
            file.write_all(line)?;
            *ino
        };
        self.dirty = true;
        Ok(Appended {
            before: current.map_or(0, |m| m.len()),
            ino,
        })
    }

    /// The length of the file the handle refers to, now (`fstat`).
    pub(crate) fn len_now(&self) -> std::io::Result<u64> {
        match &self.open {
            Some((f, _)) => Ok(f.metadata()?.len()),
            None => Ok(0),
        }
    }

    /// Makes what was appended since the last call durable (`fdatasync`); nothing to do when
    /// nothing was appended.
    pub(crate) fn sync(&mut self) -> std::io::Result<()> {
        if let Some((f, _)) = &self.open
            && self.dirty
        {
            f.sync_data()?;
        }
        self.dirty = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_file_is_reopened_and_rotation_keeps_one_predecessor() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("state/log.jsonl");
        let mut f = AppendFile::new(path.clone());
        let first = f.append(b"a\n", None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(first.before, 0);
        assert_eq!(f.append(b"b\n", None).map(|a| a.before).ok(), Some(2));
        assert_eq!(f.len_now().ok(), Some(4));
        // Another process replaces the file (an agent rename rewrites the ledger).
        std::fs::write(dir.path().join("new"), "x\n").unwrap_or_else(|e| panic!("{e}"));
        std::fs::rename(dir.path().join("new"), &path).unwrap_or_else(|e| panic!("{e}"));
        f.append(b"c\n", None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            std::fs::read_to_string(&path).ok().as_deref(),
            Some("x\nc\n")
        );
        // Rotation at 4 bytes: the full file becomes `.1`, the line starts a new one.
        f.append(b"d\n", Some(4)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(std::fs::read_to_string(&path).ok().as_deref(), Some("d\n"));
        let rotated = dir.path().join("state/log.jsonl.1");
        assert_eq!(
            std::fs::read_to_string(rotated).ok().as_deref(),
            Some("x\nc\n")
        );
        f.sync().unwrap_or_else(|e| panic!("{e}"));
    }
}
