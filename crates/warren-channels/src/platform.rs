//! Why a call to a chat platform failed ([`PlatformError`]): the Bot API method and the
//! platform's answer or the transport's error. The seams below the adapters
//! ([`crate::media::FileSource`], [`crate::approvals::Messenger`]) return it, so those modules
//! name the call that failed without knowing the adapter's own error type.

/// A failed platform call: which method, and why.
#[derive(Debug, thiserror::Error)]
#[error("{method}: {cause}")]
pub struct PlatformError {
    /// The platform's method (`getFile`, `sendMessage`, a file download...).
    pub method: &'static str,
    /// The platform's description or the transport's error.
    pub cause: String,
}

impl PlatformError {
    pub fn new(method: &'static str, cause: impl std::fmt::Display) -> Self {
        Self {
            method,
            cause: cause.to_string(),
        }
    }
}
