//! Exec-capable commands (PERM-4): programs that can start other programs or run code the
//! policy never sees. They are refused when they only wrap another command (`xargs`, `env`,
//! `timeout`, ... would hide it from the allowlist) or when their repository config runs
//! programs (`git`: use the `git_operations` tool); otherwise they are classed exec-capable,
//! which needs the operator's approval under autonomy `supervised` and is listed by
//! `warren security posture`. Some programs are exec-capable always (interpreters, `awk`,
//! `make`, editors and pagers, `ssh`); others only with certain options (`sort
//! --compress-program`, `tar -I`, `sed` scripts with `w`/`r` or read from a file). The kernel
//! sandbox stays the boundary for what such code then does.

use super::{CommandDenied, deny};

/// Programs that interpret code or start other programs whatever their arguments.
const ALWAYS: &[&str] = &[
    "R", "Rscript", "ant", "apt", "apt-get", "at", "awk", "bash", "batch", "bun", "bundle", "c++",
    "cargo", "cc", "clang", "clang++", "cmake", "composer", "csh", "dash", "deno", "docker",
    "doas", "dotnet", "dpkg", "ed", "emacs", "ex", "expect", "fish", "g++", "gawk", "gcc", "gdb",
    "gem", "ghci", "gmake", "go", "gradle", "groovy", "guile", "irb", "java", "jshell", "julia",
    "ksh", "kubectl", "less", "lldb", "lua", "luajit", "make", "man", "mariadb", "mawk", "meson",
    "mksh", "more", "most", "mvn", "mysql", "nawk", "ninja", "node", "nodejs", "npm", "npx",
    "nvim", "ocaml", "patch", "perl", "php", "pip", "pipx", "pnpm", "podman", "psql", "pwsh",
    "pypy", "python", "racket", "rake", "rbash", "rsync", "ruby", "runghc", "rustc", "sbcl",
    "scala", "scp", "screen", "sftp", "sh", "sqlite", "ssh", "su", "sudo", "tclsh", "tcsh", "tmux",
    "valgrind", "vi", "view", "vim", "wish", "yarn", "zsh",
];

/// Programs that are exec-capable only with certain options or scripts.
const WITH_OPTIONS: &[&str] = &[
    "diff3", "install", "sdiff", "sed", "sort", "split", "tar", "zip",
];

/// Programs that only run another command (or change how the shell runs one): the allowlist
/// would see the wrapper, never the command, so they are refused outright.
const WRAPPERS: &[&str] = &[
    ".",
    "alias",
    "builtin",
    "busybox",
    "chroot",
    "chrt",
    "command",
    "coproc",
    "declare",
    "enable",
    "env",
    "eval",
    "exec",
    "export",
    "fc",
    "flock",
    "hash",
    "ionice",
    "let",
    "local",
    "ltrace",
    "newgrp",
    "nice",
    "nohup",
    "nsenter",
    "parallel",
    "popd",
    "prlimit",
    "pushd",
    "readonly",
    "runuser",
    "script",
    "setpriv",
    "setsid",
    "sg",
    "shopt",
    "source",
    "stdbuf",
    "strace",
    "systemd-run",
    "taskset",
    "time",
    "timeout",
    "toybox",
    "trap",
    "typeset",
    "unshare",
    "watch",
    "xargs",
];

/// Shell reserved words: bash would read a compound command the policy does not parse.
const RESERVED: &[&str] = &[
    "case", "do", "done", "elif", "else", "esac", "fi", "for", "function", "if", "in", "select",
    "then", "until", "while",
];

/// `python3.12` → `python`, `perl5.36` → `perl`, `pip3` → `pip`: versioned names of one
/// program are one program.
pub(super) fn base_name(name: &str) -> &str {
    let trimmed = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    if trimmed.is_empty() { name } else { trimmed }
}

/// Every program this module classes exec-capable (always or with options), sorted.
pub(super) fn known() -> Vec<&'static str> {
    let mut all: Vec<&'static str> = ALWAYS.iter().chain(WITH_OPTIONS).copied().collect();
    all.sort_unstable();
    all
}

/// Whether an allowed command `name` can be exec-capable in some invocation.
pub(super) fn may_be_exec_capable(name: &str) -> bool {
    let base = base_name(name);
    ALWAYS.contains(&name) || ALWAYS.contains(&base) || WITH_OPTIONS.contains(&base)
}

