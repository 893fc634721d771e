//! The shell command policy (PERM-4): what the `shell` tool lets through before the sandbox.
//!
//! A command is lexed like bash reads it ([`lex`]: quotes, escapes, operators, redirects) and
//! refused when it uses anything bash would expand or interpret that the lexer does not evaluate
//! (substitutions, `$'…'`, braces, globs, tildes, history, comments, background jobs,
//! here-documents), or an environment assignment. Each segment's program must be in the risk
//! profile's allowlist (`*` = any); wrappers that hide the command they run (`xargs`, `env`,
//! `timeout`, ...), shell keywords and `git` (use `git_operations`) are refused, and so are known
//! option-injection forms (`find -exec`, `python -c`, `sed 1e`, ...). Programs that can still
//! run other programs or code are classed exec-capable ([`exec`]): approval under `supervised`,
//! listed in posture. Every argument and redirect target is then treated as a path the
//! command may touch: redirect targets need write access, input redirects read access, other
//! arguments read or write access, all resolved like the file tools (PERM-3..6). Whatever still
//! escapes this check (a script that builds paths at run time) is stopped by the kernel sandbox.

mod exec;
mod lex;

use std::path::{Path, PathBuf};

use serde::Serialize;
use warren_config::schema::Autonomy;

use crate::policy::SecurityPolicy;
use lex::{Redirect, Token, lex};

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
/// What the policy concluded about an allowed command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommandCheck {
    pub risk: Risk,
    /// Whether the runtime must obtain an approval before running it.
    pub needs_approval: bool,
    /// The programs of each segment, in order.
    pub programs: Vec<String>,
    /// Whether a program of the command can run other programs or code the policy does not
    /// see (`awk`, interpreters, `sort --compress-program`, ...): approval under `supervised`.
    pub exec_capable: bool,
    /// Those programs, each with the reason (`awk: it runs code or other programs`).
    pub exec_capable_programs: Vec<String>,
}

/// A refused command: the reason names the token, path or rule at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("command refused: {0}")]
pub struct CommandDenied(pub String);

pub(crate) fn deny(msg: impl Into<String>) -> CommandDenied {
    CommandDenied(msg.into())
}

/// One simple command of a command line: its words, its redirects and the operator before it.
struct Segment {
    op_before: Option<&'static str>,
    words: Vec<String>,
    redirects: Vec<(Redirect, String)>,
}

/// Splits tokens into segments; refuses empty ones and redirects without a target.
fn segments(tokens: Vec<Token>) -> Result<Vec<Segment>, CommandDenied> {
    let mut out = Vec::new();
    let mut current = Segment {
        op_before: None,
        words: Vec::new(),
        redirects: Vec::new(),
    };
    let mut iter = tokens.into_iter();
    loop {
        let token = iter.next();
        match token {
            Some(Token::Word(w)) => current.words.push(w),
            Some(Token::Redirect(kind)) => {
                let Some(Token::Word(target)) = iter.next() else {
                    return Err(deny("a redirect needs a target"));
                };
                current.redirects.push((kind, target));
            }
            Some(Token::Op(op)) => {
                if current.words.is_empty() {
                    return Err(deny("empty command segment"));
                }
                let next = Segment {
                    op_before: Some(op),
                    words: Vec::new(),
                    redirects: Vec::new(),
                };
                out.push(std::mem::replace(&mut current, next));
            }
            None => {
                if !current.words.is_empty() {
                    out.push(current);
                } else if !current.redirects.is_empty() {
                    return Err(deny("a redirect needs a command"));
                }
                break;
            }
        }
    }
    Ok(out)
}

