//! The selftest probe runner. `warren security selftest` starts this very binary inside the
//! agent's sandbox (under the full level it is bound read-only at [`STAGE_PATH`]) with a probe in
//! the environment variable [`STAGE_ENV`]. Before `main` runs, a constructor in `.init_array`
//! notices the variable, performs the probe (already confined by the launcher) and exits: every
//! binary that links warren-security (the `warren` binary, test binaries) can probe without a
//! second executable to install.

/// The environment variable carrying the probe (JSON).
pub(crate) const STAGE_ENV: &str = "WARREN_SANDBOX_PROBE";
/// Where the full level binds this executable for a probe.
pub(crate) const STAGE_PATH: &str = "/.warren-sandbox-probe";

/// Runs the probe when this process was started as one; returns otherwise.
fn maybe_run() {
    let Some(spec) = std::env::var_os(STAGE_ENV) else {
        return;
    };
    let line = match serde_json::from_str::<super::selftest::ProbeSpec>(&spec.to_string_lossy()) {
        Ok(probe) => super::selftest_stage::in_stage(&probe),
        Err(e) => format!("refused: bad probe: {e}"),
    };
    println!("{line}");
    std::process::exit(0);
}

/// Called by `Sandbox` so the object file holding the constructor is always linked.
#[inline(never)]
pub(crate) fn linked() -> bool {
    CONSTRUCTOR as usize != 0
}

extern "C" fn constructor() {
    maybe_run();
}

// Registering `constructor` in `.init_array`, which glibc runs after its own and std's
// initialisation (std's argument capture sits in a prioritised `.init_array.00099` section,
// which runs first), before `main`.
#[allow(unsafe_code)]
#[used]
#[unsafe(link_section = ".init_array")]
static CONSTRUCTOR: extern "C" fn() = constructor;
