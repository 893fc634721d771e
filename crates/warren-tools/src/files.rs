//! `file_read`, `file_write`, `file_edit` (PERM-3, PERM-4, PERM-6): each decides with the agent's
//! policy, then reaches the disk only through `warren_security::confined` handles on the allowed
//! root. `file_edit` needs read AND write, so a write-only grant cannot be used to probe content.
//!
//! Reads refuse every regular file with more than one hard link, wherever it is (the own
//! workspace included), checked on the opened descriptor (PERM-6): a hard link gives no hint of
//! where its other names are, so "every other link is inside a readable root" cannot be proven,
//! and a link planted in a readable directory would otherwise hand out a sibling's or a host
//! file. `file_edit` reads first, so it refuses them too; `file_write` replaces the directory
//! entry (never the shared inode) in the own workspace and refuses hard links elsewhere.
//! A path outside the agent's roots gets one refusal computed before it is touched
//! ([`warren_security::paths`]).
//!
//! When the turn's [`ToolContext`] lends a [`FileTransport`] (an editor over ACP), an allowed
//! file's text is read from and written to it instead of the disk (issue 19 §3), after the very
//! same decision and the same confined check of the file on disk (a link swapped in, a
//! hard-linked file, a non-file, a binary file are refused before the transport is asked). A
//! write whose target is hard-linked goes to the disk as without a transport (the entry is
//! replaced, never the shared inode: an editor would write into the inode).
//!
//! Writes that grow a file are admitted first by [`SecurityPolicy::admit_write`] (issue 35 §8):
//! the owning workspace's `max_workspace_mb` and the daemon's `[runtime] disk_reserve_mb`;
//! the refusal names the agent, the limit and the usage. Writes that do not grow a file always
//! pass, so an agent over its limit can still shrink or empty files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::json;
use warren_security::confined::{self, ConfinedError};
use warren_security::{Resolved, SecurityPolicy, Tier};

use crate::context::{FileTransport, ToolContext};
use crate::tool::{BoxFuture, RiskClass, Tool, ToolError, ToolOutput, parse_args};

/// Largest file `file_read` returns.
pub const MAX_READ_BYTES: u64 = 10 * 1024 * 1024;
/// Largest content `file_write`/`file_edit` accept.
const MAX_WRITE_BYTES: usize = 10 * 1024 * 1024;

fn denied(e: warren_security::Denied) -> ToolError {
    ToolError::Denied(e.to_string())
}

fn io_failed(e: ConfinedError) -> ToolError {
    match e {
        ConfinedError::SymlinkSwapped { .. } | ConfinedError::HardLinked { .. } => {
            ToolError::Denied(e.to_string())
        }
        other => ToolError::Failed(other.to_string()),
    }
}

/// Runs blocking file work off the async workers.
fn off_worker(
    policy: &SecurityPolicy,
    args: serde_json::Value,
    run: fn(&SecurityPolicy, serde_json::Value) -> Result<ToolOutput, ToolError>,
) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
    let policy = policy.clone();
    Box::pin(blocking(move || run(&policy, args)))
}

/// Runs blocking work (the policy decision, the confined check) off the async workers.
async fn blocking<T: Send + 'static>(
    run: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(run)
        .await
        .map_err(|e| ToolError::Failed(format!("file tool task failed: {e}")))?
}

/// Whether `resolved` goes through the transport (devices such as `/dev/null` never do).
fn through(resolved: &Resolved) -> bool {
    resolved.tier != Tier::Device
}

/// The transport's text of an allowed file.
async fn transport_read(files: &dyn FileTransport, path: &Path) -> Result<String, ToolError> {
    let text = files.read_text(path).await.map_err(|e| {
        ToolError::Failed(format!(
            "{}: the editor did not read it: {e}",
            path.display()
        ))
    })?;
    if text.len() as u64 > MAX_READ_BYTES {
        return Err(ToolError::Failed(format!(
            "{}: file is larger than the {MAX_READ_BYTES}-byte limit",
            path.display()
        )));
    }
    Ok(text)
}

async fn transport_write(
    files: &dyn FileTransport,
    path: &Path,
    text: &str,
) -> Result<(), ToolError> {
    files.write_text(path, text).await.map_err(|e| {
        ToolError::Failed(format!(
            "{}: the editor did not write it: {e}",
            path.display()
        ))
    })
}

/// Counts `\n` bytes in chunks small enough for byte-wide counters (vectorises well).
fn count_newlines(bytes: &[u8]) -> usize {
    bytes
        .chunks(255)
        .map(|c| usize::from(c.iter().fold(0u8, |n, b| n + u8::from(*b == b'\n'))))
        .sum()
}