/// Whether `arg` is the GNU long option `name`, spelled whole or as a prefix (getopt accepts
/// any unambiguous one: `--compress=sh` is `--compress-program=sh`), with or without `=value`.
fn long_opt(arg: &str, name: &str) -> bool {
    arg.strip_prefix("--")
        .map(|a| a.split('=').next().unwrap_or(""))
        .is_some_and(|n| !n.is_empty() && name.starts_with(n))
}

/// The value of the long option at `args[i]`: after `=`, else the next argument.
fn long_value(args: &[String], i: usize) -> Option<&str> {
    match args[i].split_once('=') {
        Some((_, v)) => Some(v),
        None => args.get(i + 1).map(String::as_str),
    }
}

/// Refuses wrappers, reserved words, `git` and the option forms that run code outright.
pub(super) fn refuse(name: &str, args: &[String]) -> Result<(), CommandDenied> {
    let base = base_name(name);
    if RESERVED.contains(&name) {
        return Err(deny(format!(
            "'{name}' starts a compound command the policy does not read; run the commands one by one"
        )));
    }
    if WRAPPERS.contains(&name) || WRAPPERS.contains(&base) {
        return Err(deny(format!(
            "'{name}' runs another command (or changes how the shell runs one), which the allowlist cannot check; run the command itself"
        )));
    }
    if base == "git" {
        return Err(deny(
            "'git' does not run in the shell: a repository's config (core.fsmonitor, hooks, aliases, pagers) would start programs no allowlist checks; use the git_operations tool",
        ));
    }
    let has = |pred: &dyn Fn(&str) -> bool| args.iter().any(|a| pred(a));
    let refused = match base {
        "find" => has(&|a| {
            matches!(
                a,
                "-exec"
                    | "-execdir"
                    | "-ok"
                    | "-okdir"
                    | "-delete"
                    | "-fprint"
                    | "-fprint0"
                    | "-fprintf"
                    | "-fls"
            )
        }),
        "python" | "pypy" | "perl" | "ruby" | "php" | "lua" => has(&|a| {
            a.starts_with("-c") || a.starts_with("-m") || a.starts_with("-e") || a.starts_with("-r")
        }),
        "node" | "nodejs" | "deno" | "bun" => has(&|a| {
            a.starts_with("-e")
                || a.starts_with("--eval")
                || a.starts_with("-p")
                || a.starts_with("--print")
                || a == "eval"
        }),
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "mksh" | "rbash" | "fish" | "csh" | "tcsh" => {
            has(&|a| a.starts_with('-') && !a.starts_with("--") && a.contains('c'))
        }
        "awk" | "gawk" | "mawk" | "nawk" => has(&|a| {
            a.contains("system")
                || a.contains("getline")
                || a.contains("|&")
                || a.contains("| \"")
                || a.contains("|\"")
        }),
        "sed" => sed(args).runs_commands,
        _ => false,
    };
    if refused {
        return Err(deny(format!(
            "'{name}' with these arguments runs other programs or code; refused"
        )));
    }
    Ok(())
}

/// Why `name args` is exec-capable, or `None`. Called after [`refuse`].
pub(super) fn classify(name: &str, args: &[String]) -> Option<&'static str> {
    let base = base_name(name);
    if ALWAYS.contains(&name) || ALWAYS.contains(&base) {
        return Some("it runs code or other programs");
    }
    let has = |pred: &dyn Fn(&str) -> bool| args.iter().any(|a| pred(a));
    match base {
        "sed" => sed(args).exec_capable,
        "sort" => has(&|a| long_opt(a, "compress-program"))
            .then_some("--compress-program starts a program"),
        "tar" => {
            let long = has(&|a| {
                [
                    "to-command",
                    "use-compress-program",
                    "checkpoint-action",
                    "info-script",
                    "new-volume-script",
                    "rsh-command",
                    "rmt-command",
                ]
                .iter()
                .any(|o| long_opt(a, o))
            });
            let short = args.iter().enumerate().any(|(i, a)| {
                let cluster = match a.strip_prefix('-') {
                    Some(c) if !c.starts_with('-') => c,
                    // Old-style first argument: `tar xIf prog a.tar`.
                    None if i == 0 => a.as_str(),
                    _ => "",
                };
                cluster.contains(['I', 'F'])
            });
            let remote = !has(&|a| long_opt(a, "force-local"))
                && has(&|a| !a.starts_with('-') && a.contains(':'));
            (long || short || remote).then_some(
                "its options (-I, --to-command, --checkpoint-action, host:archive) start programs",
            )
        }
        "zip" => has(&|a| a.starts_with("-TT") || long_opt(a, "unzip-command"))
            .then_some("-TT / --unzip-command starts a program"),
        "split" => has(&|a| long_opt(a, "filter")).then_some("--filter runs a shell command"),
        "install" => {
            has(&|a| long_opt(a, "strip-program")).then_some("--strip-program starts a program")
        }
        "sdiff" | "diff3" => {
            has(&|a| long_opt(a, "diff-program")).then_some("--diff-program starts a program")
        }
        _ => None,
    }
}

