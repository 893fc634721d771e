//! Text → validated `Config`: TOML syntax, schema (serde, unknown keys denied), decryption of
//! secrets, then the semantic rules of `validate`. Every failure becomes a [`Problem`] that names
//! the key path and, where the text has it, line and column (CFG-7).

use std::path::Path;

use toml_edit::{Document, DocumentMut};

use crate::error::{ConfigError, Problem, deepest_line, did_you_mean, line_col};
use crate::keypath::{KeyPath, Segment};
use crate::redact::Redactor;
use crate::schema::Config;
use crate::secrets::LazyKey;

/// A validated config and the editable document it came from.
#[derive(Debug, Clone)]
pub(crate) struct Parsed {
    pub config: Config,
    pub doc: DocumentMut,
}

/// Parses and validates `text`, the content of `file`. `key_file` is `.secret_key`.
pub(crate) fn parse(file: &Path, text: &str, key_file: &Path) -> Result<Parsed, ConfigError> {
    let doc: DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| {
        ConfigError::invalid(
            file,
            Problem {
                key: None,
                position: e
                    .span()
                    .map(|s| line_col(text, s.start))
                    .or_else(|| deepest_line(text)),
                message: format!("TOML syntax error: {}", e.message().trim_end()),
                hint: e.message().contains("duplicate key").then(|| {
                    "a key or [table] (such as [agents.<alias>]) may be defined only once"
                        .to_string()
                }),
            },
        )
    })?;

    // A file with no setting at all (0 bytes, blanks, comments) is what a failed write, a
    // truncation or a stray `> config.toml` leaves; loading it would run a daemon with no agent
    // and no paired token, so it is refused and the previous generation keeps serving.
    if doc.as_table().is_empty() {
        return Err(ConfigError::invalid(
            file,
            Problem {
                key: None,
                position: None,
                message: format!(
                    "the file is empty ({}); a config needs at least one [agents.<alias>] table",
                    if text.trim().is_empty() {
                        format!("{} byte(s), no setting", text.len())
                    } else {
                        "only comments".to_string()
                    }
                ),
                hint: Some(format!(
                    "restore your config from {} if it holds it, or move the file away and run                      `warren init` for a starter config",
                    crate::atomic::backup_path(file).display()
                )),
            },
        ));
    }
    let config = parse_config(file, text, key_file)?;
    Ok(Parsed { config, doc })
}

/// Schema, secrets and rules for `text` (which parses as TOML), without building the editable
/// document: writers that already hold the edited document validate with this.
pub(crate) fn parse_config(
    file: &Path,
    text: &str,
    key_file: &Path,
) -> Result<Config, ConfigError> {
    // The schema pass uses `toml`'s borrowing deserializer (no copy of the document); the
    // editable document above keeps the formatting for saves.
    let de = toml::de::Deserializer::parse(text).map_err(|e| {
        ConfigError::invalid(
            file,
            Problem {
                key: None,
                position: e
                    .span()
                    .map(|s| line_col(text, s.start))
                    .or_else(|| deepest_line(text)),
                message: format!("TOML syntax error: {}", e.message().trim_end()),
                hint: None,
            },
        )
    })?;
    let mut config: Config = serde_path_to_error::deserialize(de)
        .map_err(|e| ConfigError::invalid(file, mask_secret_value(schema_problem(text, e))))?;

    let mut key = LazyKey::new(key_file);
    let mut problems = Vec::new();
    for (path, secret) in config.secrets_mut() {
        if !secret.is_encrypted() {
            continue;
        }
        match key.existing().and_then(|k| k.decrypt(secret.expose())) {
            Ok(plain) => secret.replace(plain),
            Err(e) => problems.push(Problem::at(path, e.to_string())),
        }
    }
    problems.extend(crate::validate::validate(&config));
    // `file` is `<install>/config.toml`: the agents' roots are beside it (issue 35 §4).
    let root = crate::paths::InstallRoot::at(file.parent().unwrap_or(Path::new("")));
    problems.extend(crate::schema::mcp_secrets::problems(&config, &root));
    if !problems.is_empty() {
        // A rule may quote a value; no stored secret is ever printed (CFG-6).
        crate::error::redact_problems(&mut problems, &Redactor::from_config(&config));
        // Positions are looked up only on this error path.
        let spanned = Document::parse(text.to_owned()).ok();
        for p in &mut problems {
            if p.position.is_none() {
                p.position = p
                    .key
                    .as_deref()
                    .and_then(|k| k.parse::<KeyPath>().ok())
                    .and_then(|k| spanned.as_ref().and_then(|d| span_of(d, &k)))
                    .map(|offset| line_col(text, offset));
            }
        }
        return Err(ConfigError::Invalid {
            file: file.to_path_buf(),
            problems,
        });
    }
    Ok(config)
}

