//! Escape suite, shell tool and kernel sandbox (PERM-4, SBX-1..3). Each case runs the attack
//! unguarded first (`sh -c` as the same root user: it works), then through Warren: the command
//! policy refuses it, or the Landlock sandbox makes it fail. Cases marked "kernel" use the agent
//! `wild`, whose command policy allows anything, so only Landlock stands in the way.

// Test helpers outside #[test] fns: a failed setup step should panic with its name.
#![allow(clippy::expect_used)]

use crate::common;

use std::fs;

use common::{Fixture, ShellResult, assert_kernel_blocks};
use serde_json::json;
use warren_tools::ToolError;

#[track_caller]
fn assert_refused(f: &Fixture, agent: &str, command: &str) -> String {
    match f.shell(agent, command) {
        Err(ToolError::Denied(msg)) => msg,
        other => panic!("`{command}` should be refused by the command policy, got {other:?}"),
    }
}

/// The unguarded attack works (shows the secret); the guarded one is refused by policy.
#[track_caller]
fn policy_blocks(f: &Fixture, command: &str, marker: &str) -> String {
    let baseline = f.unguarded_shell("main", command);
    assert!(
        baseline.stdout.contains(marker) || baseline.ok(),
        "baseline must work unguarded: {baseline:?}"
    );
    assert_refused(f, "main", command)
}

