//! Safe keyword queries (MEM-2): a model's recall text becomes a bag of plain words, never
//! search-engine syntax. FTS5 operators (`OR`, `NEAR`, `^`, column filters like `agent_id:`),
//! quotes and parentheses are treated as ordinary text, so a query can neither widen the
//! agent filter (which lives outside the MATCH expression anyway) nor raise a syntax error.
//!
//! A word is a run of letters or digits; a `*` right after a word makes it a prefix. The same
//! words drive SQLite FTS5 (quoted phrases joined by OR) and PostgreSQL (`to_tsquery` with
//! `|`), so both backends answer the same question.

use crate::entry::ScopeRule;
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

/// Uppercase hex of the UTF-8 bytes, as SQLite's `hex()` writes it.
fn hex(parts: &[&str]) -> String {
    parts
        .iter()
        .flat_map(|p| p.bytes())
        .map(|b| format!("{b:02X}"))
        .collect()
}

/// The FTS token naming every row of `agent` (the `a…` half of `memories.scope`).
pub fn agent_token(agent: &str) -> String {
    format!("a{}", hex(&[agent]))
}

/// The FTS token naming the rows of `agent` in `category` (the `c…` half of `memories.scope`).
/// `:` never occurs in an agent id (a UUID), so agent and category cannot blur.
pub fn category_token(agent: &str, category: &str) -> String {
    format!("c{}", hex(&[agent, ":", category]))
}

/// The scoped FTS5 MATCH expression (MEM-2/3/8): the user's words, restricted to the `key` and
/// `content` columns, AND any of the scope tokens the rules allow in the `scope` column. A
/// rule without categories gives its agent token, one with categories one token per category,
/// an empty category list nothing. `None` when no rule can match anything. The words are
/// quoted as in [`fts5_match`]; the tokens are hex, so neither can carry FTS5 syntax. This
/// only narrows the search: the SQL scope filter still applies to every row it returns.
pub fn fts5_scoped_match(words: &[Word], scope: &[ScopeRule]) -> Option<String> {
    let mut tokens: Vec<String> = Vec::new();
    for rule in scope {
        match &rule.categories {
            None => tokens.push(agent_token(&rule.agent.0)),
            Some(cats) => tokens.extend(cats.iter().map(|c| category_token(&rule.agent.0, c))),
        }
    }
    tokens.sort_unstable();
    tokens.dedup();
    if tokens.is_empty() {
        return None;
    }
    Some(format!(
        "{{key content}} : ({}) AND scope : ({})",
        fts5_match(words),
        tokens
            .iter()
            .map(|t| format!("\"{t}\""))
            .collect::<Vec<_>>()
            .join(" OR ")
    ))
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
    fn scoped_match_names_columns_and_scope_tokens_mem2() {
        use crate::entry::AgentId;
        let w = words("a", "scope: x").unwrap_or_default();
        let rule = |cats: Option<Vec<&str>>| ScopeRule {
            agent: AgentId("id-1".into()),
            categories: cats.map(|c| c.into_iter().map(String::from).collect()),
        };
        assert_eq!(agent_token("id-1"), "a69642D31");
        assert_eq!(category_token("id-1", "c"), "c69642D313A63");
        assert_eq!(
            fts5_scoped_match(&w, &[rule(None), rule(Some(vec!["c"]))]).as_deref(),
            Some(
                r#"{key content} : ("scope" OR "x") AND scope : ("a69642D31" OR "c69642D313A63")"#
            )
        );
        assert_eq!(fts5_scoped_match(&w, &[rule(Some(vec![]))]), None);
        assert_eq!(fts5_scoped_match(&w, &[]), None);
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
