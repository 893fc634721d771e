//! End-to-end: the real `warren` binary against temporary install roots. Each bad input of the
//! foundation issue gets a clear one-line error, a non-zero exit and no change on disk.

use crate::common::bin;
use std::fs;

use pretty_assertions::assert_eq;
use warren_testkit::{TempRoot, text};

type R = Result<(), Box<dyn std::error::Error>>;

/// Runs and expects failure: exit 1, stderr lines all `error: ...`, no panic/backtrace.
fn fails(root: &TempRoot, args: &[&str]) -> Result<String, Box<dyn std::error::Error>> {
    let out = root.run(bin(), args)?;
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "warren {args:?} should fail; stdout {stdout} stderr {stderr}"
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );
    let not_error = |l: &&str| !l.starts_with("error: ") && !l.contains(" WARN ");
    assert!(
        stderr.lines().find(not_error).is_none(),
        "one clear error line each:\n{stderr}"
    );
    Ok(stderr)
}

fn ok(root: &TempRoot, args: &[&str]) -> Result<String, Box<dyn std::error::Error>> {
    let out = root.run(bin(), args)?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "warren {args:?} failed: {stderr}");
    Ok(stdout)
}

#[test]
fn init_creates_the_layout_and_a_valid_commented_starter() -> R {
    let root = TempRoot::new()?;
    let out = ok(&root, &["init"])?;
    assert!(out.contains("initialised Warren"), "{out}");
    for dir in ["data", "shared", "agents"] {
        assert!(root.path().join(dir).is_dir(), "{dir} missing");
    }
    let starter = root.read_config()?;
    assert!(starter.contains("[agents.main]") && starter.contains("provider = \"demo\""));
    assert!(ok(&root, &["config", "validate"])?.contains("is valid (1 agent)"));
    // Idempotent: a second init leaves the config alone.
    fs::write(root.config_path(), format!("{starter}# mine\n"))?;
    assert!(ok(&root, &["init"])?.contains("left unchanged"));
    assert!(root.read_config()?.ends_with("# mine\n"));
    Ok(())
}

#[test]
fn config_set_get_round_trip_and_json() -> R {
    let root = TempRoot::new()?;
    ok(&root, &["init"])?;
    assert_eq!(
        ok(&root, &["config", "get", "gateway.port"])?,
        "42617\n",
        "defaults are visible"
    );
    ok(&root, &["config", "set", "gateway.port", "4242"])?;
    assert_eq!(ok(&root, &["config", "get", "gateway.port"])?, "4242\n");
    ok(
        &root,
        &["config", "set", "agents.main.model", "gpt-4o-mini"],
    )?;
    let json: serde_json::Value =
        serde_json::from_str(&ok(&root, &["--json", "config", "get", "agents.main"])?)?;
    assert_eq!(json["model"], "gpt-4o-mini");
    assert_eq!(
        json["risk_profile"], "starter",
        "the starter risk profile (issue 16 §1)"
    );
    assert_eq!(
        ok(&root, &["config", "get", "agents.main.provider"])?,
        "demo\n",
        "no provider key in the environment: the offline demo"
    );
    assert_eq!(
        ok(&root, &["config", "path"])?.trim(),
        root.config_path().display().to_string()
    );
    Ok(())
}

#[test]
fn agents_add_and_list() -> R {
    let root = TempRoot::new()?;
    ok(&root, &["init"])?;
    ok(
        &root,
        &["agents", "add", "research", "--model", "claude-sonnet"],
    )?;
    ok(
        &root,
        &[
            "config",
            "set",
            "agents.main.workspace.access.research",
            "Read",
        ],
    )?;
    let list: serde_json::Value = serde_json::from_str(&ok(&root, &["agents", "list", "--json"])?)?;
    let aliases: Vec<_> = list
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| a["alias"].clone())
        .collect();
    assert_eq!(
        aliases,
        vec![serde_json::json!("main"), serde_json::json!("research")]
    );
    assert_eq!(list[0]["access"]["research"], "Read");
    assert_eq!(list[0]["default"], true);
    assert_eq!(list[1]["model"], "claude-sonnet");
    assert!(
        !root.path().join("agents/research/workspace").exists(),
        "workspaces are created lazily (PERM-1)"
    );
    let table = ok(&root, &["agents", "list"])?;
    assert!(table.contains("research:Read"), "{table}");
    Ok(())
}

