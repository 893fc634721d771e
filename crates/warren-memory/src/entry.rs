//! The memory vocabulary: [`MemoryEntry`], what a write carries ([`NewEntry`]), recall and list
//! queries, the per-agent scope a backend filters by ([`ScopeRule`], MEM-2/3/8) and the input
//! limits every backend shares.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::error::MemoryError;

/// Largest `content` accepted, in bytes.
pub const MAX_CONTENT_BYTES: usize = 64 * 1024;
/// Largest `key` accepted, in bytes.
pub const MAX_KEY_BYTES: usize = 256;
/// Largest category name accepted, in bytes.
pub const MAX_CATEGORY_BYTES: usize = 64;
/// Largest recall query accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 1024;
/// Largest `limit` of a recall or list page.
pub const MAX_LIMIT: usize = 200;
/// The category of entries stored without one (long-term facts; `MEMORY.md` in Markdown).
pub const CORE_CATEGORY: &str = "core";

/// A backend's handle on one agent: a UUID (as text) in the SQL stores, the alias in Markdown
/// and None. Obtained only from [`crate::MemoryStore::agent_id`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AgentId(pub(crate) String);

impl AgentId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// How far a memory may be trusted, by who wrote it (issue 20 §3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trust {
    /// Written by the operator (CLI, API).
    Operator,
    /// Written by an agent's tool in a turn that had read nothing untrusted.
    #[default]
    Agent,
    /// Written in a turn that had read untrusted content (a web page, MCP output...).
    Untrusted,
}

impl Trust {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Operator => "operator",
            Self::Agent => "agent",
            Self::Untrusted => "untrusted",
        }
    }

    /// Parses [`Trust::as_str`]; anything else is `None`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "operator" => Some(Self::Operator),
            "agent" => Some(Self::Agent),
            "untrusted" => Some(Self::Untrusted),
            _ => None,
        }
    }
}

impl std::fmt::Display for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who wrote one version of a memory (issue 20 §3). Rows written before provenance existed
/// read as `agent` trust with every other field empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Provenance {
    pub trust: Trust,
    /// The agent whose turn wrote it (`None` for operator writes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The chat session of that turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The channel the turn came in on (`cli`, `gateway`, `acp`, `cron`...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// The model's tool call id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call: Option<String>,
    /// The signed receipt of that tool call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receipt: Option<String>,
}

impl Provenance {
    /// An operator write through `channel` (`cli`, `api`).
    pub fn operator(channel: &str) -> Self {
        Self {
            trust: Trust::Operator,
            channel: Some(channel.to_string()),
            ..Self::default()
        }
    }

    /// Values longer than [`MAX_KEY_BYTES`] or with control characters are dropped (never
    /// stored, never an error: provenance is best effort metadata of a write).
    pub(crate) fn sanitized(mut self) -> Self {
        for f in [
            &mut self.agent,
            &mut self.session,
            &mut self.channel,
            &mut self.tool_call,
            &mut self.receipt,
        ] {
            if f.as_deref()
                .is_some_and(|s| s.is_empty() || s.len() > 1024 || s.chars().any(char::is_control))
            {
                *f = None;
            }
        }
        self
    }
}

/// One stored memory. Timestamps are UTC instants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryEntry {
    /// Backend row id (a UUID in SQL stores, `<file>:<key>` in Markdown).
    pub id: String,
    /// Alias of the agent that wrote the row (validated when the row is decoded).
    pub agent: warren_core::AgentAlias,
    pub key: String,
    pub content: String,
    pub category: String,
    pub session: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    /// Version of this key: 1 for the first write, +1 for every later write or undo of the key
    /// (a key forgotten and stored again continues the count). 0 where a backend keeps none.
    #[serde(default)]
    pub version: u64,
    /// Who wrote this version.
    #[serde(default)]
    pub provenance: Provenance,
}

/// What happened to a version kept in a key's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VersionState {
    /// The live version.
    Current,
    /// Overwritten by a later version.
    Replaced,
    /// Removed by `forget` (or by a purge of one key).
    Forgotten,
}

impl VersionState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Current => "current",
            Self::Replaced => "replaced",
            Self::Forgotten => "forgotten",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "current" => Some(Self::Current),
            "replaced" => Some(Self::Replaced),
            "forgotten" => Some(Self::Forgotten),
            _ => None,
        }
    }
}

