//! A bad `[agents.<alias>.network] allow` or `[secrets.<name>] hosts` entry (issue 24) is
//! refused by `warren config validate` and by a starting daemon, naming the file, the line,
//! the key path and why, before any agent is built; `warren config set` cannot write one.

use crate::common::bin;

use pretty_assertions::assert_eq;
use warren_testkit::{TempRoot, text};

type R = Result<(), Box<dyn std::error::Error>>;

const CONFIG: &str = r#"[agents.main]
provider = "fake"
model = "m"

[agents.main.network]
allow = [
  "api.github.com",
  "127.0.0.1:8080",
  "https://api.example.org/v1",
]

[providers.fake]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"

[secrets.gh]
hosts = ["*."]
"#;

#[test]
fn a_bad_allowlist_entry_is_named_by_config_validate_and_daemon_start() -> R {
    let root = TempRoot::new()?;
    root.write_config(CONFIG)?;
    let file = root.config_path().display().to_string();
    let allow = format!(
        "error: {file}:9:3: agents.main.network.allow[2]: 'https://api.example.org/v1' is not a host pattern: it has a scheme or a path"
    );
    let secret = format!(
        "{file}:17:10: secrets.gh.hosts[0]: '*.' is not a host pattern: '*.' needs a domain"
    );
    for args in [&["config", "validate"][..], &["daemon"][..]] {
        let out = root.run(bin(), args)?;
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&allow),
            "{args:?}: expected {allow:?} in {stderr}"
        );
        assert!(
            stderr.contains(&secret),
            "{args:?}: expected {secret:?} in {stderr}"
        );
        assert!(
            !stderr.contains("allow[0]") && !stderr.contains("allow[1]"),
            "good entries are not named: {stderr}"
        );
    }
    let out = root.run(bin(), &["--json", "config", "validate"])?;
    let v: serde_json::Value = serde_json::from_str(&text(&out).0)?;
    assert_eq!(v["valid"], false);
    assert_eq!(v["problems"][0]["key"], "agents.main.network.allow[2]");
    assert_eq!(v["problems"][0]["line"], 9);
    assert!(
        v["problems"][0]["hint"]
            .as_str()
            .is_some_and(|h| h.contains("\"*.example.org\"")),
        "{v}"
    );
    assert_eq!(root.read_config()?, CONFIG, "nothing is rewritten");

    // Fixed, it validates; an edit cannot put a bad entry back.
    root.write_config(
        &CONFIG
            .replace("https://api.example.org/v1", "api.example.org")
            .replace("\"*.\"", "\"*.github.com\""),
    )?;
    let out = root.run(bin(), &["config", "validate"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    let out = root.run(
        bin(),
        &[
            "config",
            "set",
            "agents.main.network.allow",
            r#"["x.org:99999"]"#,
        ],
    )?;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("agents.main.network.allow[0]")
            && stderr.contains("the port '99999' is not a number from 1 to 65535"),
        "{stderr}"
    );
    assert!(root.read_config()?.contains("\"api.example.org\""));
    Ok(())
}
