//! Plaintext secrets in `config.toml` (CFG-6, issue 35 §9): a secret field written by hand
//! (`api_key = "sk-..."`) is stored as typed until something encrypts it.
//!
//! - [`plaintext_secrets`] names the secret fields of a document that hold plaintext (key
//!   paths only, never a value): `warren doctor` and `warren config validate` report them.
//! - [`crate::WriteTxn::encrypt_plaintext_secrets`] marks them for the commit, which encrypts
//!   every marked secret (`warren config encrypt-secrets`).
//! - [`scrubbed_backup`]: a save keeps the previous file as `config.toml.bak`; when the previous
//!   file held a plaintext secret the new file no longer holds in plaintext (encrypted, changed
//!   or removed), the `.bak` is written with that value encrypted instead, so the backup never
//!   keeps a plaintext secret the live file dropped. The `.bak` still restores the same config.

use toml_edit::{DocumentMut, Value};

use crate::edit;
use crate::error::ConfigError;
use crate::keypath::KeyPath;
use crate::schema::Config;
use crate::secrets::{ENC_PREFIX, LazyKey};

/// The key paths of `config`'s secret fields (as `Config::secrets_mut` lists them).
fn secret_paths(config: &Config) -> Vec<KeyPath> {
    let mut config = config.clone();
    config
        .secrets_mut()
        .into_iter()
        .filter_map(|(path, _)| path.parse::<KeyPath>().ok())
        .collect()
}

/// The plaintext value at `path` of `doc`, if it holds one (not encrypted, not empty).
fn plaintext_at<'a>(doc: &'a DocumentMut, path: &KeyPath) -> Option<&'a str> {
    edit::get_str(doc, path).filter(|v| !v.is_empty() && !v.starts_with(ENC_PREFIX))
}

/// The secret fields of `config` (parsed from `doc`) whose value in `doc` is plaintext, as key
/// paths (`providers.openai.api_key`). Never the values.
pub fn plaintext_secrets(config: &Config, doc: &DocumentMut) -> Vec<KeyPath> {
    secret_paths(config)
        .into_iter()
        .filter(|p| plaintext_at(doc, p).is_some())
        .collect()
}

/// The text `config.toml.bak` gets instead of `old_text` (the file being replaced, which
/// parsed to `old_config`), when `old_text` holds a plaintext secret that `new_doc` does not
/// hold in plaintext at the same path: `old_text` with each such value encrypted. `None` when
/// there is nothing to hide (the `.bak` is then the old file itself).
pub(crate) fn scrubbed_backup(
    old_text: &str,
    old_config: &Config,
    new_doc: &DocumentMut,
    key: &mut LazyKey<'_>,
) -> Result<Option<String>, ConfigError> {
    let Ok(mut old_doc) = old_text.parse::<DocumentMut>() else {
        return Ok(None);
    };
    let mut scrubbed = false;
    for path in secret_paths(old_config) {
        let Some(plain) = plaintext_at(&old_doc, &path).map(str::to_owned) else {
            continue;
        };
        if plaintext_at(new_doc, &path) == Some(plain.as_str()) {
            continue; // the live file still holds it: the .bak reveals nothing more
        }
        let sealed = key.create_if_missing()?.encrypt(&plain)?;
        edit::set(&mut old_doc, &path, Value::from(sealed))?;
        scrubbed = true;
    }
    Ok(scrubbed.then(|| old_doc.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plaintext_secrets_are_named_by_path_and_encrypted_ones_are_not_issue35() {
        let text = "[providers.a]\nkind = \"openai\"\napi_key = \"sk-plain\"\n\n[providers.b]\nkind = \"openai\"\napi_key = \"enc2:00\"\n";
        let doc: DocumentMut = text.parse().unwrap_or_else(|e| panic!("{e}"));
        let mut config = Config::default();
        for name in ["a", "b"] {
            config.providers.insert(
                name.into(),
                crate::schema::ProviderConfig {
                    api_key: Some(crate::Secret::new("x")),
                    ..Default::default()
                },
            );
        }
        let found: Vec<String> = plaintext_secrets(&config, &doc)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(found, vec!["providers.a.api_key".to_string()]);
    }
}
