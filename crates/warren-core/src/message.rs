//! Conversation vocabulary shared by providers, the turn loop and the session store (LOOP-1):
//! [`ChatMessage`], [`ToolCall`], [`ToolDefinition`] and [`Usage`]. No I/O.
//!
//! A message is what a provider sees: a role, text, the tool calls an assistant message made,
//! and for a `tool` message the id of the call it answers. Tool arguments are a JSON object
//! (providers that send them as a JSON string are decoded at the wire).

use serde::{Deserialize, Serialize};

use crate::Role;

/// One tool call requested by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's call id (or one Warren made up for calls recovered from text).
    pub id: String,
    pub name: String,
    /// The arguments object.
    pub arguments: serde_json::Value,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    #[serde(default)]
    pub content: String,
    /// Calls an assistant message made, in the model's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For `Role::Tool`: the call this result answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For `Role::Tool`: the tool's name (providers without call ids need it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Images attached to a user message (a photo sent to a channel, issue 38 §5): providers
    /// whose wire takes image parts send them beside the text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
}

/// One image given to the model: its media type (`image/jpeg`, `image/png`, ...) and its bytes
/// in standard base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    pub media_type: String,
    pub base64: String,
}

impl Image {
    /// An image of `media_type` with `bytes` (base64-encoded here, padded).
    pub fn from_bytes(media_type: impl Into<String>, bytes: &[u8]) -> Self {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
        for chunk in bytes.chunks(3) {
            let b = [
                chunk[0],
                chunk.get(1).copied().unwrap_or(0),
                chunk.get(2).copied().unwrap_or(0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
                } else {
                    out.push('=');
                }
            }
        }
        Self {
            media_type: media_type.into(),
            base64: out,
        }
    }

    /// A `data:` URL of the image (the OpenAI wire's `image_url`).
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.media_type, self.base64)
    }
}

impl ChatMessage {
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            images: Vec::new(),
        }
    }

    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }

    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, content)
    }

    /// An assistant message that made `calls`.
    pub fn assistant_calls(content: impl Into<String>, calls: Vec<ToolCall>) -> Self {
        Self {
            tool_calls: calls,
            ..Self::new(Role::Assistant, content)
        }
    }

    /// The result of `call`.
    pub fn tool_result(call: &ToolCall, content: impl Into<String>) -> Self {
        Self {
            tool_call_id: Some(call.id.clone()),
            name: Some(call.name.clone()),
            ..Self::new(Role::Tool, content)
        }
    }
}

/// What a provider is told about a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// Tokens a provider request consumed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl Usage {
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
    }

    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_through_json() {
        let call = ToolCall {
            id: "c1".into(),
            name: "file_read".into(),
            arguments: serde_json::json!({"path": "a.md"}),
        };
        let msgs = vec![
            ChatMessage::user("hi"),
            ChatMessage::assistant_calls("", vec![call.clone()]),
            ChatMessage::tool_result(&call, "text"),
        ];
        let text = serde_json::to_string(&msgs).unwrap_or_default();
        let back: Vec<ChatMessage> = serde_json::from_str(&text).unwrap_or_default();
        assert_eq!(back, msgs);
    }
}

#[cfg(test)]
mod image_tests {
    use super::Image;

    #[test]
    fn images_are_padded_base64_issue38() {
        for (bytes, b64) in [
            (&b""[..], ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
        ] {
            assert_eq!(Image::from_bytes("image/png", bytes).base64, b64);
        }
        assert_eq!(
            Image::from_bytes("image/png", b"fo").data_url(),
            "data:image/png;base64,Zm8="
        );
    }
}
