//! Config errors that name the file, the key path and, where known, line and column (CFG-7).

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::atomic::AtomicWriteError;
use crate::keypath::KeyPathError;
use crate::paths::PathError;
use crate::secrets::SecretError;

/// One thing wrong with a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Dotted key path at fault, if the problem is about a key.
    pub key: Option<String>,
    /// 1-based line and column in the file, when known.
    pub position: Option<(usize, usize)>,
    pub message: String,
    /// A close known name (`did you mean ...?`) or another way out.
    pub hint: Option<String>,
}

impl Problem {
    pub fn at(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: Some(key.into()),
            position: None,
            message: message.into(),
            hint: None,
        }
    }
    pub fn with_hint(mut self, hint: Option<String>) -> Self {
        self.hint = hint;
        self
    }
}

/// Everything that can go wrong loading, editing or saving config.
///
/// An io error's text is part of its variant's message (`cannot read <path>: <cause>`) and is
/// not also returned by `source()`: a printed chain (`{:#}`) then names it once, not twice.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file (or an edit) does not pass parsing, schema or validation; nothing was changed.
    #[error("{}", render_problems(file, problems))]
    Invalid {
        file: PathBuf,
        problems: Vec<Problem>,
    },
    #[error("no config at {path}; run `warren init` (or pass --config-dir DIR)")]
    Missing { path: PathBuf },
    #[error("cannot read {path}: {cause}")]
    Read { path: PathBuf, cause: io::Error },
    #[error("cannot write {path}: {cause}")]
    Write { path: PathBuf, cause: io::Error },
    #[error(
        "refusing to save: this config was not loaded from a file on disk, so saving it could \
         replace a real config with defaults"
    )]
    Unbound,
    #[error(
        "{path} changed on disk since it was loaded (generation {generation}); nothing was written. \
         Reload the config and retry"
    )]
    Stale { path: PathBuf, generation: u64 },
    #[error("cannot take the config write lock {path}: {cause}")]
    Lock { path: PathBuf, cause: io::Error },
    #[error("{key}: {}", cut_long_values(message))]
    Edit { key: String, message: String },
    #[error(transparent)]
    KeyPath(#[from] KeyPathError),
    #[error(transparent)]
    Secret(#[from] SecretError),
    #[error(transparent)]
    Save(#[from] AtomicWriteError),
    #[error(transparent)]
    Path(#[from] PathError),
}

impl ConfigError {
    pub(crate) fn invalid(file: impl Into<PathBuf>, problem: Problem) -> Self {
        Self::Invalid {
            file: file.into(),
            problems: vec![problem],
        }
    }
}

/// Redacts every message and hint of `problems` (CFG-6: validation never prints a secret).
pub(crate) fn redact_problems(problems: &mut [Problem], redactor: &crate::redact::Redactor) {
    if redactor.is_empty() {
        return;
    }
    for p in problems {
        redactor.redact_in_place(&mut p.message);
        if let Some(hint) = p.hint.as_mut() {
            redactor.redact_in_place(hint);
        }
    }
}

fn render_problems(file: &std::path::Path, problems: &[Problem]) -> String {
    let mut out = String::new();
    for (i, p) in problems.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&ProblemLine { file, problem: p }.to_string());
    }
    out
}

struct ProblemLine<'a> {
    file: &'a std::path::Path,
    problem: &'a Problem,
}

impl fmt::Display for ProblemLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.problem;
        write!(f, "{}", self.file.display())?;
        if let Some((line, col)) = p.position {
            write!(f, ":{line}:{col}")?;
        }
        f.write_str(": ")?;
        if let Some(key) = &p.key {
            write!(f, "{key}: ")?;
        }
        f.write_str(&cut_long_values(&p.message))?;
        if let Some(hint) = &p.hint {
            write!(f, " ({})", cut_long_values(hint))?;
        }
        Ok(())
    }
}

/// Values longer than this are cut in messages (issue 36 §7).
const VALUE_SHOWN: usize = 200;
/// A message still longer than this after its values were cut is cut too.
const MESSAGE_SHOWN: usize = 2000;

/// `message` with every long value cut (issue 36 §7): a run of more than 200 bytes without
/// whitespace, quote or backtick (what a schema or rule error echoes of a value) keeps its
/// first 200 characters and says `… (N bytes)`; a message still over 2,000 bytes keeps its
/// first 2,000 characters. A 5 MB value never becomes a 5 MB line.
pub fn cut_long_values(message: &str) -> std::borrow::Cow<'_, str> {
    let delimiter = |c: char| c.is_whitespace() || matches!(c, '`' | '"' | '\'');
    let long = message.split(delimiter).any(|run| run.len() > VALUE_SHOWN);
    if !long && message.len() <= MESSAGE_SHOWN {
        return std::borrow::Cow::Borrowed(message);
    }
    let mut out = String::with_capacity(MESSAGE_SHOWN + 64);
    let mut rest = message;
    while !rest.is_empty() {
        let end = rest.find(delimiter).unwrap_or(rest.len());
        let (run, after) = rest.split_at(end);
        if run.len() > VALUE_SHOWN {
            out.extend(run.chars().take(VALUE_SHOWN));
            out.push_str(&format!("… ({} bytes)", run.len()));
        } else {
            out.push_str(run);
        }
        let mut chars = after.chars();
        if let Some(d) = chars.next() {
            out.push(d);
        }
        rest = chars.as_str();
    }
    if out.len() > MESSAGE_SHOWN {
        let total = out.len();
        out = out.chars().take(MESSAGE_SHOWN).collect();
        out.push_str(&format!("… ({total} bytes in all)"));
    }
    std::borrow::Cow::Owned(out)
}

/// Where a TOML error without a position most likely is: the line with the most dotted
/// parts (a recursion-limit error on a deeply dotted header or key has no span; issue 36 §7).
pub(crate) fn deepest_line(text: &str) -> Option<(usize, usize)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (l.matches('.').count(), i))
        .filter(|(dots, _)| *dots > 0)
        .max_by_key(|(dots, i)| (*dots, std::cmp::Reverse(*i)))
        .map(|(_, i)| (i + 1, 1))
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before
        .rsplit('\n')
        .next()
        .map(|l| l.chars().count())
        .unwrap_or(0)
        + 1;
    (line, col)
}

/// "did you mean `x`?" for the closest of `candidates`, if any is close enough.
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(word, c), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| format!("did you mean `{c}`?"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("a = 1\nbb = 2\n", 0), (1, 1));
        assert_eq!(line_col("a = 1\nbb = 2\n", 6), (2, 1));
        assert_eq!(line_col("a = 1\nbb = 2\n", 11), (2, 6));
    }

    #[test]
    fn suggestions_only_when_close() {
        assert_eq!(
            did_you_mean("prot", ["bind", "port"]),
            Some("did you mean `port`?".into())
        );
        assert_eq!(did_you_mean("zzzz", ["bind", "port"]), None);
    }
}
