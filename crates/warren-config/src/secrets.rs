//! Encrypted secrets (SPEC CFG-6, STATE-2).
//!
//! Stored form: `enc2:<hex(nonce ‖ ciphertext ‖ tag)>`, ChaCha20-Poly1305 with a fresh random
//! 12-byte nonce per value. Key: 32 random bytes, hex-encoded in `<install>/.secret_key`, created
//! 0600 with no-replace semantics (hard link from a private temp file; a concurrent creator's key
//! wins and is read back) and never opened through a symlink. Decrypted values live in [`Secret`],
//! whose `Debug`, `Display` and `Serialize` print `[redacted]`.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::keypath::{KeyPath, Segment};

/// Prefix of an encrypted value.
pub const ENC_PREFIX: &str = "enc2:";
const NONCE_LEN: usize = 12;
const KEY_LEN: usize = 32;
const REDACTED: &str = "[redacted]";

/// A secret value (plaintext once loaded). It never prints or serialises its content.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }
    /// The plaintext. Call only where the value is used (an HTTP header, a DSN), never to print.
    pub fn expose(&self) -> &str {
        &self.0
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub(crate) fn is_encrypted(&self) -> bool {
        self.0.starts_with(ENC_PREFIX)
    }
    pub(crate) fn replace(&mut self, plaintext: String) {
        self.0 = plaintext;
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(REDACTED)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

/// The shapes of the secret fields' key paths (`*` = any key, `[]` = any index or none):
/// the same fields `Config::secrets_mut` lists (a unit test keeps the two equal).
const SECRET_FIELDS: &[&[&str]] = &[
    &["providers", "*", "api_key"],
    &["memory", "embedder", "api_key"],
    &["memory", "qdrant", "api_key"],
    &["memory", "postgres", "url"],
    &["gateway", "paired_tokens", "[]"],
    &["secrets", "*", "value"],
    &["channels", "telegram", "*", "token"],
];

fn shape_matches(shape: &[&str], path: &[Segment], prefix_only: bool) -> bool {
    let keys: Vec<&Segment> = path.iter().collect();
    let mut i = 0;
    for (n, want) in shape.iter().enumerate() {
        let Some(seg) = keys.get(i) else {
            // The path ended first: below it lies this secret (or it is the array itself).
            return prefix_only || (n + 1 == shape.len() && *want == "[]");
        };
        match (*want, seg) {
            ("[]", Segment::Index(_)) => i += 1,
            ("[]", Segment::Key(_)) => return false,
            ("*", Segment::Key(_)) => i += 1,
            (name, Segment::Key(k)) if k == name => i += 1,
            _ => return false,
        }
    }
    i == keys.len()
}

/// Whether `path` names a secret field (`providers.x.api_key`, `memory.postgres.url`, ...).
pub fn is_secret_key(path: &KeyPath) -> bool {
    SECRET_FIELDS
        .iter()
        .any(|shape| shape_matches(shape, path.segments(), false))
}

/// Whether a value set at `path` may hold a secret: `path` is a secret field or a table
/// above one (`providers.x`, `memory`, the whole document).
pub fn may_hold_secret(path: &KeyPath) -> bool {
    SECRET_FIELDS
        .iter()
        .any(|shape| shape_matches(shape, path.segments(), true))
}

/// Why a secret or the key file could not be used. Messages never contain secret material.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error(
        "config holds encrypted values but the key file {path} is missing; encrypted values cannot \
         be recovered without the original key (restore .secret_key from a backup, or set the \
         secrets again)"
    )]
    KeyMissing { path: PathBuf },
    #[error(
        "refusing key file {path}: it is a symlink (the key is never read or written through a symlink)"
    )]
    KeySymlink { path: PathBuf },
    #[error(
        "key file {path} is corrupt: expected {} hex characters, found {found}; encrypted values cannot be \
         recovered without the original key", KEY_LEN * 2
    )]
    KeyCorrupt { path: PathBuf, found: String },
    #[error("key file {path} is not a regular file")]
    KeyNotAFile { path: PathBuf },
    #[error("cannot use key file {path}: {cause}")]
    KeyIo { path: PathBuf, cause: io::Error },
    #[error(
        "cannot decrypt with {path}: wrong key or altered value; encrypted values cannot be \
         recovered without the original key"
    )]
    Decrypt { path: PathBuf },
    #[error("malformed encrypted value (expected {ENC_PREFIX}<hex>)")]
    Malformed,
    #[error("the system random number generator failed: {0}")]
    Random(String),
}

/// The install's secret key, bound to the file it came from.
pub struct SecretKey {
    path: PathBuf,
    cipher: ChaCha20Poly1305,
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretKey")
            .field("path", &self.path)
            .field("key", &REDACTED)
            .finish()
    }
}

