//! Named crash points (docs/architecture.md, "Crash tests").
//!
//! With the `failpoints` feature, `FAILPOINTS=<name>=return` makes the process abort at a crash point (SIGABRT, no
//! destructors, no flushing) when it reaches `<name>`: the same as being killed there. Without the
//! feature every call compiles to nothing. Names are constants here so tests iterate them.

/// Every crash point of a durable config save, in the order a save reaches them.
pub const CONFIG_SAVE: [&str; 4] = [
    "config-save-after-temp-write",
    "config-save-after-temp-fsync",
    "config-save-after-rename",
    "config-save-after-dir-sync",
];

/// Every crash point of writing a scrubbed `config.toml.bak` (issue 35 §9), which a save that
/// takes a plaintext secret out of the file does before [`CONFIG_SAVE`]'s steps.
pub const CONFIG_BACKUP_SAVE: [&str; 4] = [
    "config-backup-after-temp-write",
    "config-backup-after-temp-fsync",
    "config-backup-after-rename",
    "config-backup-after-dir-sync",
];

/// Error injection (not a crash): the directory sync after the rename fails (CFG-5).
pub const CONFIG_DIR_SYNC_ERROR: &str = "config-save-dir-sync-error";

/// Aborts the process if the crash point `name` is armed.
#[cfg(feature = "failpoints")]
pub fn crash_point(name: &str) {
    if fail::eval(name, |_| ()).is_some() {
        eprintln!("failpoint {name} reached: aborting");
        std::process::abort();
    }
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn crash_point(_name: &str) {}

/// Whether the error-injection point `name` is armed (`FAILPOINTS=<name>=return`).
#[cfg(feature = "failpoints")]
pub fn injected_error(name: &str) -> bool {
    fail::eval(name, |_| ()).is_some()
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn injected_error(_name: &str) -> bool {
    false
}

/// Arms the crash points named in `FAILPOINTS`; keep the guard alive for the process lifetime.
#[cfg(feature = "failpoints")]
pub fn init_from_env() -> Option<fail::FailScenario<'static>> {
    Some(fail::FailScenario::setup())
}

/// Without the feature there is nothing to arm.
#[cfg(not(feature = "failpoints"))]
pub fn init_from_env() -> Option<()> {
    None
}