/// What one segment amounts to.
struct SegmentCheck {
    risk: Risk,
    /// The reason the program is exec-capable, if it is.
    exec: Option<&'static str>,
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
        let segments = segments(lex(command)?)?;
        if segments.is_empty() {
            return Err(deny("empty command"));
        }
        let mut risk = Risk::Low;
        let mut programs = Vec::new();
        let mut exec_capable_programs = Vec::new();
        let mut cwd = self.workspace().to_path_buf();
        for (k, segment) in segments.iter().enumerate() {
            for (kind, target) in &segment.redirects {
                match kind {
                    Redirect::HereString => {}
                    Redirect::Out => self.check_path_token(&cwd, target, PathUse::Write)?,
                    Redirect::In => self.check_path_token(&cwd, target, PathUse::Read)?,
                }
            }
            if segment.words[0] == "cd" {
                // The tracked directory must be the one bash is in for every later command:
                // `cd` first in an `&&` chain that runs to the end.
                let certain = matches!(segment.op_before, None | Some(";" | "&&"))
                    && segments[k + 1..].iter().all(|s| s.op_before == Some("&&"));
                if !certain {
                    return Err(deny(
                        "'cd' is allowed only before '&&' to the end of the command (cd DIR && ...): after '||', '|' or ';' the directory of later commands would be uncertain",
                    ));
                }
            }
            let checked = self.check_segment(&segment.words, &mut cwd)?;
            risk = risk.max(checked.risk);
            programs.push(segment.words[0].clone());
            if let Some(why) = checked.exec {
                exec_capable_programs.push(format!("{}: {why}", segment.words[0]));
            }
        }
        let exec_capable = !exec_capable_programs.is_empty();
        let (needs_approval, blocked) = match (self.autonomy(), risk) {
            (Autonomy::ReadOnly, _) => (false, true),
            (Autonomy::Supervised, Risk::High) => (false, true),
            (Autonomy::Supervised, Risk::Medium) => (true, false),
            (Autonomy::Supervised, Risk::Low) => (exec_capable, false),
            (Autonomy::Full, Risk::High) => (true, false),
            (Autonomy::Full, _) => (false, false),
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
            exec_capable,
            exec_capable_programs,
        })
    }

    /// Which allowed commands of this agent are exec-capable (always, or with some options):
    /// every known one when the allowlist is `*`. Shown by `warren security posture`.
    pub fn exec_capable_allowed(&self) -> Vec<String> {
        let allowed = self.allowed_commands();
        if allowed.iter().any(|a| a == "*") {
            return exec::known().into_iter().map(String::from).collect();
        }
        let mut out: Vec<String> = allowed
            .iter()
            .filter(|a| {
                let name = Path::new(a.as_str())
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                exec::may_be_exec_capable(&name)
            })
            .cloned()
            .collect();
        out.sort();
        out.dedup();
        out
    }

    fn check_segment(
        &self,
        words: &[String],
        cwd: &mut PathBuf,
    ) -> Result<SegmentCheck, CommandDenied> {
        let program = &words[0];
        if program.contains('=') && !program.starts_with('=') && !program.starts_with('-') {
            return Err(deny(format!(
                "environment assignment '{program}' is not allowed"
            )));
        }
        let allowed = self.allowed_commands();
        let any = allowed.iter().any(|a| a == "*");
        let name = if program.contains('/') {
            if !allowed.iter().any(|a| a == program) && !any {
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
        let args = &words[1..];
        // Refusals that hold whatever the allowlist says come first: their message names the
        // right tool (git → git_operations) instead of "not in the allowed commands".
        exec::refuse(&name, args)?;
        if !is_builtin_cd && !any && !allowed.contains(&name) {
            return Err(deny(format!(
                "'{name}' is not in the allowed commands of agent '{}' ({})",
                self.alias(),
                allowed.join(", ")
            )));
        }
        if is_builtin_cd {
            if args.len() > 1 || args.first().is_some_and(|a| a.starts_with('-')) {
                return Err(deny("'cd' takes one directory and no options"));
            }
            // `cd` alone goes to HOME, which is the workspace in the sandbox.
            let home = self.workspace().to_string_lossy();
            let target = args.first().map_or(&*home, String::as_str);
            self.check_path_token(cwd, target, PathUse::Read)?;
            *cwd = self
                .resolve(&cwd.join(target))
                .map_err(|d| deny(d.to_string()))?;
            return Ok(SegmentCheck {
                risk: Risk::Low,
                exec: None,
            });
        }
        for started in exec::named_programs(&name, args) {
            let started_name = Path::new(&started)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !any && !allowed.iter().any(|a| *a == started || *a == started_name) {
                return Err(deny(format!(
                    "'{name}' would start '{started}', which is not in the allowed commands of agent '{}'",
                    self.alias()
                )));
            }
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
            || (name == "sed" && exec::sed(args).in_place)
        {
            Risk::Medium
        } else {
            Risk::Low
        };
        Ok(SegmentCheck {
            risk,
            exec: exec::classify(&name, args),
        })
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
        // An unquoted '~' never gets here (the lexer refuses it); a quoted one is a file name.
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
