//! The in-sandbox stage: the last step before an agent's program runs.
//!
//! Every confined child is started as `<this executable> <program> <args>...` with the agent's
//! [`StageSpec`] in the environment variable [`STAGE_ENV`]: under the full sandbox inside `bwrap`'s
//! namespaces (the executable is bound read-only at [`STAGE_PATH`]), under the `landlock` level
//! directly. Before `main` runs, a constructor in `.init_array` notices the variable and, instead
//! of the host program, runs [`run`]: it sets the rlimits, enforces the agent's Landlock ruleset
//! (file tiers, the exec allowlist, TCP rules and scopes), installs the seccomp filter (which also
//! sets `no_new_privs`) and `exec`s the program with the variable removed. Any failure exits 126
//! with one line on stderr: a child never runs with a layer missing.
//!
//! Landlock cannot be applied before `bwrap` (a Landlock domain forbids `mount`), and `bwrap`
//! cannot apply Landlock itself, hence this stage. Doing it in a constructor means every binary
//! that links warren-security (the `warren` binary, test and bench binaries) can be its own stage
//! without a second executable to install or find.

use std::ffi::OsString;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The environment variable carrying the stage's JSON spec.
pub(crate) const STAGE_ENV: &str = "WARREN_SANDBOX_STAGE";
/// Where `bwrap` binds the stage executable inside the sandbox.
pub(crate) const STAGE_PATH: &str = "/.warren-sandbox-stage";
/// Exit code of a child whose confinement could not be completed.
pub const STAGE_FAILED: i32 = 126;

/// What the stage enforces for one child.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StageSpec {
    /// Every file right (workspace, `ReadWrite` roots).
    pub full: Vec<PathBuf>,
    /// Read and list (`Read` roots).
    pub read: Vec<PathBuf>,
    /// Write, create, remove; no read or list (`Write` roots).
    pub write_only: Vec<PathBuf>,
    /// Extra read-only files (the operator's global git config).
    pub extra_read: Vec<PathBuf>,
    /// Files that may be executed; `None` = everything under the system directories and the
    /// granted roots (`allowed_commands = ["*"]`).
    pub exec: Option<Vec<PathBuf>>,
    pub network: bool,
    pub landlock: bool,
    /// The seccomp filters, compiled by the daemon (empty = the layer is off).
    pub seccomp: Vec<Vec<u64>>,
    pub rlimits: Rlimits,
    /// The uid and gid to become before Landlock (the daemon runs as root: `bwrap` ran
    /// privileged and kept the capabilities the switch needs; the switch drops them all).
    pub run_as: Option<u32>,
    /// A selftest probe to perform instead of running a program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<super::selftest::ProbeSpec>,
}

/// Resource limits of one child (from the risk profile).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Rlimits {
    pub processes: u64,
    pub file_size: u64,
    pub cpu_secs: u64,
}

/// Runs the stage when this process was started as one; returns otherwise.
fn maybe_run() {
    let Some(spec) = std::env::var_os(STAGE_ENV) else {
        return;
    };
    let mut args = std::env::args_os().skip(1);
    let Some(program) = args.next() else {
        fail("no program to run");
    };
    let rest: Vec<OsString> = args.collect();
    let mut spec: StageSpec = match serde_json::from_str(&spec.to_string_lossy()) {
        Ok(s) => s,
        Err(e) => fail(&format!("bad stage spec: {e}")),
    };
    // The program the daemon starts (bash for the shell tool, git for git_operations) is always
    // executable; what it starts in turn must be on the list.
    if let Some(exec) = spec.exec.as_mut() {
        let path = std::path::Path::new(&program);
        // git_operations writes keep the repository's hooks (GIT-8): for a git child the
        // workspace and read-write roots stay executable (hooks still start only listed programs).
        if path.file_name().is_some_and(|n| n == "git") {
            exec.extend(spec.full.iter().cloned());
        }
        if path.is_absolute() {
            exec.push(path.to_path_buf());
        } else if let Some(found) = super::which(&program.to_string_lossy()) {
            exec.push(found);
        }
    }
    let err = run(&spec, program, &rest);
    fail(&err);
}

fn fail(msg: &str) -> ! {
    eprintln!("warren sandbox: {msg}");
    std::process::exit(STAGE_FAILED);
}

/// Enforces `spec` on this process and execs `program` (returns only the reason it could not).
fn run(spec: &StageSpec, program: OsString, args: &[OsString]) -> String {
    if let Err(e) = set_rlimits(spec.rlimits) {
        return format!("cannot set resource limits: {e}");
    }
    if let Some(id) = spec.run_as
        && let Err(e) = become_user(id)
    {
        return format!("cannot switch to uid {id}: {e}");
    }
    // Setuid and file-capability binaries gain nothing from here on.
    if let Err(e) = rustix::thread::set_no_new_privs(true) {
        return format!("cannot set no_new_privs: {e}");
    }
    if spec.landlock
        && let Err(e) = super::landlock_rules::enforce(spec)
    {
        return e;
    }
    if !spec.seccomp.is_empty()
        && let Err(e) = super::seccomp::install(&spec.seccomp)
    {
        return format!("cannot install the seccomp filter: {e}");
    }
    if let Some(probe) = &spec.probe {
        println!("{}", super::selftest::in_stage(probe));
        std::process::exit(0);
    }
    use std::os::unix::process::CommandExt;
    let err = std::process::Command::new(&program)
        .args(args)
        .env_remove(STAGE_ENV)
        .exec();
    format!("cannot run {}: {err}", program.to_string_lossy())
}

/// Drops every supplementary group, then gid and uid (real, effective, saved): leaving uid 0
/// clears every capability; checked afterwards.
fn become_user(id: u32) -> rustix::io::Result<()> {
    use rustix::process::{Gid, Uid};
    use rustix::thread::{
        CapabilitySet, capabilities, set_thread_groups, set_thread_res_gid, set_thread_res_uid,
    };
    let (uid, gid) = (Uid::from_raw(id), Gid::from_raw(id));
    set_thread_groups(&[])?;
    set_thread_res_gid(gid, gid, gid)?;
    set_thread_res_uid(uid, uid, uid)?;
    let caps = capabilities(None)?;
    if caps.effective != CapabilitySet::empty() || caps.permitted != CapabilitySet::empty() {
        return Err(rustix::io::Errno::PERM);
    }
    Ok(())
}

fn set_rlimits(r: Rlimits) -> rustix::io::Result<()> {
    use rustix::process::{Resource, Rlimit, setrlimit};
    let limit = |n: u64| Rlimit {
        current: Some(n),
        maximum: Some(n),
    };
    setrlimit(Resource::Nproc, limit(r.processes))?;
    setrlimit(Resource::Fsize, limit(r.file_size))?;
    setrlimit(Resource::Cpu, limit(r.cpu_secs))?;
    setrlimit(Resource::Core, limit(0))
}

/// Called by `Sandbox` so the object file holding the constructor is always linked.
#[inline(never)]
pub(crate) fn linked() -> bool {
    CONSTRUCTOR as usize != 0
}

extern "C" fn constructor() {
    maybe_run();
}

// The only unsafe item of the sandbox: registering `constructor` in `.init_array`, which glibc
// runs after its own and std's initialisation (std's argument capture sits in a prioritised
// `.init_array.00099` section, which runs first), before `main`.
#[allow(unsafe_code)]
#[used]
#[unsafe(link_section = ".init_array")]
static CONSTRUCTOR: extern "C" fn() = constructor;
