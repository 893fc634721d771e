//! The client's `messages` as a conversation, checked against the session's stored one so a
//! client resending the whole conversation does not duplicate it (issue 27 §2).

use serde::Deserialize;
use serde_json::Value;
use warren_core::Role;

use super::{MAX_INPUT, OpenAiError};

#[derive(Deserialize)]
pub(super) struct InMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<Value>,
    #[serde(default)]
    pub tool_calls: Option<Vec<Value>>,
}

/// One visible message of a conversation: what a chat client shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Visible {
    pub role: Role,
    pub text: String,
}

/// Why a client's earlier messages do not match the stored conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// Index into the client's `messages` (system/developer messages counted).
    pub index: usize,
    pub reason: String,
}

/// Checks the client's earlier messages `client` (each with its index in `messages`) against
/// the session's stored conversation `stored`: they must equal its newest messages, so a
/// client may resend the whole conversation, only its newest message (Warren keeps the
/// history), or start a new conversation in a session that already holds one (it goes on
/// after it). A failed turn's unanswered user message at the end of `stored` is not counted
/// (the client retries it). An assistant message matches a stored reply when equal or ending
/// with it (a streaming client also shows tool-round text and approval notices before it).
pub fn check_history(client: &[(usize, Visible)], stored: &[Visible]) -> Result<(), Divergence> {
    let answered = stored
        .iter()
        .rposition(|m| m.role == Role::Assistant)
        .map_or(0, |i| i + 1);
    let stored = stored.get(..answered).unwrap_or_default();
    let Some(offset) = stored.len().checked_sub(client.len()) else {
        return Err(Divergence {
            index: client.first().map_or(0, |(i, _)| *i),
            reason: format!(
                "the client sent {} earlier messages but the session holds {} (a conversation Warren did not hold)",
                client.len(),
                stored.len()
            ),
        });
    };
    for (n, (index, message)) in client.iter().enumerate() {
        let kept = &stored[offset + n];
        let (a, b) = (message.text.trim(), kept.text.trim());
        let same = message.role == kept.role
            && (a == b || (message.role == Role::Assistant && !b.is_empty() && a.ends_with(b)));
        if !same {
            return Err(Divergence {
                index: *index,
                reason: format!(
                    "the client's {} message differs from the session's {} message {} (of {})",
                    role_name(message.role),
                    role_name(kept.role),
                    offset + n,
                    stored.len()
                ),
            });
        }
    }
    Ok(())
}

/// The stored reply when a request repeats the session's last answered exchange: `stored` ends
/// with the user message `input` and its reply, and the client's earlier messages line up with
/// what came before them ([`check_history`]). Used for retries ([`super::retry`]).
pub fn repeated_reply<'a>(
    client: &[(usize, Visible)],
    input: &str,
    stored: &'a [Visible],
) -> Option<&'a str> {
    let [before @ .., user, reply] = stored else {
        return None;
    };
    let repeats = user.role == Role::User
        && reply.role == Role::Assistant
        && user.text.trim() == input.trim();
    (repeats && check_history(client, before).is_ok()).then_some(reply.text.as_str())
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

/// A message's text: a string, or an array of `{"type": "text", "text"}` parts.
fn text_of(field: &str, index: usize, content: Option<&Value>) -> Result<String, OpenAiError> {
    let param = format!("{field}[{index}].content");
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for part in parts {
                match (part["type"].as_str(), part["text"].as_str()) {
                    (Some("text" | "input_text" | "output_text"), Some(t)) => texts.push(t),
                    _ => {
                        return Err(OpenAiError::bad(
                            param,
                            "unsupported_content",
                            "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported",
                        ));
                    }
                }
            }
            Ok(texts.join("\n"))
        }
        Some(_) => Err(OpenAiError::bad(
            param,
            "invalid_content",
            "content must be a string or an array of text parts",
        )),
    }
}

