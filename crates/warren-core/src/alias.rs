//! Agent aliases: the key of `[agents.<alias>]` and the directory name under `agents/`.
//!
//! Rules: 1 to 32 characters of `[a-z0-9_-]`; `default` is reserved (it names the legacy
//! workspace bridge of LAYOUT-2 and can never be created, renamed or deleted). Because the
//! character set excludes `/` and `.`, a valid alias is always a single, non-traversing path
//! component.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The alias no agent may take.
pub const RESERVED_ALIAS: &str = "default";

/// Longest alias accepted.
pub const MAX_ALIAS_LEN: usize = 32;

/// Why a string is not a valid agent alias.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AliasError {
    #[error("agent alias must not be empty")]
    Empty,
    #[error("agent alias '{0}' is longer than {MAX_ALIAS_LEN} characters")]
    TooLong(String),
    #[error(
        "agent alias '{alias}' contains '{ch}'; use only lowercase letters, digits, '_' and '-'"
    )]
    BadChar { alias: String, ch: char },
    #[error("agent alias 'default' is reserved; choose another name")]
    Reserved,
}

/// A validated agent alias. Construct with [`AgentAlias::new`] or `parse`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AgentAlias(String);

impl AgentAlias {
    /// Validates `alias` against the rules above.
    pub fn new(alias: impl Into<String>) -> Result<Self, AliasError> {
        let alias = alias.into();
        if alias.is_empty() {
            return Err(AliasError::Empty);
        }
        if alias.chars().count() > MAX_ALIAS_LEN {
            return Err(AliasError::TooLong(alias));
        }
        if let Some(ch) = alias
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_' || *c == '-'))
        {
            return Err(AliasError::BadChar { alias, ch });
        }
        if alias == RESERVED_ALIAS {
            return Err(AliasError::Reserved);
        }
        Ok(Self(alias))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for AgentAlias {
    type Error = AliasError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<AgentAlias> for String {
    fn from(value: AgentAlias) -> Self {
        value.0
    }
}

impl std::str::FromStr for AgentAlias {
    type Err = AliasError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl fmt::Display for AgentAlias {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for AgentAlias {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Read-only access to the validated text (`alias.len()`, `opt.as_deref()`).
impl std::ops::Deref for AgentAlias {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

/// Maps keyed by alias can be probed with a `&str` (`Eq`, `Ord` and `Hash` are the inner
/// string's, so the `Borrow` contract holds).
impl std::borrow::Borrow<str> for AgentAlias {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<String> for AgentAlias {
    fn borrow(&self) -> &String {
        &self.0
    }
}

impl PartialEq<str> for AgentAlias {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for AgentAlias {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for AgentAlias {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl PartialEq<AgentAlias> for str {
    fn eq(&self, other: &AgentAlias) -> bool {
        self == other.0
    }
}

impl PartialEq<AgentAlias> for &str {
    fn eq(&self, other: &AgentAlias) -> bool {
        *self == other.0
    }
}

impl PartialEq<AgentAlias> for String {
    fn eq(&self, other: &AgentAlias) -> bool {
        *self == other.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_alphabet() {
        for ok in ["main", "a", "ops-2", "research_bot", &"x".repeat(32)] {
            assert_eq!(
                AgentAlias::new(ok).map(|a| a.to_string()),
                Ok(ok.to_string())
            );
        }
    }

    #[test]
    fn refuses_traversal_separators_case_and_reserved() {
        assert_eq!(AgentAlias::new(""), Err(AliasError::Empty));
        assert_eq!(AgentAlias::new("default"), Err(AliasError::Reserved));
        assert!(matches!(
            AgentAlias::new("a/b"),
            Err(AliasError::BadChar { ch: '/', .. })
        ));
        assert!(matches!(
            AgentAlias::new(".."),
            Err(AliasError::BadChar { ch: '.', .. })
        ));
        assert!(matches!(
            AgentAlias::new("Main"),
            Err(AliasError::BadChar { ch: 'M', .. })
        ));
        assert!(matches!(
            AgentAlias::new("a b"),
            Err(AliasError::BadChar { ch: ' ', .. })
        ));
        assert!(matches!(
            AgentAlias::new("x".repeat(33)),
            Err(AliasError::TooLong(_))
        ));
    }

    /// On disk and on the wire an alias is the plain string; a bad stored value is refused
    /// when read, not carried on as a string.
    #[test]
    fn serde_is_the_plain_string_and_validates() {
        let a = AgentAlias::new("bee").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(serde_json::to_string(&a).ok().as_deref(), Some("\"bee\""));
        let back: Result<AgentAlias, _> = serde_json::from_str("\"bee\"");
        assert_eq!(back.ok(), Some(a));
        let bad = serde_json::from_str::<AgentAlias>("\"../x\"")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(bad.contains("contains '.'"), "{bad}");
        let map: std::collections::BTreeMap<AgentAlias, u8> =
            serde_json::from_str(r#"{"main": 1}"#).unwrap_or_default();
        assert_eq!(map.get("main"), Some(&1));
        assert!(
            serde_json::from_str::<std::collections::BTreeMap<AgentAlias, u8>>(r#"{"Main": 1}"#)
                .is_err()
        );
    }
}
