//! Running git: the environment (GIT-5), the hardening of read commands (GIT-6, GIT-7) and the
//! one place a git process is started, through the agent's sandbox (GIT-8, SBX-3).
//!
//! Every invocation gets a cleared environment (the sandbox drops every inherited variable, so no
//! `GIT_*` survives) plus `GIT_TERMINAL_PROMPT=0`, `GIT_PAGER=cat`, `GIT_CEILING_DIRECTORIES` at
//! the grant root's parent, and `HOME` set to the operator's home so identity comes from the
//! global git config only. The repository is pinned with `--git-dir`/`--work-tree` after
//! validation, and pathspecs are literal.
//!
//! Reads additionally get `GIT_ALLOW_PROTOCOL=none` (no transport at all), `GIT_NO_LAZY_FETCH=1`,
//! `GIT_OPTIONAL_LOCKS=0`, `--no-pager`, and `-c` overrides (which git also passes to any git it
//! starts, e.g. in a submodule) that switch off every executable a repository can configure:
//! hooks, fsmonitor, pager, external diff, mailmap, signatures, and each clean/smudge/process
//! filter and diff driver the repository's config names. A pre-pass lists the config with its
//! origins: a repository config that includes a file the agent may not read is refused. Its
//! outcome is cached while the config files are unchanged ([`super::prepass`]), so a read costs
//! one sandboxed spawn.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use warren_security::SecurityPolicy;
use warren_security::sandbox::{ChildIo, Sandbox};

use super::repo::{Need, Repo, check};
use crate::shell::{GroupKill, read_capped};
use crate::tool::ToolError;

/// Cap of git's stdout (structured results are parsed from it).
pub const STDOUT_CAP: usize = 16 * 1024 * 1024;
const STDERR_CAP: usize = 64 * 1024;
/// Where `core.hooksPath` points for reads: not a directory, so no hook can ever be found there
/// and nobody can create one.
pub const NO_HOOKS: &str = "/dev/null";

/// `-c` overrides of every read command (GIT-6/7). `core.checkStat=minimal`: the first
/// sandboxed spawn hands the workspace to the sandbox user (a chown of every file), after which
/// every entry's owner and ctime differ from what the index recorded; reads never rewrite the
/// index (`--no-optional-locks`), so by default each `status` re-hashed every file until
/// something else rewrote it (10,000 files: 0.11 s instead of 0.02 s). Size and whole-second
/// mtime still decide, and git's racy-entry check still reads files as new as the index.
pub const READ_CONFIG: [&str; 19] = [
    "core.fsmonitor=false",
    "core.checkStat=minimal",
    "core.hooksPath=/dev/null",
    "core.pager=cat",
    "core.sshCommand=false",
    "core.askPass=",
    "credential.helper=",
    "diff.external=",
    "diff.submodule=short",
    "diff.ignoreSubmodules=dirty",
    "log.showSignature=false",
    "log.mailmap=false",
    "mailmap.file=",
    "mailmap.blob=",
    "protocol.allow=never",
    "submodule.recurse=false",
    "status.submoduleSummary=false",
    "color.ui=false",
    "core.quotePath=false",
];

/// Repository config keys naming a file git reads on read paths: a repository-scoped value must
/// be readable by the agent (`mailmap.file` and `core.hooksPath` are overridden instead).
const PATH_KEYS: [&str; 4] = [
    "core.excludesfile",
    "core.attributesfile",
    "diff.orderfile",
    "blame.ignorerevsfile",
];

/// What git answered.
#[derive(Debug)]
pub struct GitOutput {
    pub stdout: Vec<u8>,
    pub stdout_truncated: bool,
    pub stderr: String,
    pub code: Option<i32>,
}

impl GitOutput {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }

    /// The failure as a tool error naming the operation and git's message.
    pub fn failure(&self, op: &str) -> ToolError {
        let msg = self.stderr.trim();
        if msg.contains("lazy fetching disabled") || msg.contains("from promisor remote") {
            return ToolError::Failed(format!(
                "git {op} needs an object this partial clone does not have; reads never fetch (GIT-7). \
                 Fetch it yourself outside Warren or use a full clone. git said: {msg}"
            ));
        }
        ToolError::Failed(format!(
            "git {op} failed (exit {}): {}",
            self.code.map_or("signal".into(), |c| c.to_string()),
            if msg.is_empty() { "no message" } else { msg }
        ))
    }
}