/// Issue 35 §8: a write that grows the file at `resolved` from `old` to `new` bytes must fit
/// the owning workspace's limit and leave the daemon's disk reserve free (blocking: it may
/// measure the workspace).
fn admit(
    policy: &SecurityPolicy,
    resolved: &Resolved,
    old: usize,
    new: usize,
) -> Result<(), ToolError> {
    let len = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    policy
        .admit_write(resolved, len(old), len(new))
        .map_err(|e| ToolError::Denied(e.to_string()))
}

/// The size of the file a write would replace (0 when there is none).
fn current_len(resolved: &Resolved) -> Result<usize, ToolError> {
    let len = confined::len(resolved).map_err(io_failed)?.unwrap_or(0);
    Ok(usize::try_from(len).unwrap_or(usize::MAX))
}

fn require_act(policy: &SecurityPolicy, tool: &str) -> Result<(), ToolError> {
    if policy.can_act() {
        Ok(())
    } else {
        Err(ToolError::Denied(format!(
            "agent '{}' has autonomy read_only; {tool} is not allowed",
            policy.alias()
        )))
    }
}

/// Reads a text file, optionally a range of lines.
pub struct FileRead {
    policy: SecurityPolicy,
}

impl FileRead {
    pub fn new(policy: SecurityPolicy) -> Self {
        Self { policy }
    }

    fn args(args: serde_json::Value) -> Result<ReadArgs, ToolError> {
        let a: ReadArgs = parse_args(args)?;
        if a.offset == Some(0) {
            return Err(ToolError::InvalidArguments(
                "offset is 1-based; use 1 for the first line".into(),
            ));
        }
        Ok(a)
    }

    /// The decision and the file's text on disk (refusing binary and non-UTF-8 files).
    fn disk_text(policy: &SecurityPolicy, a: &ReadArgs) -> Result<(Resolved, String), ToolError> {
        let resolved = policy.can_read(&a.path).map_err(denied)?;
        let bytes = confined::read(&resolved, MAX_READ_BYTES).map_err(io_failed)?;
        if bytes.iter().take(8192).any(|b| *b == 0) {
            return Err(ToolError::Failed(format!(
                "{}: binary file (contains NUL bytes); not shown",
                a.path.display()
            )));
        }
        let text = String::from_utf8(bytes).map_err(|_| {
            ToolError::Failed(format!("{}: not UTF-8 text; not shown", a.path.display()))
        })?;
        Ok((resolved, text))
    }

    fn run(policy: &SecurityPolicy, args: serde_json::Value) -> Result<ToolOutput, ToolError> {
        let a = Self::args(args)?;
        let (resolved, text) = Self::disk_text(policy, &a)?;
        Ok(Self::output(&resolved.path, text, &a))
    }

    /// Through the turn's transport: the same decision and disk check, then its text.
    async fn run_through(
        policy: SecurityPolicy,
        args: serde_json::Value,
        files: Arc<dyn FileTransport>,
    ) -> Result<ToolOutput, ToolError> {
        let a = Self::args(args)?;
        let (a, resolved, disk) = blocking(move || {
            let (resolved, text) = Self::disk_text(&policy, &a)?;
            Ok((a, resolved, text))
        })
        .await?;
        let text = if through(&resolved) {
            transport_read(&*files, &resolved.path).await?
        } else {
            disk
        };
        Ok(Self::output(&resolved.path, text, &a))
    }

    /// The result: the whole text, or lines `offset..offset+limit`.
    fn output(path: &Path, text: String, a: &ReadArgs) -> ToolOutput {
        // Count lines as `str::lines` would, without iterating line by line.
        let newlines = count_newlines(text.as_bytes());
        let total = newlines + usize::from(!text.is_empty() && !text.ends_with('\n'));
        let start = usize::try_from(a.offset.unwrap_or(1)).unwrap_or(usize::MAX);
        let limit = a
            .limit
            .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
        let content = if a.offset.is_none() && a.limit.is_none() {
            text
        } else {
            text.lines()
                .skip(start.saturating_sub(1))
                .take(limit)
                .collect::<Vec<_>>()
                .join("\n")
        };
        let end = total.min(start.saturating_sub(1).saturating_add(limit));
        let mut out = json!({
            "path": path,
            "start_line": start.min(total.saturating_add(1)),
            "end_line": end,
            "total_lines": total,
        });
        // Moved in, not serialised: `json!` would copy the whole content.
        out["content"] = serde_json::Value::String(content);
        ToolOutput::json(out)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    path: PathBuf,
    /// First line to return (1-based).
    offset: Option<u64>,
    /// Number of lines to return.
    limit: Option<u64>,
}

impl Tool for FileRead {
    fn name(&self) -> &'static str {
        "file_read"
    }
    fn description(&self) -> &'static str {
        "Read a UTF-8 text file (optionally lines offset..offset+limit) within the agent's read grants."
    }
    fn parameters(&self) -> serde_json::Value {
        json!({"type": "object", "additionalProperties": false, "required": ["path"], "properties": {
            "path": {"type": "string", "description": "absolute, or relative to the workspace"},
            "offset": {"type": "integer", "minimum": 1},
            "limit": {"type": "integer", "minimum": 0}
        }})
    }
    fn risk(&self) -> RiskClass {
        RiskClass::Read
    }
    fn execute(&self, args: serde_json::Value) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        match ToolContext::files_for(true, false) {
            Some(files) => Box::pin(Self::run_through(self.policy.clone(), args, files)),
            None => off_worker(&self.policy, args, Self::run),
        }
    }
}

