//! The `shell` tool (PERM-4, SBX-3): the command policy first, then `bash -c` (or `sh -c`) through the
//! agent's sandbox (the one spawn module), with cwd = workspace, a cleared environment, stdin
//! closed, its own process group (killed whole on timeout or cancel), and stdout/stderr each
//! capped with a truncation marker. Disk (issue 35 §8): the sandbox caps each file at what
//! remains of the workspace limit and the reserve (`RLIMIT_FSIZE`), a watchdog kills the
//! command once the workspace passes its limit or the disk its reserve, and the workspace is
//! measured again after every command. Approval comes from the runtime (`execute_approved`), never
//! from an argument the model controls; under `supervised` it is needed for medium-risk and
//! exec-capable commands (programs that can run other programs or code, PERM-4).

use std::os::fd::OwnedFd;
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt};
use warren_security::quota::{DiskCheck, DiskSample};
use warren_security::sandbox::{ChildIo, Sandbox};
use warren_security::{QuotaError, SecurityPolicy};

use crate::tool::{BoxFuture, RiskClass, Tool, ToolError, ToolOutput, parse_args};

/// Default cap of stdout and of stderr, each.
pub const DEFAULT_OUTPUT_CAP: usize = 1024 * 1024;
const TRUNCATED: &str = "\n[output truncated]";

/// Runs a shell command for one agent.
pub struct Shell {
    sandbox: Sandbox,
    output_cap: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    command: String,
    timeout_secs: Option<u64>,
}

impl Shell {
    pub fn new(sandbox: Sandbox) -> Self {
        Self {
            sandbox,
            output_cap: DEFAULT_OUTPUT_CAP,
        }
    }

    pub fn with_output_cap(mut self, cap: usize) -> Self {
        self.output_cap = cap;
        self
    }

    async fn run(&self, args: serde_json::Value, approved: bool) -> Result<ToolOutput, ToolError> {
        let a: Args = parse_args(args)?;
        let policy = self.sandbox.policy();
        let check = policy
            .check_command(&a.command)
            .map_err(|e| ToolError::Denied(e.to_string()))?;
        if check.needs_approval && !approved {
            return Err(ToolError::ApprovalRequired(if check.exec_capable {
                format!(
                    "exec-capable command ({}) needs the operator's approval: it can run programs or code the command policy does not see",
                    check.exec_capable_programs.join("; ")
                )
            } else {
                format!(
                    "{:?}-risk command ({}) needs the operator's approval",
                    check.risk,
                    check.programs.join(", ")
                )
            }));
        }
        let limit = policy.shell_timeout();
        let timeout = a
            .timeout_secs
            .map_or(limit, |s| Duration::from_secs(s).min(limit));
        let shell = if std::path::Path::new("/bin/bash").is_file() {
            "/bin/bash"
        } else {
            "/bin/sh"
        };
        // The disk as the command starts (issue 35 §8): the watchdog's and the after-check's
        // baseline (cached usage: it was measured after the previous command).
        let sampler = policy.clone();
        let start = tokio::task::spawn_blocking(move || {
            sampler.disk_sample(warren_security::quota::CACHE_TTL).ok()
        })
        .await
        .ok()
        .flatten();
        let mut child = self
            .sandbox
            .spawn(
                shell,
                &["-c".into(), a.command.clone().into()],
                ChildIo::Piped,
            )
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        let pgid = Some(child.id());
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(ToolError::Failed("command output unavailable".into()));
        };
        let pipe = |fd: OwnedFd| {
            tokio::net::unix::pipe::Receiver::from_owned_fd(fd)
                .map_err(|e| ToolError::Failed(format!("cannot read the command's output: {e}")))
        };
        let (stdout, stderr) = (pipe(OwnedFd::from(stdout))?, pipe(OwnedFd::from(stderr))?);
        let cap = self.output_cap;
        let waiter = tokio::task::spawn_blocking(move || child.wait());
        let work = async {
            let (out, err, status) =
                tokio::join!(read_capped(stdout, cap), read_capped(stderr, cap), waiter);
            (out, err, status)
        };
        // Dropping `work` on timeout, when the disk watchdog fires (issue 35 §8) or when the
        // caller cancels this future ends the wait; the guard kills the whole process group so
        // no grandchild survives.
        let guard = GroupKill(pgid);
        let watched = async {
            tokio::select! {
                done = work => Ok(done),
                stop = disk_watch(policy.clone(), start.clone()) => Err(stop),
            }
        };
        let result = tokio::time::timeout(timeout, watched).await;
        match result {
            Err(_) => {
                drop(guard);
                Err(ToolError::Failed(format!(
                    "command timed out after {}s and was killed",
                    timeout.as_secs()
                )))
            }
            Ok(Err(stop)) => {
                drop(guard);
                Err(ToolError::Denied(format!(
                    "command killed while it ran: {stop}"
                )))
            }
            Ok(Ok(((stdout, out_cut), (stderr, err_cut), status))) => {
                std::mem::forget(guard);
                let status = status
                    .map_err(|e| ToolError::Failed(format!("waiting for the command failed: {e}")))?
                    .map_err(|e| {
                        ToolError::Failed(format!("waiting for the command failed: {e}"))
                    })?;
                let mut stdout = String::from_utf8_lossy(&stdout).into_owned();
                let mut stderr = String::from_utf8_lossy(&stderr).into_owned();
                if out_cut {
                    stdout.push_str(TRUNCATED);
                }
                if err_cut {
                    stderr.push_str(TRUNCATED);
                }
                // Measured after every command: while a limit is passed, the next child may not
                // grow any file (RLIMIT_FSIZE 0) and the file tools refuse growing writes.
                let after = policy.clone();
                let disk = tokio::task::spawn_blocking(move || match &start {
                    Some(start) => after.disk_check(DiskCheck::After(start)),
                    None => after.disk_check(DiskCheck::Now),
                })
                .await
                .ok()
                .and_then(Result::err)
                .map(|e| e.to_string());
                use std::os::unix::process::ExitStatusExt;
                let mut out = json!({
                    "exit_code": status.code(),
                    "signal": status.signal(),
                    "stdout": stdout,
                    "stderr": stderr,
                    "stdout_truncated": out_cut,
                    "stderr_truncated": err_cut,
                    "risk": check.risk,
                    "exec_capable": check.exec_capable,
                    "sandbox": self.sandbox.backend(),
                });
                if let Some(disk) = disk {
                    out["disk_limit"] = disk.into();
                }
                Ok(ToolOutput::json(out))
            }
        }
    }
}