#[test]
fn status_reports_root_config_and_no_daemon() -> R {
    let root = TempRoot::new()?;
    ok(&root, &["init"])?;
    let json: serde_json::Value = serde_json::from_str(&ok(&root, &["status", "--json"])?)?;
    assert_eq!(json["install_root"], root.path().display().to_string());
    assert_eq!(json["config"], "valid");
    assert_eq!(json["daemon"]["status"], "not_running");
    assert_eq!(json["config_generation"], serde_json::Value::Null);
    assert!(ok(&root, &["status"])?.contains("daemon:            not running"));
    Ok(())
}

#[test]
fn completions_and_version() -> R {
    let root = TempRoot::new()?;
    // The script registers `warren` with bash; the subcommands come from the binary on Tab.
    let bash = ok(&root, &["completions", "bash"])?;
    assert!(
        bash.contains("_clap_complete_warren"),
        "bash completion script: {bash}"
    );
    let offered = tab(&root, &["ag"])?;
    assert!(
        offered.iter().any(|c| c == "agents") && offered.iter().any(|c| c == "agent"),
        "{offered:?}"
    );
    let version = ok(&root, &["--version"])?;
    assert_eq!(
        version.trim(),
        format!("warren {}", env!("CARGO_PKG_VERSION"))
    );
    Ok(())
}

#[test]
fn bad_config_files_are_reported_with_file_key_line_and_change_nothing() -> R {
    let root = TempRoot::new()?;
    let cases: &[(&str, &[&str])] = &[
        (
            "[agents.main]\nmodel = \"unterminated\n",
            &["config.toml:2:", "TOML syntax error"],
        ),
        (
            "[agents.main]\n[gateway]\nprot = 1\n",
            &["config.toml:3:1: gateway.prot: unknown key `prot` (did you mean `port`?)"],
        ),
        (
            "[agents.main]\n[gateway]\nport = \"high\"\n",
            &["config.toml:3:8: gateway.port: invalid type: string \"high\""],
        ),
        (
            "[agents.main]\n[agents.ops]\n[agents.main]\n",
            &["config.toml:3:", "duplicate key"],
        ),
        (
            "[agents.\"../evil\"]\n",
            &["agents.\"../evil\"", "contains '.'"],
        ),
        ("[agents.\"a/b\"]\n", &["agents.\"a/b\"", "contains '/'"]),
        ("[agents.default]\n", &["agents.default", "reserved"]),
    ];
    for (text, expected) in cases {
        root.write_config(text)?;
        let err = fails(&root, &["config", "validate"])?;
        for e in *expected {
            assert!(err.contains(e), "config {text:?}: expected {e:?} in {err}");
        }
        // Mutating commands refuse too and leave the bytes alone.
        fails(&root, &["config", "set", "gateway.port", "5000"])?;
        assert_eq!(root.read_config()?, *text);
        assert!(!root.path().join("config.toml.bak").exists());
    }
    let json: serde_json::Value =
        serde_json::from_str(&text(&root.run(bin(), &["--json", "config", "validate"])?).0)?;
    assert_eq!(json["valid"], false);
    assert_eq!(json["problems"][0]["key"], "agents.default");
    assert_eq!(json["problems"][0]["line"], 1);
    Ok(())
}

