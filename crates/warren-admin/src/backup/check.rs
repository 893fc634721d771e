//! `warren backup verify SRC`: every stored file has the size and SHA-256 its manifest says
//! (and nothing is missing or extra), the passphrase opens an encrypted backup, every
//! database opens read-only and passes `PRAGMA integrity_check` at the schema version
//! recorded, and the backup's `.secret_key` decrypts a secret of its config.toml. Before any
//! of that, [`Manifest::read`] refuses a manifest whose entries do not form one tree (a path
//! twice, or below a symbolic link or a file entry; issue 35 §2).

use std::collections::BTreeSet;
use std::fs::File;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use warren_config::sqlite;

use super::BackupError;
use super::beneath::Beneath;
use super::bytes::{HashWriter, copy_big, create_file};
use super::crypt::Sealer;
use super::manifest::{self, Class, EntryKind, Manifest};

/// What `verify` checked (`--json` prints it).
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    pub path: PathBuf,
    pub created_at: String,
    pub files: u64,
    pub bytes: u64,
    pub encrypted: bool,
    /// Each database with its schema version (all passed `integrity_check`).
    pub databases: Vec<(String, i64)>,
    /// How many encrypted secrets of config.toml were decrypted with the backup's key.
    pub secrets_decrypted: u64,
}

/// Checks the backup at `src`; `passphrase` is needed for an encrypted one.
pub fn verify(src: &Path, passphrase: Option<&str>) -> Result<VerifyReport, BackupError> {
    let (report, _) = verify_keeping(src, passphrase)?;
    Ok(report)
}