/// Programs an option of `name` names to start (`sort --compress-program=gzip`,
/// `tar -I zstd`, `zip -TT cmd`): each must be an allowed command itself.
pub(super) fn named_programs(name: &str, args: &[String]) -> Vec<String> {
    let base = base_name(name);
    let options: &[&str] = match base {
        "sort" => &["compress-program"],
        "tar" => &["use-compress-program"],
        "zip" => &["unzip-command"],
        "install" => &["strip-program"],
        "sdiff" | "diff3" => &["diff-program"],
        _ => return Vec::new(),
    };
    let short = match base {
        "tar" => Some("-I"),
        "zip" => Some("-TT"),
        _ => None,
    };
    let first_word = |v: &str| v.split_whitespace().next().unwrap_or("").to_string();
    let mut out = Vec::new();
    for (i, a) in args.iter().enumerate() {
        if options.iter().any(|o| long_opt(a, o)) {
            out.extend(long_value(args, i).map(first_word));
        } else if let Some(flag) = short
            && let Some(attached) = a.strip_prefix(flag)
        {
            let value = if attached.is_empty() {
                args.get(i + 1).map(String::as_str)
            } else {
                Some(attached)
            };
            out.extend(value.map(first_word));
        }
    }
    out.retain(|p| !p.is_empty());
    out
}

/// What a `sed` invocation does beyond its arguments.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Sed {
    /// A script with the `e` command or the `s///e` flag: runs shell commands.
    pub runs_commands: bool,
    /// Why it is exec-capable otherwise (file I/O in the script, a script file, a script the
    /// policy could not read).
    pub exec_capable: Option<&'static str>,
    /// `-i` / `--in-place`: rewrites its input files.
    pub in_place: bool,
}

const SED_LONG: &[&str] = &[
    "binary",
    "debug",
    "expression",
    "file",
    "follow-symlinks",
    "help",
    "in-place",
    "line-length",
    "null-data",
    "posix",
    "quiet",
    "regexp-extended",
    "sandbox",
    "separate",
    "silent",
    "unbuffered",
    "version",
    "zero-terminated",
];

