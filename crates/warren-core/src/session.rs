//! Session vocabulary shared by the session backends, the runtime and the CLI (SPEC SESS-1):
//! [`SessionKey`], the validated name of a chat/code session, and [`Role`], who said a message.
//! No I/O.
//!
//! A key is 1 to 128 characters, each a Unicode letter or digit, `_` or `-`. Because `/`, `.`
//! and NUL are excluded, a valid key is always one non-traversing file-name component (the
//! JSONL backend stores `<key>.jsonl`). [`SessionKey::sanitize`] maps any text onto that set the
//! same way in every layer (the reference implementation sanitized in one backend and not the
//! other).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Longest key accepted, in characters.
pub const MAX_SESSION_KEY_LEN: usize = 128;

/// Why a string is not a valid session key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionKeyError {
    #[error("session key must not be empty")]
    Empty,
    #[error("session key '{0}' is longer than {MAX_SESSION_KEY_LEN} characters")]
    TooLong(String),
    #[error("session key '{key}' contains {ch:?}; use letters, digits, '_' and '-'")]
    BadChar { key: String, ch: char },
}

/// A validated session key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SessionKey(String);

fn allowed(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-'
}

impl SessionKey {
    /// Validates `key` as is.
    pub fn new(key: impl Into<String>) -> Result<Self, SessionKeyError> {
        let key = key.into();
        if key.is_empty() {
            return Err(SessionKeyError::Empty);
        }
        if key.chars().count() > MAX_SESSION_KEY_LEN {
            return Err(SessionKeyError::TooLong(key));
        }
        if let Some(ch) = key.chars().find(|c| !allowed(*c)) {
            return Err(SessionKeyError::BadChar { key, ch });
        }
        Ok(Self(key))
    }

    /// Replaces every character outside the key alphabet with `_` (idempotent). Fails only on
    /// empty or over-long input.
    pub fn sanitize(raw: &str) -> Result<Self, SessionKeyError> {
        Self::new(
            raw.chars()
                .map(|c| if allowed(c) { c } else { '_' })
                .collect::<String>(),
        )
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

impl FromStr for SessionKey {
    type Err = SessionKeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl TryFrom<String> for SessionKey {
    type Error = SessionKeyError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl From<SessionKey> for String {
    fn from(k: SessionKey) -> Self {
        k.0
    }
}

/// Who produced a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// A role name that is not one of `system`, `user`, `assistant`, `tool`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown message role '{0}' (expected system, user, assistant or tool)")]
pub struct RoleError(pub String);

impl Role {
    pub const ALL: [Role; 4] = [Role::System, Role::User, Role::Assistant, Role::Tool];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for Role {
    type Err = RoleError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| RoleError(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_single_path_components_sess1() {
        assert!(SessionKey::new("telegram_42-a").is_ok());
        assert!(SessionKey::new("café").is_ok());
        for bad in ["", "a/b", "..", "a.b", "a b", "a\0b"] {
            assert!(SessionKey::new(bad).is_err(), "{bad:?} accepted");
        }
        assert!(SessionKey::new("x".repeat(MAX_SESSION_KEY_LEN + 1)).is_err());
    }

    #[test]
    fn sanitize_is_idempotent_and_total_on_nonempty_input() {
        let once = SessionKey::sanitize("a b/../c.d").ok();
        assert_eq!(once.as_ref().map(SessionKey::as_str), Some("a_b____c_d"));
        let twice = once.and_then(|k| SessionKey::sanitize(k.as_str()).ok());
        assert_eq!(twice.as_ref().map(SessionKey::as_str), Some("a_b____c_d"));
        assert!(SessionKey::sanitize("").is_err());
    }

    #[test]
    fn roles_round_trip() {
        for r in Role::ALL {
            assert_eq!(r.as_str().parse::<Role>().ok(), Some(r));
        }
        assert!("robot".parse::<Role>().is_err());
    }
}