impl SecretKey {
    /// Reads the key at `path`; `Ok(None)` when no key file exists.
    pub fn load(path: &Path) -> Result<Option<Self>, SecretError> {
        let io_err = |cause| SecretError::KeyIo {
            path: path.to_path_buf(),
            cause,
        };
        let file = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(SecretError::KeySymlink {
                    path: path.to_path_buf(),
                });
            }
            Err(e) => return Err(io_err(e)),
        };
        let meta = file.metadata().map_err(io_err)?;
        if !meta.is_file() {
            return Err(SecretError::KeyNotAFile {
                path: path.to_path_buf(),
            });
        }
        if meta.mode() & 0o077 != 0 {
            tracing::warn!(path = %path.display(), "secret key file is readable by other users; run chmod 600 on it");
        }
        let mut text = String::new();
        file.take(1024).read_to_string(&mut text).map_err(io_err)?;
        let trimmed = text.trim();
        let bytes = warren_core::hex::decode(trimmed)
            .filter(|b| b.len() == KEY_LEN)
            .ok_or_else(|| SecretError::KeyCorrupt {
                path: path.to_path_buf(),
                found: format!("{} characters", trimmed.len()),
            })?;
        Ok(Some(Self {
            path: path.to_path_buf(),
            cipher: ChaCha20Poly1305::new(Key::from_slice(&bytes)),
        }))
    }

    /// Reads the key at `path`, creating it (0600, no-replace) when absent.
    pub fn load_or_create(path: &Path) -> Result<Self, SecretError> {
        if let Some(key) = Self::load(path)? {
            return Ok(key);
        }
        let io_err = |cause| SecretError::KeyIo {
            path: path.to_path_buf(),
            cause,
        };
        let mut raw = [0u8; KEY_LEN];
        getrandom::fill(&mut raw).map_err(|e| SecretError::Random(e.to_string()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce).map_err(|e| SecretError::Random(e.to_string()))?;
        let temp = dir.join(format!(
            ".secret_key.tmp-{}-{}",
            std::process::id(),
            warren_core::hex::encode(&nonce)
        ));
        let write = || -> io::Result<()> {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&temp)?;
            f.write_all(warren_core::hex::encode(&raw).as_bytes())?;
            f.write_all(b"\n")?;
            f.sync_all()?;
            crate::atomic::sync_dir(dir)?;
            // No-replace publish: link fails with EEXIST if another process won the race (or if
            // something, even a symlink, already sits at `path`).
            match fs::hard_link(&temp, path) {
                Ok(()) => crate::atomic::sync_dir(dir),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
                Err(e) => Err(e),
            }
        };
        let result = write();
        let _ = fs::remove_file(&temp);
        result.map_err(io_err)?;
        Self::load(path)?.ok_or_else(|| io_err(io::ErrorKind::NotFound.into()))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Encrypts `plaintext` into its stored form, with a fresh nonce.
    pub fn encrypt(&self, plaintext: &str) -> Result<String, SecretError> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|e| SecretError::Random(e.to_string()))?;
        let sealed = self
            .cipher
            .encrypt(Nonce::from_slice(&nonce), plaintext.as_bytes())
            .map_err(|_| SecretError::Malformed)?;
        let mut blob = nonce.to_vec();
        blob.extend_from_slice(&sealed);
        Ok(format!("{ENC_PREFIX}{}", warren_core::hex::encode(&blob)))
    }

    /// Decrypts a stored `enc2:` value.
    pub fn decrypt(&self, stored: &str) -> Result<String, SecretError> {
        let blob = stored
            .strip_prefix(ENC_PREFIX)
            .and_then(warren_core::hex::decode)
            .filter(|b| b.len() > NONCE_LEN)
            .ok_or(SecretError::Malformed)?;
        let (nonce, sealed) = blob.split_at(NONCE_LEN);
        let plain = self
            .cipher
            .decrypt(Nonce::from_slice(nonce), sealed)
            .map_err(|_| SecretError::Decrypt {
                path: self.path.clone(),
            })?;
        String::from_utf8(plain).map_err(|_| SecretError::Decrypt {
            path: self.path.clone(),
        })
    }
}

/// Opens the key at most once per load, only when an encrypted value needs it.
pub(crate) struct LazyKey<'a> {
    path: &'a Path,
    key: Option<SecretKey>,
}