#[test]
fn bad_cli_edits_get_clear_errors_and_change_nothing() -> R {
    let root = TempRoot::new()?;
    ok(&root, &["init"])?;
    let before = root.read_config()?;
    let cases: &[(&[&str], &str)] = &[
        (
            &["config", "set", "gateway.prot", "1"],
            "did you mean `port`?",
        ),
        (
            &["config", "set", "gatewy.port", "1"],
            "did you mean `gateway`?",
        ),
        (&["config", "set", "gateway.port", "many"], "expected u16"),
        (&["config", "set", "gateway.port"], "missing VALUE"),
        (&["config", "set", "gateway..port", "1"], "invalid key path"),
        (
            &["config", "set", "gateway.bind", "0.0.0.0", "--secret"],
            "not a secret field",
        ),
        (&["config", "get", "gateway.prot"], "did you mean `port`?"),
        (&["agents", "add", "main"], "already exists"),
        (&["agents", "add", "a/b"], "contains '/'"),
        (&["agents", "add", ".."], "contains '.'"),
        (&["agents", "add", "default"], "reserved"),
        (
            &["agents", "add", "ops", "--provider", "nope"],
            "unknown provider 'nope'",
        ),
        (
            &["config", "set", "channels.session_queue_timeout_secs", "0"],
            "channels.session_queue_timeout_secs: must be between 1 and 86400",
        ),
        (
            &["config", "set", "channels.session_queue_depth", "5000"],
            "channels.session_queue_depth: must be between 0",
        ),
    ];
    for (args, expected) in cases {
        let err = fails(&root, args)?;
        assert!(
            err.contains(expected),
            "warren {args:?}: expected {expected:?} in {err}"
        );
        assert_eq!(
            root.read_config()?,
            before,
            "warren {args:?} changed config.toml"
        );
    }
    Ok(())
}

#[test]
fn secrets_are_never_printed_and_key_problems_are_named() -> R {
    let root = TempRoot::new()?;
    ok(&root, &["init"])?;
    let out = root
        .warren(
            bin(),
            &["config", "set", "providers.openai.api_key", "--secret"],
        )
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .map(|mut s| s.write_all(b"sk-super-secret-value\n"))
                .transpose()?;
            child.wait_with_output()
        })?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(!stdout.contains("sk-super") && !stderr.contains("sk-super"));
    assert!(
        !root.read_config()?.contains("sk-super"),
        "stored encrypted"
    );
    assert_eq!(
        ok(&root, &["config", "get", "providers.openai.api_key"])?,
        "[redacted]\n"
    );
    assert!(!ok(&root, &["--json", "config", "get", "providers"])?.contains("sk-super"));

    let key = root.path().join(".secret_key");
    let key_bytes = fs::read(&key)?;
    fs::remove_file(&key)?;
    let err = fails(&root, &["config", "validate"])?;
    assert!(
        err.contains("providers.openai.api_key")
            && err.contains("cannot be recovered without the original key"),
        "{err}"
    );
    fails(&root, &["config", "set", "gateway.port", "1234"])?;

    let real = root.path().join("key-elsewhere");
    fs::write(&real, &key_bytes)?;
    std::os::unix::fs::symlink(&real, &key)?;
    assert!(fails(&root, &["config", "validate"])?.contains("symlink"));
    fs::remove_file(&key)?;
    fs::write(&key, "0123")?;
    assert!(fails(&root, &["config", "validate"])?.contains("corrupt"));
    fs::write(&key, &key_bytes)?;
    ok(&root, &["config", "validate"])?;
    Ok(())
}

#[test]
fn an_unwritable_install_root_is_named() -> R {
    let root = TempRoot::new()?;
    // A regular file where a directory of the root must go: unwritable even for root users.
    fs::create_dir_all(root.path())?;
    let blocker = root.path().join("not-a-dir");
    fs::write(&blocker, "")?;
    let target = blocker.join("warren");
    let out = std::process::Command::new(bin())
        .args(["--config-dir"])
        .arg(&target)
        .arg("init")
        .env_remove("WARREN_HOME")
        .output()?;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.starts_with("error: install root ")
            && stderr.contains(&target.display().to_string()),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"));

    // A read-only filesystem (sysfs) is refused the same way.
    let out = std::process::Command::new(bin())
        .args(["--config-dir", "/sys/warren-test-root", "init"])
        .output()?;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("/sys/warren-test-root"), "{stderr}");
    Ok(())
}