/// One version of a key (issue 20 §4): the entry as it was, and when it stopped being current
/// (`None` for the live version).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryVersion {
    #[serde(flatten)]
    pub entry: MemoryEntry,
    pub state: VersionState,
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub archived_at: Option<OffsetDateTime>,
}

/// Default number of earlier versions kept per key (`[memory] history_versions`).
pub const DEFAULT_HISTORY_VERSIONS: u32 = 20;

/// A recall result: the entry and its relevance (higher is better; 1.0 for recent-recall).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecallHit {
    #[serde(flatten)]
    pub entry: MemoryEntry,
    pub score: f64,
}

/// One write, validated by [`NewEntry::new`].
#[derive(Debug, Clone, PartialEq)]
pub struct NewEntry {
    pub key: String,
    pub content: String,
    pub category: String,
    pub session: Option<String>,
    /// Vector of `key\ncontent` when an embedder is configured.
    pub embedding: Option<Vec<f32>>,
    /// Who writes (default: an agent's tool, `agent` trust, nothing else known).
    pub provenance: Provenance,
    /// Compare-and-set: the write succeeds only if the key is at this version now (0: the key
    /// must not exist). `None` writes whatever the version; the replaced one is still kept.
    pub expected_version: Option<u64>,
}

impl NewEntry {
    /// Checks the limits above; `agent` names the writer in the error.
    pub fn new(
        agent: &str,
        key: &str,
        content: &str,
        category: Option<&str>,
        session: Option<&str>,
    ) -> Result<Self, MemoryError> {
        let key = key.trim();
        if key.is_empty() {
            return Err(MemoryError::invalid(agent, "key must not be empty"));
        }
        if key.len() > MAX_KEY_BYTES {
            return Err(MemoryError::invalid(
                agent,
                format!("key is {} bytes; the limit is {MAX_KEY_BYTES}", key.len()),
            ));
        }
        if key.chars().any(char::is_control) {
            return Err(MemoryError::invalid(
                agent,
                format!("key {key:?} contains control characters"),
            ));
        }
        if content.trim().is_empty() {
            return Err(MemoryError::invalid(
                agent,
                format!("content of key '{key}' is empty"),
            ));
        }
        if content.len() > MAX_CONTENT_BYTES {
            return Err(MemoryError::invalid(
                agent,
                format!(
                    "content of key '{key}' is {} bytes; the limit is {MAX_CONTENT_BYTES} (split it into several keys)",
                    content.len()
                ),
            ));
        }
        let category = validate_category(agent, category.unwrap_or(CORE_CATEGORY))?;
        let session = match session.map(str::trim) {
            None | Some("") => None,
            Some(s) if s.len() > MAX_KEY_BYTES || s.chars().any(char::is_control) => {
                return Err(MemoryError::invalid(
                    agent,
                    format!("session {s:?} is too long or contains control characters"),
                ));
            }
            Some(s) => Some(s.to_string()),
        };
        Ok(Self {
            key: key.to_string(),
            content: content.to_string(),
            category,
            session,
            embedding: None,
            provenance: Provenance::default(),
            expected_version: None,
        })
    }

    /// This write with its provenance.
    pub fn with_provenance(mut self, provenance: Provenance) -> Self {
        self.provenance = provenance;
        self
    }

    /// This write as a compare-and-set on `version` (0: the key must not exist yet).
    pub fn expecting(mut self, version: Option<u64>) -> Self {
        self.expected_version = version;
        self
    }

    /// The text an embedder sees for this entry.
    pub fn embedding_text(&self) -> String {
        format!("{}\n{}", self.key, self.content)
    }
}

/// Category names: 1..=64 bytes, no control characters, no surrounding spaces. Exact and
/// case-sensitive everywhere (MEM-8).
pub fn validate_category(agent: &str, category: &str) -> Result<String, MemoryError> {
    if category.is_empty()
        || category.len() > MAX_CATEGORY_BYTES
        || category.trim() != category
        || category.chars().any(char::is_control)
    {
        return Err(MemoryError::invalid(
            agent,
            format!(
                "category {category:?} must be 1 to {MAX_CATEGORY_BYTES} bytes without surrounding spaces or control characters"
            ),
        ));
    }
    Ok(category.to_string())
}

