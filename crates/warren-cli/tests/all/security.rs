//! `warren security posture` and `warren tools run`, end to end (PERM-2..6, SBX-1).

use crate::common::bin;
use std::fs;

use warren_testkit::{TempRoot, text};

type R = Result<(), Box<dyn std::error::Error>>;

fn json(
    root: &TempRoot,
    args: &[&str],
) -> Result<(Option<i32>, serde_json::Value), Box<dyn std::error::Error>> {
    let out = root.run(bin(), args)?;
    let (stdout, stderr) = text(&out);
    let value = serde_json::from_str(&stdout)
        .map_err(|e| format!("{e}: stdout {stdout} stderr {stderr}"))?;
    Ok((out.status.code(), value))
}

fn setup() -> Result<TempRoot, Box<dyn std::error::Error>> {
    let root = TempRoot::new()?;
    root.write_config(
        "[agents.main.workspace.access]\ndocs = \"Read\"\n[agents.docs]\n[agents.stranger]\n",
    )?;
    for a in ["docs", "stranger"] {
        let ws = root.path().join("agents").join(a).join("workspace");
        fs::create_dir_all(&ws)?;
        fs::write(ws.join("secret.txt"), format!("SECRET-{a}"))?;
    }
    Ok(root)
}

#[test]
fn posture_shows_grants_and_the_active_backend() -> R {
    let root = setup()?;
    let (code, v) = json(&root, &["security", "posture", "main", "--json"])?;
    assert_eq!(code, Some(0));
    assert_eq!(v["policy"]["read_only"][0]["alias"], "docs");
    assert_eq!(v["policy"]["workspace_only"], true);
    assert_eq!(v["sandbox"]["active"], "full");
    assert_eq!(v["sandbox"]["layers"]["seccomp"], true);
    let out = root.run(bin(), &["security", "posture", "main"])?;
    let shown = text(&out).0;
    assert!(
        shown.contains("sandbox:          full (requested auto)"),
        "{shown}"
    );
    assert!(
        shown.contains("network (kernel): denied (empty network namespace"),
        "{shown}"
    );
    Ok(())
}

#[test]
fn tools_run_reads_writes_and_refuses_with_json_results() -> R {
    let root = setup()?;
    let (code, v) = json(
        &root,
        &[
            "tools",
            "run",
            "main",
            "file_write",
            r#"{"path": "notes/a.md", "content": "hello"}"#,
        ],
    )?;
    assert_eq!((code, v["ok"].clone()), (Some(0), serde_json::json!(true)));
    let (_, v) = json(
        &root,
        &[
            "tools",
            "run",
            "main",
            "file_read",
            r#"{"path": "notes/a.md"}"#,
        ],
    )?;
    assert_eq!(v["result"]["content"], "hello");
    let (_, v) = json(
        &root,
        &[
            "tools",
            "run",
            "main",
            "file_read",
            r#"{"path": "../../docs/workspace/secret.txt"}"#,
        ],
    )?;
    assert_eq!(v["result"]["content"], "SECRET-docs");

    let (code, v) = json(
        &root,
        &[
            "tools",
            "run",
            "main",
            "file_read",
            r#"{"path": "../../stranger/workspace/secret.txt"}"#,
        ],
    )?;
    assert_eq!(code, Some(1));
    assert_eq!(v["error"]["kind"], "denied");
    assert!(
        v["message"]
            .as_str()
            .is_some_and(|m| m.contains("no Read grant on 'stranger'")),
        "{v}"
    );

    let (code, v) = json(
        &root,
        &[
            "tools",
            "run",
            "main",
            "shell",
            r#"{"command": "mkdir made"}"#,
        ],
    )?;
    assert_eq!(
        (code, v["error"]["kind"].clone()),
        (Some(1), serde_json::json!("approval_required"))
    );
    let (code, _) = json(
        &root,
        &[
            "tools",
            "run",
            "main",
            "shell",
            r#"{"command": "mkdir made"}"#,
            "--approve",
        ],
    )?;
    assert_eq!(code, Some(0));
    assert!(root.path().join("agents/main/workspace/made").is_dir());
    Ok(())
}

#[test]
fn bad_tool_invocations_are_clear_errors() -> R {
    let root = setup()?;
    let out = root.run(bin(), &["tools", "run", "main", "file_read", "{not json"])?;
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).1.contains("not valid JSON"), "{}", text(&out).1);
    let out = root.run(bin(), &["tools", "run", "main", "teleport", "{}"])?;
    assert!(
        text(&out).1.contains("no tool 'teleport'") && text(&out).1.contains("file_read"),
        "{}",
        text(&out).1
    );
    let out = root.run(bin(), &["tools", "run", "ghost", "file_read", "{}"])?;
    assert!(
        text(&out).1.contains("no agent 'ghost'"),
        "{}",
        text(&out).1
    );
    Ok(())
}
