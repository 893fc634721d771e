//! Issue 35 §8, as attacks: one agent cannot stop the others through the disk. Each case runs
//! the attack with the guard switched off in config (`max_workspace_mb = 0`, or
//! `[runtime] disk_reserve_mb = 0`) and shows it works, then with the guard on and shows it is
//! stopped — by the kernel (`RLIMIT_FSIZE`), the shell's watchdog, or the file tools'
//! admission. The reserve case mounts a real 48 MiB tmpfs as the install root and fills it.

// Test helpers outside #[test] fns: a failed setup step should panic with its name.
#![allow(clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use warren_config::{ConfigStore, InstallRoot, KeyPath};
use warren_security::SecurityPolicy;
use warren_security::sandbox::Sandbox;
use warren_tools::{Tool, ToolError, ToolOutput};

use crate::common::alias;

const MIB: u64 = 1 << 20;

/// An install root with one agent `filler` (any command, full autonomy) and a sibling `victim`
/// (1 MiB limit), under the given `[risk_profiles.filler]` and `[runtime]` lines; `grant`
/// gives `filler` a ReadWrite grant on `victim`.
struct Install {
    _dir: tempfile::TempDir,
    mount: Option<PathBuf>,
    root: InstallRoot,
}

impl Install {
    fn new(profile: &str, runtime: &str, tmpfs_mb: Option<u64>) -> Self {
        Self::with_grant(profile, runtime, tmpfs_mb, false)
    }

    fn with_grant(profile: &str, runtime: &str, tmpfs_mb: Option<u64>, grant: bool) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path().join("mnt");
        fs::create_dir_all(&base).expect("mount point");
        let mount = tmpfs_mb.map(|mb| {
            let status = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={mb}m"), "tmpfs"])
                .arg(&base)
                .status()
                .expect("mount");
            assert!(status.success(), "mounting a tmpfs needs root");
            base.clone()
        });
        let root = InstallRoot::at(base.join("warren"));
        root.ensure_layout().expect("layout");
        let access = if grant { "victim = \"ReadWrite\"" } else { "" };
        let config = format!(
            r#"
[runtime]
{runtime}

[agents.filler]
risk_profile = "filler"
[agents.filler.workspace.access]
{access}

[agents.victim]
risk_profile = "small"

[risk_profiles.filler]
autonomy = "full"
allowed_commands = ["*"]
{profile}

[risk_profiles.small]
max_workspace_mb = 1
"#
        );
        fs::write(root.config_file(), config).expect("config");
        for agent in ["filler", "victim"] {
            fs::create_dir_all(root.agent_workspace(&alias(agent))).expect("workspace");
        }
        Self {
            _dir: dir,
            mount,
            root,
        }
    }

    fn store(&self) -> ConfigStore {
        ConfigStore::load(self.root.clone()).expect("config loads")
    }

    fn policy(&self) -> SecurityPolicy {
        let config = self.store().snapshot().config().clone();
        let p = SecurityPolicy::for_agent(&config, &self.root, &alias("filler")).expect("policy");
        p.ensure_workspace().expect("workspace");
        p
    }

    fn ws(&self, agent: &str) -> PathBuf {
        self.root.agent_workspace(&alias(agent))
    }

    /// Runs `tool` for `filler` (approved, so only the limits decide).
    fn call(&self, tool: &str, args: Value) -> Result<ToolOutput, ToolError> {
        let policy = self.policy();
        let sandbox = Sandbox::for_policy(&policy).expect("sandbox available on this host");
        let tools: Vec<Arc<dyn Tool>> = warren_tools::agent_tools(&policy, &sandbox);
        let t = tools
            .iter()
            .find(|t| t.name() == tool)
            .expect("tool exists");
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(t.execute_approved(args))
    }

    fn shell(&self, command: &str) -> Result<ToolOutput, ToolError> {
        self.call("shell", json!({ "command": command }))
    }

    fn write(&self, path: &Path, bytes: usize) -> Result<ToolOutput, ToolError> {
        let content = "x".repeat(bytes);
        self.call("file_write", json!({ "path": path, "content": content }))
    }

    /// `config set runtime.shutdown_grace_secs <secs>`, as the CLI does it.
    fn config_set(&self, secs: u64) -> Result<(), String> {
        let store = self.store();
        let path: KeyPath = "runtime.shutdown_grace_secs".parse().expect("key");
        let mut txn = store.write_latest_blocking().map_err(|e| e.to_string())?;
        txn.set_from_str(&path, &secs.to_string())
            .map_err(|e| e.to_string())?;
        txn.commit().map(|_| ()).map_err(|e| e.to_string())
    }
}

impl Drop for Install {
    fn drop(&mut self) {
        if let Some(m) = &self.mount {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(m)
                .status();
        }
    }
}

