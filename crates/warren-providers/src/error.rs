//! Provider errors: each names the provider and, for HTTP failures, the status. The API key
//! never appears: bodies quoted from a server are redacted before they reach an error.

use std::path::PathBuf;
use std::time::Duration;

/// Why a provider call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProviderError {
    #[error("provider '{provider}' answered HTTP {status}: {message}")]
    Status {
        provider: String,
        status: u16,
        message: String,
        /// The server's `Retry-After`, when it sent one (in seconds).
        retry_after: Option<Duration>,
    },
    #[error("provider '{provider}' timed out after {after:?} ({url})")]
    Timeout {
        provider: String,
        url: String,
        after: Duration,
    },
    #[error("provider '{provider}' could not be reached at {url}: {message}")]
    Transport {
        provider: String,
        url: String,
        message: String,
    },
    #[error("provider '{provider}' sent a response Warren cannot read: {message}")]
    Protocol { provider: String, message: String },
    #[error(
        "provider '{provider}' has no API key (run `warren config set providers.{provider}.api_key --secret`, or set api_key_env){detail}"
    )]
    MissingKey { provider: String, detail: String },
    #[error("provider '{provider}' is misconfigured: {message}")]
    Config { provider: String, message: String },
    #[error("provider '{provider}': script {}: {message}", path.display())]
    Script {
        provider: String,
        path: PathBuf,
        message: String,
    },
    /// No text and no tool call (issue 16 §3): never a silent success.
    #[error(
        "provider '{provider}' returned an empty answer (no text and no tool call){detail}; if it is a local server, check that its chat format supports tools, or set providers.{provider}.stream = false"
    )]
    EmptyAnswer { provider: String, detail: String },
    #[error("provider '{provider}' is not configured (see [providers] in config.toml)")]
    Unknown { provider: String },
    #[error("the provider call was cancelled")]
    Cancelled,
    #[error("every provider of the route failed: {}", join(.attempts))]
    AllFailed { attempts: Vec<ProviderError> },
}

/// A model's tool call that does not decode (the provider turns it into
/// [`ProviderError::Protocol`], naming itself).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ToolCallError {
    #[error("tool_use block {index} has no name")]
    UnnamedBlock { index: u64 },
    #[error("tool call #{index} has no function name")]
    UnnamedCall { index: u64 },
    #[error("tool call arguments are not JSON ({cause}): {text}")]
    Arguments {
        text: String,
        cause: serde_json::Error,
    },
}

fn join(errors: &[ProviderError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl ProviderError {
    /// Worth retrying on the same provider: HTTP 429, 5xx, timeouts.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProviderError::Status { status, .. } => *status == 429 || *status >= 500,
            ProviderError::Timeout { .. } => true,
            _ => false,
        }
    }

    /// How long the server asked to wait before retrying.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The provider that gave an empty answer, if this is (or a route failed with) one.
    pub fn empty_answer_from(&self) -> Option<&str> {
        match self {
            ProviderError::EmptyAnswer { provider, .. } => Some(provider),
            ProviderError::AllFailed { attempts } => {
                attempts.iter().find_map(ProviderError::empty_answer_from)
            }
            _ => None,
        }
    }

    /// The HTTP status, if the provider answered with one.
    pub fn status(&self) -> Option<u16> {
        match self {
            ProviderError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// `text` without `secret` or any 8+ character run of it (the key without its `sk-` prefix,
/// its tail, an echoed prefix): the one redactor of `warren_config` (CFG-6).
pub(crate) fn redact(text: &str, secret: Option<&str>) -> String {
    match secret {
        Some(secret) => warren_config::Redactor::new([secret])
            .redact(text)
            .into_owned(),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_removes_key_and_echoed_prefix() {
        let key = "sk-test-0123456789abcdef";
        let text = format!("bad key {key}; provided: sk-test-0...cdef");
        let out = redact(&text, Some(key));
        assert!(!out.contains(key));
        assert!(!out.contains("sk-test-0"), "{out}");
        // Derived forms a server may echo: no prefix, the last 12 characters.
        let text = format!("got {} / {}", &key[3..], &key[key.len() - 12..]);
        assert_eq!(redact(&text, Some(key)), "got [redacted] / [redacted]");
    }
}