/// The conversation of a request: user and assistant messages with their indexes (system and
/// developer messages are skipped: the agent's system prompt is Warren's), the last of which
/// must be a user message (the turn's input).
pub(super) fn conversation(
    field: &str,
    messages: &[InMessage],
) -> Result<(Vec<(usize, Visible)>, String), OpenAiError> {
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let role = match m.role.as_str() {
            "system" | "developer" => continue,
            "user" => Role::User,
            "assistant" if m.tool_calls.as_ref().is_none_or(Vec::is_empty) => Role::Assistant,
            "assistant" | "tool" | "function" => {
                return Err(OpenAiError::bad(
                    format!("{field}[{i}]"),
                    "client_tools_unsupported",
                    "client-side tool calls are not supported: the agent's tools are Warren's and run inside Warren",
                ));
            }
            other => {
                return Err(OpenAiError::bad(
                    format!("{field}[{i}].role"),
                    "invalid_role",
                    format!(
                        "unknown role '{other}' (expected system, developer, user or assistant)"
                    ),
                ));
            }
        };
        let text = text_of(field, i, m.content.as_ref())?;
        out.push((i, Visible { role, text }));
    }
    match out.pop() {
        Some((i, last)) if last.role == Role::User => {
            if last.text.trim().is_empty() || last.text.len() > MAX_INPUT {
                return Err(OpenAiError::bad(
                    format!("{field}[{i}].content"),
                    "invalid_input",
                    format!(
                        "the last user message must be non-empty and at most {MAX_INPUT} bytes"
                    ),
                ));
            }
            Ok((out, last.text))
        }
        _ => Err(OpenAiError::bad(
            field,
            "last_message_not_user",
            "the last message must be a user message (the turn's input)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use serde_json::json;

    use super::*;

    fn v(role: Role, text: &str) -> Visible {
        Visible {
            role,
            text: text.into(),
        }
    }

    fn indexed(messages: &[Visible]) -> Vec<(usize, Visible)> {
        messages.iter().cloned().enumerate().collect()
    }

    #[test]
    fn resent_history_matches_and_divergence_names_the_index() {
        let stored = vec![
            v(Role::User, "one"),
            v(Role::Assistant, "First."),
            v(Role::User, "two"),
            v(Role::Assistant, "Second."),
        ];
        // Only the new message, or the whole conversation as answered.
        assert_eq!(check_history(&[], &stored), Ok(()));
        assert_eq!(check_history(&indexed(&stored), &stored), Ok(()));
        // A streaming client that also showed a tool round's text before the reply.
        let mut streamed = stored.clone();
        streamed[1].text = "Let me look.First.".into();
        assert_eq!(check_history(&indexed(&streamed), &stored), Ok(()));
        // An edited earlier message.
        let mut edited = stored.clone();
        edited[2].text = "TWO".into();
        assert_eq!(
            check_history(&indexed(&edited), &stored).map_err(|d| d.index),
            Err(2)
        );
        // A new conversation in the same session goes on after the stored one.
        assert_eq!(check_history(&indexed(&stored[2..]), &stored), Ok(()));
        // A regenerated last answer (the client dropped it) does not line up.
        assert_eq!(
            check_history(&indexed(&stored[..3]), &stored).map_err(|d| d.index),
            Err(0)
        );
        // A conversation Warren never held.
        assert_eq!(
            check_history(&indexed(&stored), &stored[..2]).map_err(|d| d.index),
            Err(0)
        );
        // A failed turn's unanswered user message is retried, not counted.
        let mut failed = stored.clone();
        failed.push(v(Role::User, "three"));
        assert_eq!(check_history(&indexed(&stored), &failed), Ok(()));
    }

    #[test]
    fn a_repeat_of_the_last_exchange_finds_its_stored_reply() {
        let stored = vec![
            v(Role::User, "one"),
            v(Role::Assistant, "First."),
            v(Role::User, "two"),
            v(Role::Assistant, "Second."),
        ];
        // The whole conversation up to "two", or only "two": the reply to "two".
        assert_eq!(
            repeated_reply(&indexed(&stored[..2]), "two", &stored),
            Some("Second.")
        );
        assert_eq!(repeated_reply(&[], "two", &stored), Some("Second."));
        // Another input, or earlier messages that do not line up: not a repeat.
        assert_eq!(
            repeated_reply(&indexed(&stored[..2]), "three", &stored),
            None
        );
        assert_eq!(repeated_reply(&indexed(&stored), "two", &stored), None);
        // The last exchange is unanswered (a turn that runs or failed): nothing to repeat.
        assert_eq!(repeated_reply(&[], "two", &stored[..3]), None);
    }

    #[test]
    fn system_messages_are_skipped_and_the_last_must_be_user() {
        let m = |role: &str, content: Value| InMessage {
            role: role.into(),
            content: Some(content),
            tool_calls: None,
        };
        let (earlier, input) = conversation(
            "messages",
            &[
                m("system", json!("be brief")),
                m("user", json!([{"type": "text", "text": "hi"}])),
                m("assistant", json!("hello")),
                m("user", json!("again")),
            ],
        )
        .unwrap();
        assert_eq!(input, "again");
        assert_eq!(
            earlier,
            vec![(1, v(Role::User, "hi")), (2, v(Role::Assistant, "hello"))]
        );
        let err = conversation(
            "messages",
            &[m("user", json!("a")), m("assistant", json!("b"))],
        )
        .unwrap_err();
        assert_eq!(err.code, "last_message_not_user");
        let err =
            conversation("messages", &[m("tool", json!("r")), m("user", json!("a"))]).unwrap_err();
        assert_eq!(
            (err.status, err.code),
            (StatusCode::BAD_REQUEST, "client_tools_unsupported")
        );
    }
}