/// The environment of every git process (on top of the sandbox's cleared one).
pub fn env(repo: &Repo, read: bool) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = vec![
        ("GIT_TERMINAL_PROMPT".into(), "0".into()),
        ("GIT_PAGER".into(), "cat".into()),
        ("GIT_LITERAL_PATHSPECS".into(), "1".into()),
    ];
    if let Some(parent) = repo.grant_root.parent() {
        env.push(("GIT_CEILING_DIRECTORIES".into(), parent.into()));
    }
    if let Some(home) = std::env::var_os("HOME") {
        env.push(("HOME".into(), home));
    }
    if read {
        env.extend([
            ("GIT_ALLOW_PROTOCOL".into(), "none".into()),
            ("GIT_NO_LAZY_FETCH".into(), "1".into()),
            ("GIT_OPTIONAL_LOCKS".into(), "0".into()),
            ("GIT_NO_REPLACE_OBJECTS".into(), "1".into()),
        ]);
    }
    env
}

/// The global options pinning the repository, then (reads) the hardening overrides.
pub fn global_args(repo: &Repo, read: bool, drivers: &[String]) -> Vec<OsString> {
    let mut args: Vec<OsString> = Vec::with_capacity(48);
    args.push("-C".into());
    args.push(repo.work_tree.clone().into());
    let mut git_dir = OsString::from("--git-dir=");
    git_dir.push(&repo.git_dir);
    let mut work_tree = OsString::from("--work-tree=");
    work_tree.push(&repo.work_tree);
    args.extend([git_dir, work_tree, "--literal-pathspecs".into()]);
    if read {
        args.push("--no-pager".into());
        args.push("--no-optional-locks".into());
        for c in READ_CONFIG {
            args.push("-c".into());
            args.push(c.into());
        }
        for d in drivers {
            args.push("-c".into());
            args.push(d.into());
        }
    }
    args
}

/// Runs git with `args` after the global options; `read` selects the hardened mode.
pub async fn run(
    sandbox: &Sandbox,
    repo: &Repo,
    read: bool,
    drivers: &[String],
    args: &[OsString],
) -> Result<GitOutput, ToolError> {
    let mut argv = global_args(repo, read, drivers);
    argv.extend(args.iter().cloned());
    spawn(sandbox, &argv, &env(repo, read)).await
}

/// Starts `git argv` through the sandbox and collects its capped output.
///
/// The exit is awaited on a pidfd in the runtime's reactor, beside the two pipes, so a call
/// hands nothing to another thread (each hand-off is a wake-up that waits for a CPU on a loaded
/// machine); without pidfds (Linux before 5.3) a blocking pool thread waits instead.
async fn spawn(
    sandbox: &Sandbox,
    argv: &[OsString],
    env: &[(OsString, OsString)],
) -> Result<GitOutput, ToolError> {
    let mut child = sandbox
        .spawn_with_env("git", argv, ChildIo::Piped, env)
        .map_err(|e| ToolError::Failed(format!("cannot start git: {e}")))?;
    let pgid = Some(child.id());
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(ToolError::Failed("git output unavailable".into()));
    };
    let pipe = |fd: OwnedFd| {
        tokio::net::unix::pipe::Receiver::from_owned_fd(fd)
            .map_err(|e| ToolError::Failed(format!("cannot read git's output: {e}")))
    };
    let (stdout, stderr) = (pipe(OwnedFd::from(stdout))?, pipe(OwnedFd::from(stderr))?);
    let guard = GroupKill(pgid);
    // `child` stays here when a pidfd watches it (reaped below, or in the background after a
    // timeout); the fallback thread takes it.
    let (exit, mut child) = match exit_fd(child.id()) {
        Some(fd) => (Exit::Fd(fd), Some(child)),
        None => (
            Exit::Thread(tokio::task::spawn_blocking(move || child.wait())),
            None,
        ),
    };
    let exited = async {
        match exit {
            // Readable once the process has exited; an error leaves the blocking wait below.
            Exit::Fd(fd) => {
                let _ = fd.readable().await;
                None
            }
            Exit::Thread(waiter) => Some(waiter.await),
        }
    };
    let work = async {
        tokio::join!(
            read_capped(stdout, STDOUT_CAP),
            read_capped(stderr, STDERR_CAP),
            exited
        )
    };
    let timeout: Duration = sandbox.policy().shell_timeout();
    match tokio::time::timeout(timeout, work).await {
        Err(_) => {
            drop(guard);
            if let Some(mut child) = child.take() {
                // Killed with its group: reap it off the runtime.
                drop(tokio::task::spawn_blocking(move || child.wait()));
            }
            Err(ToolError::Failed(format!(
                "git timed out after {}s and was killed",
                timeout.as_secs()
            )))
        }
        Ok(((stdout, stdout_truncated), (stderr, _), waited)) => {
            std::mem::forget(guard);
            let failed = |e: &dyn std::fmt::Display| {
                ToolError::Failed(format!("waiting for git failed: {e}"))
            };
            let status = match (waited, child.as_mut()) {
                (Some(joined), _) => joined.map_err(|e| failed(&e))?,
                // The pidfd said it exited: this wait only collects the status.
                (None, Some(child)) => child.wait(),
                (None, None) => return Err(failed(&"the child was lost")),
            }
            .map_err(|e| failed(&e))?;
            Ok(GitOutput {
                stdout,
                stdout_truncated,
                stderr: String::from_utf8_lossy(&stderr).into_owned(),
                code: status.code(),
            })
        }
    }
}