#[test]
fn warren_home_moves_the_root_and_the_flag_wins() -> R {
    let a = TempRoot::new()?;
    let b = TempRoot::new()?;
    let out = std::process::Command::new(bin())
        .args(["config", "path"])
        .env("WARREN_HOME", a.path())
        .output()?;
    assert_eq!(text(&out).0.trim(), a.config_path().display().to_string());
    let out = std::process::Command::new(bin())
        .args(["config", "path", "--config-dir"])
        .arg(b.path())
        .env("WARREN_HOME", a.path())
        .output()?;
    assert_eq!(text(&out).0.trim(), b.config_path().display().to_string());
    Ok(())
}

/// Issue 37 §5: `warren logs | head -1` (and every other listing piped into a reader that stops
/// early) exits 0 without a panic. Before, std's `println!` panicked on the closed pipe
/// ("failed printing to stdout: Broken pipe") and the process aborted with status 134.
#[test]
fn a_reader_that_stops_early_ends_the_listing_quietly() -> R {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let root = TempRoot::new()?;
    ok(&root, &["init"])?;
    // 20,000 trace events: far more than a pipe buffer (64 KiB) holds.
    let state = root.path().join("data/state");
    fs::create_dir_all(&state)?;
    let line = r#"{"time":"2026-12-02T00:00:00.000000Z","kind":"notice","agent":"main","data":{"n":"a line of the trace that is long enough"}}"#;
    fs::write(
        state.join("runtime-trace.jsonl"),
        format!("{line}\n").repeat(20_000),
    )?;
    for args in [&["logs"][..], &["logs", "--json"], &["completions", "bash"]] {
        let mut child = root
            .warren(bin(), args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut first = String::new();
        BufReader::new(child.stdout.take().ok_or("no stdout")?).read_line(&mut first)?;
        // The reader is dropped here: the pipe is closed after one line, like `head -1`.
        let out = child.wait_with_output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!first.is_empty(), "warren {args:?} printed nothing");
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "warren {args:?}: {stderr}"
        );
        assert_eq!(out.status.code(), Some(0), "warren {args:?}: {stderr}");
    }
    Ok(())
}

/// What a Tab offers after `words` (the last word is the one being completed), as the script of
/// `warren completions bash` asks the binary for it.
fn tab(root: &TempRoot, words: &[&str]) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let root_dir = root.path().to_string_lossy().into_owned();
    let mut line = vec!["warren", "--config-dir", root_dir.as_str()];
    line.extend_from_slice(words);
    let out = std::process::Command::new(bin())
        .arg("--")
        .args(&line)
        .env("COMPLETE", "bash")
        .env("_CLAP_COMPLETE_INDEX", (line.len() - 1).to_string())
        .env("_CLAP_IFS", "\n")
        .env_remove("WARREN_HOME")
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?
        .lines()
        .map(str::to_string)
        .collect())
}

/// Issue 37 §5: completion knows the install — agent aliases, session keys and config keys —
/// not only flags; and `warren completions bash` prints a script that asks the binary.
#[test]
fn tab_completes_agent_aliases_session_keys_and_config_keys() -> R {
    let root = TempRoot::new()?;
    ok(&root, &["init"])?;
    ok(&root, &["agents", "add", "research"])?;
    ok(
        &root,
        &[
            "sessions", "append", "notes-1", "--role", "user", "--agent", "main", "hello",
        ],
    )?;
    let offered = tab(&root, &["security", "posture", ""])?;
    assert_eq!(offered[..2], ["main", "research"], "{offered:?}");
    assert_eq!(tab(&root, &["security", "posture", "re"])?, ["research"]);
    assert_eq!(tab(&root, &["sessions", "show", "no"])?, ["notes-1"]);
    let keys = tab(&root, &["config", "get", "gateway.p"])?;
    assert!(keys.iter().any(|k| k == "gateway.port"), "{keys:?}");
    // Flags still complete.
    assert!(
        tab(&root, &["agents", "delete", "--"])?
            .iter()
            .any(|f| f.starts_with("--"))
    );
    let script = ok(&root, &["completions", "bash"])?;
    assert!(
        script.contains("COMPLETE=\"bash\"") && script.contains("complete -o nospace"),
        "{script}"
    );
    Ok(())
}