/// What `recall` searches for.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RecallQuery {
    /// Keywords. Empty, blank or `*` means "most recent first".
    pub text: String,
    pub limit: usize,
    /// Only rows of this session.
    pub session: Option<String>,
    /// Only rows created at or after this instant.
    pub since: Option<OffsetDateTime>,
    /// Only rows created at or before this instant.
    pub until: Option<OffsetDateTime>,
}

impl RecallQuery {
    pub fn new(text: impl Into<String>, limit: usize) -> Self {
        Self {
            text: text.into(),
            limit,
            ..Self::default()
        }
    }

    /// Whether this is a recent-recall (no keywords).
    pub fn is_recent(&self) -> bool {
        let t = self.text.trim();
        t.is_empty() || t == "*"
    }

    pub(crate) fn check(&self, agent: &str) -> Result<(), MemoryError> {
        if self.text.len() > MAX_QUERY_BYTES {
            return Err(MemoryError::InvalidQuery {
                agent: agent.to_string(),
                query: self.text.chars().take(40).collect(),
                message: format!(
                    "query is {} bytes; the limit is {MAX_QUERY_BYTES}",
                    self.text.len()
                ),
            });
        }
        check_limit(agent, self.limit)?;
        if let (Some(since), Some(until)) = (self.since, self.until)
            && since > until
        {
            return Err(MemoryError::invalid(
                agent,
                format!("time window is empty: since {since} is after until {until}"),
            ));
        }
        Ok(())
    }
}

/// A page of `list`, newest `updated_at` first.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ListQuery {
    pub category: Option<String>,
    pub offset: usize,
    pub limit: usize,
}

impl ListQuery {
    pub(crate) fn check(&self, agent: &str) -> Result<(), MemoryError> {
        check_limit(agent, self.limit)
    }
}

fn check_limit(agent: &str, limit: usize) -> Result<(), MemoryError> {
    if limit == 0 || limit > MAX_LIMIT {
        return Err(MemoryError::invalid(
            agent,
            format!("limit {limit} must be between 1 and {MAX_LIMIT}"),
        ));
    }
    Ok(())
}

/// One agent a recall may see, and which of its categories (`None` = all). The bound agent's
/// own rule always has `None` (MEM-3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeRule {
    pub agent: AgentId,
    pub categories: Option<Vec<String>>,
}

impl ScopeRule {
    /// Whether a row of `agent` in `category` passes this rule.
    pub fn allows(&self, agent: &AgentId, category: &str) -> bool {
        &self.agent == agent
            && self
                .categories
                .as_ref()
                .is_none_or(|c| c.iter().any(|x| x == category))
    }
}

/// Whether any rule of `scope` allows the row.
pub fn scope_allows(scope: &[ScopeRule], agent: &AgentId, category: &str) -> bool {
    scope.iter().any(|r| r.allows(agent, category))
}

pub(crate) fn now() -> OffsetDateTime {
    // Microsecond precision: what PostgreSQL keeps, so every backend returns the same instant.
    let now = OffsetDateTime::now_utc();
    now.replace_nanosecond(now.nanosecond() / 1000 * 1000)
        .unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_enforced_with_named_errors() {
        let big = "x".repeat(MAX_CONTENT_BYTES + 1);
        let err = NewEntry::new("ops", "k", &big, None, None)
            .err()
            .map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("'ops'") && e.contains("65537")),
            "{err:?}"
        );
        assert!(NewEntry::new("ops", " ", "c", None, None).is_err());
        assert!(NewEntry::new("ops", "k", "  ", None, None).is_err());
        assert!(NewEntry::new("ops", "k", "c", Some(""), None).is_err());
        assert!(NewEntry::new("ops", "k", "c", Some(" x"), None).is_err());
        let ok = NewEntry::new("ops", " k ", "c", None, Some(""));
        assert_eq!(
            ok.ok().map(|e| (e.key, e.category, e.session)),
            Some(("k".into(), "core".into(), None))
        );
    }

    #[test]
    fn recent_recall_rule() {
        for q in ["", "  ", "*", " * "] {
            assert!(RecallQuery::new(q, 5).is_recent(), "{q:?}");
        }
        assert!(!RecallQuery::new("wild*", 5).is_recent());
    }
}
