//! The crate's integration tests, linked into one binary (one module per suite).

mod alias_keys;
mod config_store;
mod inert_settings;
#[cfg(feature = "sqlite")]
mod migration_race;
