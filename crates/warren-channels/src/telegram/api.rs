//! The Telegram Bot API over `ureq` (blocking; callers run it on a blocking thread): one
//! method call is a JSON POST to `{api_base}/bot{token}/{method}`, answered
//! `{"ok": true, "result": ...}` or `{"ok": false, "error_code", "description",
//! "parameters": {"retry_after"}}`. Errors name the channel and the method, never the URL
//! (it carries the token), and any text that echoes the token is scrubbed.

use std::time::Duration;

use serde_json::{Value, json};

/// Why a Bot API call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// The server answered `ok: false` (or a non-2xx status) with this code and description.
    #[error("{channel}: {method}: {code} {description}")]
    Api {
        channel: String,
        method: &'static str,
        code: u16,
        description: String,
        /// `parameters.retry_after` (seconds), on a 429.
        retry_after: Option<u64>,
    },
    /// No answer: connect or read failed, timed out, or the body was not the API's JSON.
    #[error("{channel}: {method}: {cause}")]
    Transport {
        channel: String,
        method: &'static str,
        cause: String,
    },
}

impl ApiError {
    /// The API's error code, if it answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            ApiError::Api { code, .. } => Some(*code),
            ApiError::Transport { .. } => None,
        }
    }

    /// Seconds the platform asked us to wait (a 429's `retry_after`).
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::Api { retry_after, .. } => *retry_after,
            ApiError::Transport { .. } => None,
        }
    }

    /// The server rejected the message's formatting (`can't parse entities`).
    pub fn bad_markup(&self) -> bool {
        matches!(self, ApiError::Api { code: 400, description, .. }
            if description.to_ascii_lowercase().contains("can't parse entities"))
    }

    /// Worth another attempt later: a transport failure, a 429 or a server error (a 4xx other
    /// than 429 will fail the same way again).
    pub fn transient(&self) -> bool {
        match self {
            ApiError::Transport { .. } => true,
            ApiError::Api { code, .. } => *code == 429 || *code >= 500,
        }
    }
}

/// One bot's client.
#[derive(Clone)]
pub struct Api {
    channel: String,
    base: String,
    token: String,
    agent: ureq::Agent,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("channel", &self.channel)
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl Api {
    /// A client of `channel` (for error messages) at `base` with `token`; each request gives
    /// up after `timeout` (a long poll's own timeout plus slack: a silently dead connection
    /// ends as an error, never as a hang).
    pub fn new(channel: &str, base: &str, token: &str, timeout: Duration) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .build()
            .into();
        Self {
            channel: channel.to_string(),
            base: base.trim_end_matches('/').to_string(),
            token: token.to_string(),
            agent,
        }
    }

    /// The same bot on a new connection pool (after a 409 the old keep-alive connection is
    /// never reused).
    pub fn fresh(&self, timeout: Duration) -> Self {
        Self::new(&self.channel, &self.base, &self.token, timeout)
    }

    fn scrub(&self, text: &str) -> String {
        if self.token.is_empty() {
            text.to_string()
        } else {
            text.replace(&self.token, "[redacted]")
        }
    }

    /// Calls `method` with `body`; the `result` on success.
    pub fn call(&self, method: &'static str, body: &Value) -> Result<Value, ApiError> {
        let url = format!("{}/bot{}/{method}", self.base, self.token);
        let transport = |cause: String| ApiError::Transport {
            channel: self.channel.clone(),
            method,
            cause: self.scrub(&cause),
        };
        let response = self
            .agent
            .post(&url)
            .header("Content-Type", "application/json")
            .send(body.to_string().as_bytes())
            .map_err(|e| transport(e.to_string()))?;
        let status = response.status().as_u16();
        let text = response
            .into_body()
            .read_to_string()
            .map_err(|e| transport(e.to_string()))?;
        let value: Value = serde_json::from_str(&text)
            .map_err(|_| transport(format!("HTTP {status}: not a Bot API answer")))?;
        if value["ok"].as_bool() == Some(true) && (200..300).contains(&status) {
            return Ok(value["result"].clone());
        }
        Err(ApiError::Api {
            channel: self.channel.clone(),
            method,
            code: value["error_code"]
                .as_u64()
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(status),
            description: self.scrub(value["description"].as_str().unwrap_or("no description")),
            retry_after: value["parameters"]["retry_after"].as_u64(),
        })
    }

