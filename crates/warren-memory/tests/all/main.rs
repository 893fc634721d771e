//! The crate's integration tests, linked into one binary (one module per suite).

mod backend_lock;
mod backends;
mod common;
mod fts_scope;
mod grant_rules;
mod hybrid;
mod isolation;
mod lifecycle;
mod lucid;
mod markdown_links;
mod qdrant;
mod scope_prop;
mod vector_cache;
mod versions;
