//! Validation rules that need state outside `config.toml`, registered on a [`ConfigStore`] by
//! crates above this one: the MEM-9 memory backend lock (warren-memory) asks the memory
//! stores themselves whether an agent has written, so the rule needs no copy of that fact here.
//!
//! [`ConfigStore`]: crate::ConfigStore

use crate::error::Problem;
use crate::paths::InstallRoot;
use crate::schema::Config;

/// A rule over config and the install's durable state.
pub trait StateCheck: Send + Sync {
    /// Problems of `config`. `previous` is the config it replaces (`None` when checking a
    /// loaded config on its own), so a check may probe only what changed.
    fn check(&self, root: &InstallRoot, previous: Option<&Config>, config: &Config)
    -> Vec<Problem>;
}
