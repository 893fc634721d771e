//! `[memory.qdrant]` and `[memory.lucid]`: the settings of the two external memory backends
//! (MEM-2, MEM-5) and their validation.

use serde::{Deserialize, Serialize};

use super::Config;
use super::agents::MemoryBackendKind;
use crate::Problem;
use crate::secrets::Secret;

/// `[memory.qdrant]`: a Qdrant server reached over its REST API (MEM-5). Every agent on the
/// `qdrant` backend shares one collection; each point carries its agent in the payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QdrantConfig {
    /// Base URL of the REST API, e.g. `http://127.0.0.1:6333`.
    pub url: Option<String>,
    /// The shared collection (created on first use).
    pub collection: String,
    /// Sent as the `api-key` header; a secret.
    pub api_key: Option<Secret>,
    /// Vector size of the collection; unset = the embedder's `dimensions`, else the size of
    /// the first vector the embedder returns.
    pub vector_size: Option<u32>,
    /// Seconds one request may take.
    pub timeout_secs: u64,
}

impl Default for QdrantConfig {
    fn default() -> Self {
        Self {
            url: None,
            collection: "warren_memory".to_string(),
            api_key: None,
            vector_size: None,
            timeout_secs: 10,
        }
    }
}

/// `[memory.lucid]`: the external `lucid` CLI as an enrichment of the SQLite store (MEM-2).
/// SQLite stays the source of truth; a missing or failing `lucid` only loses the enrichment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LucidConfig {
    /// The program: a name looked up on `PATH`, or a path.
    pub command: String,
    /// Milliseconds a `lucid store` may take before it is killed.
    pub store_timeout_ms: u64,
    /// Milliseconds a `lucid context` (recall) may take before it is killed.
    pub recall_timeout_ms: u64,
    /// Token budget passed as `--budget` to `lucid context`.
    pub budget: u32,
}

impl Default for LucidConfig {
    fn default() -> Self {
        Self {
            command: "lucid".to_string(),
            store_timeout_ms: 3000,
            recall_timeout_ms: 3000,
            budget: 200,
        }
    }
}

/// Problems of `[memory.qdrant]` / `[memory.lucid]` for the agents that use them.
pub fn validate(config: &Config) -> Vec<Problem> {
    let mut out = Vec::new();
    let uses = |kind: MemoryBackendKind| {
        config
            .agents
            .values()
            .any(|a| config.memory_backend_of(a) == kind)
    };
    if uses(MemoryBackendKind::Qdrant) {
        let q = &config.memory.qdrant;
        match q.url.as_deref().map(str::trim) {
            None | Some("") => out.push(
                Problem::at(
                    "memory.qdrant.url",
                    "an agent uses the qdrant memory backend but no URL is set",
                )
                .with_hint(Some(
                    "warren config set memory.qdrant.url http://127.0.0.1:6333".into(),
                )),
            ),
            Some(u) if !(u.starts_with("http://") || u.starts_with("https://")) => out.push(
                Problem::at("memory.qdrant.url", "must start with http:// or https://"),
            ),
            Some(u)
                if u.split("://")
                    .nth(1)
                    .is_some_and(|r| r.split('/').next().unwrap_or("").contains('@')) =>
            {
                out.push(Problem::at(
                    "memory.qdrant.url",
                    "put the key in memory.qdrant.api_key (a secret), not in the URL",
                ))
            }
            Some(_) => {}
        }
        if q.collection.is_empty()
            || q.collection.len() > 255
            || !q
                .collection
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            out.push(Problem::at(
                "memory.qdrant.collection",
                "must be 1 to 255 characters of letters, digits, '_' or '-'",
            ));
        }
        if q.vector_size == Some(0) {
            out.push(Problem::at(
                "memory.qdrant.vector_size",
                "must be at least 1",
            ));
        }
        if q.timeout_secs == 0 {
            out.push(Problem::at(
                "memory.qdrant.timeout_secs",
                "must be at least 1",
            ));
        }
        if config.memory.embedder.kind == super::EmbedderKind::None {
            out.push(
                Problem::at(
                    "memory.embedder.kind",
                    "the qdrant memory backend stores vectors and needs an embedder",
                )
                .with_hint(Some(
                    "set [memory.embedder] kind = \"openai\" with base_url and model".into(),
                )),
            );
        }
    }
    if uses(MemoryBackendKind::Lucid) {
        let l = &config.memory.lucid;
        if l.command.trim().is_empty() {
            out.push(Problem::at("memory.lucid.command", "must not be empty"));
        }
        if l.store_timeout_ms == 0 {
            out.push(Problem::at(
                "memory.lucid.store_timeout_ms",
                "must be at least 1",
            ));
        }
        if l.recall_timeout_ms == 0 {
            out.push(Problem::at(
                "memory.lucid.recall_timeout_ms",
                "must be at least 1",
            ));
        }
    }
    out
}
