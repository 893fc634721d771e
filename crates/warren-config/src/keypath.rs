//! Dotted key paths as users type them: `gateway.port`, `cost.rates."gpt-4.1".input_per_mtok`,
//! `gateway.paired_tokens[0]`. One parser and one printer for the CLI, errors and edits.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Segment {
    Key(String),
    Index(usize),
}

/// A parsed key path.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyPath(pub Vec<Segment>);

/// A key path that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid key path '{path}': {reason} (write keys as section.key, quoting keys with dots: cost.rates.\"gpt-4.1\")"
)]
pub struct KeyPathError {
    pub path: String,
    pub reason: &'static str,
}

impl KeyPath {
    pub fn segments(&self) -> &[Segment] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `self` equals `prefix` or lies below it.
    pub fn starts_with(&self, prefix: &KeyPath) -> bool {
        self.0.len() >= prefix.0.len() && self.0[..prefix.0.len()] == prefix.0[..]
    }

    pub fn push_key(mut self, key: impl Into<String>) -> Self {
        self.0.push(Segment::Key(key.into()));
        self
    }

    /// The keys only, dropping array indexes (`gateway.paired_tokens[0]` → `gateway.paired_tokens`).
    pub fn without_indexes(&self) -> KeyPath {
        KeyPath(
            self.0
                .iter()
                .filter(|s| matches!(s, Segment::Key(_)))
                .cloned()
                .collect(),
        )
    }
}

/// Quotes a key when it is not a bare TOML key.
pub fn quote(key: &str) -> Cow<'_, str> {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        Cow::Borrowed(key)
    } else {
        Cow::Owned(format!(
            "\"{}\"",
            key.replace('\\', "\\\\").replace('"', "\\\"")
        ))
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Segment::Key(k) if i == 0 => write!(f, "{}", quote(k))?,
                Segment::Key(k) => write!(f, ".{}", quote(k))?,
                Segment::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

impl FromStr for KeyPath {
    type Err = KeyPathError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let fail = |reason| KeyPathError {
            path: s.to_string(),
            reason,
        };
        let mut segs = Vec::new();
        let mut chars = s.chars().peekable();
        let mut expect_key = true;
        while let Some(&c) = chars.peek() {
            match c {
                '.' if !expect_key => {
                    chars.next();
                    expect_key = true;
                }
                '[' if !expect_key => {
                    chars.next();
                    let mut digits = String::new();
                    for d in chars.by_ref() {
                        if d == ']' {
                            break;
                        }
                        digits.push(d);
                    }
                    let n = digits
                        .parse()
                        .map_err(|_| fail("array index must be a number in [..]"))?;
                    segs.push(Segment::Index(n));
                }
                '"' if expect_key => {
                    chars.next();
                    let mut key = String::new();
                    let mut closed = false;
                    while let Some(d) = chars.next() {
                        match d {
                            '\\' => key.push(chars.next().ok_or_else(|| fail("dangling escape"))?),
                            '"' => {
                                closed = true;
                                break;
                            }
                            other => key.push(other),
                        }
                    }
                    if !closed {
                        return Err(fail("unterminated quote"));
                    }
                    segs.push(Segment::Key(key));
                    expect_key = false;
                }
                _ if expect_key => {
                    let mut key = String::new();
                    while let Some(&d) = chars.peek() {
                        if d == '.' || d == '[' {
                            break;
                        }
                        if !(d.is_ascii_alphanumeric() || d == '_' || d == '-') {
                            return Err(fail("bare keys use only letters, digits, '_' and '-'"));
                        }
                        key.push(d);
                        chars.next();
                    }
                    if key.is_empty() {
                        return Err(fail("empty key"));
                    }
                    segs.push(Segment::Key(key));
                    expect_key = false;
                }
                _ => return Err(fail("expected '.' or '[' between keys")),
            }
        }
        if expect_key {
            return Err(fail(if segs.is_empty() {
                "empty path"
            } else {
                "path ends with '.'"
            }));
        }
        Ok(KeyPath(segs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_round_trip() {
        for p in [
            "gateway.port",
            "cost.rates.\"gpt-4.1\".input_per_mtok",
            "gateway.paired_tokens[0]",
            "a",
        ] {
            assert_eq!(
                p.parse::<KeyPath>().map(|k| k.to_string()),
                Ok(p.to_string())
            );
        }
        let k: Result<KeyPath, _> = "cost.rates.\"gpt-4.1\"".parse();
        assert_eq!(
            k.map(|k| k.0),
            Ok(vec![
                Segment::Key("cost".into()),
                Segment::Key("rates".into()),
                Segment::Key("gpt-4.1".into())
            ])
        );
    }

    #[test]
    fn rejects_malformed_paths() {
        for bad in ["", ".", "a.", "a..b", "a b", "\"open", "a[x]", "a/b"] {
            assert!(bad.parse::<KeyPath>().is_err(), "{bad:?} should not parse");
        }
    }
}
