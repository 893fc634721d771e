//! `--encrypt`: a key from the passphrase (Argon2id, a fresh salt per backup) and every file
//! sealed with ChaCha20-Poly1305 in 64 KiB chunks.
//!
//! Stored file: `prefix (7 random bytes) ‖ chunk₀ ‖ chunk₁ ‖ …`, each chunk the sealed
//! plaintext (≤ 64 KiB) and its 16-byte tag. Nonce of chunk i: `prefix ‖ i (u32, BE) ‖ last`,
//! where `last` is 1 only on the final chunk (a truncated file does not decrypt), and the
//! associated data is the entry's path (a file moved to another name does not decrypt). The
//! manifest keeps the salt, the Argon2 costs and a sealed check value, so a wrong passphrase
//! is told apart from a damaged file before anything is restored.

use std::io::{Read, Write};

use argon2::{Algorithm, Argon2, Version};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use serde::{Deserialize, Serialize};

use super::BackupError;

/// Plaintext bytes per sealed chunk.
pub const CHUNK: usize = 64 * 1024;
const TAG: usize = 16;
const PREFIX: usize = 7;
const CHECK_TEXT: &[u8] = b"warren-backup key check";
const CHECK_PATH: &str = "\0key-check";

/// The encryption parameters in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Params {
    pub cipher: String,
    pub kdf: String,
    pub m_kib: u32,
    pub t: u32,
    pub p: u32,
    /// Hex.
    pub salt: String,
    /// The check value sealed like a file (hex).
    pub check: String,
}

/// The key of one backup.
pub struct Sealer {
    cipher: ChaCha20Poly1305,
}

fn crypto(what: &str, cause: impl std::fmt::Display) -> BackupError {
    BackupError::Crypto {
        what: what.to_string(),
        cause: cause.to_string(),
    }
}

fn derive(passphrase: &str, salt: &[u8], m: u32, t: u32, p: u32) -> Result<Sealer, BackupError> {
    let params = argon2::Params::new(m, t, p, Some(32)).map_err(|e| crypto("argon2", e))?;
    let mut key = [0u8; 32];
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
        .hash_password_into(passphrase.as_bytes(), salt, &mut key)
        .map_err(|e| crypto("argon2", e))?;
    Ok(Sealer {
        cipher: ChaCha20Poly1305::new(Key::from_slice(&key)),
    })
}

impl Sealer {
    /// A new key for a new backup: a fresh salt, Argon2id at its default costs.
    pub fn create(passphrase: &str) -> Result<(Self, Params), BackupError> {
        if passphrase.is_empty() {
            return Err(crypto("passphrase", "is empty"));
        }
        let mut salt = [0u8; 16];
        getrandom::fill(&mut salt).map_err(|e| crypto("random salt", e))?;
        let (m, t, p) = (
            argon2::Params::DEFAULT_M_COST,
            argon2::Params::DEFAULT_T_COST,
            argon2::Params::DEFAULT_P_COST,
        );
        let sealer = derive(passphrase, &salt, m, t, p)?;
        let mut check = Vec::new();
        sealer.seal(CHECK_PATH, &mut &CHECK_TEXT[..], &mut check)?;
        let params = Params {
            cipher: "chacha20poly1305-64k".to_string(),
            kdf: "argon2id".to_string(),
            m_kib: m,
            t,
            p,
            salt: warren_core::hex::encode(&salt),
            check: warren_core::hex::encode(&check),
        };
        Ok((sealer, params))
    }

    /// The key of an existing backup; `None` when the passphrase does not open its check value.
    pub fn open(passphrase: &str, params: &Params) -> Result<Option<Self>, BackupError> {
        let salt = warren_core::hex::decode(&params.salt)
            .ok_or_else(|| crypto("manifest", "salt is not hex"))?;
        let check = warren_core::hex::decode(&params.check)
            .ok_or_else(|| crypto("manifest", "check is not hex"))?;
        let sealer = derive(passphrase, &salt, params.m_kib, params.t, params.p)?;
        let mut out = Vec::new();
        match sealer.unseal(CHECK_PATH, &mut &check[..], &mut out) {
            Ok(_) if out == CHECK_TEXT => Ok(Some(sealer)),
            _ => Ok(None),
        }
    }

    fn nonce(prefix: &[u8; PREFIX], index: u32, last: bool) -> [u8; 12] {
        let mut n = [0u8; 12];
        n[..PREFIX].copy_from_slice(prefix);
        n[PREFIX..PREFIX + 4].copy_from_slice(&index.to_be_bytes());
        n[11] = u8::from(last);
        n
    }