/// The command run the way the shell tool runs it, with no guard: `bash -c` in the agent's
/// workspace (bash, not `sh`: brace expansion and `>&word` are bash's).
fn unguarded_bash(f: &Fixture, agent: &str, command: &str) -> ShellResult {
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(command)
        .current_dir(f.ws(agent))
        .output()
        .expect("bash");
    ShellResult {
        exit_code: out.status.code().map(i64::from),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Unguarded, bash shows `marker` (on stdout or stderr); through Warren the command is refused.
#[track_caller]
fn bash_attack_refused(f: &Fixture, agent: &str, command: &str, marker: &str) -> String {
    let baseline = unguarded_bash(f, agent, command);
    assert!(
        baseline.stdout.contains(marker) || baseline.stderr.contains(marker),
        "baseline must work unguarded: {baseline:?}"
    );
    assert_refused(f, agent, command)
}

fn python(f: &Fixture, name: &str, code: &str) -> String {
    fs::write(f.ws("wild").join(name), code).expect("script");
    format!("python3 {name}")
}

// ---- matrix through the shell -------------------------------------------------------------------

#[test]
fn shell_cat_sibling_without_grant_perm4() {
    let f = Fixture::new();
    let msg = policy_blocks(
        &f,
        "cat ../../stranger/workspace/secret.txt",
        "SECRET-stranger",
    );
    assert!(msg.contains("no Read grant on 'stranger'"), "{msg}");
}

#[test]
fn shell_list_sibling_without_grant_perm4() {
    let f = Fixture::new();
    policy_blocks(&f, "ls ../../stranger/workspace", "secret.txt");
}

#[test]
fn shell_write_sibling_without_grant_perm4() {
    let f = Fixture::new();
    let target = f.ws("stranger").join("pwn");
    policy_blocks(&f, "echo pwned > ../../stranger/workspace/pwn", "");
    fs::remove_file(&target).expect("baseline created it");
    assert_refused(&f, "main", "echo pwned > ../../stranger/workspace/pwn");
    assert!(!target.exists());
}

#[test]
fn shell_read_of_a_write_only_root_is_stopped_by_landlock_perm3_sbx2() {
    let f = Fixture::new();
    // The path is writable for main, so the policy lets the token through; the kernel refuses the read.
    let cmd = "cat ../../writer/workspace/secret.txt";
    let guarded = f.shell("main", cmd).expect("runs");
    assert_kernel_blocks(&guarded, &f.unguarded_shell("main", cmd), "SECRET-writer");
    assert!(guarded.stderr.contains("Permission denied"), "{guarded:?}");
}

#[test]
fn shell_list_of_a_write_only_root_is_stopped_by_landlock_sbx2() {
    let f = Fixture::new();
    let cmd = "ls ../../writer/workspace";
    let guarded = f.shell("main", cmd).expect("runs");
    assert_kernel_blocks(&guarded, &f.unguarded_shell("main", cmd), "secret.txt");
}

#[test]
fn shell_write_into_a_write_only_root_works_sbx2() {
    let f = Fixture::new();
    let out = f
        .shell("main", "echo delivered > ../../writer/workspace/drop.txt")
        .expect("runs");
    assert!(out.ok(), "{out:?}");
    assert_eq!(
        fs::read_to_string(f.ws("writer").join("drop.txt"))
            .ok()
            .as_deref(),
        Some("delivered\n")
    );
}

#[test]
fn shell_write_into_a_read_only_root_is_refused_perm4() {
    let f = Fixture::new();
    let msg = assert_refused(&f, "main", "echo x >> ../../reader/workspace/secret.txt");
    assert!(msg.contains("only a Read grant"), "{msg}");
}

#[test]
fn kernel_write_into_a_read_only_root_sbx2() {
    let f = Fixture::new();
    let cmd = python(
        &f,
        "w.py",
        "open('../../reader/workspace/secret.txt','a').write('pwned')\nprint('WROTE')\n",
    );
    let guarded = f.shell("wild", &cmd).expect("runs");
    assert!(
        !guarded.ok() && !guarded.stdout.contains("WROTE"),
        "{guarded:?}"
    );
    assert_eq!(
        fs::read_to_string(f.secret("reader")).ok().as_deref(),
        Some("SECRET-reader\n")
    );
    let unguarded = f.unguarded_shell("wild", &cmd);
    assert!(
        unguarded.stdout.contains("WROTE"),
        "baseline: {unguarded:?}"
    );
}

#[test]
fn kernel_exec_from_a_read_only_root_sbx2() {
    let f = Fixture::new();
    let script = f.ws("reader").join("run.sh");
    warren_testkit::write_executable(&script, "#!/bin/sh\necho EXECUTED\n").expect("script");
    let cmd = "../../reader/workspace/run.sh";
    let guarded = f.shell("wild", cmd).expect("runs");
    assert_kernel_blocks(&guarded, &f.unguarded_shell("wild", cmd), "EXECUTED");
}

#[test]
fn kernel_exec_in_a_read_write_root_is_allowed_sbx2() {
    let f = Fixture::new();
    let script = f.ws("both").join("run.sh");
    warren_testkit::write_executable(&script, "#!/bin/sh\necho EXECUTED\n").expect("script");
    let out = f
        .shell("wild", "../../both/workspace/run.sh")
        .expect("runs");
    assert!(out.ok() && out.stdout.contains("EXECUTED"), "{out:?}");
}

#[test]
fn shell_reads_granted_read_root_perm3() {
    let f = Fixture::new();
    let out = f
        .shell("main", "cat ../../reader/workspace/secret.txt")
        .expect("runs");
    assert!(out.ok() && out.stdout.contains("SECRET-reader"), "{out:?}");
}

// ---- shell tricks ---------------------------------------------------------------------------------

#[test]
fn cd_up_then_cat_perm4() {
    let f = Fixture::new();
    policy_blocks(
        &f,
        "cd ../.. && cat stranger/workspace/secret.txt",
        "SECRET-stranger",
    );
}

#[test]
fn command_substitution_builds_the_path_perm4() {
    let f = Fixture::new();
    let msg = policy_blocks(
        &f,
        "cat $(echo ../..)/stranger/workspace/secret.txt",
        "SECRET-stranger",
    );
    assert!(msg.contains("command substitution"), "{msg}");
}

#[test]
fn backtick_substitution_perm4() {
    let f = Fixture::new();
    policy_blocks(
        &f,
        "cat `echo ../../stranger/workspace/secret.txt`",
        "SECRET-stranger",
    );
}

#[test]
fn env_expansion_builds_the_path_perm4() {
    let f = Fixture::new();
    policy_blocks(
        &f,
        "cat $PWD/../../stranger/workspace/secret.txt",
        "SECRET-stranger",
    );
}

#[test]
fn redirect_out_to_a_sibling_perm4() {
    let f = Fixture::new();
    let msg = assert_refused(&f, "main", "echo x > ../../stranger/workspace/x");
    assert!(msg.contains("../../stranger/workspace/x"), "{msg}");
}

#[test]
fn stderr_redirect_to_a_sibling_perm4() {
    let f = Fixture::new();
    assert_refused(&f, "main", "ls nothing 2>../../stranger/workspace/err");
    assert!(!f.ws("stranger").join("err").exists());
}

#[test]
fn input_redirect_from_a_sibling_perm4() {
    let f = Fixture::new();
    policy_blocks(
        &f,
        "cat < ../../stranger/workspace/secret.txt",
        "SECRET-stranger",
    );
}

#[test]
fn here_string_is_data_not_a_path_perm4() {
    let f = Fixture::new();
    let out = f
        .shell("main", "cat <<< ../../stranger/workspace/secret.txt")
        .expect("runs");
    assert!(out.ok() && !out.stdout.contains("SECRET"), "{out:?}");
    assert_refused(
        &f,
        "main",
        "cat <<< \"$(cat ../../stranger/workspace/secret.txt)\"",
    );
}

#[test]
fn bash_dash_c_is_refused_and_landlock_stops_it_anyway_sbx3() {
    let f = Fixture::new();
    assert_refused(
        &f,
        "wild",
        "bash -c 'cat ../../stranger/workspace/secret.txt'",
    );
    // Through a script the policy cannot read, the kernel stops it.
    fs::write(
        f.ws("wild").join("s.sh"),
        "cat ../../stranger/workspace/secret.txt\n",
    )
    .expect("script");
    let guarded = f.shell("wild", "bash s.sh").expect("runs");
    assert_kernel_blocks(
        &guarded,
        &f.unguarded_shell("wild", "bash s.sh"),
        "SECRET-stranger",
    );
}

// ---- expansions the lexer does not evaluate are refused, named (PERM-4) -----------------------

#[test]
fn brace_expansion_after_an_empty_quote_reaches_an_absolute_path_perm4() {
    let f = Fixture::new();
    let cmd = format!("cat ''{{{},x}}", f.secret("stranger").display());
    let msg = bash_attack_refused(&f, "main", &cmd, "SECRET-stranger");
    assert!(msg.contains("brace expansion"), "{msg}");
}

#[test]
fn glob_through_a_planted_symlink_perm4() {
    let f = Fixture::new();
    std::os::unix::fs::symlink(f.ws("stranger"), f.ws("main").join("innocent")).expect("symlink");
    let msg = bash_attack_refused(&f, "main", "cat innoc*/secret.txt", "SECRET-stranger");
    assert!(msg.contains("glob"), "{msg}");
    for pattern in ["cat innocen?/secret.txt", "cat innocen[t]/secret.txt"] {
        let msg = bash_attack_refused(&f, "main", pattern, "SECRET-stranger");
        assert!(msg.contains("glob"), "{msg}");
    }
}

#[test]
fn tilde_forms_expand_to_a_home_directory_perm4() {
    let f = Fixture::new();
    let home = std::env::var("HOME").expect("HOME");
    for cmd in ["echo x=~", "echo ~", "echo ~root", "echo PATH=/x:~"] {
        let baseline = unguarded_bash(&f, "main", cmd);
        assert!(
            !baseline.stdout.contains('~') && baseline.stdout.contains('/'),
            "bash expands {cmd}: {baseline:?} (HOME {home})"
        );
        let msg = assert_refused(&f, "main", cmd);
        assert!(msg.contains("tilde"), "{msg}");
    }
    // Where bash keeps it, the lexer still refuses rather than guess.
    assert_refused(&f, "main", "echo a:~");
    // Quoted, it is a character.
    let out = f.shell("main", "echo '~'").expect("runs");
    assert_eq!(out.stdout, "~\n");
}

#[test]
fn ansi_c_and_locale_quoting_build_a_path_perm4() {
    let f = Fixture::new();
    let cmd = "cat $'\\x2e\\x2e/\\x2e\\x2e/stranger/workspace/secret.txt'";
    let msg = bash_attack_refused(&f, "main", cmd, "SECRET-stranger");
    assert!(msg.contains("ANSI-C quoting"), "{msg}");
    let cmd = "cat $\"../../stranger/workspace/secret.txt\"";
    let msg = bash_attack_refused(&f, "main", cmd, "SECRET-stranger");
    assert!(msg.contains("locale quoting"), "{msg}");
}

#[test]
fn process_substitution_and_arithmetic_perm4() {
    let f = Fixture::new();
    let msg = bash_attack_refused(
        &f,
        "main",
        "cat <(cat ../../stranger/workspace/secret.txt)",
        "SECRET-stranger",
    );
    assert!(msg.contains("process substitution"), "{msg}");
    let msg = bash_attack_refused(&f, "main", "echo $((6*7))", "42");
    assert!(msg.contains("arithmetic"), "{msg}");
}

/// Bash reads `#'...` as a comment, so the quote never opens and the next line runs: a program
/// outside the allowlist. The lexer used to read it as one quoted word.
#[test]
fn a_comment_hides_an_unlisted_program_from_the_allowlist_perm4() {
    let f = Fixture::new();
    let cmd = "echo #'\npython3 -V\n'";
    let msg = bash_attack_refused(&f, "main", cmd, "Python 3");
    assert!(msg.contains("comments"), "{msg}");
}

/// `>&word` with a word that is not a descriptor writes to the FILE `word` in bash; the lexer
/// used to read a descriptor and check the rest as an argument.
#[test]
fn descriptor_redirect_to_a_file_through_a_symlink_perm4() {
    let f = Fixture::new();
    std::os::unix::fs::symlink(f.ws("stranger"), f.ws("main").join("1l")).expect("symlink");
    let landed = f.ws("stranger").join("..").join("pwn");
    let baseline = unguarded_bash(&f, "main", "echo x >&1l/../pwn");
    assert!(baseline.ok() && landed.exists(), "baseline: {baseline:?}");
    fs::remove_file(&landed).expect("cleanup");
    let msg = assert_refused(&f, "main", "echo x >&1l/../pwn");
    assert!(msg.contains("descriptor"), "{msg}");
    assert!(!landed.exists());
}

/// `'>'&` used to become part of a word: bash runs the command as a background job.
#[test]
fn a_quoted_redirect_char_before_ampersand_is_a_background_job_perm4() {
    let f = Fixture::new();
    let marker = f.ws("wild").join("late");
    fs::write(
        f.ws("wild").join("bg.py"),
        format!(
            "import os,time\nos.close(1)\nos.close(2)\ntime.sleep(1)\nopen('{}','w').write('x')\n",
            marker.display()
        ),
    )
    .expect("script");
    let baseline = unguarded_bash(&f, "wild", "python3 bg.py '>'&");
    assert!(
        baseline.ok() && !marker.exists(),
        "returned at once: {baseline:?}"
    );
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(marker.exists(), "the baseline ran in the background");
    fs::remove_file(&marker).expect("cleanup");
    let msg = assert_refused(&f, "wild", "python3 bg.py '>'&");
    assert!(msg.contains("background"), "{msg}");
}

/// A `cd` that may not run (after `&&` that fails, before `;`) used to move the policy's idea
/// of the directory anyway: the next path was checked against the wrong place.
#[test]
fn cd_that_may_not_run_cannot_move_the_checked_directory_perm4() {
    let f = Fixture::new();
    fs::create_dir_all(f.ws("main").join("sub/d")).expect("dirs");
    let cmd = "test -e nothing && cd sub/d; cat ../../stranger/workspace/secret.txt";
    let msg = bash_attack_refused(&f, "main", cmd, "SECRET-stranger");
    assert!(msg.contains("'cd'"), "{msg}");
    for uncertain in [
        "test -e nothing || cd sub/d && cat ../../x",
        "cd sub/d | cat",
        "cd sub/d; cat x",
        "cd - && cat x",
    ] {
        assert_refused(&f, "main", uncertain);
    }
    let out = f.shell("main", "cd sub && cd d && pwd").expect("runs");
    assert!(
        out.stdout.trim_end().ends_with("workspace/sub/d"),
        "{out:?}"
    );
}

// ---- exec-capable commands (PERM-4) -------------------------------------------------------

#[test]
fn git_in_the_shell_runs_the_repository_fsmonitor_and_is_refused_git6() {
    let f = Fixture::new();
    let repo = f.ws("main");
    for args in [
        &["init", "-q", "."][..],
        &["config", "core.fsmonitor", "echo FSMONITOR-RAN >&2; false"],
    ] {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(&repo)
            .status()
            .expect("git");
        assert!(ok.success());
    }
    let msg = bash_attack_refused(&f, "main", "git status", "FSMONITOR-RAN");
    assert!(msg.contains("git_operations"), "{msg}");
    assert_refused(&f, "main", "/usr/bin/git status");
}

#[test]
fn awk_piping_to_a_command_is_refused_or_needs_approval_perm4() {
    let f = Fixture::new();
    // A literal command after the pipe: refused outright.
    let msg = bash_attack_refused(&f, "main", "awk 'BEGIN{print \"x\" | \"id\"}'", "uid=");
    assert!(msg.contains("awk"), "{msg}");
    // A command in a variable passes the heuristics; awk is exec-capable, so `supervised`
    // asks the operator first.
    let cmd = "awk 'BEGIN{c=\"id\"; print \"x\" | c}'";
    let baseline = unguarded_bash(&f, "main", cmd);
    assert!(baseline.stdout.contains("uid="), "{baseline:?}");
    let err = f.call("main", "shell", json!({ "command": cmd })).err();
    assert!(
        matches!(&err, Some(ToolError::ApprovalRequired(m)) if m.contains("exec-capable") && m.contains("awk")),
        "{err:?}"
    );
    let check = f
        .policy("main")
        .check_command(cmd)
        .expect("allowed with approval");
    assert!(check.exec_capable && check.needs_approval, "{check:?}");
}

#[test]
fn sort_compress_program_runs_the_input_as_a_script_perm4() {
    let f = Fixture::new();
    fs::write(
        f.ws("main").join("data"),
        "echo SORT-RAN-CODE >&2\n".repeat(20_000),
    )
    .expect("data");
    let cmd = "sort -S 16k --compress-program=sh data";
    let msg = bash_attack_refused(&f, "main", cmd, "SORT-RAN-CODE");
    assert!(
        msg.contains("'sh'") && msg.contains("not in the allowed commands"),
        "{msg}"
    );
    // Abbreviated, the option still names the program.
    assert_refused(&f, "main", "sort -S 16k --compress=sh data");
    // With a program the allowlist has, it is exec-capable: approval under supervised.
    let check = f
        .policy("main")
        .check_command("sort -S 16k --compress-program=cat data")
        .expect("cat is allowed");
    assert!(check.exec_capable && check.needs_approval, "{check:?}");
    let plain = f
        .policy("main")
        .check_command("sort data")
        .expect("plain sort");
    assert!(!plain.exec_capable && !plain.needs_approval, "{plain:?}");
}

#[test]
fn sed_execute_command_is_refused_perm4() {
    let f = Fixture::new();
    fs::write(f.ws("main").join("in.txt"), "line\n").expect("input");
    for cmd in [
        "sed '1e id' in.txt",
        "sed -n 's/line/id/e;p' in.txt",
        "sed -e p -e '1e id' in.txt",
    ] {
        let msg = bash_attack_refused(&f, "main", cmd, "uid=");
        assert!(msg.contains("sed"), "{msg}");
    }
    // `w` writes a file the path rules never see: exec-capable.
    let check = f
        .policy("main")
        .check_command("sed -n 'w out.txt' in.txt")
        .expect("allowed with approval");
    assert!(check.exec_capable && check.needs_approval, "{check:?}");
    let plain = f
        .policy("main")
        .check_command("sed -n 's/a/b/p' e.txt")
        .expect("plain");
    assert!(!plain.exec_capable && !plain.needs_approval, "{plain:?}");
}

#[test]
fn wrappers_that_hide_the_command_are_refused_perm4() {
    let f = Fixture::new();
    for cmd in [
        "stdbuf -o0 cat x",
        "timeout 5 cat x",
        "setsid cat x",
        "nohup cat x",
        "busybox cat x",
        "env cat x",
        "xargs cat",
        "for x in a; do cat x; done",
        "trap 'cat x' EXIT",
    ] {
        let msg = assert_refused(&f, "wild", cmd);
        assert!(
            msg.contains("runs another command") || msg.contains("compound command"),
            "{cmd}: {msg}"
        );
    }
}

#[test]
fn posture_lists_the_exec_capable_allowed_commands_perm4() {
    let f = Fixture::new();
    let main = f.policy("main");
    assert_eq!(main.exec_capable_allowed(), vec!["awk", "sed", "sort"]);
    assert_eq!(
        main.describe()["exec_capable"],
        json!(["awk", "sed", "sort"])
    );
    let wild = f.policy("wild").exec_capable_allowed();
    for name in ["awk", "bash", "python", "make", "ssh", "tar"] {
        assert!(wild.iter().any(|w| w == name), "{name} in {wild:?}");
    }
}

#[test]
fn python_dash_c_is_refused_perm4() {
    let f = Fixture::new();
    let msg = assert_refused(
        &f,
        "wild",
        "python3 -c 'print(open(\"../../stranger/workspace/secret.txt\").read())'",
    );
    assert!(msg.contains("python3"), "{msg}");
}

#[test]
fn kernel_python_script_reads_a_sibling_sbx2() {
    let f = Fixture::new();
    let cmd = python(
        &f,
        "r.py",
        "print(open('../../stranger/workspace/secret.txt').read())\n",
    );
    let guarded = f.shell("wild", &cmd).expect("runs");
    assert_kernel_blocks(
        &guarded,
        &f.unguarded_shell("wild", &cmd),
        "SECRET-stranger",
    );
    // Landlock alone refuses the open; the full sandbox does not even mount the sibling.
    assert!(
        guarded.stderr.contains("PermissionError") || guarded.stderr.contains("FileNotFoundError"),
        "{guarded:?}"
    );
}

#[test]
fn find_exec_is_refused_perm4() {
    let f = Fixture::new();
    let msg = assert_refused(
        &f,
        "main",
        "find . -exec cat ../../stranger/workspace/secret.txt ;",
    );
    assert!(msg.contains("find"), "{msg}");
}

#[test]
fn kernel_symlink_created_by_the_shell_then_read_sbx2() {
    let f = Fixture::new();
    let secret = f.secret("stranger");
    let cmd = python(
        &f,
        "l.py",
        &format!(
            "import os\nos.symlink('{}', 'l')\nprint(open('l').read())\n",
            secret.display()
        ),
    );
    let guarded = f.shell("wild", &cmd).expect("runs");
    let _ = fs::remove_file(f.ws("wild").join("l"));
    let unguarded = f.unguarded_shell("wild", &cmd);
    // Root reads anything by file mode: the denial is Landlock's.
    assert_kernel_blocks(&guarded, &unguarded, "SECRET-stranger");
}

#[test]
fn shell_symlink_planted_in_the_workspace_is_resolved_perm6() {
    let f = Fixture::new();
    std::os::unix::fs::symlink(f.secret("stranger"), f.ws("main").join("innocent"))
        .expect("symlink");
    policy_blocks(&f, "cat innocent", "SECRET-stranger");
}

#[test]
fn proc_self_root_through_the_shell_perm6() {
    let f = Fixture::new();
    let cmd = format!("cat /proc/self/root{}", f.secret("stranger").display());
    policy_blocks(&f, &cmd, "SECRET-stranger");
}

#[test]
fn tilde_paths_are_refused_perm4() {
    let f = Fixture::new();
    assert_refused(&f, "main", "cat ~/.ssh/id_rsa");
}

#[test]
fn grep_recursive_over_the_install_root_perm4() {
    let f = Fixture::new();
    policy_blocks(&f, "grep -r SECRET ../..", "SECRET");
}

#[test]
fn git_dash_c_option_injection_is_refused_git10() {
    let f = Fixture::new();
    assert_refused(&f, "main", "git -c core.pager=cat log");
    assert_refused(&f, "main", "git config --global user.name x");
}

#[test]
fn commands_outside_the_allowlist_are_refused_perm4() {
    let f = Fixture::new();
    let msg = assert_refused(&f, "main", "python3 x.py");
    assert!(msg.contains("not in the allowed commands"), "{msg}");
    assert_refused(&f, "main", "/usr/bin/cat x");
}

#[test]
fn background_jobs_and_env_assignments_are_refused_perm4() {
    let f = Fixture::new();
    assert_refused(&f, "main", "sleep 100 &");
    assert_refused(&f, "main", "LD_PRELOAD=/x.so cat a");
}

#[test]
fn the_model_cannot_approve_its_own_command_perm7() {
    let f = Fixture::new();
    let err = f
        .call(
            "main",
            "shell",
            json!({"command": "mkdir d", "approved": true}),
        )
        .err();
    assert!(
        matches!(err, Some(ToolError::InvalidArguments(_))),
        "{err:?}"
    );
    let err = f.call("main", "shell", json!({"command": "mkdir d"})).err();
    assert!(
        matches!(err, Some(ToolError::ApprovalRequired(_))),
        "{err:?}"
    );
    assert!(!f.ws("main").join("d").exists());
}

#[test]
fn high_risk_commands_are_blocked_at_supervised_perm4() {
    let f = Fixture::new();
    let mut config = f.config.clone();
    config.risk_profiles.insert(
        "default".into(),
        warren_config::schema::RiskProfile {
            allowed_commands: vec!["*".into()],
            ..Default::default()
        },
    );
    let policy =
        warren_security::SecurityPolicy::for_agent(&config, &f.root, &common::alias("main"))
            .expect("policy");
    let err = policy
        .check_command("curl http://example.com")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("high-risk"), "{err}");
}

#[test]
fn read_only_autonomy_has_no_shell_perm2() {
    let f = Fixture::new();
    let msg = assert_refused(&f, "readonly", "ls");
    assert!(msg.contains("read_only"), "{msg}");
}

// ---- sandbox ----------------------------------------------------------------------------------------

#[test]
fn kernel_write_outside_every_root_sbx2() {
    let f = Fixture::new();
    let outside = std::env::temp_dir().join(format!("warren-escape-{}", std::process::id()));
    let cmd = python(
        &f,
        "o.py",
        &format!(
            "open('{}','w').write('x')\nprint('WROTE')\n",
            outside.display()
        ),
    );
    let guarded = f.shell("wild", &cmd).expect("runs");
    assert!(
        !guarded.stdout.contains("WROTE") && !outside.exists(),
        "{guarded:?}"
    );
    let unguarded = f.unguarded_shell("wild", &cmd);
    assert!(
        unguarded.stdout.contains("WROTE") && outside.exists(),
        "baseline: {unguarded:?}"
    );
    let _ = fs::remove_file(&outside);
}

#[test]
fn kernel_reading_etc_shadow_sbx2() {
    let f = Fixture::new();
    let cmd = python(
        &f,
        "sh.py",
        "print(open('/etc/shadow').read()[:4] + 'READ')\n",
    );
    let guarded = f.shell("wild", &cmd).expect("runs");
    assert_kernel_blocks(&guarded, &f.unguarded_shell("wild", &cmd), "READ");
}

#[test]
fn kernel_reading_the_install_root_config_sbx2() {
    let f = Fixture::new();
    let cmd = python(
        &f,
        "c.py",
        &format!("print(open('{}').read())\n", f.root.config_file().display()),
    );
    let guarded = f.shell("wild", &cmd).expect("runs");
    assert_kernel_blocks(&guarded, &f.unguarded_shell("wild", &cmd), "[agents.main");
}

#[test]
fn kernel_network_connect_is_denied_when_the_profile_denies_network_sbx1() {
    let f = Fixture::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let port = listener.local_addr().expect("addr").port();
    let cmd = python(
        &f,
        "n.py",
        &format!(
            "import socket\ns=socket.create_connection(('127.0.0.1',{port}),timeout=3)\nprint('CONNECTED')\n"
        ),
    );
    let guarded = f.shell("wild", &cmd).expect("runs");
    assert_kernel_blocks(&guarded, &f.unguarded_shell("wild", &cmd), "CONNECTED");
}

#[test]
fn kernel_dev_tcp_is_denied_sbx1() {
    let f = Fixture::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let port = listener.local_addr().expect("addr").port();
    fs::write(
        f.ws("wild").join("t.sh"),
        format!("echo hi > /dev/tcp/127.0.0.1/{port} && echo CONNECTED\n"),
    )
    .expect("script");
    let guarded = f.shell("wild", "bash t.sh").expect("runs");
    assert_kernel_blocks(
        &guarded,
        &f.unguarded_shell("wild", "bash t.sh"),
        "CONNECTED",
    );
}

#[test]
fn kernel_tmp_is_not_a_shared_side_channel_sbx2() {
    let f = Fixture::new();
    let cmd = python(
        &f,
        "tmp.py",
        "import os\nprint(sorted(os.listdir('/tmp'))[:1], 'LISTED')\n",
    );
    let guarded = f.shell("wild", &cmd).expect("runs");
    assert_kernel_blocks(&guarded, &f.unguarded_shell("wild", &cmd), "LISTED");
    // Each agent has its own TMPDIR inside its workspace.
    let out = f.shell("wild", "python3 -V").expect("runs");
    assert!(out.ok(), "{out:?}");
    let tmpdir = python(
        &f,
        "td.py",
        "import tempfile\nprint(tempfile.gettempdir())\n",
    );
    let out = f.shell("wild", &tmpdir).expect("runs");
    assert!(out.stdout.trim().ends_with("workspace/.tmp"), "{out:?}");
}

#[test]
fn a_granted_sibling_root_that_does_not_exist_yet_does_not_disable_the_sandbox_sbx2() {
    let f = Fixture::new();
    let ghost = f.ws("ghost");
    assert!(!ghost.exists());
    let out = f.shell("main", "echo still-sandboxed").expect("runs");
    assert!(
        out.ok() && out.stdout.contains("still-sandboxed"),
        "{out:?}"
    );
    // The Read grant on ghost is usable once ghost exists; it was created for the sandbox rule.
    assert!(ghost.exists());
    let denied = f
        .shell("main", "cat ../../writer/workspace/secret.txt")
        .expect("runs");
    assert!(!denied.ok(), "sandbox still enforced: {denied:?}");
}

#[test]
fn device_files_work_inside_the_sandbox_perm5() {
    let f = Fixture::new();
    let out = f.shell("main", "head -c 4 /dev/urandom | wc -c; cat /dev/null; echo ok > /dev/null; head -c 3 /dev/zero | wc -c").expect("runs");
    assert!(out.ok(), "{out:?}");
    assert_eq!(
        out.stdout.split_whitespace().collect::<Vec<_>>(),
        vec!["4", "3"]
    );
}

#[test]
fn the_environment_is_cleared_sbx3() {
    let f = Fixture::new();
    fs::write(f.ws("wild").join("e.sh"), "env\n").expect("script");
    let out = f.shell("wild", "bash e.sh").expect("runs");
    let names: Vec<&str> = out
        .stdout
        .lines()
        .filter_map(|l| l.split('=').next())
        .collect();
    for leaked in ["CARGO", "RUST_BACKTRACE", "WARREN_HOME", "HOSTNAME", "USER"] {
        assert!(
            !names.contains(&leaked),
            "{leaked} leaked into the child: {names:?}"
        );
    }
    assert!(out.stdout.contains("TMPDIR=") && out.stdout.contains("/workspace/.tmp"));
}

#[test]
fn output_is_capped_with_a_marker() {
    let f = Fixture::new();
    let policy = f.policy("wild");
    let sandbox = warren_security::sandbox::Sandbox::for_policy(&policy).expect("sandbox");
    let shell = warren_tools::Shell::new(sandbox).with_output_cap(1000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    fs::write(
        f.ws("wild").join("big.sh"),
        "head -c 5000 /dev/zero | tr '\\0' a\n",
    )
    .expect("script");
    let out = rt
        .block_on(warren_tools::Tool::execute_approved(
            &shell,
            json!({"command": "bash big.sh"}),
        ))
        .expect("runs");
    assert_eq!(out.content["stdout_truncated"], true);
    assert!(
        out.content["stdout"]
            .as_str()
            .is_some_and(|s| s.ends_with("[output truncated]") && s.len() < 1100)
    );
}

#[test]
fn a_timeout_kills_the_whole_process_group() {
    let f = Fixture::new();
    let marker = f.ws("wild").join("survivor");
    fs::write(
        f.ws("wild").join("slow.sh"),
        format!("(sleep 3; touch {}) &\nsleep 30\n", marker.display()),
    )
    .expect("script");
    let started = std::time::Instant::now();
    let err = f
        .call_with(
            "wild",
            "shell",
            json!({"command": "bash slow.sh", "timeout_secs": 1}),
            true,
        )
        .err();
    assert!(
        matches!(&err, Some(ToolError::Failed(m)) if m.contains("timed out")),
        "{err:?}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    std::thread::sleep(std::time::Duration::from_secs(4));
    assert!(!marker.exists(), "a grandchild survived the timeout");
}

#[test]
fn a_noop_sandbox_or_fallback_needs_unrestricted_sbx3() {
    let f = Fixture::new();
    let mut config = f.config.clone();
    config.risk_profiles.insert(
        "default".into(),
        warren_config::schema::RiskProfile {
            sandbox: warren_config::schema::SandboxKind::Noop,
            ..Default::default()
        },
    );
    let policy =
        warren_security::SecurityPolicy::for_agent(&config, &f.root, &common::alias("main"))
            .expect("policy");
    let err = warren_security::sandbox::Sandbox::for_policy(&policy)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("noop") && err.contains("unrestricted = true"),
        "{err}"
    );
    if let Some(p) = config.risk_profiles.get_mut("default") {
        p.sandbox = warren_config::schema::SandboxKind::Auto;
    }
    let mut with_fallback = config.clone();
    if let Some(p) = with_fallback.risk_profiles.get_mut("default") {
        p.fallback = warren_config::schema::SandboxFallback::Noop;
    }
    let policy =
        warren_security::SecurityPolicy::for_agent(&with_fallback, &f.root, &common::alias("main"))
            .expect("policy");
    let err = warren_security::sandbox::Sandbox::for_policy(&policy)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("unrestricted = true"),
        "a noop fallback needs unrestricted: {err}"
    );
    if let Some(p) = with_fallback.risk_profiles.get_mut("default") {
        p.unrestricted = true;
    }
    let policy =
        warren_security::SecurityPolicy::for_agent(&with_fallback, &f.root, &common::alias("main"))
            .expect("policy");
    let sandbox = warren_security::sandbox::Sandbox::for_policy(&policy).expect("fallback");
    // The full sandbox is available here, so the fallback is not used.
    assert_eq!(sandbox.backend(), warren_security::sandbox::Backend::Full);
    if let Some(p) = with_fallback.risk_profiles.get_mut("default") {
        p.sandbox = warren_config::schema::SandboxKind::Noop;
    }
    let policy =
        warren_security::SecurityPolicy::for_agent(&with_fallback, &f.root, &common::alias("main"))
            .expect("policy");
    let sandbox = warren_security::sandbox::Sandbox::for_policy(&policy).expect("noop");
    assert_eq!(sandbox.backend(), warren_security::sandbox::Backend::Noop);
    assert!(
        sandbox.posture()["not_contained"]
            .to_string()
            .contains("unconfined"),
        "{}",
        sandbox.posture()
    );
}
