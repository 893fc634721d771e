//! `manifest.json`: what a backup holds, with the size and SHA-256 of every stored file.
//!
//! [`Manifest::read`] also checks the shape of the tree the entries describe (issue 35 §2):
//! every path is plain and relative, appears once, and has no symbolic link or file entry
//! among its ancestors. Restore confines itself to its target regardless ([`super::beneath`]);
//! this check makes `backup verify` name a hand-edited entry instead of passing it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::BackupError;

/// The `format` field of every manifest.
pub const FORMAT: &str = "warren-backup";
/// Version of the layout written when no file is sparse (readable by every release).
pub const VERSION: u32 = 1;
/// Version written when a file entry has [`Sparse`] extents (issue 35 §8): an older release
/// refuses it instead of restoring a sparse file as its data packed together.
pub const VERSION_SPARSE: u32 = 2;
/// The manifest's file name in a backup.
pub const FILE: &str = "manifest.json";
/// The directory of the stored files in a backup.
pub const FILES_DIR: &str = "files";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    pub warren_version: String,
    /// RFC 3339 time the snapshot started: what was acknowledged before it is in the backup.
    pub created_at: String,
    pub source_root: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<super::crypt::Params>,
    /// `PRAGMA user_version` of each database, by its path.
    pub schemas: BTreeMap<String, i64>,
    pub entries: Vec<Entry>,
    pub files: u64,
    pub bytes: u64,
    /// What was left out, and why (a hard-linked workspace file, a socket, a remote memory
    /// backend).
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// One entry, by its path relative to the install root (`/`-separated).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub path: String,
    #[serde(flatten)]
    pub kind: EntryKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EntryKind {
    Dir {
        mode: u32,
    },
    File {
        mode: u32,
        class: Class,
        /// Size and SHA-256 (hex) of the bytes stored under `files/` (encrypted, if so).
        size: u64,
        sha256: String,
        /// A sparse file: only its data extents are stored, one after another (absent in
        /// version 1 backups and for files without holes).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sparse: Option<Sparse>,
    },
    Symlink {
        target: String,
    },
}

/// The layout of a sparse file: its length, and the `[offset, length]` of each data extent in
/// ascending order; the stored bytes are these extents' bytes concatenated, everything else
/// is a hole (reads as zeros).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sparse {
    pub len: u64,
    pub data: Vec<[u64; 2]>,
}

impl Sparse {
    /// Bytes of data (what is stored, before encryption).
    pub fn data_bytes(&self) -> u64 {
        self.data.iter().map(|[_, n]| n).sum()
    }

    /// Why the extents are not ascending, disjoint and inside the file, if they are not.
    pub fn problem(&self) -> Option<String> {
        let mut end = 0u64;
        for &[off, n] in &self.data {
            let Some(stop) = off.checked_add(n) else {
                return Some(format!("extent [{off}, {n}] overflows"));
            };
            if off < end || n == 0 || stop > self.len {
                return Some(format!(
                    "extent [{off}, {n}] overlaps, is empty or lies past the file's {} bytes",
                    self.len
                ));
            }
            end = stop;
        }
        None
    }
}

/// How a file was read from the live install.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// An SQLite database, copied through the online backup API.
    Sqlite,
    /// A JSONL ledger, copied up to its last complete line.
    Ledger,
    /// Any other file, copied as read.
    Plain,
}

impl Manifest {
    /// Reads and checks `<backup>/manifest.json`.
    pub fn read(backup: &Path) -> Result<Self, BackupError> {
        let path = backup.join(FILE);
        let bytes = std::fs::read(&path).map_err(|e| BackupError::NotABackup {
            path: backup.to_path_buf(),
            cause: format!("cannot read {}: {e}", path.display()),
        })?;
        let m: Self = serde_json::from_slice(&bytes).map_err(|e| BackupError::Verify {
            path: path.clone(),
            cause: format!("does not parse: {e}"),
        })?;
        if m.format != FORMAT || !(VERSION..=VERSION_SPARSE).contains(&m.version) {
            return Err(BackupError::NotABackup {
                path: path.clone(),
                cause: format!("format {} version {}", m.format, m.version),
            });
        }
        if let Some(cause) = tree_problem(&m.entries) {
            return Err(BackupError::Verify { path, cause });
        }
        Ok(m)
    }
}

