//! Safe keyword queries (MEM-2): a model's recall text becomes a bag of plain words, never
//! search-engine syntax. FTS5 operators (`OR`, `NEAR`, `^`, column filters like `agent_id:`),
//! quotes and parentheses are treated as ordinary text, so a query can neither widen the
//! agent filter (which lives outside the MATCH expression anyway) nor raise a syntax error.
//!
//! A word is a run of letters or digits; a `*` right after a word makes it a prefix. The same
//! words drive SQLite FTS5 (quoted phrases joined by OR) and PostgreSQL (`to_tsquery` with
//! `|`), so both backends answer the same question.

use crate::error::MemoryError;

/// Most words a query may carry; later ones are ignored.
pub const MAX_WORDS: usize = 32;

/// One search word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// Lowercase letters and digits only.
    pub text: String,
    pub prefix: bool,
}

/// Splits `query` into words. A query with no letters or digits (and not a recent-recall
/// query) is an error that says so, rather than an empty result.
pub fn words(agent: &str, query: &str) -> Result<Vec<Word>, MemoryError> {
    let mut out: Vec<Word> = Vec::new();
    let mut current = String::new();
    for c in query.chars() {
        if c.is_alphanumeric() {
            current.extend(c.to_lowercase());
            continue;
        }
        if !current.is_empty() {
            let prefix = c == '*';
            push(&mut out, std::mem::take(&mut current), prefix);
        }
    }
    if !current.is_empty() {
        push(&mut out, current, false);
    }
    if out.is_empty() {
        return Err(MemoryError::InvalidQuery {
            agent: agent.to_string(),
            query: query.chars().take(80).collect(),
            message: "it has no letters or digits to search for (use '*' or an empty query for the most recent entries)".into(),
        });
    }
    out.truncate(MAX_WORDS);
    Ok(out)
}

fn push(out: &mut Vec<Word>, text: String, prefix: bool) {
    if let Some(existing) = out.iter_mut().find(|w| w.text == text) {
        existing.prefix |= prefix;
    } else {
        out.push(Word { text, prefix });
    }
}

/// The FTS5 MATCH expression: each word a double-quoted phrase (quotes cannot occur in a
/// word, but are doubled anyway), prefixes marked with `*`, joined by OR.
pub fn fts5_match(words: &[Word]) -> String {
    words
        .iter()
        .map(|w| {
            format!(
                "\"{}\"{}",
                w.text.replace('"', "\"\""),
                if w.prefix { "*" } else { "" }
            )
        })
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// The PostgreSQL `to_tsquery` text: words joined by `|`, prefixes as `:*`. Words hold only
/// letters and digits, so no tsquery operator can appear.
pub fn pg_tsquery(words: &[Word]) -> String {
    words
        .iter()
        .map(|w| format!("{}{}", w.text, if w.prefix { ":*" } else { "" }))
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(q: &str) -> Vec<(String, bool)> {
        words("a", q)
            .unwrap_or_default()
            .into_iter()
            .map(|w| (w.text, w.prefix))
            .collect()
    }

    #[test]
    fn fts_syntax_becomes_plain_words() {
        assert_eq!(
            texts(r#"agent_id:abc OR "x" NEAR(a b) wild* ^Up"#),
            vec![
                ("agent".into(), false),
                ("id".into(), false),
                ("abc".into(), false),
                ("or".into(), false),
                ("x".into(), false),
                ("near".into(), false),
                ("a".into(), false),
                ("b".into(), false),
                ("wild".into(), true),
                ("up".into(), false),
            ]
        );
        let w = words("a", "wild* x").unwrap_or_default();
        assert_eq!(fts5_match(&w), r#""wild"* OR "x""#);
        assert_eq!(pg_tsquery(&w), "wild:* | x");
    }

    #[test]
    fn punctuation_only_is_an_invalid_query_not_no_results() {
        for q in ["\"", "()", "-- ;", "**"] {
            let err = words("ops", q).err().map(|e| e.to_string());
            assert!(
                err.as_deref()
                    .is_some_and(|e| e.contains("invalid recall query") && e.contains("'ops'")),
                "{q}: {err:?}"
            );
        }
    }
}