/// Shortest pause of the disk watchdog between two measurements.
const WATCH_MIN: Duration = Duration::from_millis(250);

/// Issue 35 §8: measures the agent's writable workspaces and the free space above the reserve
/// while a command runs, and returns once a limit is passed (the caller kills the command).
/// Each check walks the workspaces afresh (free space alone is no proof on a busy host: other
/// processes free space meanwhile), paced so the walks take at most a quarter of the time.
async fn disk_watch(policy: SecurityPolicy, mut start: Option<DiskSample>) -> QuotaError {
    // `start`: the sample when the command started. Only growth past a limit counts (a cleanup
    // run while over the limit is not killed; RLIMIT_FSIZE 0 keeps it from growing a file).
    loop {
        tokio::time::sleep(WATCH_MIN).await;
        let (p, since) = (policy.clone(), start.clone());
        let took = std::time::Instant::now();
        let checked = tokio::task::spawn_blocking(move || match since {
            None => p.disk_sample(warren_security::quota::CACHE_TTL),
            Some(since) => p.disk_check(DiskCheck::Watch(&since)),
        })
        .await;
        match checked {
            Ok(Ok(sample)) => {
                start.get_or_insert(sample);
            }
            Ok(Err(stop)) if start.is_some() => return stop,
            // No baseline yet (the workspace could not be measured): try again.
            Ok(Err(_)) | Err(_) => {}
        }
        // Paced so walks take at most a quarter of the time.
        tokio::time::sleep(took.elapsed().saturating_mul(3)).await;
    }
}

/// Kills the process group when dropped (timeout or cancellation).
pub(crate) struct GroupKill(pub(crate) Option<u32>);

impl Drop for GroupKill {
    fn drop(&mut self) {
        if let Some(pid) = self
            .0
            .and_then(|p| i32::try_from(p).ok())
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

/// Reads a stream to its end, keeping at most `cap` bytes (the rest is drained and dropped).
pub(crate) async fn read_capped(mut stream: impl AsyncRead + Unpin, cap: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    let mut truncated = false;
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                if n > room {
                    truncated = true;
                }
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    (kept, truncated)
}

impl Tool for Shell {
    fn name(&self) -> &'static str {
        "shell"
    }
    fn description(&self) -> &'static str {
        "Run a shell command in the agent's workspace, inside its sandbox. Only allowlisted commands, written literally: no variable or command substitution, globs, braces or '~' (quote such characters to mean them). git is not available here: use git_operations."
    }
    fn parameters(&self) -> serde_json::Value {
        json!({"type": "object", "additionalProperties": false, "required": ["command"], "properties": {
            "command": {"type": "string"},
            "timeout_secs": {"type": "integer", "minimum": 1}
        }})
    }
    fn risk(&self) -> RiskClass {
        RiskClass::Execute
    }
    fn execute(&self, args: serde_json::Value) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        Box::pin(self.run(args, false))
    }
    fn execute_approved(
        &self,
        args: serde_json::Value,
    ) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        Box::pin(self.run(args, true))
    }
}
