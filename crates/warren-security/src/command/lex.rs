//! The lexer of the shell command policy (PERM-4): words, operators and redirects as POSIX
//! `sh` and bash read them, and a refusal, naming the construct, for everything bash would
//! expand or interpret that this lexer does not evaluate itself: parameter, command,
//! arithmetic and process substitution, `$'…'` and `$"…"` quoting, brace expansion (also
//! after quotes: `''{/abs,x}`), globs, tilde forms, history `!`, comments, subshells and
//! groups, background jobs, here-documents. Quoted text is literal and always fine.

use super::{CommandDenied, deny};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Token {
    Word(String),
    Op(&'static str),
    /// A redirect operator and its direction.
    Redirect(Redirect),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Redirect {
    Out,
    In,
    HereString,
}

/// The refusal for an unquoted `$` followed by `rest`.
fn dollar(mut rest: std::iter::Peekable<std::str::Chars<'_>>) -> CommandDenied {
    let next = rest.next();
    let after = rest.next();
    deny(match (next, after) {
        (Some('\''), _) => "ANSI-C quoting ($'...') is not allowed; write the characters literally",
        (Some('"'), _) => "locale quoting ($\"...\") is not allowed; use plain double quotes",
        (Some('('), Some('(')) => "arithmetic expansion ($((...))) is not allowed",
        (Some('('), _) => "command substitution ($(...)) is not allowed",
        (Some('['), _) => "arithmetic expansion ($[...]) is not allowed",
        (Some('{'), _) => "parameter expansion (${...}) is not allowed; write values literally",
        _ => "variable or command expansion ($) is not allowed; write values literally",
    })
}

/// Lexes `command` into words, operators and redirects; refuses unsupported syntax.
pub(super) fn lex(command: &str) -> Result<Vec<Token>, CommandDenied> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = command.chars().peekable();
    let flush = |tokens: &mut Vec<Token>, word: &mut String, in_word: &mut bool| {
        if *in_word {
            tokens.push(Token::Word(std::mem::take(word)));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(ch) => word.push(ch),
                        None => return Err(deny("unterminated single quote")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(ch @ ('"' | '\\' | '$' | '`')) => word.push(ch),
                            Some('\n') => {}
                            Some(ch) => {
                                word.push('\\');
                                word.push(ch);
                            }
                            None => return Err(deny("unterminated double quote")),
                        },
                        Some('$') => return Err(dollar(chars.clone())),
                        Some('`') => {
                            return Err(deny("command substitution (`...`) is not allowed"));
                        }
                        Some(ch) => word.push(ch),
                        None => return Err(deny("unterminated double quote")),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some('\n') => {}
                    Some(ch) => word.push(ch),
                    None => return Err(deny("dangling backslash")),
                }
            }
            '$' => return Err(dollar(chars.clone())),
            '`' => return Err(deny("command substitution (`...`) is not allowed")),
            ' ' | '\t' => flush(&mut tokens, &mut word, &mut in_word),
            '\n' | ';' => {
                flush(&mut tokens, &mut word, &mut in_word);
                tokens.push(Token::Op(";"));
            }
            '|' => {
                flush(&mut tokens, &mut word, &mut in_word);
                if chars.peek() == Some(&'|') {
                    chars.next();
                    tokens.push(Token::Op("||"));
                } else if chars.peek() == Some(&'&') {
                    return Err(deny("'|&' is not allowed"));
                } else {
                    tokens.push(Token::Op("|"));
                }
            }
            '&' => {
                flush(&mut tokens, &mut word, &mut in_word);
                if chars.peek() == Some(&'&') {
                    chars.next();
                    tokens.push(Token::Op("&&"));
                } else if chars.peek() == Some(&'>') {
                    chars.next();
                    if chars.peek() == Some(&'>') {
                        chars.next();
                    }
                    tokens.push(Token::Redirect(Redirect::Out));
                } else {
                    return Err(deny("background jobs ('&') are not allowed"));
                }
            }
            '(' | ')' => {
                return Err(deny(format!(
                    "'{c}' (subshells, arithmetic and function definitions) is not allowed"
                )));
            }
            '{' | '}' => {
                return Err(deny(format!(
                    "'{c}' (brace expansion and command groups) is not allowed; quote it ('{c}') to mean the character"
                )));
            }
            '*' | '?' | '[' => {
                return Err(deny(format!(
                    "'{c}' (a glob pattern) is not allowed; name the files, or quote it ('{c}') to mean the character"
                )));
            }
            '~' => {
                return Err(deny(
                    "'~' (tilde expansion to a home directory) is not allowed; use a path in the workspace, or quote it ('~')",
                ));
            }
            '!' => {
                return Err(deny(
                    "'!' (history expansion and pipeline negation) is not allowed; quote it ('!') to mean the character",
                ));
            }
            '#' if !in_word => {
                return Err(deny(
                    "comments ('#') are not allowed; quote it ('#') to mean the character",
                ));
            }
            '>' | '<' => {
                // A descriptor number right before the operator (`2>`) belongs to it.
                if in_word && !word.is_empty() && word.chars().all(|d| d.is_ascii_digit()) {
                    word.clear();
                    in_word = false;
                } else {
                    flush(&mut tokens, &mut word, &mut in_word);
                }
                if chars.peek() == Some(&'(') {
                    return Err(deny(format!(
                        "process substitution ({c}(...)) is not allowed"
                    )));
                }
                let kind = if c == '>' {
                    if matches!(chars.peek(), Some('>' | '|')) {
                        chars.next();
                    }
                    Redirect::Out
                } else if chars.peek() == Some(&'<') {
                    chars.next();
                    if chars.peek() == Some(&'<') {
                        chars.next();
                        Redirect::HereString
                    } else {
                        return Err(deny(
                            "here-documents (<<) are not allowed; use a here-string (<<<) or a file",
                        ));
                    }
                } else {
                    Redirect::In
                };
                // `>&2`, `2>&1`, `<&-`: duplicating or closing a descriptor touches no path.
                if chars.peek() == Some(&'&') {
                    chars.next();
                    let mut fd = String::new();
                    while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                        fd.push(d);
                        chars.next();
                    }
                    if fd.is_empty() && chars.peek() == Some(&'-') {
                        chars.next();
                        fd.push('-');
                    }
                    // Anything else after `>&` is a file name to bash: refused, not guessed.
                    let ends = chars.peek().is_none_or(|n| {
                        matches!(n, ' ' | '\t' | '\n' | ';' | '|' | '&' | '<' | '>')
                    });
                    if fd.is_empty() || !ends {
                        return Err(deny(
                            "malformed descriptor redirect: '>&' takes a descriptor number or '-'; redirect to a file with '>' FILE",
                        ));
                    }
                    continue;
                }
                tokens.push(Token::Redirect(kind));
            }
            other => {
                in_word = true;
                word.push(other);
            }
        }
    }
    flush(&mut tokens, &mut word, &mut in_word);
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexer_handles_quotes_operators_and_redirects() {
        let toks = lex("echo 'a b' \"c\" > out.txt 2>&1 && cat<in | wc -l").unwrap_or_default();
        assert_eq!(
            toks,
            vec![
                Token::Word("echo".into()),
                Token::Word("a b".into()),
                Token::Word("c".into()),
                Token::Redirect(Redirect::Out),
                Token::Word("out.txt".into()),
                Token::Op("&&"),
                Token::Word("cat".into()),
                Token::Redirect(Redirect::In),
                Token::Word("in".into()),
                Token::Op("|"),
                Token::Word("wc".into()),
                Token::Word("-l".into()),
            ]
        );
    }

    /// Every expansion bash would perform is refused, and the refusal names it.
    #[test]
    fn lexer_refuses_every_expansion_it_does_not_evaluate_perm4() {
        for (bad, named) in [
            ("echo $HOME", "variable"),
            ("cat $(echo ..)/x", "command substitution"),
            ("cat `pwd`", "command substitution"),
            ("echo $((1+2))", "arithmetic"),
            ("echo $[1+2]", "arithmetic"),
            ("echo ${HOME}", "parameter expansion"),
            ("cat $'\\x2e\\x2e/x'", "ANSI-C"),
            ("cat $\"x\"", "locale"),
            ("echo \"$X\"", "variable"),
            ("sleep 1 &", "background"),
            ("cat <(ls)", "process substitution"),
            ("tee >(cat)", "process substitution"),
            ("cat <<EOF", "here-documents"),
            ("(cd ..)", "subshells"),
            ("((x=1))", "arithmetic"),
            ("cat ''{/etc/passwd,x}", "brace expansion"),
            ("cat a{b,c}", "brace expansion"),
            ("cat {a..c}", "brace expansion"),
            ("{ cat x; }", "brace expansion"),
            ("cat *", "glob"),
            ("cat ../../*/workspace/secret.txt", "glob"),
            ("cat ?", "glob"),
            ("cat [ab]", "glob"),
            ("cat ~/x", "tilde"),
            ("cat ~root/x", "tilde"),
            ("cat x=~/y", "tilde"),
            ("cat --file=~/y", "tilde"),
            ("echo !!", "history"),
            ("! cat x", "history"),
            ("echo #'\ncat secret\n'", "comments"),
            ("cat x >&file", "descriptor"),
            ("cat x >&1file", "descriptor"),
            ("echo x '>'&", "background"),
        ] {
            let msg = lex(bad).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(
                msg.contains(named),
                "`{bad}` should be refused naming {named}: {msg:?}"
            );
        }
    }

    #[test]
    fn quoted_and_escaped_text_is_literal() {
        for (ok, word) in [
            ("echo '$HOME'", "$HOME"),
            ("echo '{a,b}'", "{a,b}"),
            ("echo \"*.txt\"", "*.txt"),
            ("echo \\*", "*"),
            ("echo '~'", "~"),
            ("echo \"!\"", "!"),
            ("echo a#b", "a#b"),
            ("echo ''#x", "#x"),
            ("echo '[x]'", "[x]"),
        ] {
            assert_eq!(
                lex(ok).ok().and_then(|t| t.get(1).cloned()),
                Some(Token::Word(word.into())),
                "{ok}"
            );
        }
        assert!(lex("ls 2>&1 >&2 <&- | wc").is_ok());
    }
}