    /// Seals everything `input` gives into `out`; returns the plaintext length. I/O errors are
    /// returned as they are (the caller names the path).
    pub fn seal(
        &self,
        path: &str,
        input: &mut impl Read,
        out: &mut impl Write,
    ) -> Result<u64, BackupError> {
        let mut prefix = [0u8; PREFIX];
        getrandom::fill(&mut prefix).map_err(|e| crypto("random nonce", e))?;
        out.write_all(&prefix)
            .map_err(|e| BackupError::io(path, e))?;
        let mut buf = vec![0u8; CHUNK];
        let mut next = vec![0u8; CHUNK];
        let mut len = fill(input, &mut buf).map_err(|e| BackupError::io(path, e))?;
        let mut total = 0u64;
        let mut index = 0u32;
        loop {
            // Read ahead one chunk to know whether this one is the last.
            let next_len = if len == CHUNK {
                fill(input, &mut next).map_err(|e| BackupError::io(path, e))?
            } else {
                0
            };
            let last = next_len == 0;
            let sealed = self
                .cipher
                .encrypt(
                    Nonce::from_slice(&Self::nonce(&prefix, index, last)),
                    Payload {
                        msg: &buf[..len],
                        aad: path.as_bytes(),
                    },
                )
                .map_err(|e| crypto(path, e))?;
            out.write_all(&sealed)
                .map_err(|e| BackupError::io(path, e))?;
            total += len as u64;
            if last {
                return Ok(total);
            }
            std::mem::swap(&mut buf, &mut next);
            len = next_len;
            index = index
                .checked_add(1)
                .ok_or_else(|| crypto(path, "file too large"))?;
        }
    }

    /// Opens what [`Self::seal`] wrote for `path`; returns the plaintext length. A damaged,
    /// truncated or moved file fails with an error naming `path`.
    pub fn unseal(
        &self,
        path: &str,
        input: &mut impl Read,
        out: &mut impl Write,
    ) -> Result<u64, BackupError> {
        let bad = |cause: &str| BackupError::Verify {
            path: path.into(),
            cause: cause.to_string(),
        };
        let mut prefix = [0u8; PREFIX];
        input
            .read_exact(&mut prefix)
            .map_err(|_| bad("too short to be an encrypted file"))?;
        let mut buf = vec![0u8; CHUNK + TAG];
        let mut next = vec![0u8; CHUNK + TAG];
        let mut len = fill(input, &mut buf).map_err(|e| BackupError::io(path, e))?;
        let mut total = 0u64;
        let mut index = 0u32;
        loop {
            let next_len = if len == CHUNK + TAG {
                fill(input, &mut next).map_err(|e| BackupError::io(path, e))?
            } else {
                0
            };
            let last = next_len == 0;
            let plain = self
                .cipher
                .decrypt(
                    Nonce::from_slice(&Self::nonce(&prefix, index, last)),
                    Payload {
                        msg: &buf[..len],
                        aad: path.as_bytes(),
                    },
                )
                .map_err(|_| bad("does not decrypt (damaged, truncated, or not this backup's)"))?;
            out.write_all(&plain)
                .map_err(|e| BackupError::io(path, e))?;
            total += plain.len() as u64;
            if last {
                return Ok(total);
            }
            std::mem::swap(&mut buf, &mut next);
            len = next_len;
            index = index.checked_add(1).ok_or_else(|| bad("too many chunks"))?;
        }
    }
}

/// Reads until `buf` is full or the input ends; returns how much was read.
fn fill(input: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_tamper() {
        let (sealer, params) = Sealer::create("correct horse").unwrap();
        for size in [0usize, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK] {
            let plain: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            let mut sealed = Vec::new();
            sealer.seal("a/b", &mut &plain[..], &mut sealed).unwrap();
            let mut back = Vec::new();
            sealer.unseal("a/b", &mut &sealed[..], &mut back).unwrap();
            assert_eq!(back, plain, "size {size}");
            // Another path, a flipped byte, a dropped last chunk: refused.
            assert!(
                sealer
                    .unseal("a/c", &mut &sealed[..], &mut Vec::new())
                    .is_err()
            );
            let mut flipped = sealed.clone();
            let at = flipped.len() / 2;
            flipped[at] ^= 1;
            assert!(
                sealer
                    .unseal("a/b", &mut &flipped[..], &mut Vec::new())
                    .is_err()
            );
            if size > CHUNK {
                let cut = &sealed[..PREFIX + CHUNK + TAG];
                assert!(
                    sealer
                        .unseal("a/b", &mut &cut[..], &mut Vec::new())
                        .is_err()
                );
            }
        }
        assert!(Sealer::open("correct horse", &params).unwrap().is_some());
        assert!(Sealer::open("wrong", &params).unwrap().is_none());
    }
}