/// How [`spawn`] learns that git exited.
enum Exit {
    Fd(AsyncFd<OwnedFd>),
    Thread(tokio::task::JoinHandle<std::io::Result<std::process::ExitStatus>>),
}

/// A pidfd of `pid` in the reactor, or `None` when the kernel has none.
fn exit_fd(pid: u32) -> Option<AsyncFd<OwnedFd>> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)?;
    let fd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::NONBLOCK).ok()?;
    // The safe constructor is deprecated because a borrowed descriptor could be closed under
    // it; an `OwnedFd` it owns stays open on the same description until the `AsyncFd` drops
    // (what `AsyncFd::register_with_interest` asks), so it is sound here.
    #[allow(deprecated)]
    AsyncFd::with_interest(fd, Interest::READABLE).ok()
}

/// The read pre-pass, step 1: the repository's config with origins and scopes, listed by git
/// itself (hardened, sandboxed). A listing that fails (an `include.path`/`includeIf` git may not
/// read under the sandbox) refuses the read. Cached by [`super::prepass`].
pub async fn list_config(sandbox: &Sandbox, repo: &Repo) -> Result<Vec<ConfigEntry>, ToolError> {
    let args: Vec<OsString> = ["config", "--list", "--show-origin", "--show-scope", "-z"]
        .into_iter()
        .map(OsString::from)
        .collect();
    let out = run(sandbox, repo, true, &[], &args).await?;
    if !out.ok() {
        return Err(ToolError::Denied(format!(
            "cannot read the configuration of the repository {} under the agent's sandbox \
             (an include outside the agent's grants?): {}",
            repo.work_tree.display(),
            out.stderr.trim()
        )));
    }
    Ok(parse_config_list(&out.stdout))
}

/// A path the listing implied the agent must be able to read, checked again on every read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recheck {
    path: PathBuf,
    key: String,
    /// `true`: a repository-scoped config file (an origin); `false`: a configured path.
    origin: bool,
}

/// The read pre-pass, step 2: refuses a repository-scoped config file or a configured path
/// ([`PATH_KEYS`]) the agent may not read, and returns the `-c` overrides that blank every
/// filter and diff driver the config defines (GIT-6), with the checks it made.
pub fn decide(
    policy: &SecurityPolicy,
    repo: &Repo,
    listing: &[ConfigEntry],
) -> Result<(Vec<String>, Vec<Recheck>), ToolError> {
    let mut drivers = Vec::new();
    let mut checks: Vec<Recheck> = Vec::new();
    for entry in listing {
        let repo_scoped = matches!(entry.scope.as_str(), "local" | "worktree");
        if repo_scoped && let Some(file) = entry.origin.strip_prefix("file:") {
            checks.push(Recheck {
                path: origin_path(repo, file),
                key: entry.key.clone(),
                origin: true,
            });
        }
        if repo_scoped
            && PATH_KEYS.contains(&entry.key.to_ascii_lowercase().as_str())
            && let Some(value) = entry.value.as_deref().filter(|v| !v.is_empty())
        {
            checks.push(Recheck {
                path: repo.work_tree.join(value),
                key: entry.key.clone(),
                origin: false,
            });
        }
        let blank = neutralise(&entry.key);
        if !blank.is_empty() && entry.key.chars().any(|c| c == '=' || c.is_control()) {
            return Err(ToolError::Denied(format!(
                "the repository config defines a driver with a name git's -c cannot override ({:?}); refusing to run it",
                entry.key.chars().take(80).collect::<String>()
            )));
        }
        drivers.extend(blank);
    }
    checks.dedup_by(|a, b| a.path == b.path && a.origin == b.origin);
    recheck(policy, &checks)?;
    drivers.sort();
    drivers.dedup();
    Ok((drivers, checks))
}

