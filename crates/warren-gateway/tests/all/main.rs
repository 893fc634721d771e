//! The crate's integration tests, linked into one binary (one module per suite).

mod alias_paths;
mod chat;
mod common;
mod control;
mod dashboard;
mod memory_api;
mod memory_backends;
mod memory_provenance;
mod openai_api;
mod openai_failed_retry;
mod routes;
mod session_keys;
mod sqlite_stores;