impl<'a> LazyKey<'a> {
    pub(crate) fn new(path: &'a Path) -> Self {
        Self { path, key: None }
    }
    /// The existing key (for decryption): missing is an error.
    pub(crate) fn existing(&mut self) -> Result<&SecretKey, SecretError> {
        if self.key.is_none() {
            let key = SecretKey::load(self.path)?.ok_or_else(|| SecretError::KeyMissing {
                path: self.path.to_path_buf(),
            })?;
            self.key = Some(key);
        }
        self.key.as_ref().ok_or(SecretError::Malformed)
    }
    /// The key, created on first need (for encryption).
    pub(crate) fn create_if_missing(&mut self) -> Result<&SecretKey, SecretError> {
        if self.key.is_none() {
            self.key = Some(SecretKey::load_or_create(self.path)?);
        }
        self.key.as_ref().ok_or(SecretError::Malformed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    type R = Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn round_trip_with_fresh_nonces_and_0600_key() -> R {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join(".secret_key");
        let key = SecretKey::load_or_create(&path)?;
        assert_eq!(fs::metadata(&path)?.permissions().mode() & 0o777, 0o600);
        let a = key.encrypt("sk-live-123")?;
        let b = key.encrypt("sk-live-123")?;
        assert!(a.starts_with(ENC_PREFIX));
        assert_ne!(a, b, "each value gets a fresh nonce");
        assert!(!a.contains("sk-live"));
        // A second handle on the same file reads the same key.
        let again = SecretKey::load_or_create(&path)?;
        assert_eq!(again.decrypt(&a)?, "sk-live-123");
        Ok(())
    }

    #[test]
    fn wrong_key_and_tampering_say_unrecoverable() -> R {
        let dir = tempfile::tempdir()?;
        let one = SecretKey::load_or_create(&dir.path().join("k1"))?;
        let two = SecretKey::load_or_create(&dir.path().join("k2"))?;
        let sealed = one.encrypt("hunter2")?;
        let err = two
            .decrypt(&sealed)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("cannot be recovered without the original key"),
            "{err}"
        );
        let mut tampered = sealed.clone();
        tampered.pop();
        tampered.push(if sealed.ends_with('0') { '1' } else { '0' });
        assert!(matches!(
            one.decrypt(&tampered),
            Err(SecretError::Decrypt { .. })
        ));
        Ok(())
    }

    #[test]
    fn refuses_symlinked_corrupt_and_missing_keys() -> R {
        let dir = tempfile::tempdir()?;
        let real = dir.path().join("real");
        SecretKey::load_or_create(&real)?;
        let link = dir.path().join(".secret_key");
        std::os::unix::fs::symlink(&real, &link)?;
        assert!(matches!(
            SecretKey::load(&link),
            Err(SecretError::KeySymlink { .. })
        ));
        assert!(matches!(
            SecretKey::load_or_create(&link),
            Err(SecretError::KeySymlink { .. })
        ));

        let short = dir.path().join("short");
        fs::write(&short, "abcd")?;
        assert!(matches!(
            SecretKey::load(&short),
            Err(SecretError::KeyCorrupt { .. })
        ));

        let missing = dir.path().join("missing");
        let err = LazyKey::new(&missing)
            .existing()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("cannot be recovered without the original key"),
            "{err}"
        );
        assert!(!missing.exists(), "decryption never creates a key");
        Ok(())
    }

    #[test]
    fn secret_never_prints() {
        let s = Secret::new("sk-very-secret");
        assert_eq!(format!("{s} {s:?}"), "[redacted] [redacted]");
        assert_eq!(serde_json_like(&s), "\"[redacted]\"");
    }

    #[test]
    fn secret_key_shapes_match_the_secret_fields_of_the_schema() -> R {
        let mut config = crate::Config::default();
        for name in ["openai", "my.provider"] {
            config.providers.insert(
                name.into(),
                crate::schema::ProviderConfig {
                    api_key: Some(Secret::new("x")),
                    ..Default::default()
                },
            );
        }
        config.memory.embedder.api_key = Some(Secret::new("x"));
        config.memory.postgres.url = Some(Secret::new("x"));
        // Was missing from SECRET_FIELDS: `config set memory.qdrant.api_key K` without
        // `--secret` stored it as plain text and echoed it.
        config.memory.qdrant.api_key = Some(Secret::new("x"));
        config.gateway.paired_tokens = vec![Secret::new("a"), Secret::new("b")];
        for (path, _) in config.secrets_mut() {
            let path: KeyPath = path.parse()?;
            assert!(is_secret_key(&path), "{path}");
            assert!(may_hold_secret(&path), "{path}");
        }
        for yes in ["gateway.paired_tokens", "providers.x.api_key"] {
            assert!(is_secret_key(&yes.parse()?), "{yes}");
        }
        for no in [
            "providers.x.api_key_env",
            "providers.x",
            "memory.postgres.schema",
            "gateway.port",
            "providers.x.api_key.y",
        ] {
            assert!(!is_secret_key(&no.parse()?), "{no}");
        }
        for holder in [
            "providers",
            "providers.x",
            "memory",
            "memory.postgres",
            "gateway",
        ] {
            assert!(may_hold_secret(&holder.parse()?), "{holder}");
        }
        assert!(may_hold_secret(&KeyPath::default()));
        assert!(!may_hold_secret(&"gateway.port".parse()?));
        assert!(!may_hold_secret(&"agents.main".parse()?));
        Ok(())
    }

    fn serde_json_like(s: &Secret) -> String {
        toml::Value::try_from(s)
            .map(|v| v.to_string())
            .unwrap_or_default()
    }
}
