//! Secrets never reach output (CFG-6, STATE-13), end to end through the real binary: `config
//! set` on a secret key without `--secret`, `config validate` with a stored database URL, a
//! provider's 401 body echoing derived forms of the key (stderr, the trace file, `warren logs`),
//! and a trace written before redaction. Each case checks every 8-character piece of the secret.

use crate::common::bin;
use std::io::Write;
use std::process::{Output, Stdio};

use warren_testkit::fake_llm::{FakeOpenAi, FakeReply};
use warren_testkit::{TempRoot, text};

type R = Result<(), Box<dyn std::error::Error>>;

/// Every run of 8 characters of `secret` that appears in `haystack`.
fn leaked<'a>(secret: &'a str, haystack: &str) -> Vec<&'a str> {
    (0..=secret.len().saturating_sub(8))
        .map(|i| &secret[i..i + 8])
        .filter(|piece| haystack.contains(piece))
        .collect()
}

#[track_caller]
fn assert_no_leak(secret: &str, what: &str, haystack: &str) {
    let found = leaked(secret, haystack);
    assert!(found.is_empty(), "{what} leaks {found:?}: {haystack}");
}

fn run_with_stdin(root: &TempRoot, args: &[&str], stdin: &str) -> std::io::Result<Output> {
    let mut child = root
        .warren(bin(), args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin.as_bytes())?;
    }
    child.wait_with_output()
}

#[test]
fn config_set_on_a_secret_key_without_secret_flag_stores_encrypted_and_never_echoes_cfg6() -> R {
    let root = TempRoot::new()?;
    root.write_config("[agents.main]\n")?;
    let key = "sk-cli-Zq81mXv02LrT7wNc4Hb";
    let out = root.run(bin(), &["config", "set", "providers.openai.api_key", key])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_no_leak(key, "stdout", &stdout);
    assert_no_leak(key, "stderr", &stderr);
    assert!(
        stdout.contains("providers.openai.api_key (secret, stored encrypted"),
        "{stdout}"
    );
    assert!(
        stderr.contains("--secret"),
        "points to the stdin form: {stderr}"
    );
    let file = root.read_config()?;
    assert_no_leak(key, "config.toml", &file);
    assert!(file.contains("enc2:"), "{file}");
    let got = root.run(bin(), &["config", "get", "providers.openai.api_key"])?;
    assert_eq!(text(&got).0, "[redacted]\n");

    // A table above a secret field: stored encrypted, echoed without the secret.
    let inline = "sk-inline-Pq55Wd9Lk3Rt6Yv";
    let table = format!("{{ kind = \"openai\", api_key = \"{inline}\" }}");
    let out = root.run(bin(), &["config", "set", "providers.other", &table])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_no_leak(inline, "stdout", &stdout);
    assert_no_leak(inline, "config.toml", &root.read_config()?);
    Ok(())
}

#[test]
fn config_validate_shows_a_stored_database_url_with_its_password_masked_cfg6() -> R {
    let root = TempRoot::new()?;
    root.write_config("[agents.main]\n")?;
    // An unencoded '/' in the password once cut the URL short of it; port 1 refuses at once.
    let password = "pa/ss-Xk29vLq7Tz";
    let url = format!("postgres://bob:{password}@127.0.0.1:1/warren");
    let out = run_with_stdin(
        &root,
        &["config", "set", "memory.postgres.url", "--secret"],
        &format!("{url}\n"),
    )?;
    assert!(out.status.success(), "{}", text(&out).1);
    let config = root.read_config()? + "\n[agents.main.memory]\nbackend = \"postgres\"\n";
    root.write_config(&config)?;

    let out = root.run(bin(), &["config", "validate"])?;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "the server is unreachable: {stdout}");
    assert_no_leak(password, "validate", &format!("{stdout}{stderr}"));
    assert!(
        stderr.contains("postgres://bob") && stderr.contains("127.0.0.1:1/warren"),
        "the server is still named: {stderr}"
    );
    let out = root.run(bin(), &["config", "validate", "--json"])?;
    let (stdout, stderr) = text(&out);
    assert_no_leak(password, "validate --json", &format!("{stdout}{stderr}"));

    // A write whose check fails quotes the URL too: masked as well.
    let out = root.run(
        bin(),
        &["config", "set", "agents.main.memory.backend", "postgres"],
    )?;
    let (stdout, stderr) = text(&out);
    assert_no_leak(password, "config set", &format!("{stdout}{stderr}"));
    Ok(())
}

