//! How a turn's messages are kept in the session backend (SESS-1 stores role + text): plain
//! messages as their text; an assistant message with tool calls and every tool result as a
//! JSON envelope `{"warren_exchange": 1, "message": <ChatMessage>}`, so the tool-exchange
//! history survives a restart exactly.
//!
//! Loading repairs what an interrupted process could leave: an assistant tool-call message
//! whose results are missing gets "interrupted" results, and a tool result with no call
//! before it is dropped, so a provider never sees an inconsistent exchange.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use warren_core::{ChatMessage, Role};
use warren_store::sessions::StoredMessage;

/// The result text of a call that never finished.
pub const INTERRUPTED: &str = "Error: interrupted before a result (the turn was cancelled)";

#[derive(Deserialize)]
struct Envelope {
    warren_exchange: u8,
    message: ChatMessage,
}

/// [`Envelope`] as written: borrows the message instead of copying it.
#[derive(Serialize)]
struct EnvelopeRef<'a> {
    warren_exchange: u8,
    message: &'a ChatMessage,
}

/// The text stored for `message`.
pub fn encode(message: &ChatMessage) -> String {
    if message.tool_calls.is_empty() && message.role != Role::Tool {
        return message.content.clone();
    }
    serde_json::to_string(&EnvelopeRef {
        warren_exchange: 1,
        message,
    })
    .unwrap_or_else(|_| message.content.clone())
}

/// The message stored as `stored`.
pub fn decode(stored: &StoredMessage) -> ChatMessage {
    if matches!(stored.role, Role::Assistant | Role::Tool)
        && stored.content.starts_with("{\"warren_exchange\"")
        && let Ok(env) = serde_json::from_str::<Envelope>(&stored.content)
        && env.warren_exchange == 1
        && env.message.role == stored.role
    {
        return env.message;
    }
    ChatMessage::new(stored.role, stored.content.clone())
}

/// Loaded history made consistent (see the module docs). System messages are dropped: the
/// system prompt is rebuilt every turn.
pub fn repair(messages: Vec<ChatMessage>) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len());
    let mut open: Vec<warren_core::ToolCall> = Vec::new();
    let mut answered: HashSet<String> = HashSet::new();
    let close = |out: &mut Vec<ChatMessage>,
                 open: &mut Vec<warren_core::ToolCall>,
                 answered: &HashSet<String>| {
        for call in open.drain(..) {
            if !answered.contains(&call.id) {
                out.push(ChatMessage::tool_result(&call, INTERRUPTED));
            }
        }
    };
    for m in messages {
        match m.role {
            Role::System => {}
            Role::Tool => {
                let id = m.tool_call_id.clone().unwrap_or_default();
                if open.iter().any(|c| c.id == id) && answered.insert(id) {
                    out.push(m);
                }
            }
            _ => {
                close(&mut out, &mut open, &answered);
                answered.clear();
                if !m.tool_calls.is_empty() {
                    open = m.tool_calls.clone();
                }
                out.push(m);
            }
        }
    }
    close(&mut out, &mut open, &answered);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use warren_core::ToolCall;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "file_read".into(),
            arguments: json!({}),
        }
    }

    #[test]
    fn a_torn_round_gets_interrupted_results_and_orphans_are_dropped() {
        let msgs = vec![
            ChatMessage::user("u"),
            ChatMessage::tool_result(&call("orphan"), "x"),
            ChatMessage::assistant_calls("", vec![call("a"), call("b")]),
            ChatMessage::tool_result(&call("a"), "ra"),
        ];
        let fixed = repair(msgs);
        assert_eq!(
            fixed,
            vec![
                ChatMessage::user("u"),
                ChatMessage::assistant_calls("", vec![call("a"), call("b")]),
                ChatMessage::tool_result(&call("a"), "ra"),
                ChatMessage::tool_result(&call("b"), INTERRUPTED),
            ]
        );
    }
}