/// Creates or replaces a file atomically.
pub struct FileWrite {
    policy: SecurityPolicy,
}

impl FileWrite {
    pub fn new(policy: SecurityPolicy) -> Self {
        Self { policy }
    }

    /// The arguments and the decision.
    fn decide(
        policy: &SecurityPolicy,
        args: serde_json::Value,
    ) -> Result<(Resolved, String), ToolError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Args {
            path: PathBuf,
            content: String,
        }
        let a: Args = parse_args(args)?;
        require_act(policy, "file_write")?;
        if a.content.len() > MAX_WRITE_BYTES {
            return Err(ToolError::InvalidArguments(format!(
                "content is larger than {MAX_WRITE_BYTES} bytes"
            )));
        }
        let resolved = policy.can_write(&a.path).map_err(denied)?;
        admit(policy, &resolved, current_len(&resolved)?, a.content.len())?;
        Ok((resolved, a.content))
    }

    fn write_disk(resolved: &Resolved, content: &str) -> Result<ToolOutput, ToolError> {
        confined::write_atomic(resolved, content.as_bytes(), true).map_err(io_failed)?;
        Ok(Self::output(resolved, content))
    }

    fn output(resolved: &Resolved, content: &str) -> ToolOutput {
        ToolOutput::json(json!({"path": resolved.path, "bytes_written": content.len()}))
    }

    fn run(policy: &SecurityPolicy, args: serde_json::Value) -> Result<ToolOutput, ToolError> {
        let (resolved, content) = Self::decide(policy, args)?;
        Self::write_disk(&resolved, &content)
    }

    /// Through the turn's transport: the same decision; the target on disk is checked with
    /// the confined handles first (a link swapped in is refused; a hard-linked target is
    /// written on disk, entry replaced, as without a transport).
    async fn run_through(
        policy: SecurityPolicy,
        args: serde_json::Value,
        files: Arc<dyn FileTransport>,
    ) -> Result<ToolOutput, ToolError> {
        let decided = blocking(move || {
            let (resolved, content) = Self::decide(&policy, args)?;
            if !through(&resolved) {
                return Self::write_disk(&resolved, &content).map(Err);
            }
            // Only the checks matter (file kind, link count on the opened inode): with a 0-byte
            // limit a non-empty file stops at TooLarge before any byte is read.
            match confined::read(&resolved, 0) {
                Ok(_) | Err(ConfinedError::NotFound { .. } | ConfinedError::TooLarge { .. }) => {
                    Ok(Ok((resolved, content)))
                }
                Err(ConfinedError::HardLinked { .. }) => {
                    Self::write_disk(&resolved, &content).map(Err)
                }
                Err(e) => Err(io_failed(e)),
            }
        })
        .await?;
        let (resolved, content) = match decided {
            Ok(send) => send,
            Err(done) => return Ok(done),
        };
        transport_write(&*files, &resolved.path, &content).await?;
        Ok(Self::output(&resolved, &content))
    }
}

impl Tool for FileWrite {
    fn name(&self) -> &'static str {
        "file_write"
    }
    fn description(&self) -> &'static str {
        "Create or replace a file (atomically) within the agent's write grants; parent directories are created."
    }
    fn parameters(&self) -> serde_json::Value {
        json!({"type": "object", "additionalProperties": false, "required": ["path", "content"], "properties": {
            "path": {"type": "string"}, "content": {"type": "string"}
        }})
    }
    fn risk(&self) -> RiskClass {
        RiskClass::Write
    }
    fn execute(&self, args: serde_json::Value) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        match ToolContext::files_for(false, true) {
            Some(files) => Box::pin(Self::run_through(self.policy.clone(), args, files)),
            None => off_worker(&self.policy, args, Self::run),
        }
    }
}