fn size(path: &Path) -> u64 {
    fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Allocated bytes of every file directly in `dir`.
fn files_total(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .expect("read_dir")
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .sum()
}

#[track_caller]
fn ran(out: &Result<ToolOutput, ToolError>) -> &Value {
    match out {
        Ok(o) => &o.content,
        Err(e) => panic!("the command should have run: {e:?}"),
    }
}

#[test]
fn a_shell_command_writing_past_the_workspace_limit_is_stopped_by_the_kernel_issue35() {
    let attack = "head -c 20971520 /dev/zero > big";
    // Guard off: the file reaches 20 MiB.
    let off = Install::new("max_workspace_mb = 0", "", None);
    let out = off.shell(attack);
    assert_eq!(ran(&out)["exit_code"], json!(0), "{out:?}");
    assert_eq!(size(&off.ws("filler").join("big")), 20 * MIB);

    // Guard on (8 MiB): RLIMIT_FSIZE stops the file at what remains of the limit.
    let on = Install::new("max_workspace_mb = 8", "", None);
    let out = on.shell(attack);
    let content = ran(&out);
    assert_ne!(content["exit_code"], json!(0), "{out:?}");
    let big = size(&on.ws("filler").join("big"));
    assert!(big <= 8 * MIB && big > 7 * MIB, "{big} bytes");
}

#[test]
fn raising_the_file_size_limit_inside_the_sandbox_fails_at_both_levels_issue35() {
    let attack = "ulimit -f unlimited; head -c 20971520 /dev/zero > big";
    // Guard off: an unlimited workspace, the limit raised or not, the file reaches 20 MiB.
    let off = Install::new("max_workspace_mb = 0", "", None);
    let out = off.shell(attack);
    assert_eq!(ran(&out)["exit_code"], json!(0), "{out:?}");
    assert_eq!(size(&off.ws("filler").join("big")), 20 * MIB);
    for level in ["auto", "landlock"] {
        let on = Install::new(
            &format!("max_workspace_mb = 8\nsandbox = \"{level}\""),
            "",
            None,
        );
        let out = on.shell(attack);
        let content = ran(&out);
        assert_ne!(content["exit_code"], json!(0), "{level}: {out:?}");
        let big = size(&on.ws("filler").join("big"));
        assert!(big <= 8 * MIB, "{level}: {big} bytes");
    }
}

#[test]
fn many_files_past_the_limit_are_stopped_by_the_watchdog_and_writes_refused_after_issue35() {
    // Each file stays under RLIMIT_FSIZE; only their sum passes the limit.
    let attack = "python3 fill.py";
    let script = "import time\nfor i in range(40):\n    open('f%d' % i, 'wb').write(b'x' * 1048576)\n    time.sleep(0.05)\n";
    let off = Install::new("max_workspace_mb = 0", "", None);
    fs::write(off.ws("filler").join("fill.py"), script).expect("script");
    let out = off.shell(attack);
    assert_eq!(ran(&out)["exit_code"], json!(0), "{out:?}");
    assert!(files_total(&off.ws("filler")) >= 40 * MIB);

    let on = Install::new("max_workspace_mb = 8", "", None);
    let ws = on.ws("filler");
    fs::create_dir_all(&ws).expect("workspace");
    fs::write(ws.join("fill.py"), script).expect("script");
    match on.shell(attack) {
        Err(ToolError::Denied(msg)) => {
            assert!(msg.contains("command killed while it ran"), "{msg}");
            assert!(msg.contains("agent 'filler'"), "{msg}");
            assert!(msg.contains("8 MiB limit"), "{msg}");
        }
        other => panic!("the watchdog should have killed the command: {other:?}"),
    }
    let written = files_total(&ws);
    assert!(written > 8 * MIB && written < 20 * MIB, "{written} bytes");
    // Over the limit: the next command may not grow a file (the kernel refuses), nor may
    // file_write; reading and deleting still work, and then writing again.
    let out = on.shell("echo more > more.txt");
    assert_ne!(ran(&out)["exit_code"], json!(0), "{out:?}");
    assert!(ran(&out)["disk_limit"].is_string(), "{out:?}");
    assert_eq!(size(&ws.join("more.txt")), 0);
    assert!(matches!(
        on.write(&ws.join("w.txt"), 10),
        Err(ToolError::Denied(_))
    ));
    // A command that only reads or waits while over the limit is not killed (only growth past
    // the limit since it started counts).
    let out = on.shell("sleep 1");
    assert_eq!(ran(&out)["exit_code"], json!(0), "{out:?}");
    let out = on.shell("rm -f f1 f2 f3 f4 f5 f6 f7 f8 f9 f10 f11 f12 f13 f14 f15 f16 f17 f18 f19");
    assert_eq!(ran(&out)["exit_code"], json!(0), "{out:?}");
    let out = on.shell("echo more > more.txt");
    assert_eq!(ran(&out)["exit_code"], json!(0), "{out:?}");
    assert_eq!(size(&ws.join("more.txt")), 5);
}

#[test]
fn a_file_write_past_the_workspace_limit_is_refused_naming_agent_limit_and_usage_issue35() {
    let attack = |i: &Install| {
        let ws = i.ws("filler");
        let first = i.write(&ws.join("a.txt"), 600 * 1024);
        let second = i.write(&ws.join("b.txt"), 600 * 1024);
        (first, second)
    };
    let off = Install::with_grant("max_workspace_mb = 0", "", None, true);
    let (first, second) = attack(&off);
    assert!(first.is_ok() && second.is_ok(), "{first:?} {second:?}");

    let on = Install::with_grant("max_workspace_mb = 1", "", None, true);
    let (first, second) = attack(&on);
    assert!(first.is_ok(), "{first:?}");
    let msg = match second {
        Err(ToolError::Denied(msg)) => msg,
        other => panic!("the second write should be refused: {other:?}"),
    };
    assert!(msg.contains("agent 'filler'"), "{msg}");
    assert!(msg.contains("1 MiB limit"), "{msg}");
    assert!(msg.contains("max_workspace_mb"), "{msg}");
    assert!(msg.contains("holds 6"), "usage named: {msg}");
    assert!(!on.ws("filler").join("b.txt").exists());
    // A write that does not grow a file passes, over the limit or not.
    assert!(on.write(&on.ws("filler").join("a.txt"), 10).is_ok());

    // Into a granted sibling: the sibling's own limit (1 MiB) counts, and the message names it.
    let msg = match on.write(&on.ws("victim").join("big.txt"), 2 * 1024 * 1024) {
        Err(ToolError::Denied(msg)) => msg,
        other => panic!("the write into the sibling should be refused: {other:?}"),
    };
    assert!(
        msg.contains("agent 'filler'") && msg.contains("workspace of agent 'victim'"),
        "{msg}"
    );
}

/// The full-disk attack on a real 48 MiB filesystem: the agent writes until the disk is full,
/// then the daemon saves its config and appends to a session.
fn fill_the_disk(reserve_mb: u64) -> (Install, Result<ToolOutput, ToolError>) {
    let install = Install::new(
        "max_workspace_mb = 0",
        &format!("disk_reserve_mb = {reserve_mb}"),
        Some(48),
    );
    let out = install.shell("head -c 104857600 /dev/zero > big");
    (install, out)
}

fn session_append(root: &InstallRoot) -> Result<(), String> {
    use warren_store::sessions::{NewMessage, SessionBackend, SqliteBackend};
    let backend = SqliteBackend::open(root, warren_config::schema::SessionDurability::Turn)
        .map_err(|e| e.to_string())?;
    let key = warren_core::SessionKey::new("cli-main").map_err(|e| e.to_string())?;
    let text = "y".repeat(256 * 1024);
    backend
        .append(&key, &NewMessage::new(warren_core::Role::User, text))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[test]
fn with_free_space_at_the_reserve_agent_writes_stop_and_the_daemon_still_writes_issue35() {
    // Guard off: the agent fills the filesystem, and `config set` fails.
    let (off, out) = fill_the_disk(0);
    assert_ne!(
        ran(&out)["exit_code"],
        json!(0),
        "the disk fills up: {out:?}"
    );
    let config = off.config_set(11);
    assert!(config.is_err(), "config set on a full disk: {config:?}");

    // Guard on (16 MiB reserve): the kernel stops the file above the reserve.
    let (on, out) = fill_the_disk(16);
    assert_ne!(ran(&out)["exit_code"], json!(0), "{out:?}");
    let big = size(&on.ws("filler").join("big"));
    assert!(big > 16 * MIB && big < 33 * MIB, "{big} bytes");
    // The daemon's stores still have room.
    assert_eq!(on.config_set(12), Ok(()));
    assert_eq!(session_append(&on.root), Ok(()));
    // Agent writes are refused, naming the reserve; the shell cannot grow a file either.
    let msg = match on.write(&on.ws("filler").join("note.txt"), 1024 * 1024) {
        Err(ToolError::Denied(msg)) => msg,
        other => panic!("file_write under the reserve should be refused: {other:?}"),
    };
    assert!(
        msg.contains("agent 'filler'") && msg.contains("disk_reserve_mb"),
        "{msg}"
    );
    let out = on.shell("head -c 1048576 /dev/zero > more");
    assert!(size(&on.ws("filler").join("more")) < MIB, "{out:?}");
}