/// Turns a serde error into a problem with key path, position and a "did you mean" hint.
fn schema_problem(text: &str, err: serde_path_to_error::Error<toml::de::Error>) -> Problem {
    let mut path = KeyPath(
        err.path()
            .iter()
            .filter_map(|seg| match seg {
                serde_path_to_error::Segment::Map { key } => Some(Segment::Key(key.clone())),
                serde_path_to_error::Segment::Seq { index } => Some(Segment::Index(*index)),
                serde_path_to_error::Segment::Enum { variant } => {
                    Some(Segment::Key(variant.clone()))
                }
                _ => None,
            })
            .collect(),
    );
    let inner = err.into_inner();
    let message = inner.message().trim_end().to_string();
    let position = inner.span().map(|s| line_col(text, s.start));
    let mut hint = None;
    let mut shown = message.clone();
    for (prefix, what) in [
        ("unknown field `", "unknown key"),
        ("unknown variant `", "unknown value"),
    ] {
        let Some(rest) = message.strip_prefix(prefix) else {
            continue;
        };
        let Some((word, expected)) = rest.split_once('`') else {
            continue;
        };
        let candidates = backticked(expected);
        hint = did_you_mean(word, candidates.iter().copied());
        if what == "unknown key" {
            if path.0.last() != Some(&Segment::Key(word.to_string())) {
                path.0.push(Segment::Key(word.to_string()));
            }
            shown = format!("unknown key `{word}`");
        } else {
            shown = format!(
                "unknown value `{word}`; expected one of {}",
                candidates.join(", ")
            );
        }
        if hint.is_none() && what == "unknown key" && !candidates.is_empty() {
            hint = Some(format!("known keys here: {}", candidates.join(", ")));
        }
    }
    Problem {
        key: (!path.is_empty()).then(|| path.to_string()),
        position,
        message: shown,
        hint,
    }
}

/// A schema problem on a secret field quotes no value: serde writes the offending value
/// between backticks or double quotes (`invalid type: integer `12345678`, expected a string`,
/// `invalid type: string "tok...", expected a sequence`).
fn mask_secret_value(mut problem: Problem) -> Problem {
    let secret = problem
        .key
        .as_deref()
        .and_then(|k| k.parse::<KeyPath>().ok())
        .is_some_and(|k| crate::secrets::may_hold_secret(&k) && !k.is_empty());
    if secret {
        for quote in ['`', '"'] {
            problem.message = problem
                .message
                .split(quote)
                .enumerate()
                .map(|(i, part)| if i % 2 == 1 { "***" } else { part })
                .collect::<Vec<_>>()
                .join(&quote.to_string());
        }
    }
    problem
}

/// The words between backticks in serde's "expected one of `a`, `b`" lists.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// Byte offset of the key (or value) at `path` in a parsed document.
fn span_of(doc: &Document<String>, path: &KeyPath) -> Option<usize> {
    let mut item = doc.as_item();
    let mut offset = None;
    for seg in path.segments() {
        match seg {
            Segment::Key(k) => {
                let table = item.as_table_like()?;
                let (key, next) = table.get_key_value(k)?;
                offset = key
                    .span()
                    .map(|s| s.start)
                    .or_else(|| next.span().map(|s| s.start))
                    .or(offset);
                item = next;
            }
            Segment::Index(i) => {
                let value = item.as_array()?.get(*i)?;
                offset = value.span().map(|s| s.start).or(offset);
                return offset;
            }
        }
    }
    offset
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A secret field of the wrong type is named, its value never quoted (CFG-6).
    #[test]
    fn schema_errors_on_secret_fields_quote_no_value_cfg6() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let key_file = dir.path().join(".secret_key");
        for (text, secret) in [
            (
                "[providers.y]\nkind = \"openai\"\napi_key = 90210123456789\n",
                "90210123456789",
            ),
            (
                "[gateway]\npaired_tokens = \"tok-Vn28Qx7Lm4Zp\"\n",
                "tok-Vn28Qx7Lm4Zp",
            ),
        ] {
            let err = parse_config(Path::new("config.toml"), text, &key_file)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains("invalid type"), "{err}");
            assert!(!err.contains(secret), "{err}");
        }
        // Other keys keep their values in the message.
        let err = parse_config(
            Path::new("config.toml"),
            "[gateway]\nport = \"eighty\"\n",
            &key_file,
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(err.contains("eighty"), "{err}");
    }
}