/// Replaces one exact, unique occurrence of a string in a file.
pub struct FileEdit {
    policy: SecurityPolicy,
}

impl FileEdit {
    pub fn new(policy: SecurityPolicy) -> Self {
        Self { policy }
    }

    /// The arguments, the decision (read AND write) and the file's text on disk.
    fn decide(
        policy: &SecurityPolicy,
        args: serde_json::Value,
    ) -> Result<(EditArgs, Resolved, String), ToolError> {
        let a: EditArgs = parse_args(args)?;
        require_act(policy, "file_edit")?;
        if a.old_string.is_empty() {
            return Err(ToolError::InvalidArguments(
                "old_string must not be empty".into(),
            ));
        }
        // Read AND write: a write-only grant must not become a read oracle.
        let resolved = policy.can_read_write(&a.path).map_err(denied)?;
        let bytes = confined::read(&resolved, MAX_READ_BYTES).map_err(io_failed)?;
        let text = String::from_utf8(bytes)
            .map_err(|_| ToolError::Failed(format!("{}: not UTF-8 text", a.path.display())))?;
        Ok((a, resolved, text))
    }

    /// `text` with the one occurrence replaced.
    fn edit(a: &EditArgs, text: &str) -> Result<String, ToolError> {
        let matches = text.matches(&a.old_string).count();
        if matches != 1 {
            return Err(ToolError::Failed(format!(
                "{}: old_string matches {matches} times; it must match exactly once",
                a.path.display()
            )));
        }
        let edited = text.replacen(&a.old_string, &a.new_string, 1);
        if edited.len() > MAX_WRITE_BYTES {
            return Err(ToolError::InvalidArguments(format!(
                "the edited file would exceed {MAX_WRITE_BYTES} bytes"
            )));
        }
        Ok(edited)
    }

    fn output(resolved: &Resolved) -> ToolOutput {
        ToolOutput::json(json!({"path": resolved.path, "replacements": 1}))
    }

    fn run(policy: &SecurityPolicy, args: serde_json::Value) -> Result<ToolOutput, ToolError> {
        let (a, resolved, text) = Self::decide(policy, args)?;
        let edited = Self::edit(&a, &text)?;
        admit(policy, &resolved, text.len(), edited.len())?;
        confined::write_atomic(&resolved, edited.as_bytes(), false).map_err(io_failed)?;
        Ok(Self::output(&resolved))
    }

    /// Through the turn's transport: the same decision and disk check, then the transport's
    /// text is edited and written back through it.
    async fn run_through(
        policy: SecurityPolicy,
        args: serde_json::Value,
        files: Arc<dyn FileTransport>,
    ) -> Result<ToolOutput, ToolError> {
        let quota = policy.clone();
        let (a, resolved, disk) = blocking(move || Self::decide(&policy, args)).await?;
        if !through(&resolved) {
            let edited = Self::edit(&a, &disk)?;
            return blocking(move || {
                admit(&quota, &resolved, disk.len(), edited.len())?;
                confined::write_atomic(&resolved, edited.as_bytes(), false).map_err(io_failed)?;
                Ok(Self::output(&resolved))
            })
            .await;
        }
        let text = transport_read(&*files, &resolved.path).await?;
        let edited = Self::edit(&a, &text)?;
        // The editor saves the file to the same disk: the same admission, against its size there.
        let (checked, grown) = (resolved.clone(), edited.len());
        blocking(move || admit(&quota, &checked, disk.len(), grown)).await?;
        transport_write(&*files, &resolved.path, &edited).await?;
        Ok(Self::output(&resolved))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EditArgs {
    path: PathBuf,
    old_string: String,
    new_string: String,
}

impl Tool for FileEdit {
    fn name(&self) -> &'static str {
        "file_edit"
    }
    fn description(&self) -> &'static str {
        "Replace one exact, unique occurrence of old_string with new_string in a file (needs read and write access)."
    }
    fn parameters(&self) -> serde_json::Value {
        json!({"type": "object", "additionalProperties": false, "required": ["path", "old_string", "new_string"], "properties": {
            "path": {"type": "string"}, "old_string": {"type": "string", "minLength": 1}, "new_string": {"type": "string"}
        }})
    }
    fn risk(&self) -> RiskClass {
        RiskClass::Write
    }
    fn execute(&self, args: serde_json::Value) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        match ToolContext::files_for(true, true) {
            Some(files) => Box::pin(Self::run_through(self.policy.clone(), args, files)),
            None => off_worker(&self.policy, args, Self::run),
        }
    }
}
