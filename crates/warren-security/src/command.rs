//! The shell command policy (PERM-4): what the `shell` tool lets through before the sandbox.
//!
//! A command is lexed like POSIX `sh` (quotes, escapes, operators, redirects) and refused when it
//! uses what cannot be checked statically: command or process substitution, variable expansion,
//! background jobs, here-documents, environment assignments. Each segment's program must be in the
//! risk profile's allowlist (`*` = any); known option-injection forms are refused (`find -exec`,
//! `git -c`, `python -c`, ...). Every argument and redirect target is then treated as a path the
//! command may touch: redirect targets need write access, input redirects read access, other
//! arguments read or write access, all resolved like the file tools (PERM-3..6). Whatever still
//! escapes this check (a script that builds paths at run time) is stopped by the kernel sandbox.

use std::path::{Path, PathBuf};

use serde::Serialize;
use warren_config::schema::Autonomy;

use crate::policy::SecurityPolicy;

/// How much damage a command can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    Low,
    Medium,
    High,
}

const HIGH_RISK: &[&str] = &[
    "rm",
    "rmdir",
    "dd",
    "mkfs",
    "shutdown",
    "reboot",
    "halt",
    "poweroff",
    "sudo",
    "su",
    "doas",
    "chown",
    "chmod",
    "chgrp",
    "mount",
    "umount",
    "useradd",
    "userdel",
    "usermod",
    "passwd",
    "iptables",
    "curl",
    "wget",
    "nc",
    "ncat",
    "netcat",
    "ssh",
    "scp",
    "sftp",
    "rsync",
    "ftp",
    "telnet",
    "kill",
    "pkill",
    "killall",
    "crontab",
    "systemctl",
];
const MEDIUM_RISK: &[&str] = &[
    "mv", "cp", "mkdir", "touch", "ln", "tee", "truncate", "install", "patch",
];
const GIT_WRITES: &[&str] = &[
    "commit",
    "push",
    "reset",
    "clean",
    "rebase",
    "merge",
    "cherry-pick",
    "revert",
    "checkout",
    "switch",
    "tag",
    "branch",
    "stash",
    "restore",
    "rm",
    "mv",
    "add",
    "worktree",
    "pull",
    "fetch",
    "clone",
];

/// What the policy concluded about an allowed command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommandCheck {
    pub risk: Risk,
    /// Whether the runtime must obtain an approval before running it.
    pub needs_approval: bool,
    /// The programs of each segment, in order.
    pub programs: Vec<String>,
}