/// Runs the grant checks a listing implied (on every read, cached or not).
pub fn recheck(policy: &SecurityPolicy, checks: &[Recheck]) -> Result<(), ToolError> {
    for c in checks {
        check(policy, &c.path, Need::Read).map_err(|e| {
            ToolError::Denied(if c.origin {
                format!(
                    "the repository config includes {} ({}), which the agent may not read: {e}",
                    c.path.display(),
                    c.key
                )
            } else {
                format!(
                    "the repository config sets {} to {}, which the agent may not read: {e}",
                    c.key,
                    c.path.display()
                )
            })
        })?;
    }
    Ok(())
}

/// The file an origin `file:<path>` names (git prints it as it opened it: relative paths are
/// relative to the work tree, where git runs).
pub fn origin_path(repo: &Repo, file: &str) -> PathBuf {
    let path = Path::new(file);
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        repo.work_tree.join(path)
    }
}

/// `-c` overrides that blank the command of a filter or diff driver config key.
fn neutralise(key: &str) -> Vec<String> {
    let lower = key.to_ascii_lowercase();
    let Some((section_name, var)) = lower.rsplit_once('.') else {
        return Vec::new();
    };
    let Some((section, name)) = key[..section_name.len()].split_once('.') else {
        return Vec::new();
    };
    match (section.to_ascii_lowercase().as_str(), var) {
        ("filter", "clean" | "smudge" | "process" | "required") => vec![
            format!("filter.{name}.clean="),
            format!("filter.{name}.smudge="),
            format!("filter.{name}.process="),
            format!("filter.{name}.required=false"),
        ],
        ("diff", "command" | "textconv") => vec![
            format!("diff.{name}.command="),
            format!("diff.{name}.textconv="),
        ],
        _ => Vec::new(),
    }
}

/// One line of `git config --list --show-origin --show-scope -z`.
#[derive(Debug, PartialEq, Eq)]
pub struct ConfigEntry {
    pub scope: String,
    pub origin: String,
    pub key: String,
    pub value: Option<String>,
}

/// Parses `git config --list --show-origin --show-scope -z`: `scope\0origin\0key\nvalue\0`.
fn parse_config_list(bytes: &[u8]) -> Vec<ConfigEntry> {
    let mut fields = bytes.split(|b| *b == 0).map(String::from_utf8_lossy);
    let mut out = Vec::new();
    while let (Some(scope), Some(origin), Some(kv)) = (fields.next(), fields.next(), fields.next())
    {
        let (key, value) = match kv.split_once('\n') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (kv.into_owned(), None),
        };
        out.push(ConfigEntry {
            scope: scope.into_owned(),
            origin: origin.into_owned(),
            key,
            value,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_listing_parses_and_filters_are_blanked() {
        let raw = b"global\0file:/root/.gitconfig\0user.name\nX\0local\0file:.git/config\0filter.Evil.clean\ntouch x\0local\0file:.git/config\0core.bare\nfalse\0";
        let entries = parse_config_list(raw);
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[1].key, "filter.Evil.clean");
        assert_eq!(
            neutralise(&entries[1].key),
            vec![
                "filter.Evil.clean=",
                "filter.Evil.smudge=",
                "filter.Evil.process=",
                "filter.Evil.required=false"
            ]
        );
        assert_eq!(
            neutralise("diff.a.b.textconv"),
            vec!["diff.a.b.command=", "diff.a.b.textconv="]
        );
        assert!(neutralise("core.bare").is_empty());
    }
}
