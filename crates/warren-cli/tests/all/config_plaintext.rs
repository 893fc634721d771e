//! Hand-written plaintext secrets in `config.toml` (issue 35 §9, CFG-6), end to end through the
//! real binary: `warren config validate` and `warren doctor` name the key path (never the
//! value), `warren config encrypt-secrets` encrypts them in place, and `config.toml.bak` keeps
//! no plaintext secret the live file dropped, after `encrypt-secrets` and after a save that
//! replaced a plaintext secret. The unscrubbed save (a `.bak` that is the old file, as before
//! the issue) is shown to keep the secret.

use crate::common::bin;

use warren_config::atomic::{CrashPoints, write_durable};
use warren_config::failpoint::{CONFIG_BACKUP_SAVE, CONFIG_SAVE};
use warren_config::{ConfigStore, InstallRoot};
use warren_testkit::{TempRoot, run_until_crash, text};

type R = Result<(), Box<dyn std::error::Error>>;

const OPENAI: &str = "sk-handwritten-Vt81qLx02MzR7wNc";
const NAMED: &str = "ghp-handwritten-Kq39Tz0Wx5Lp2Ab";

fn config() -> String {
    format!(
        "[agents.main]\n\n[providers.openai]\nkind = \"openai\"\napi_key = \"{OPENAI}\"\n\n[secrets.gh]\nvalue = \"{NAMED}\"\nhosts = [\"api.github.com\"]\n"
    )
}

#[track_caller]
fn assert_hidden(what: &str, haystack: &str) {
    for secret in [OPENAI, NAMED] {
        assert!(
            !haystack.contains(secret),
            "{what} holds {secret}: {haystack}"
        );
    }
}

fn backup(root: &TempRoot) -> std::io::Result<String> {
    std::fs::read_to_string(root.path().join("config.toml.bak"))
}

