//! The `script` provider: replays a scripted conversation from a JSON file, for offline runs,
//! demos and tests. No network, deterministic, and stateless across processes, so a script
//! can span several `warren agent` runs of one persisted session.
//!
//! File format:
//! ```json
//! { "turns": [
//!     [ { "text": "Let me look.", "tool_calls": [{"name": "file_read", "arguments": {"path": "a.md"}}],
//!         "usage": {"input_tokens": 120, "output_tokens": 30} },
//!       { "text": "It says hello." } ],
//!     [ { "text": "Second user turn." } ] ],
//!   "final": "Summary used when a request carries no tools and the step has calls." }
//! ```
//! Which response answers a request: turn = number of user messages in the request − 1
//! (clamped to the last turn), step = number of assistant messages after the last user
//! message (clamped to the turn's last step, so a looping step repeats). A request without
//! tools (the loop's final summary call) gets the step's text with its calls dropped, or
//! `final` when the step has no text.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use warren_core::{Role, ToolCall, Usage};

use crate::{
    BoxFuture, Capabilities, ChatRequest, ChatResponse, EventSink, Provider, ProviderError,
    StreamEvent,
};

/// One scripted tool call (`id` is made up when absent).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    #[serde(default)]
    pub id: Option<String>,
    pub name: String,
    #[serde(default = "empty_object")]
    pub arguments: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::json!({})
}

/// One scripted provider response.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScriptResponse {
    pub text: String,
    pub tool_calls: Vec<ScriptedCall>,
    pub usage: Option<Usage>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ScriptFile {
    turns: Vec<Vec<ScriptResponse>>,
    #[serde(rename = "final")]
    final_text: Option<String>,
    /// Declared capabilities (default: everything supported).
    single_tool_control: Option<bool>,
}

/// A provider replaying a script.
#[derive(Debug, Clone)]
pub struct ScriptProvider {
    name: String,
    path: PathBuf,
    script: Arc<ScriptFile>,
}

impl ScriptProvider {
    /// Loads and checks the script at `path`.
    pub fn load(name: impl Into<String>, path: &Path) -> Result<Self, ProviderError> {
        let name = name.into();
        let err = |message: String| ProviderError::Script {
            provider: name.clone(),
            path: path.to_path_buf(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
        let script: ScriptFile =
            serde_json::from_str(&text).map_err(|e| err(format!("invalid script: {e}")))?;
        if script.turns.is_empty() || script.turns.iter().any(Vec::is_empty) {
            return Err(err(
                "every script needs at least one turn with one response".into(),
            ));
        }
        Ok(Self {
            name,
            path: path.to_path_buf(),
            script: Arc::new(script),
        })
    }

    /// The response the script gives to `request`.
    pub fn respond(&self, request: &ChatRequest) -> ChatResponse {
        let users = request
            .messages
            .iter()
            .filter(|m| m.role == Role::User)
            .count();
        let last_user = request
            .messages
            .iter()
            .rposition(|m| m.role == Role::User)
            .unwrap_or(0);
        let steps = request.messages[last_user..]
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        let t = users.saturating_sub(1).min(self.script.turns.len() - 1);
        let turn = &self.script.turns[t];
        let s = steps.min(turn.len() - 1);
        let step = &turn[s];
        let mut text = step.text.clone();
        let mut tool_calls: Vec<ToolCall> = step
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| ToolCall {
                id: c
                    .id
                    .clone()
                    .unwrap_or_else(|| format!("script_{t}_{steps}_{i}")),
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            })
            .collect();
        if request.tools.is_empty() && !tool_calls.is_empty() {
            tool_calls.clear();
            if text.is_empty() {
                text = self
                    .script
                    .final_text
                    .clone()
                    .unwrap_or_else(|| "(the script has no summary)".into());
            }
        }
        let usage = step.usage.unwrap_or(Usage {
            input_tokens: request
                .messages
                .iter()
                .map(|m| m.content.len() as u64 / 4 + 1)
                .sum(),
            output_tokens: text.len() as u64 / 4 + 1,
        });
        ChatResponse {
            text,
            tool_calls,
            usage,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Provider for ScriptProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            native_tools: true,
            single_tool_control: self.script.single_tool_control.unwrap_or(true),
            streaming: true,
        }
    }

    fn chat(
        &self,
        request: Arc<ChatRequest>,
        events: EventSink,
    ) -> BoxFuture<'_, Result<ChatResponse, ProviderError>> {
        Box::pin(async move {
            if request.cancel.is_cancelled() {
                return Err(ProviderError::Cancelled);
            }
            let response = self.respond(&request);
            if !response.text.is_empty() {
                events(StreamEvent::TextDelta(response.text.clone()));
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_core::{ChatMessage, ToolDefinition};

    #[test]
    fn steps_follow_assistant_messages_and_turns_follow_user_messages() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("s.json");
        std::fs::write(
            &path,
            r#"{"turns":[[{"text":"a","tool_calls":[{"name":"t"}]},{"text":"b"}],[{"text":"c"}]]}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let p = ScriptProvider::load("s", &path).unwrap_or_else(|e| panic!("{e}"));
        let tools = Arc::new(vec![ToolDefinition {
            name: "t".into(),
            description: String::new(),
            parameters: serde_json::json!({}),
        }]);
        let mut req = ChatRequest {
            messages: vec![ChatMessage::user("1")],
            tools,
            ..ChatRequest::default()
        };
        let r = p.respond(&req);
        assert_eq!((r.text.as_str(), r.tool_calls.len()), ("a", 1));
        req.messages
            .push(ChatMessage::assistant_calls("a", r.tool_calls.clone()));
        req.messages
            .push(ChatMessage::tool_result(&r.tool_calls[0], "ok"));
        assert_eq!(p.respond(&req).text, "b");
        req.messages.push(ChatMessage::assistant("b"));
        req.messages.push(ChatMessage::user("2"));
        assert_eq!(p.respond(&req).text, "c");
    }
}
