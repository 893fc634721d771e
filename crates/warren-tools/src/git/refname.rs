//! Refname and revision rules for model-supplied values (GIT-10).
//!
//! [`check_branch_name`] implements `git check-ref-format --branch` (the rules of
//! `git help check-ref-format`, one-level names allowed) plus git's own refusal of a branch
//! named `HEAD` or starting with `-`, so no branch name can be read as an option.
//! [`check_revision`] accepts the small revision grammar `log` and start points need (names,
//! `~N`, `^N`, `A..B`, `A...B`, `@{N}`) and nothing that git could parse as an option.

/// Longest branch name or revision accepted.
pub const MAX_REF_BYTES: usize = 255;

/// What a refused value was given as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefKind {
    Branch,
    Revision,
}

impl std::fmt::Display for RefKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Branch => "branch name",
            Self::Revision => "revision",
        })
    }
}

/// A branch name or revision that git must not be given, and the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} '{value}' is invalid: {rule}")]
pub struct InvalidRef {
    pub kind: RefKind,
    /// The value as given (escaped, at most 80 characters).
    pub value: String,
    /// The rule it breaks ("it starts with '-' ...").
    pub rule: String,
}

impl InvalidRef {
    fn new(kind: RefKind, value: &str, rule: &str) -> Self {
        Self {
            kind,
            value: shown(value),
            rule: rule.to_string(),
        }
    }
}

/// Why `name` is not a valid branch name, or `Ok`.
pub fn check_branch_name(name: &str) -> Result<(), InvalidRef> {
    let bad = |why: &str| Err(InvalidRef::new(RefKind::Branch, name, why));
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > MAX_REF_BYTES {
        return bad("it is longer than 255 bytes");
    }
    if name.starts_with('-') {
        return bad("it starts with '-' (git would read it as an option)");
    }
    if name == "HEAD" || name == "@" {
        return bad("it is reserved");
    }
    if let Some(c) = name.chars().find(|c| {
        c.is_ascii_control() || matches!(c, ' ' | '~' | '^' | ':' | '?' | '*' | '[' | '\\')
    }) {
        return bad(&format!("it contains {c:?}"));
    }
    if name.contains("..") {
        return bad("it contains '..'");
    }
    if name.contains("@{") {
        return bad("it contains '@{'");
    }
    if name.starts_with('/') || name.ends_with('/') || name.contains("//") {
        return bad("it has an empty path component");
    }
    if name.ends_with('.') {
        return bad("it ends with '.'");
    }
    for component in name.split('/') {
        if component.starts_with('.') {
            return bad("a component starts with '.'");
        }
        if component.ends_with(".lock") {
            return bad("a component ends with '.lock'");
        }
    }
    Ok(())
}

/// Why `rev` is not an acceptable revision or range, or `Ok`.
pub fn check_revision(rev: &str) -> Result<(), InvalidRef> {
    let bad = |why: &str| Err(InvalidRef::new(RefKind::Revision, rev, why));
    if rev.is_empty() {
        return bad("it is empty");
    }
    if rev.len() > MAX_REF_BYTES {
        return bad("it is longer than 255 bytes");
    }
    if rev.starts_with('-') {
        return bad("it starts with '-' (git would read it as an option)");
    }
    if let Some(c) = rev.chars().find(|c| {
        !(c.is_ascii_alphanumeric()
            || matches!(c, '/' | '.' | '_' | '-' | '~' | '^' | '@' | '{' | '}'))
    }) {
        return bad(&format!(
            "it contains {c:?} (allowed: names, ~N, ^N, A..B, A...B, @{{N}})"
        ));
    }
    for side in rev.split("..") {
        let side = side.trim_start_matches('.');
        if side.starts_with('-') {
            return bad("a side of the range starts with '-'");
        }
    }
    Ok(())
}

fn shown(s: &str) -> String {
    s.chars().take(80).flat_map(char::escape_debug).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branch_rules_follow_check_ref_format() {
        for ok in ["main", "feature/x", "a-b_c.d", "v1.2", "x@y", "ü"] {
            assert_eq!(check_branch_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "-c",
            "--output=x",
            "HEAD",
            "@",
            "a..b",
            "a b",
            "a~1",
            "a^",
            "a:b",
            "a?",
            "a*",
            "a[",
            "a\\b",
            "a@{1}",
            "/a",
            "a/",
            "a//b",
            "a.",
            ".a",
            "a/.b",
            "a.lock",
            "a/b.lock/c",
            "a\u{7f}",
            "a\nb",
        ] {
            assert!(check_branch_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn revisions_refuse_options() {
        for ok in [
            "HEAD",
            "HEAD~3",
            "main..feature",
            "a...b",
            "HEAD@{2}",
            "v1.0^2",
            "abc123",
        ] {
            assert_eq!(check_revision(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "-n1",
            "--output=/tmp/x",
            "--upload-pack=touch",
            "HEAD..--output=x",
            "a b",
            "HEAD:secret",
            "a;b",
            "$(x)",
        ] {
            assert!(check_revision(bad).is_err(), "{bad:?} accepted");
        }
    }
}
