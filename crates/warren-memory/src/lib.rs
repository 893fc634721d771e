//! Agent-scoped memory (SPEC §6, MEM-1..9).
//!
//! - [`Memory`]: what an agent's tools see; always an [`AgentScopedMemory`] built by
//!   [`create_memory_for_agent`] (MEM-1/6).
//! - [`MemoryStore`]: an install-wide backend taking an explicit agent on every call: SQLite
//!   ([`SqliteStore`], default), PostgreSQL ([`PostgresStore`]), Markdown ([`MarkdownStore`],
//!   MEM-4), None ([`NoneStore`]), Qdrant ([`QdrantStore`], MEM-5, REST) and Lucid
//!   ([`LucidStore`]: SQLite enriched by the `lucid` CLI).
//! - Grants (`read_memory_from`) are resolved by the factory and enforced inside each backend's
//!   query, before the limit (MEM-2/3/8); the backend lock of MEM-9 is in [`lock`].

mod embed;
mod entry;
mod error;
mod factory;
pub mod fts;
mod hybrid;
pub mod lock;
pub mod lucid;
mod markdown;
mod none;
mod openai;
mod postgres;
pub mod qdrant;

mod scoped;
mod sqlite;
mod store;

pub use embed::Embedder;
pub use entry::{
    AgentId, CORE_CATEGORY, DEFAULT_HISTORY_VERSIONS, ListQuery, MAX_CATEGORY_BYTES,
    MAX_CONTENT_BYTES, MAX_KEY_BYTES, MAX_LIMIT, MAX_QUERY_BYTES, MemoryEntry, MemoryVersion,
    NewEntry, Provenance, RecallHit, RecallQuery, ScopeRule, Trust, VersionState, scope_allows,
    validate_category,
};
pub use error::{MemoryError, redact_url};
pub use factory::{MemoryStores, create_memory_for_agent, resolve_grants};
pub use lock::BackendLock;
pub use lucid::LucidStore;
pub use markdown::MarkdownStore;
pub use none::NoneStore;
pub use openai::OpenAiEmbedder;
pub use postgres::PostgresStore;
pub use qdrant::QdrantStore;
pub use scoped::{AgentScopedMemory, Grant};
pub use sqlite::store_exists as sqlite_store_exists;
pub use sqlite::{SqliteStore, VERSION_CRASH_POINTS, registered_agents_at};
pub use store::{BoxFuture, MemFuture, Memory, MemoryStore};