/// Reads `sed`'s options and scripts the way GNU sed does (options may follow files; without
/// `-e`/`-f` the first operand is the script).
pub(super) fn sed(args: &[String]) -> Sed {
    let mut out = Sed::default();
    let mut scripts: Vec<String> = Vec::new();
    let mut operands: Vec<&str> = Vec::new();
    let (mut script_option, mut from_file, mut sandbox, mut unknown) = (false, false, false, false);
    let mut i = 0;
    let mut options_end = false;
    while i < args.len() {
        let a = args[i].as_str();
        if options_end || !a.starts_with('-') || a == "-" {
            operands.push(a);
        } else if a == "--" {
            options_end = true;
        } else if let Some(long) = a.strip_prefix("--") {
            let (name, attached) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            let candidates: Vec<&str> = SED_LONG
                .iter()
                .copied()
                .filter(|o| !name.is_empty() && o.starts_with(name))
                .collect();
            let resolved = if candidates.contains(&name) {
                Some(name)
            } else if candidates.len() == 1 {
                candidates.first().copied()
            } else {
                None
            };
            let takes_value = matches!(resolved, Some("expression" | "file" | "line-length"));
            let value = if takes_value && attached.is_none() {
                i += 1;
                args.get(i).map(String::as_str)
            } else {
                attached
            };
            match (resolved, value) {
                (Some("expression"), Some(v)) => {
                    script_option = true;
                    scripts.push(v.to_string());
                }
                (Some("file"), _) => {
                    script_option = true;
                    from_file = true;
                }
                (Some("sandbox"), _) => sandbox = true,
                (Some("in-place"), _) => out.in_place = true,
                (Some("expression" | "line-length"), None) | (None, _) => unknown = true,
                (Some(_), _) => {}
            }
        } else {
            let cluster: Vec<char> = a.chars().skip(1).collect();
            for (k, ch) in cluster.iter().enumerate() {
                match ch {
                    'n' | 'r' | 'E' | 's' | 'u' | 'z' | 'b' => {}
                    'i' => {
                        out.in_place = true;
                        break; // the rest is the backup suffix
                    }
                    'e' | 'f' | 'l' => {
                        let rest: String = cluster[k + 1..].iter().collect();
                        let value = if rest.is_empty() {
                            i += 1;
                            args.get(i).cloned()
                        } else {
                            Some(rest)
                        };
                        match (ch, value) {
                            ('e', Some(v)) => {
                                script_option = true;
                                scripts.push(v);
                            }
                            ('f', _) => {
                                script_option = true;
                                from_file = true;
                            }
                            ('l', Some(_)) => {}
                            _ => unknown = true,
                        }
                        break;
                    }
                    _ => unknown = true,
                }
            }
        }
        i += 1;
    }
    if !script_option {
        match operands.first() {
            Some(s) => scripts.push((*s).to_string()),
            None => unknown = true,
        }
    }
    for s in &scripts {
        fold(&mut out, sed_script(s));
    }
    if sandbox {
        // GNU sed --sandbox rejects e, r and w itself.
        out.runs_commands = false;
        out.exec_capable = None;
        return out;
    }
    if from_file && out.exec_capable.is_none() {
        out.exec_capable = Some("sed -f runs a script file the policy cannot read");
    }
    if unknown && out.exec_capable.is_none() {
        out.exec_capable = Some("sed options the policy could not read");
    }
    out
}

