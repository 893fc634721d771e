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

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::json;
use warren_security::SecurityPolicy;
use warren_security::confined::{self, ConfinedError};

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
    Box::pin(async move {
        tokio::task::spawn_blocking(move || run(&policy, args))
            .await
            .map_err(|e| ToolError::Failed(format!("file tool task failed: {e}")))?
    })
}

/// Counts `\n` bytes in chunks small enough for byte-wide counters (vectorises well).
fn count_newlines(bytes: &[u8]) -> usize {
    bytes
        .chunks(255)
        .map(|c| usize::from(c.iter().fold(0u8, |n, b| n + u8::from(*b == b'\n'))))
        .sum()
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

    fn run(policy: &SecurityPolicy, args: serde_json::Value) -> Result<ToolOutput, ToolError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Args {
            path: PathBuf,
            /// First line to return (1-based).
            offset: Option<u64>,
            /// Number of lines to return.
            limit: Option<u64>,
        }
        let a: Args = parse_args(args)?;
        if a.offset == Some(0) {
            return Err(ToolError::InvalidArguments(
                "offset is 1-based; use 1 for the first line".into(),
            ));
        }
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
            "path": resolved.path,
            "start_line": start.min(total.saturating_add(1)),
            "end_line": end,
            "total_lines": total,
        });
        // Moved in, not serialised: `json!` would copy the whole content.
        out["content"] = serde_json::Value::String(content);
        Ok(ToolOutput::json(out))
    }
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
        off_worker(&self.policy, args, Self::run)
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

    fn run(policy: &SecurityPolicy, args: serde_json::Value) -> Result<ToolOutput, ToolError> {
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
        confined::write_atomic(&resolved, a.content.as_bytes(), true).map_err(io_failed)?;
        Ok(ToolOutput::json(
            json!({"path": resolved.path, "bytes_written": a.content.len()}),
        ))
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
        off_worker(&self.policy, args, Self::run)
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

    fn run(policy: &SecurityPolicy, args: serde_json::Value) -> Result<ToolOutput, ToolError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Args {
            path: PathBuf,
            old_string: String,
            new_string: String,
        }
        let a: Args = parse_args(args)?;
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
        confined::write_atomic(&resolved, edited.as_bytes(), false).map_err(io_failed)?;
        Ok(ToolOutput::json(
            json!({"path": resolved.path, "replacements": 1}),
        ))
    }
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
        off_worker(&self.policy, args, Self::run)
    }
}
