//! `MemoryError`: every failure of the memory layer, naming the agent, key, path or URL at fault
//! (MEM-1..9). Never carries a secret: PostgreSQL URLs are shown with their password removed.

use std::path::PathBuf;

/// Everything that can go wrong storing or recalling memory.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The caller's input breaks a limit or rule (empty key, enormous content, bad category...).
    #[error("invalid memory input for agent '{agent}': {message}")]
    InvalidInput { agent: String, message: String },
    /// A recall query the search engine cannot run. Never turned into "no results".
    #[error("invalid recall query {query:?} for agent '{agent}': {message}")]
    InvalidQuery {
        agent: String,
        query: String,
        message: String,
    },
    /// `agents.<alias>` is not in the config.
    #[error("agent '{agent}' is not configured (no [agents.{agent}] table)")]
    UnknownAgent { agent: String },
    /// The factory refuses a grant (e.g. a category grant on Markdown, MEM-4).
    #[error("agent '{agent}': memory grant on '{grant}' refused: {rule}")]
    Grant {
        agent: String,
        grant: String,
        rule: String,
    },
    /// A compare-and-set write lost: the key is not at the version the writer expected
    /// (issue 20 §4). Nothing was written.
    #[error(
        "memory key '{key}' of agent '{agent}' is at version {actual}, not the expected {expected}: another write got there first; read it again and retry"
    )]
    Conflict {
        agent: String,
        key: String,
        expected: u64,
        actual: u64,
    },
    /// `undo` or `history` found no such version of the key.
    #[error("memory key '{key}' of agent '{agent}': {message}")]
    NoVersion {
        agent: String,
        key: String,
        message: String,
    },
    /// The backend does not keep what was asked for (e.g. history in Markdown).
    #[error("the {backend} memory backend {message}")]
    Unsupported { backend: String, message: String },
    /// An agent rename or purge cannot proceed.
    #[error("memory of agent '{agent}': {message}")]
    Lifecycle { agent: String, message: String },
    /// The agent's store did not open this generation (a damaged file): every memory call
    /// says so, the rest of the agent runs on (issue 36 §1).
    #[error("memory is unavailable ({backend} backend): {message}")]
    Unavailable { backend: String, message: String },
    /// SQLite failed on the store file.
    #[error("SQLite memory store {path}: {source}")]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    /// A SQLite error a full disk caused, in words that say so (issue 15 §8).
    #[error("SQLite memory store {path}: disk full at {dir} (free some space there and retry)")]
    DiskFull { path: PathBuf, dir: PathBuf },
    /// PostgreSQL failed (connect, schema or query). `url` has no password.
    #[error("PostgreSQL memory store {url} (schema {schema}): {message}")]
    Postgres {
        url: String,
        schema: String,
        message: String,
    },
    /// The Qdrant server failed or refused a request. `url` has no credentials.
    #[error("Qdrant memory store {url} (collection {collection}): {message}")]
    Qdrant {
        url: String,
        collection: String,
        message: String,
    },
    /// File I/O on a Markdown memory file or the store directory.
    #[error("memory file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A stored row that does not decode (hand-edited or corrupt store).
    #[error("memory store {location}: corrupt row: {message}")]
    Corrupt { location: String, message: String },
    /// The embeddings endpoint failed.
    #[error("embedder {url}: {message}")]
    Embedder { url: String, message: String },
    /// Config needed by a backend is missing (e.g. `memory.postgres.url`).
    #[error("memory config: {0}")]
    Config(String),
    /// A blocking worker panicked or was cancelled.
    #[error("memory worker failed: {0}")]
    Worker(String),
}

impl MemoryError {
    pub(crate) fn invalid(agent: &str, message: impl Into<String>) -> Self {
        Self::InvalidInput {
            agent: agent.to_string(),
            message: message.into(),
        }
    }
}

/// Removes the password (and any query string credentials) from a connection URL for display.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // key=value form: drop any password=... pair.
        return url
            .split_whitespace()
            .map(|kv| {
                if kv.to_ascii_lowercase().starts_with("password=") {
                    "password=***"
                } else {
                    kv
                }
            })
            .collect::<Vec<_>>()
            .join(" ");
    };
    let (authority, tail) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{user}@{host}")
        }
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, _)) => format!("{path}?…"),
        None => tail.to_string(),
    };
    format!("{scheme}://{authority}{tail}")
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn redacts_passwords_in_both_url_forms() {
        assert_eq!(
            redact_url("postgres://bob:s3cret@db:5432/warren"),
            "postgres://bob@db:5432/warren"
        );
        assert_eq!(
            redact_url("postgres://bob@db/w?password=s3cret"),
            "postgres://bob@db/w?…"
        );
        assert_eq!(
            redact_url("host=db user=bob password=s3cret"),
            "host=db user=bob password=***"
        );
    }
}