fn fold(out: &mut Sed, script: SedScript) {
    match script {
        SedScript::Plain => {}
        SedScript::Exec => out.runs_commands = true,
        SedScript::Files => {
            out.exec_capable
                .get_or_insert("its script reads or writes files (r, R, w, W)");
        }
        SedScript::Unknown => {
            out.exec_capable
                .get_or_insert("its script could not be read by the policy");
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum SedScript {
    Plain,
    Files,
    Unknown,
    Exec,
}

/// Classifies one GNU sed script. Whenever the reading is uncertain the answer is `Unknown`
/// (exec-capable), never `Plain`: text this parser skips (labels, a/i/c text, regexes) ends
/// no later than where sed ends it.
pub(super) fn sed_script(script: &str) -> SedScript {
    let b: Vec<char> = script.chars().collect();
    let n = b.len();
    let mut i = 0;
    let mut worst = SedScript::Plain;
    let blank = |c: char| c == ' ' || c == '\t';
    loop {
        while i < n && (b[i].is_whitespace() || b[i] == ';' || b[i] == '}') {
            i += 1;
        }
        if i >= n {
            return worst;
        }
        if b[i] == '#' {
            while i < n && b[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if !sed_address(&b, &mut i, false) {
            return SedScript::Unknown;
        }
        while i < n && blank(b[i]) {
            i += 1;
        }
        if i < n && b[i] == ',' {
            i += 1;
            while i < n && blank(b[i]) {
                i += 1;
            }
            if !sed_address(&b, &mut i, true) {
                return SedScript::Unknown;
            }
        }
        while i < n && (blank(b[i]) || b[i] == '!') {
            i += 1;
        }
        let Some(&c) = b.get(i) else {
            return SedScript::Unknown;
        };
        i += 1;
        match c {
            '{' => continue,
            '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'n' | 'N' | 'p' | 'P' | 'x' | 'z' | 'F' => {}
            'l' | 'L' | 'q' | 'Q' => {
                while i < n && (blank(b[i]) || b[i].is_ascii_digit()) {
                    i += 1;
                }
            }
            ':' | 'b' | 't' | 'T' | 'v' => {
                while i < n && blank(b[i]) {
                    i += 1;
                }
                let start = i;
                while i < n && !b[i].is_whitespace() && b[i] != ';' && b[i] != '}' {
                    i += 1;
                }
                if c == ':' && i == start {
                    return SedScript::Unknown;
                }
            }
            'a' | 'i' | 'c' => {
                // Text to the end of the line; a backslash continues it on the next.
                while i < n && b[i] != '\n' {
                    i += if b[i] == '\\' { 2 } else { 1 };
                }
            }
            'r' | 'R' | 'w' | 'W' => {
                worst = worst.max(SedScript::Files);
                while i < n && b[i] != '\n' {
                    i += 1;
                }
            }
            'e' => return SedScript::Exec,
            's' | 'y' => {
                let Some(&delim) = b.get(i) else {
                    return SedScript::Unknown;
                };
                if delim == '\n' || delim == '\\' {
                    return SedScript::Unknown;
                }
                i += 1;
                if !sed_delimited(&b, &mut i, delim, c == 's')
                    || !sed_delimited(&b, &mut i, delim, false)
                {
                    return SedScript::Unknown;
                }
                if c == 's' {
                    while let Some(&f) = b.get(i) {
                        match f {
                            'g' | 'p' | 'i' | 'I' | 'm' | 'M' => i += 1,
                            d if d.is_ascii_digit() => i += 1,
                            'e' => return SedScript::Exec,
                            'w' => {
                                worst = worst.max(SedScript::Files);
                                while i < n && b[i] != '\n' {
                                    i += 1;
                                }
                            }
                            _ => break,
                        }
                    }
                }
            }
            _ => return SedScript::Unknown,
        }
        while i < n && blank(b[i]) {
            i += 1;
        }
        if i < n && !matches!(b[i], ';' | '\n' | '}' | '#') {
            return SedScript::Unknown;
        }
    }
}

/// Skips one address (`12`, `0~4`, `$`, `/re/I`, `\%re%`; after a comma also `+N`, `~N`).
fn sed_address(b: &[char], i: &mut usize, second: bool) -> bool {
    let n = b.len();
    let digits = |i: &mut usize| {
        while *i < n && b[*i].is_ascii_digit() {
            *i += 1;
        }
    };
    match b.get(*i) {
        Some('+' | '~') if second => {
            *i += 1;
            digits(i);
        }
        Some(d) if d.is_ascii_digit() => {
            digits(i);
            if b.get(*i) == Some(&'~') {
                *i += 1;
                digits(i);
            }
        }
        Some('$') => *i += 1,
        Some('/') | Some('\\') => {
            if b[*i] == '\\' {
                *i += 1;
            }
            let Some(&delim) = b.get(*i) else {
                return false;
            };
            if delim == '\n' || delim == '\\' {
                return false;
            }
            *i += 1;
            if !sed_delimited(b, i, delim, true) {
                return false;
            }
            while *i < n && matches!(b[*i], 'I' | 'M') {
                *i += 1;
            }
        }
        _ => {}
    }
    true
}

/// Skips a regex (bracket expressions understood, as GNU sed does) or a replacement up to and
/// including the unescaped `delim`.
fn sed_delimited(b: &[char], i: &mut usize, delim: char, regex: bool) -> bool {
    let n = b.len();
    while *i < n {
        let c = b[*i];
        if c == '\\' {
            *i += 2;
            continue;
        }
        if c == delim {
            *i += 1;
            return true;
        }
        if c == '\n' && regex {
            return false;
        }
        if regex && c == '[' {
            *i += 1;
            if b.get(*i) == Some(&'^') {
                *i += 1;
            }
            if b.get(*i) == Some(&']') {
                *i += 1;
            }
            while *i < n && b[*i] != ']' {
                if b[*i] == '[' && matches!(b.get(*i + 1), Some(':' | '.' | '=')) {
                    let close = b[*i + 1];
                    *i += 2;
                    while *i + 1 < n && !(b[*i] == close && b[*i + 1] == ']') {
                        *i += 1;
                    }
                    *i += 1;
                }
                *i += 1;
            }
            if *i >= n {
                return false;
            }
        }
        *i += 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn sed_scripts_are_read_like_gnu_sed() {
        for (script, want) in [
            ("p", SedScript::Plain),
            ("s/a/b/g", SedScript::Plain),
            ("s/[/]/X/", SedScript::Plain),
            ("s/[]]/X/2", SedScript::Plain),
            ("/x/I,+3{s|a|b|;p}", SedScript::Plain),
            ("$!N;P;D", SedScript::Plain),
            ("0~4d", SedScript::Plain),
            (":a;N;$!ba;s/\\n/ /g", SedScript::Plain),
            ("y/abc/xyz/", SedScript::Plain),
            ("1i\\\nheader", SedScript::Plain),
            ("$a foo; e id", SedScript::Plain),
            ("1e id", SedScript::Exec),
            ("e", SedScript::Exec),
            ("s/x/id/e", SedScript::Exec),
            ("s/[/]/X/;1e id", SedScript::Exec),
            (":a;e id", SedScript::Exec),
            ("/x/I e id", SedScript::Exec),
            ("b end;e id", SedScript::Exec),
            ("a foo\\\ne id", SedScript::Plain),
            ("a foo\ne id", SedScript::Exec),
            ("w out", SedScript::Files),
            ("s/a/b/w out", SedScript::Files),
            ("1r /etc/passwd", SedScript::Files),
            ("k", SedScript::Unknown),
            ("s/a/b", SedScript::Unknown),
            ("s/a/b/x", SedScript::Unknown),
        ] {
            assert_eq!(sed_script(script), want, "{script:?}");
        }
    }

    #[test]
    fn sed_options_find_every_script() {
        assert!(sed(&s(&["-n", "1e id", "f"])).runs_commands);
        assert!(sed(&s(&["-ne", "1e id"])).runs_commands);
        assert!(sed(&s(&["-e1e id"])).runs_commands);
        assert!(sed(&s(&["--expr=1e id"])).runs_commands);
        assert!(sed(&s(&["f", "--expression", "s/x/y/e"])).runs_commands);
        assert!(
            !sed(&s(&["-n", "p", "e.txt"])).runs_commands,
            "files are not scripts"
        );
        assert_eq!(sed(&s(&["-n", "p", "e.txt"])).exec_capable, None);
        assert!(sed(&s(&["-f", "x.sed", "in"])).exec_capable.is_some());
        assert!(sed(&s(&["w out", "in"])).exec_capable.is_some());
        assert!(sed(&s(&["-ni", "p", "in"])).in_place);
        assert!(sed(&s(&["--in-place=.bak", "p", "in"])).in_place);
        let sandboxed = sed(&s(&["--sandbox", "1e id"]));
        assert!(!sandboxed.runs_commands && sandboxed.exec_capable.is_none());
        assert!(sed(&s(&["--bogus", "p"])).exec_capable.is_some());
    }

    #[test]
    fn option_forms_that_start_programs_are_exec_capable() {
        assert!(classify("sort", &s(&["--compress-program=sh", "f"])).is_some());
        assert!(classify("sort", &s(&["--compress=sh", "f"])).is_some());
        assert!(classify("sort", &s(&["-r", "f"])).is_none());
        assert!(classify("tar", &s(&["-xf", "a.tar", "--to-command=sh"])).is_some());
        assert!(classify("tar", &s(&["xIf", "sh", "a.tar"])).is_some());
        assert!(classify("tar", &s(&["-cf", "host:a.tar", "x"])).is_some());
        assert!(classify("tar", &s(&["-czf", "a.tar.gz", "x"])).is_none());
        assert!(classify("zip", &s(&["-T", "-TT", "sh", "a.zip", "x"])).is_some());
        assert!(classify("awk", &s(&["{print}"])).is_some());
        assert!(classify("python3.12", &s(&["x.py"])).is_some());
        assert!(classify("cat", &s(&["x"])).is_none());
        assert_eq!(
            named_programs("sort", &s(&["--compress-program=sh", "f"])),
            vec!["sh".to_string()]
        );
        assert_eq!(
            named_programs("tar", &s(&["-I", "zstd -19", "-cf", "a", "b"])),
            vec!["zstd".to_string()]
        );
    }
}
