//! What the HTTP providers share: mapping `ureq` failures to [`ProviderError`] (timeouts are
//! retryable; the key is redacted from anything quoted), error-body messages and JSON-string
//! tool arguments.

use std::time::Duration;

use serde_json::{Value, json};

use crate::error::{ProviderError, redact};

/// The identity of one HTTP provider in its errors.
#[derive(Clone)]
pub(crate) struct Wire {
    pub name: String,
    pub timeout: Duration,
    pub api_key: Option<String>,
    pub agent: ureq::Agent,
    /// An agent that keeps no idle connection: for asking again after a stream the server
    /// broke off (llama-cpp-python's server resets the pooled connection then). Built on the
    /// first such retry: most providers never need it.
    fresh: std::sync::OnceLock<ureq::Agent>,
}

impl Wire {
    pub(crate) fn new(name: String, timeout: Duration, api_key: Option<String>) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .build()
            .into();
        Self {
            name,
            timeout,
            api_key,
            agent,
            fresh: std::sync::OnceLock::new(),
        }
    }

    pub(crate) fn redact(&self, text: &str) -> String {
        redact(text, self.api_key.as_deref())
    }

    pub(crate) fn protocol(&self, e: impl std::fmt::Display) -> ProviderError {
        ProviderError::Protocol {
            provider: self.name.clone(),
            message: self.redact(&e.to_string()),
        }
    }

    fn timeout_error(&self, url: &str) -> ProviderError {
        ProviderError::Timeout {
            provider: self.name.clone(),
            url: url.to_string(),
            after: self.timeout,
        }
    }

    pub(crate) fn io_error(&self, url: &str, e: std::io::Error) -> ProviderError {
        if e.kind() == std::io::ErrorKind::TimedOut {
            return self.timeout_error(url);
        }
        // ureq wraps its own errors (including timeouts) in io::Error while streaming.
        if let Some(inner) = e.get_ref().and_then(|i| i.downcast_ref::<ureq::Error>())
            && matches!(inner, ureq::Error::Timeout(_))
        {
            return self.timeout_error(url);
        }
        ProviderError::Transport {
            provider: self.name.clone(),
            url: url.to_string(),
            message: self.redact(&e.to_string()),
        }
    }

    /// POSTs a JSON `body` asking for a stream, with the provider's own `headers`. A non-2xx
    /// answer becomes the status error (its body and `Retry-After` quoted, the key redacted);
    /// otherwise returns the body and whether the server really answered with SSE.
    pub(crate) fn post_stream(
        &self,
        url: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Result<(ureq::Body, bool), ProviderError> {
        self.post_on(&self.agent, url, headers, body)
    }

    /// [`Wire::post_stream`] on a new connection.
    pub(crate) fn post_fresh(
        &self,
        url: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Result<(ureq::Body, bool), ProviderError> {
        let fresh = self.fresh.get_or_init(|| {
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(self.timeout))
                .max_idle_connections(0)
                .build()
                .into()
        });
        self.post_on(fresh, url, headers, body)
    }

    fn post_on(
        &self,
        agent: &ureq::Agent,
        url: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Result<(ureq::Body, bool), ProviderError> {
        let mut req = agent
            .post(url)
            .header("Content-Type", "application/json")
            .header("Accept", "text/event-stream");
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let response = req
            .send(body.as_bytes())
            .map_err(|e| self.transport(url, e))?;
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let retry_after = header("retry-after");
        let is_sse = header("content-type").is_some_and(|v| v.starts_with("text/event-stream"));
        let mut body = response.into_body();
        if !(200..300).contains(&status) {
            let text = body
                .with_config()
                .limit(64 * 1024)
                .read_to_string()
                .unwrap_or_default();
            return Err(self.status_after(status, &text, retry_after.as_deref()));
        }
        Ok((body, is_sse))
    }

    pub(crate) fn transport(&self, url: &str, e: ureq::Error) -> ProviderError {
        match e {
            ureq::Error::Timeout(_) => self.timeout_error(url),
            ureq::Error::Io(io) => self.io_error(url, io),
            other => ProviderError::Transport {
                provider: self.name.clone(),
                url: url.to_string(),
                message: self.redact(&other.to_string()),
            },
        }
    }

    /// The error for a non-2xx answer with body `text`.
    pub(crate) fn status(&self, status: u16, text: &str) -> ProviderError {
        self.status_after(status, text, None)
    }

    /// [`Wire::status`] with the response's `Retry-After` header value (seconds form).
    pub(crate) fn status_after(
        &self,
        status: u16,
        text: &str,
        retry_after: Option<&str>,
    ) -> ProviderError {
        ProviderError::Status {
            provider: self.name.clone(),
            status,
            message: self.redact(&error_message(text)),
            retry_after: retry_after
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs),
        }
    }
}

/// The error text of an error body (`{"error": {"message": ...}}`), else the body itself.
pub(crate) fn error_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let msg = parsed
        .as_ref()
        .and_then(|v| v["error"]["message"].as_str().or(v["error"].as_str()))
        .map(str::to_string)
        .unwrap_or_else(|| body.trim().to_string());
    let mut msg: String = msg.chars().take(500).collect();
    if msg.is_empty() {
        msg = "(empty body)".into();
    }
    msg
}

/// Decodes a JSON-string arguments field; empty = `{}`.
pub(crate) fn parse_arguments(text: &str) -> Result<Value, crate::error::ToolCallError> {
    if text.trim().is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_str(text).map_err(|cause| crate::error::ToolCallError::Arguments {
        text: text.to_string(),
        cause,
    })
}
