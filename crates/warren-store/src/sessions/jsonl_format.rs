//! The JSONL line format (SESS-1): one JSON object per line with `role`, `content` and optional
//! `created_at` (RFC 3339) and `agent`. Shared by the JSONL backend and the migration, so both
//! read a file the same way.
//!
//! Unreadable lines are skipped and reported, never fatal: a last line without its newline
//! that does not parse is a *torn tail* (a writer died mid-line); anything else is *invalid*.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use warren_core::{AgentAlias, Role, RoleError};

use super::NewMessage;
use crate::timefmt;

/// One line that could not be read in full.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LineIssue {
    /// 1-based line number.
    pub line: usize,
    pub kind: LineIssueKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "detail")]
pub enum LineIssueKind {
    /// The last line has no newline and does not parse: a crash mid-append. Skipped.
    TornTail,
    /// The line is not a message (bad JSON, bad UTF-8, unknown role). Skipped.
    Invalid(String),
    /// The message was kept but this field was dropped (bad `agent` or `created_at`).
    FieldDropped(String),
}

/// Why a line is not a message (the detail of [`LineIssueKind::Invalid`]; the issue carries the
/// line number).
#[derive(Debug, thiserror::Error)]
enum LineError {
    #[error("not UTF-8: {0}")]
    Utf8(#[from] std::str::Utf8Error),
    #[error("not a message: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{0}")]
    Role(#[from] RoleError),
}

#[derive(Debug, Serialize, Deserialize)]
struct Line<'a> {
    role: String,
    content: std::borrow::Cow<'a, str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    created_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    agent: Option<String>,
}

/// A parsed file.
#[derive(Debug, Default)]
pub struct Parsed {
    pub messages: Vec<NewMessage>,
    /// Byte offset of each message's line (parallel to `messages`).
    pub offsets: Vec<u64>,
    pub issues: Vec<LineIssue>,
    /// Whether any line had non-whitespace content (MIG-5: empty vs. no valid message).
    pub non_blank: bool,
}

/// Parses a whole file.
pub fn parse(bytes: &[u8]) -> Parsed {
    let mut out = Parsed::default();
    let ends_with_newline = bytes.last() == Some(&b'\n');
    let mut lines = bytes.split(|b| *b == b'\n').peekable();
    let mut number = 0;
    let mut offset = 0u64;
    while let Some(raw) = lines.next() {
        number += 1;
        let start = offset;
        offset += raw.len() as u64 + 1;
        let last = lines.peek().is_none();
        if last && ends_with_newline {
            break; // the empty remainder after the final '\n'
        }
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        out.non_blank = true;
        match parse_line(raw, number, &mut out.issues) {
            Ok(msg) => {
                out.messages.push(msg);
                out.offsets.push(start);
            }
            Err(detail) => out.issues.push(LineIssue {
                line: number,
                kind: if last {
                    LineIssueKind::TornTail
                } else {
                    LineIssueKind::Invalid(detail.to_string())
                },
            }),
        }
    }
    out
}

fn parse_line(
    raw: &[u8],
    number: usize,
    issues: &mut Vec<LineIssue>,
) -> Result<NewMessage, LineError> {
    let text = std::str::from_utf8(raw)?;
    let line: Line<'_> = serde_json::from_str(text)?;
    let role: Role = line.role.parse()?;
    let mut drop_field = |detail: String| {
        issues.push(LineIssue {
            line: number,
            kind: LineIssueKind::FieldDropped(detail),
        })
    };
    let agent = line.agent.and_then(|a| match AgentAlias::new(a.clone()) {
        Ok(alias) => Some(alias),
        Err(e) => {
            drop_field(format!("agent: {e}"));
            None
        }
    });
    let created_at = line.created_at.and_then(|t| match timefmt::parse(&t) {
        Some(t) => Some(t),
        None => {
            drop_field(format!("created_at '{t}' is not RFC 3339"));
            None
        }
    });
    Ok(NewMessage {
        role,
        content: line.content.into_owned(),
        agent,
        created_at,
    })
}

/// Encodes one message as a line, newline included.
pub fn encode(role: Role, content: &str, agent: Option<&AgentAlias>, at: OffsetDateTime) -> String {
    let line = Line {
        role: role.as_str().to_string(),
        content: std::borrow::Cow::Borrowed(content),
        created_at: Some(timefmt::format(at)),
        agent: agent.map(|a| a.as_str().to_string()),
    };
    // Serialising a struct of strings cannot fail.
    let mut text = serde_json::to_string(&line).unwrap_or_default();
    text.push('\n');
    text
}

/// Rewrites the `agent` field of every message line attributed to `from` (agent rename,
/// LIFE-3). Lines that do not parse (a torn tail, an invalid line) are kept byte for byte.
/// Returns `None` when no line changed.
pub fn rename_agent(bytes: &[u8], from: &str, to: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut changed = false;
    let mut lines = bytes.split(|b| *b == b'\n').peekable();
    while let Some(raw) = lines.next() {
        let last = lines.peek().is_none();
        let rewritten = std::str::from_utf8(raw)
            .ok()
            .and_then(|t| {
                serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(t).ok()
            })
            .filter(|m| m.get("agent").and_then(serde_json::Value::as_str) == Some(from))
            .and_then(|mut m| {
                m.insert("agent".into(), serde_json::Value::String(to.into()));
                serde_json::to_vec(&m).ok()
            });
        match rewritten {
            Some(line) => {
                changed = true;
                out.extend_from_slice(&line);
            }
            None => out.extend_from_slice(raw),
        }
        if !last {
            out.push(b'\n');
        }
    }
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torn_last_line_is_skipped_and_reported_sess1() {
        let bytes = b"{\"role\":\"user\",\"content\":\"hi\"}\n{\"role\":\"assis";
        let p = parse(bytes);
        assert_eq!(p.messages.len(), 1);
        assert_eq!(
            p.issues,
            vec![LineIssue {
                line: 2,
                kind: LineIssueKind::TornTail
            }]
        );
    }

    #[test]
    fn complete_last_line_without_newline_is_kept() {
        let p = parse(b"{\"role\":\"user\",\"content\":\"hi\"}");
        assert_eq!(p.messages.len(), 1);
        assert!(p.issues.is_empty());
    }

    #[test]
    fn blank_and_whitespace_files_have_no_content_mig5() {
        for bytes in [&b""[..], b"\n\n", b"  \n\t\n"] {
            let p = parse(bytes);
            assert!(!p.non_blank && p.messages.is_empty() && p.issues.is_empty());
        }
        let p = parse(b"garbage\n\xff\xfe\n");
        assert!(p.non_blank && p.messages.is_empty());
        assert_eq!(p.issues.len(), 2);
    }

    #[test]
    fn timestamps_and_agents_are_kept_and_bad_ones_dropped_alone() {
        let p = parse(
            b"{\"role\":\"user\",\"content\":\"a\",\"created_at\":\"2025-01-02T03:04:05Z\",\"agent\":\"main\"}\n\
              {\"role\":\"user\",\"content\":\"b\",\"created_at\":\"soon\",\"agent\":\"Bad Alias\"}\n",
        );
        assert_eq!(p.messages.len(), 2);
        assert_eq!(
            p.messages[0].agent.as_ref().map(|a| a.as_str()),
            Some("main")
        );
        assert!(p.messages[0].created_at.is_some());
        assert_eq!(p.messages[1].agent, None);
        assert_eq!(p.messages[1].created_at, None);
        assert_eq!(p.issues.len(), 2);
    }

    #[test]
    fn encode_round_trips() {
        let at = timefmt::parse("2025-01-02T03:04:05Z").unwrap();
        let line = encode(Role::Assistant, "a \"quoted\"\nline", None, at);
        let p = parse(line.as_bytes());
        assert_eq!(
            p.messages,
            vec![NewMessage::new(Role::Assistant, "a \"quoted\"\nline").at(at)]
        );
    }
}