/// [`verify`], also returning the manifest and the key (for restore).
pub(super) fn verify_keeping(
    src: &Path,
    passphrase: Option<&str>,
) -> Result<(VerifyReport, (Manifest, Option<Sealer>)), BackupError> {
    let m = Manifest::read(src)?;
    let files_dir = src.join(manifest::FILES_DIR);
    let sealer = match &m.encryption {
        None => None,
        Some(params) => {
            let p = passphrase.ok_or_else(|| BackupError::NeedPassphrase {
                path: src.to_path_buf(),
            })?;
            Some(
                Sealer::open(p, params)?.ok_or_else(|| BackupError::WrongPassphrase {
                    path: src.to_path_buf(),
                })?,
            )
        }
    };
    // Digests (each file opened beneath files/, no link followed), and nothing missing or extra.
    let stored = Beneath::open(&files_dir).map_err(|_| BackupError::Verify {
        path: files_dir.clone(),
        cause: "is missing or not a directory".to_string(),
    })?;
    let mut listed = BTreeSet::new();
    for e in &m.entries {
        let path = files_dir.join(&e.path);
        match &e.kind {
            EntryKind::File {
                size,
                sha256,
                sparse,
                ..
            } => {
                // A plain backup stores exactly the extents' data (an encrypted one adds the
                // sealing; restore checks the unsealed length).
                if let Some(layout) = sparse.as_ref().filter(|_| m.encryption.is_none())
                    && layout.data_bytes() != *size
                {
                    return Err(BackupError::Extents {
                        path,
                        got: *size,
                        want: layout.data_bytes(),
                    });
                }
                let mut input = stored.open_stored(&e.path).map_err(|err| match err {
                    BackupError::Beneath { .. } | BackupError::Verify { .. } => err,
                    _ => BackupError::Verify {
                        path: path.clone(),
                        cause: "is missing or unreadable".to_string(),
                    },
                })?;
                let mut h = HashWriter::new(std::io::sink());
                copy_big(&mut input, &mut h).map_err(|err| BackupError::io(&path, err))?;
                let (got_size, got_sha) = h.finish().map_err(|err| BackupError::io(&path, err))?;
                if got_size != *size || got_sha != *sha256 {
                    return Err(BackupError::Verify {
                        path,
                        cause: format!(
                            "SHA-256 {got_sha} ({got_size} bytes) does not match the manifest's {sha256} ({size} bytes): the file is damaged"
                        ),
                    });
                }
                listed.insert(path);
            }
            EntryKind::Dir { .. } => {
                listed.insert(path);
            }
            EntryKind::Symlink { .. } => {}
        }
    }
    let mut found = Vec::new();
    list_tree(&files_dir, &mut found)?;
    if let Some(extra) = found.into_iter().find(|p| !listed.contains(p)) {
        return Err(BackupError::Verify {
            path: extra,
            cause: "is not in the manifest".to_string(),
        });
    }

    // Databases (decrypted into a private temporary directory when sealed).
    let scratch = tempfile::Builder::new()
        .prefix("warren-verify-")
        .tempdir()
        .map_err(|e| BackupError::io(std::env::temp_dir(), e))?;
    let plain = |rel: &str| -> Result<PathBuf, BackupError> {
        let stored = files_dir.join(rel);
        match &sealer {
            None => Ok(stored),
            Some(s) => {
                let out = scratch.path().join(rel.replace('/', "%"));
                let mut input = File::open(&stored).map_err(|e| BackupError::io(&stored, e))?;
                let mut w = HashWriter::new(create_file(&out, 0o600)?);
                s.unseal(rel, &mut input, &mut w).map_err(|e| match e {
                    BackupError::Verify { cause, .. } => BackupError::Verify {
                        path: stored.clone(),
                        cause,
                    },
                    other => other,
                })?;
                w.finish().map_err(|e| BackupError::io(&out, e))?;
                Ok(out)
            }
        }
    };
    let mut databases = Vec::new();
    for e in &m.entries {
        if let EntryKind::File {
            class: Class::Sqlite,
            ..
        } = &e.kind
        {
            let path = plain(&e.path)?;
            let stored = files_dir.join(&e.path);
            let bad = |cause: String| BackupError::Verify {
                path: stored.clone(),
                cause,
            };
            let conn = sqlite::open_read_only(&path)
                .map_err(|err| bad(format!("does not open as a database: {err}")))?;
            let check: String = conn
                .query_row("PRAGMA integrity_check", [], |r| r.get(0))
                .map_err(|err| bad(format!("integrity_check: {err}")))?;
            if check != "ok" {
                return Err(bad(format!("integrity_check: {check}")));
            }
            let v = sqlite::schema_version(&conn).map_err(|err| bad(err.to_string()))?;
            if m.schemas.get(&e.path) != Some(&v) {
                return Err(bad(format!(
                    "schema version {v} is not the manifest's {:?}",
                    m.schemas.get(&e.path)
                )));
            }
            databases.push((e.path.clone(), v));
        }
    }

    // The key opens the secrets.
    // The files/ tree mirrors an install root: its names come from InstallRoot too.
    let tree = warren_config::InstallRoot::at(&files_dir);
    let rel_of = |path: &std::path::Path| {
        path.strip_prefix(&files_dir)
            .map(|r| r.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let (config_file, key_file) = (tree.config_file(), tree.secret_key());
    let (config_rel, key_rel) = (rel_of(&config_file), rel_of(&key_file));
    let has = |rel: &str| m.entries.iter().any(|e| e.path == rel);
    let mut secrets_decrypted = 0;
    if has(&config_rel) {
        let cfg_path = plain(&config_rel)?;
        let text = std::fs::read_to_string(&cfg_path).map_err(|e| BackupError::Verify {
            path: config_file.clone(),
            cause: format!("is not readable text: {e}"),
        })?;
        let secrets = enc_values(&text);
        if !secrets.is_empty() {
            if !has(&key_rel) {
                return Err(BackupError::Verify {
                    path: key_file.clone(),
                    cause: "is missing, but config.toml holds encrypted secrets".to_string(),
                });
            }
            let key_path = plain(&key_rel)?;
            let key = warren_config::SecretKey::load(&key_path)
                .ok()
                .flatten()
                .ok_or_else(|| BackupError::Verify {
                    path: key_file.clone(),
                    cause: "is not a secret key".to_string(),
                })?;
            for s in &secrets {
                key.decrypt(s).map_err(|_| BackupError::Verify {
                    path: key_file.clone(),
                    cause: "does not decrypt the secrets of the backup's config.toml (a key from another install?)".to_string(),
                })?;
                secrets_decrypted += 1;
            }
        }
    }
    let report = VerifyReport {
        path: src.to_path_buf(),
        created_at: m.created_at.clone(),
        files: m.files,
        bytes: m.bytes,
        encrypted: sealer.is_some(),
        databases,
        secrets_decrypted,
    };
    Ok((report, (m, sealer)))
}

/// Every `enc2:` value in a config text.
fn enc_values(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(warren_config::ENC_PREFIX) {
        let tail = &rest[i..];
        let end = tail
            .char_indices()
            .find(|&(j, c)| j >= warren_config::ENC_PREFIX.len() && !c.is_ascii_hexdigit())
            .map_or(tail.len(), |(j, _)| j);
        out.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

/// Every file and directory below `dir` (not following links).
fn list_tree(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), BackupError> {
    let rd = std::fs::read_dir(dir).map_err(|e| BackupError::Verify {
        path: dir.to_path_buf(),
        cause: format!("cannot be listed: {e}"),
    })?;
    for entry in rd {
        let entry = entry.map_err(|e| BackupError::io(dir, e))?;
        let path = entry.path();
        let ft = entry.file_type().map_err(|e| BackupError::io(&path, e))?;
        out.push(path.clone());
        if ft.is_dir() {
            list_tree(&path, out)?;
        }
    }
    Ok(())
}

/// Creates a private directory (0700) and its parents.
pub(super) fn private_dir(path: &Path) -> Result<(), BackupError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| BackupError::io(path, e))
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_every_encrypted_value() {
        let text = "a = \"enc2:00ff\"\n[x]\nb = 'enc2:abc'\nc = \"plain\"\n";
        assert_eq!(super::enc_values(text), vec!["enc2:00ff", "enc2:abc"]);
    }
}