/// A refused command: the reason names the token, path or rule at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("command refused: {0}")]
pub struct CommandDenied(pub String);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Op(&'static str),
    /// A redirect operator and its direction.
    Redirect(Redirect),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Redirect {
    Out,
    In,
    HereString,
}

fn deny(msg: impl Into<String>) -> CommandDenied {
    CommandDenied(msg.into())
}

/// Lexes `command` into words, operators and redirects; refuses unsupported syntax.
fn lex(command: &str) -> Result<Vec<Token>, CommandDenied> {
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
                            Some(ch) => {
                                word.push('\\');
                                word.push(ch);
                            }
                            None => return Err(deny("unterminated double quote")),
                        },
                        Some('$') => {
                            return Err(deny(
                                "variable or command expansion ($) is not allowed; write values literally",
                            ));
                        }
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
            '$' => {
                return Err(deny(
                    "variable or command expansion ($) is not allowed; write values literally",
                ));
            }
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
                if chars.peek() == Some(&'&') {
                    flush(&mut tokens, &mut word, &mut in_word);
                    chars.next();
                    tokens.push(Token::Op("&&"));
                } else if chars.peek() == Some(&'>') {
                    flush(&mut tokens, &mut word, &mut in_word);
                    chars.next();
                    if chars.peek() == Some(&'>') {
                        chars.next();
                    }
                    tokens.push(Token::Redirect(Redirect::Out));
                } else if in_word && (word.ends_with('>') || word.ends_with('<')) {
                    // `2>&1`-style descriptor duplication, handled with the redirect below.
                    word.push('&');
                } else {
                    return Err(deny("background jobs ('&') are not allowed"));
                }
            }
            '(' | ')' | '{' | '}' if !in_word => {
                return Err(deny(format!("'{c}' (subshells and groups) is not allowed")));
            }
            '>' | '<' => {
                // A descriptor number right before the operator (`2>`) belongs to it.
                if in_word && !word.is_empty() && word.chars().all(|d| d.is_ascii_digit()) {
                    word.clear();
                    in_word = false;
                } else {
                    flush(&mut tokens, &mut word, &mut in_word);
                }
                if c == '<' && chars.peek() == Some(&'(') || c == '>' && chars.peek() == Some(&'(')
                {
                    return Err(deny("process substitution is not allowed"));
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
                // `>&2`, `2>&1`: duplicating a descriptor touches no path.
                if chars.peek() == Some(&'&') {
                    chars.next();
                    let mut fd = String::new();
                    while let Some(d) = chars
                        .peek()
                        .copied()
                        .filter(|d| d.is_ascii_digit() || *d == '-')
                    {
                        fd.push(d);
                        chars.next();
                    }
                    if fd.is_empty() {
                        return Err(deny("malformed descriptor redirect"));
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

impl SecurityPolicy {
    /// Checks a shell command against the command policy and the path rules.
    pub fn check_command(&self, command: &str) -> Result<CommandCheck, CommandDenied> {
        if !self.can_act() {
            return Err(deny("autonomy is read_only: the shell tool is disabled"));
        }
        if command.contains('\0') {
            return Err(deny("command contains a NUL byte"));
        }
        let tokens = lex(command)?;
        let mut risk = Risk::Low;
        let mut programs = Vec::new();
        let mut cwd = self.workspace().to_path_buf();
        let mut segment: Vec<String> = Vec::new();
        let mut iter = tokens.into_iter().peekable();
        loop {
            let token = iter.next();
            match token {
                Some(Token::Word(w)) => segment.push(w),
                Some(Token::Redirect(kind)) => {
                    let Some(Token::Word(target)) = iter.next() else {
                        return Err(deny("a redirect needs a target"));
                    };
                    match kind {
                        Redirect::HereString => {}
                        Redirect::Out => self.check_path_token(&cwd, &target, PathUse::Write)?,
                        Redirect::In => self.check_path_token(&cwd, &target, PathUse::Read)?,
                    }
                }
                Some(Token::Op(_)) | None => {
                    if !segment.is_empty() {
                        let seg_risk = self.check_segment(&segment, &mut cwd)?;
                        risk = risk.max(seg_risk);
                        programs.push(segment[0].clone());
                        segment.clear();
                    } else if token.is_some() {
                        return Err(deny("empty command segment"));
                    }
                    if token.is_none() {
                        break;
                    }
                }
            }
        }
        if programs.is_empty() {
            return Err(deny("empty command"));
        }
        let (needs_approval, blocked) = match (self.autonomy(), risk) {
            (Autonomy::ReadOnly, _) => (false, true),
            (Autonomy::Supervised, Risk::High) => (false, true),
            (Autonomy::Supervised, Risk::Medium) => (true, false),
            (Autonomy::Full, Risk::High) => (true, false),
            _ => (false, false),
        };
        if blocked {
            return Err(deny(format!(
                "high-risk command ({}) is blocked at autonomy supervised",
                programs.join(", ")
            )));
        }
        Ok(CommandCheck {
            risk,
            needs_approval,
            programs,
        })
    }

    fn check_segment(&self, words: &[String], cwd: &mut PathBuf) -> Result<Risk, CommandDenied> {
        let program = &words[0];
        if program.contains('=') && !program.starts_with('=') && !program.starts_with('-') {
            return Err(deny(format!(
                "environment assignment '{program}' is not allowed"
            )));
        }
        let allowed = self.allowed_commands();
        let name = if program.contains('/') {
            if !allowed.iter().any(|a| a == program) && !allowed.iter().any(|a| a == "*") {
                return Err(deny(format!(
                    "'{program}': programs given by path must be listed exactly in allowed_commands"
                )));
            }
            self.check_path_token(cwd, program, PathUse::Read)?;
            Path::new(program)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        } else {
            program.clone()
        };
        let is_builtin_cd = name == "cd";
        if !is_builtin_cd && !allowed.iter().any(|a| a == "*" || *a == name) {
            return Err(deny(format!(
                "'{name}' is not in the allowed commands of agent '{}' ({})",
                self.alias(),
                allowed.join(", ")
            )));
        }
        let args = &words[1..];
        refuse_injection(&name, args)?;
        if is_builtin_cd {
            let target = args.first().map(String::as_str).unwrap_or(".");
            self.check_path_token(cwd, target, PathUse::Read)?;
            *cwd = self
                .resolve(&cwd.join(target))
                .map_err(|d| deny(d.to_string()))?;
            return Ok(Risk::Low);
        }
        for arg in args {
            if let Some(value) = arg
                .strip_prefix("--")
                .and_then(|a| a.split_once('='))
                .map(|(_, v)| v)
            {
                self.check_path_token(cwd, value, PathUse::Any)?;
            } else if arg.starts_with('-') && arg.len() > 2 && !arg.starts_with("--") {
                let attached = &arg[2..];
                if attached.contains('/') || attached.starts_with('.') {
                    self.check_path_token(cwd, attached, PathUse::Any)?;
                }
            } else if !arg.starts_with('-') {
                self.check_path_token(cwd, arg, PathUse::Any)?;
            }
        }
        let risk = if HIGH_RISK.contains(&name.as_str()) {
            Risk::High
        } else if MEDIUM_RISK.contains(&name.as_str())
            || (name == "git"
                && args
                    .iter()
                    .find(|a| !a.starts_with('-'))
                    .is_some_and(|sub| GIT_WRITES.contains(&sub.as_str())))
            || (name == "sed"
                && args
                    .iter()
                    .any(|a| a.starts_with("-i") || a == "--in-place"))
        {
            Risk::Medium
        } else {
            Risk::Low
        };
        Ok(risk)
    }

    /// Checks one word the command may use as a path.
    fn check_path_token(
        &self,
        cwd: &Path,
        token: &str,
        use_: PathUse,
    ) -> Result<(), CommandDenied> {
        if token.is_empty() || token.contains("://") {
            return Ok(());
        }
        if token.starts_with('~') {
            return Err(deny(format!(
                "'{token}': '~' paths are not allowed; use a path in the workspace"
            )));
        }
        let path = if Path::new(token).is_absolute() {
            PathBuf::from(token)
        } else {
            cwd.join(token)
        };
        let result = match use_ {
            PathUse::Read => self.can_read(&path).map(|_| ()),
            PathUse::Write => self.can_write(&path).map(|_| ()),
            PathUse::Any => match self.can_read(&path) {
                Ok(_) => Ok(()),
                Err(read_denied) => self.can_write(&path).map(|_| ()).map_err(|_| read_denied),
            },
        };
        result.map_err(|d| deny(format!("path '{token}' is not allowed: {}", d.reason)))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PathUse {
    Read,
    Write,
    Any,
}

/// Option forms that run other programs or code, refused per program.
fn refuse_injection(program: &str, args: &[String]) -> Result<(), CommandDenied> {
    let has = |pred: &dyn Fn(&str) -> bool| args.iter().any(|a| pred(a));
    let refused = match program {
        "find" => has(&|a| {
            matches!(
                a,
                "-exec" | "-execdir" | "-ok" | "-okdir" | "-delete" | "-fprint" | "-fls"
            )
        }),
        "git" => {
            has(&|a| {
                a == "-c"
                    || a.starts_with("--upload-pack")
                    || a.starts_with("--exec")
                    || a == "--config-env"
            }) || args
                .iter()
                .find(|a| !a.starts_with('-'))
                .is_some_and(|s| s == "config" || s.starts_with("alias"))
        }
        "python" | "python3" | "perl" | "ruby" => {
            has(&|a| a.starts_with("-c") || a.starts_with("-m") || a.starts_with("-e"))
        }
        "node" => has(&|a| {
            a.starts_with("-e")
                || a.starts_with("--eval")
                || a.starts_with("-p")
                || a.starts_with("--print")
        }),
        "sh" | "bash" | "dash" | "zsh" => has(&|a| a.starts_with("-c")),
        "xargs" | "env" | "nohup" | "timeout" | "nice" | "exec" | "eval" | "command"
        | "builtin" | "source" | "." => true,
        "awk" | "gawk" => {
            has(&|a| a.contains("system") || a.contains("| getline") || a.contains("|&"))
        }
        "sed" => has(&|a| {
            a.contains("/e") || a.starts_with('e') || a.contains(";e") || a.contains("\ne")
        }),
        _ => false,
    };
    if refused {
        return Err(deny(format!(
            "'{program}' with these arguments can run other programs or code; refused"
        )));
    }
    Ok(())
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

    #[test]
    fn lexer_refuses_what_cannot_be_checked() {
        for bad in [
            "echo $HOME",
            "cat $(echo ..)/x",
            "cat `pwd`",
            "sleep 1 &",
            "cat <(ls)",
            "cat <<EOF",
            "(cd ..)",
            "echo \"$X\"",
        ] {
            assert!(lex(bad).is_err(), "{bad} should be refused");
        }
        assert!(lex("echo '$HOME'").is_ok(), "single quotes are literal");
    }
}
