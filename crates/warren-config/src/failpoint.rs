//! Named crash points (ARCHITECTURE "Crash safety").
//!
//! With the `failpoints` feature, `FAILPOINTS=<name>=return` makes the process abort (SIGABRT, no
//! destructors, no flushing) when it reaches `<name>`: the same as being killed there. Without the
//! feature every call compiles to nothing. Names are listed in [`NAMES`] so tests iterate them.

/// Every crash point of a durable save, in the order a save reaches them.
pub const CONFIG_SAVE: [&str; 4] = [
    "config-save-after-temp-write",
    "config-save-after-temp-fsync",
    "config-save-after-rename",
    "config-save-after-dir-sync",
];

/// All crash points known to this crate.
pub const NAMES: &[&str] = &CONFIG_SAVE;

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