#[test]
fn plaintext_secrets_are_reported_by_key_and_encrypted_in_place_issue35() -> R {
    let root = TempRoot::new()?;
    root.write_config(&config())?;

    let out = root.run(bin(), &["config", "validate"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    for path in ["providers.openai.api_key", "secrets.gh.value"] {
        assert!(
            stderr.contains(&format!("warning: {path} holds a plaintext secret")),
            "{stderr}"
        );
    }
    assert!(stderr.contains("warren config encrypt-secrets"), "{stderr}");
    assert_hidden("validate", &format!("{stdout}{stderr}"));
    let out = root.run(bin(), &["config", "validate", "--json"])?;
    let report: serde_json::Value = serde_json::from_str(&text(&out).0)?;
    assert_eq!(
        report["plaintext_secrets"],
        serde_json::json!(["providers.openai.api_key", "secrets.gh.value"])
    );
    let out = root.run(bin(), &["doctor"])?;
    let (stdout, stderr) = text(&out);
    assert!(
        stdout.contains("warning: providers.openai.api_key holds a plaintext secret"),
        "{stdout}"
    );
    assert_hidden("doctor", &format!("{stdout}{stderr}"));

    // A save of something else keeps the plaintext in both files (the live file still has it).
    let out = root.run(bin(), &["config", "set", "gateway.port", "18999"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(backup(&root)?.contains(OPENAI));

    let out = root.run(bin(), &["config", "encrypt-secrets"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("encrypted providers.openai.api_key"),
        "{stdout}"
    );
    assert!(stdout.contains("encrypted secrets.gh.value"), "{stdout}");
    assert_hidden("encrypt-secrets", &format!("{stdout}{stderr}"));
    let live = root.read_config()?;
    assert_hidden("config.toml", &live);
    assert!(
        live.contains("gateway") && live.contains("18999"),
        "the rest is kept: {live}"
    );
    let bak = backup(&root)?;
    assert_hidden("config.toml.bak", &bak);
    assert!(bak.contains("enc2:"), "{bak}");

    // The values survive, in the live file and in the .bak (which still restores).
    let store = ConfigStore::load(InstallRoot::at(root.path()))?;
    let snapshot = store.snapshot();
    assert_eq!(
        snapshot.providers["openai"]
            .api_key
            .as_ref()
            .map(|s| s.expose()),
        Some(OPENAI)
    );
    assert_eq!(snapshot.secrets["gh"].value.expose(), NAMED);
    std::fs::copy(root.path().join("config.toml.bak"), root.config_path())?;
    let restored = ConfigStore::load(InstallRoot::at(root.path()))?.snapshot();
    assert_eq!(
        restored.providers["openai"]
            .api_key
            .as_ref()
            .map(|s| s.expose()),
        Some(OPENAI)
    );

    // Nothing is left to report.
    let out = root.run(bin(), &["config", "validate"])?;
    assert!(!text(&out).1.contains("plaintext"), "{:?}", text(&out));
    let out = root.run(bin(), &["config", "encrypt-secrets"])?;
    assert!(
        text(&out).0.contains("no plaintext secrets"),
        "{:?}",
        text(&out)
    );
    Ok(())
}

#[test]
fn a_save_that_replaces_a_plaintext_secret_leaves_no_copy_in_the_backup_issue35() -> R {
    // Guard off: a save whose .bak is the old file (as before the issue) keeps the secret.
    let unguarded = TempRoot::new()?;
    unguarded.write_config(&config())?;
    let replaced = config().replace(OPENAI, "enc2:00");
    write_durable(
        &unguarded.config_path(),
        replaced.as_bytes(),
        0o600,
        CrashPoints::CONFIG,
    )?;
    assert!(
        backup(&unguarded)?.contains(OPENAI),
        "the unscrubbed .bak keeps it"
    );

    // Guard on: `config set` of the secret (stored encrypted); the old plaintext is not in the
    // .bak, whose copy of the other, untouched plaintext secret is kept.
    let root = TempRoot::new()?;
    root.write_config(&config())?;
    let out = root.run(
        bin(),
        &[
            "config",
            "set",
            "providers.openai.api_key",
            "sk-new-value-Hy62Lm0Pq",
        ],
    )?;
    assert!(out.status.success(), "{:?}", text(&out));
    let bak = backup(&root)?;
    assert!(!bak.contains(OPENAI), "{bak}");
    assert!(
        bak.contains(NAMED),
        "a secret the live file still holds stays: {bak}"
    );
    assert!(!root.read_config()?.contains(OPENAI));

    // Encrypting the other one: its plaintext copy leaves the .bak too.
    let out = root.run(bin(), &["config", "encrypt-secrets"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    assert_hidden("config.toml.bak", &backup(&root)?);
    Ok(())
}

/// A crash at any step of `encrypt-secrets` (the scrubbed `.bak` first, then the live file)
/// leaves the old file or the encrypted one, never torn, and once the live file holds no
/// plaintext secret, neither does the `.bak`.
#[test]
fn a_crash_while_encrypting_leaves_old_or_new_and_no_plaintext_bak_behind_issue35() -> R {
    for failpoint in CONFIG_BACKUP_SAVE.iter().chain(CONFIG_SAVE.iter()) {
        let root = TempRoot::new()?;
        root.write_config(&config())?;
        run_until_crash(
            root.warren(bin(), &["config", "encrypt-secrets"]),
            failpoint,
        )?;
        let live = root.read_config()?;
        let encrypted = !live.contains(OPENAI);
        if encrypted {
            assert_hidden(&format!("{failpoint}: config.toml"), &live);
            assert_hidden(&format!("{failpoint}: config.toml.bak"), &backup(&root)?);
        } else {
            assert_eq!(live, config(), "{failpoint}: the old file, untouched");
        }
        let snapshot = ConfigStore::load(InstallRoot::at(root.path()))?.snapshot();
        let key = snapshot.providers["openai"]
            .api_key
            .as_ref()
            .map(|s| s.expose());
        assert_eq!(key, Some(OPENAI), "{failpoint}: the value survives");
    }
    Ok(())
}