fn provider_config(fake: &FakeOpenAi, key_line: &str) -> String {
    format!(
        "[agents.main]\nprovider = \"fake\"\nmodel = \"gpt-test\"\n\n\
         [providers.fake]\nkind = \"openai\"\nbase_url = \"{}\"\n{key_line}\n\
         retry_backoff_ms = 1\nmax_retries = 0\n\n[log]\npersistence = \"full\"\n",
        fake.base_url()
    )
}

/// The forms of `key` a provider's error body echoes: without its `sk-` prefix, its last 12
/// characters, the key minus its last character.
fn echoed_body(key: &str) -> String {
    format!(
        "Incorrect API key provided: {}. Key ending {}; did you mean {}?",
        key.trim_start_matches("sk-"),
        &key[key.len() - 12..],
        &key[..key.len() - 1]
    )
}

#[test]
fn a_provider_401_echoing_derived_key_forms_reaches_no_output_or_log_cfg6() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let key = "sk-proj-Hs83KdPq0Lm2Vb7Xn5Rt";
    root.write_config(&provider_config(&fake, &format!("api_key = \"{key}\"")))?;
    fake.push(FakeReply::Status(401, echoed_body(key)));
    let out = root.run(bin(), &["agent", "-m", "hi"])?;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("HTTP 401"), "{stderr}");
    assert_no_leak(key, "agent output", &format!("{stdout}{stderr}"));

    let trace = std::fs::read_to_string(root.path().join("data/state/runtime-trace.jsonl"))
        .unwrap_or_default();
    assert_no_leak(key, "runtime-trace.jsonl", &trace);
    for args in [&["logs"][..], &["logs", "--json"]] {
        let out = root.run(bin(), args)?;
        assert_no_leak(key, "warren logs", &text(&out).0);
    }

    // The same with the key in the environment (`api_key_env`).
    let env_key = "sk-env-Wq47NcLx2Pd9Tr5Mh3";
    let var = "WARREN_SECRETS_CLI_TEST_KEY";
    root.write_config(&provider_config(&fake, &format!("api_key_env = \"{var}\"")))?;
    fake.push(FakeReply::Status(401, echoed_body(env_key)));
    let out = root
        .warren(bin(), &["agent", "-m", "hi"])
        .env(var, env_key)
        .stdin(Stdio::null())
        .output()?;
    let (stdout, stderr) = text(&out);
    assert!(stderr.contains("HTTP 401"), "{stderr}");
    assert_no_leak(
        env_key,
        "agent output (env key)",
        &format!("{stdout}{stderr}"),
    );
    let out = root
        .warren(bin(), &["logs", "--json"])
        .env(var, env_key)
        .output()?;
    assert_no_leak(env_key, "warren logs (env key)", &text(&out).0);
    Ok(())
}

/// A trace line written without redaction (an older version, or before the key was set) is
/// redacted again when `warren logs` shows it.
#[test]
fn warren_logs_redacts_a_trace_written_before_the_key_was_configured_cfg6() -> R {
    let root = TempRoot::new()?;
    let key = "sk-late-Rb62QwZx9Lp4Kd8";
    root.write_config(&format!(
        "[agents.main]\n[providers.p]\nkind = \"openai\"\napi_key = \"{key}\"\n"
    ))?;
    let state = root.path().join("data/state");
    std::fs::create_dir_all(&state)?;
    let line = serde_json::json!({
        "time": "2025-01-01T00:00:00Z", "kind": "error", "agent": "main",
        "data": {"message": format!("401: {}", &key[3..]), "tail": &key[key.len() - 12..]},
    });
    std::fs::write(state.join("runtime-trace.jsonl"), format!("{line}\n"))?;
    for args in [&["logs"][..], &["logs", "--json"]] {
        let out = root.run(bin(), args)?;
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stderr}");
        assert!(
            stdout.contains("[redacted]"),
            "the event is shown: {stdout}"
        );
        assert_no_leak(key, "warren logs", &stdout);
    }
    Ok(())
}

#[test]
fn posture_lists_exec_capable_allowed_commands_perm4() -> R {
    let root = TempRoot::new()?;
    root.write_config("[agents.main]\n")?;
    let out = root.run(bin(), &["security", "posture", "main", "--json"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout)?;
    assert_eq!(
        v["policy"]["exec_capable"],
        serde_json::json!(["awk", "sed", "sort"])
    );
    let out = root.run(bin(), &["security", "posture", "main"])?;
    assert!(
        text(&out).0.contains("exec-capable:     awk sed sort"),
        "{}",
        text(&out).0
    );
    Ok(())
}