    /// `getMe`: the bot's id and user name.
    pub fn get_me(&self) -> Result<(i64, String), ApiError> {
        let me = self.call("getMe", &json!({}))?;
        Ok((
            me["id"].as_i64().unwrap_or_default(),
            me["username"].as_str().unwrap_or_default().to_string(),
        ))
    }

    /// `getUpdates` from `offset` (confirming every update below it), waiting up to
    /// `timeout_secs` for news.
    pub fn get_updates(
        &self,
        offset: Option<i64>,
        timeout_secs: u64,
    ) -> Result<Vec<Value>, ApiError> {
        let mut body = json!({
            "timeout": timeout_secs,
            "allowed_updates": ["message", "callback_query"],
        });
        if let Some(offset) = offset {
            body["offset"] = offset.into();
        }
        match self.call("getUpdates", &body)? {
            Value::Array(updates) => Ok(updates),
            _ => Ok(Vec::new()),
        }
    }

    /// `sendMessage`; the new message's id.
    pub fn send_message(
        &self,
        chat_id: &str,
        thread_id: Option<&str>,
        text: &str,
        markdown: bool,
        markup: Option<&str>,
    ) -> Result<String, ApiError> {
        let mut body = json!({"chat_id": chat_id, "text": text});
        if markdown {
            body["parse_mode"] = "Markdown".into();
        }
        if let Some(thread) = thread_id.and_then(|t| t.parse::<i64>().ok()) {
            body["message_thread_id"] = thread.into();
        }
        if let Some(markup) = markup.and_then(|m| serde_json::from_str::<Value>(m).ok()) {
            body["reply_markup"] = markup;
        }
        let sent = self.call("sendMessage", &body)?;
        Ok(sent["message_id"].as_i64().unwrap_or_default().to_string())
    }

    /// `sendChatAction typing` (a draft indicator, never a reply).
    pub fn typing(&self, chat_id: &str, thread_id: Option<&str>) -> Result<(), ApiError> {
        let mut body = json!({"chat_id": chat_id, "action": "typing"});
        if let Some(thread) = thread_id.and_then(|t| t.parse::<i64>().ok()) {
            body["message_thread_id"] = thread.into();
        }
        self.call("sendChatAction", &body).map(drop)
    }

    /// Downloads `file_path` (as `getFile` gave it) from `{api_base}/file/bot{token}/`;
    /// `None` when it is over `limit` bytes (issue 38 §5: reading stops at the limit).
    pub fn download(&self, file_path: &str, limit: u64) -> Result<Option<Vec<u8>>, ApiError> {
        let method = "getFile download";
        let transport = |cause: String| ApiError::Transport {
            channel: self.channel.clone(),
            method,
            cause: self.scrub(&cause),
        };
        let url = format!("{}/file/bot{}/{file_path}", self.base, self.token);
        let response = self
            .agent
            .get(&url)
            .call()
            .map_err(|e| transport(e.to_string()))?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(ApiError::Api {
                channel: self.channel.clone(),
                method,
                code: status,
                description: "the file could not be downloaded".into(),
                retry_after: None,
            });
        }
        match response
            .into_body()
            .with_config()
            .limit(limit.saturating_add(1))
            .read_to_vec()
        {
            Ok(bytes) if bytes.len() as u64 > limit => Ok(None),
            Ok(bytes) => Ok(Some(bytes)),
            Err(ureq::Error::BodyExceedsLimit(_)) => Ok(None),
            Err(e) => Err(transport(e.to_string())),
        }
    }

    /// `answerCallbackQuery` with a short toast.
    pub fn answer_callback(&self, id: &str, text: &str) -> Result<(), ApiError> {
        self.call(
            "answerCallbackQuery",
            &json!({"callback_query_id": id, "text": text}),
        )
        .map(drop)
    }
}