/// Why `entries` do not describe one tree a restore can write beneath its target, if they do
/// not: a path that is not plain and relative, a path listed twice, a path below a symbolic
/// link or a file entry (a hand-edited manifest that adds `x -> /etc` and then `x/cron.d/job`
/// asks a plain-path restore to write outside its target; issue 35 §2), or a sparse file whose
/// extents do not fit it.
pub fn tree_problem(entries: &[Entry]) -> Option<String> {
    use std::collections::btree_map::Entry as Slot;
    // Each path's kind: "symbolic link", "file" or "directory".
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for e in entries {
        if !safe_rel(&e.path) {
            return Some(format!("entry '{}' is not a plain relative path", e.path));
        }
        let kind = match &e.kind {
            EntryKind::Dir { .. } => "directory",
            EntryKind::Symlink { .. } => "symbolic link",
            EntryKind::File { sparse, .. } => {
                if let Some(problem) = sparse.as_ref().and_then(Sparse::problem) {
                    return Some(format!("entry '{}': {problem}", e.path));
                }
                "file"
            }
        };
        match seen.entry(e.path.as_str()) {
            Slot::Occupied(first) => {
                return Some(format!(
                    "entry '{}' is listed twice (as a {} and as a {kind}): a manifest names each path once (a hand-edited manifest?)",
                    e.path,
                    first.get()
                ));
            }
            Slot::Vacant(slot) => {
                slot.insert(kind);
            }
        }
    }
    // No proper ancestor (`a`, `a/b` of `a/b/c`) of any path is a link or a file, whichever
    // of the two the manifest lists first.
    for path in seen.keys() {
        for (i, _) in path.match_indices('/') {
            let ancestor = &path[..i];
            if let Some(kind @ ("symbolic link" | "file")) = seen.get(ancestor).copied() {
                return Some(format!(
                    "entry '{path}' lies below '{ancestor}', which the manifest lists as a {kind}: a restore would write through it (a hand-edited manifest?)"
                ));
            }
        }
    }
    None
}

/// Whether `rel` is a relative path of plain components (no `..`, no absolute path): a
/// manifest cannot make restore write outside its target.
pub fn safe_rel(rel: &str) -> bool {
    !rel.is_empty()
        && !rel.starts_with('/')
        && rel
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_paths_are_safe() {
        for ok in [
            "config.toml",
            "agents/main/workspace/a b.txt",
            ".secret_key",
        ] {
            assert!(safe_rel(ok), "{ok}");
        }
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a"] {
            assert!(!safe_rel(bad), "{bad}");
        }
    }

    fn entry(path: &str, kind: EntryKind) -> Entry {
        Entry {
            path: path.to_string(),
            kind,
        }
    }

    fn link(path: &str) -> Entry {
        entry(
            path,
            EntryKind::Symlink {
                target: "/tmp".to_string(),
            },
        )
    }

    fn dir(path: &str) -> Entry {
        entry(path, EntryKind::Dir { mode: 0o700 })
    }

    fn file(path: &str) -> Entry {
        entry(
            path,
            EntryKind::File {
                mode: 0o600,
                class: Class::Plain,
                size: 0,
                sha256: String::new(),
                sparse: None,
            },
        )
    }

    #[test]
    fn entries_below_or_repeating_a_link_and_duplicates_are_refused_issue35() {
        assert_eq!(tree_problem(&[dir("a"), file("a/f"), link("a/l")]), None);
        let cases = [
            (
                vec![link("x"), dir("x/d"), file("x/d/f")],
                "'x/d' lies below 'x'",
            ),
            (vec![link("x"), dir("x")], "'x' is listed twice"),
            (vec![dir("x"), link("x")], "'x' is listed twice"),
            (vec![file("x"), file("x")], "'x' is listed twice"),
            (vec![file("x/y"), link("x")], "'x/y' lies below 'x'"),
            (vec![file("x"), file("x/y")], "'x/y' lies below 'x'"),
        ];
        for (entries, want) in cases {
            let got = tree_problem(&entries).unwrap_or_default();
            assert!(got.contains(want), "{entries:?}: {got}");
        }
    }

    #[test]
    fn sparse_extents_must_be_ascending_and_inside_the_file_issue35() {
        let ok = Sparse {
            len: 100,
            data: vec![[0, 10], [50, 50]],
        };
        assert_eq!((ok.problem(), ok.data_bytes()), (None, 60));
        for data in [vec![[0, 10], [5, 10]], vec![[90, 20]], vec![[0, 0]]] {
            let bad = Sparse { len: 100, data };
            assert!(bad.problem().is_some(), "{bad:?}");
        }
    }
}
