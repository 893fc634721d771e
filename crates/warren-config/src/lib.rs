//! Warren's configuration: the install layout ([`InstallRoot`], LAYOUT-1/2), the schema of
//! `config.toml` ([`Config`]), its validation (CFG-7), the one in-process owner
//! ([`ConfigStore`], CFG-1..5), encrypted secrets ([`Secret`], CFG-6) and the one redactor
//! that keeps them out of every message ([`Redactor`]). [`confined`] holds the
//! confined directory handles every daemon-side access to an agent-writable place goes through
//! (PERM-6), here so the memory backends below `warren-security` can use them too. [`sqlite`]
//! (feature `sqlite`) is the one open routine and connection pattern of every SQLite store.

pub mod atomic;
mod checks;
pub mod confined;
mod edit;
mod error;
pub mod failpoint;
pub mod grants;
mod keypath;
mod load;
mod lock;
mod paths;
pub mod plaintext;
pub mod redact;
pub mod schema;
mod secrets;
#[cfg(feature = "sqlite")]
pub mod sqlite;
mod starter;
mod store;
mod validate;

pub use checks::StateCheck;
pub use error::{ConfigError, Problem, cut_long_values, did_you_mean};
pub use keypath::{KeyPath, KeyPathError, Segment};
pub use paths::{HOME_ENV, InstallRoot, LegacyMigration, PathError};
pub use redact::{Redactor, mask_url};
pub use schema::Config;
pub use secrets::{ENC_PREFIX, Secret, SecretError, SecretKey, is_secret_key, may_hold_secret};
pub use starter::{
    DEMO_SCRIPT, InitOutcome, STARTER_CONFIG, StarterProvider, init, init_with, starter_config,
};
pub use store::{CommitOutcome, ConfigStore, Snapshot, WriteTxn};
