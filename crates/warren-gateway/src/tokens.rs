//! The canonical token set, `gateway.paired_tokens` (STATE-15): read from a config snapshot,
//! changed only through a `ConfigStore` write transaction (the ONE config write lock, CFG-3),
//! so a token is handed out only after its hash is durably in config.toml.

use toml_edit::{Array, Value};
use warren_config::{CommitOutcome, Config, ConfigError, ConfigStore, KeyPath};

use crate::devices::{Device, DeviceError, Devices};
use crate::pairing::device_id;

/// The config key that holds the token hashes.
pub const TOKENS_KEY: &str = "gateway.paired_tokens";

/// The stored token hashes of `config`, in file order.
pub fn token_hashes(config: &Config) -> Vec<String> {
    config
        .gateway
        .paired_tokens
        .iter()
        .map(|s| s.expose().to_string())
        .collect()
}

/// Why a revoke did not happen.
#[derive(Debug, thiserror::Error)]
pub enum RevokeError {
    #[error("no paired device has id '{0}' (see `warren tokens list`)")]
    NotFound(String),
    #[error("id '{0}' matches more than one device; give more of it")]
    Ambiguous(String),
    #[error(
        "id '{0}' is too short: give at least {MIN_ID_LEN} characters of the device id (see `warren tokens list`)"
    )]
    TooShort(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// Rewrites the token set with `change` in one write transaction and commits it (blocking:
/// call from a blocking thread or the CLI). `change` returns a value passed back, or an error
/// that aborts the write.
pub fn change_hashes_blocking<R, E: From<ConfigError>>(
    store: &ConfigStore,
    change: impl FnOnce(&mut Vec<String>) -> Result<R, E>,
) -> Result<(R, CommitOutcome), E> {
    let mut txn = store.write_blocking()?;
    let mut hashes = token_hashes(txn.base());
    let result = change(&mut hashes)?;
    let path: KeyPath = TOKENS_KEY.parse().map_err(ConfigError::from)?;
    if hashes.is_empty() {
        txn.remove(&path)?;
    } else {
        let array: Array = hashes.iter().map(String::as_str).collect();
        txn.set(&path, Value::Array(array))?;
    }
    let outcome = txn.commit()?;
    Ok((result, outcome))
}

/// Adds `hash` to the token set and persists it before returning.
pub fn add_hash_blocking(store: &ConfigStore, hash: &str) -> Result<CommitOutcome, ConfigError> {
    change_hashes_blocking(store, |hashes| {
        if !hashes.iter().any(|h| h == hash) {
            hashes.push(hash.to_string());
        }
        Ok::<(), ConfigError>(())
    })
    .map(|((), outcome)| outcome)
}

/// The shortest id prefix a revoke accepts: a one-character prefix would revoke whichever device
/// happens to match (a fuzzer, or a typo, could revoke the caller's own token).
pub const MIN_ID_LEN: usize = 8;

/// Revokes the device whose id (a prefix of its token hash) is `id`: its hash leaves config
/// (persisted), then its registry row is deleted (best effort; reconcile drops it anyway).
/// Returns the revoked hash.
pub fn revoke_blocking(
    store: &ConfigStore,
    devices: Option<&Devices>,
    id: &str,
) -> Result<String, RevokeError> {
    let id = id.trim().to_ascii_lowercase();
    if id.len() < MIN_ID_LEN {
        return Err(RevokeError::TooShort(id));
    }
    let (hash, _) = change_hashes_blocking(store, |hashes| {
        let matching: Vec<usize> = hashes
            .iter()
            .enumerate()
            .filter(|(_, h)| !id.is_empty() && h.starts_with(id.as_str()))
            .map(|(i, _)| i)
            .collect();
        match matching.as_slice() {
            [i] => Ok(hashes.remove(*i)),
            [] => Err(RevokeError::NotFound(id.clone())),
            _ => Err(RevokeError::Ambiguous(id.clone())),
        }
    })?;
    if let Some(devices) = devices
        && let Err(e) = devices.delete(&hash)
    {
        tracing::warn!(
            device = device_id(&hash),
            "revoked, but the registry row stays: {e}"
        );
    }
    Ok(hash)
}

/// The paired devices: every hash of the canonical set with its registry metadata.
pub fn list_blocking(config: &Config, devices: &Devices) -> Result<Vec<Device>, DeviceError> {
    devices.list(&token_hashes(config))
}
