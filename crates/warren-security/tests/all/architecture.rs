//! Architecture gates (docs/architecture.md, "one seam per decision"): child processes are
//! started only by the sandbox module, file tools reach the disk only through `confined`,
//! daemon-side access to agent-writable places goes only through confined handles
//! (`confined_dir`), and install-root paths are joined only in `InstallRoot`. Each gate is first
//! shown to fire on a planted violation.

use std::fs;
use std::path::{Path, PathBuf};

/// A rule: a pattern that may appear only in the listed files.
struct Gate {
    what: &'static str,
    pattern: &'static str,
    allowed_in: &'static [&'static str],
}

const GATES: &[Gate] = &[
    Gate {
        what: "child processes are started only by the sandbox module (SBX-3)",
        pattern: "Command::new(",
        // The test kit starts the `warren` binary itself, never an agent's child.
        allowed_in: &[
            "crates/warren-security/src/sandbox/",
            "crates/warren-testkit/",
            // The `lucid` CLI of the lucid memory backend: the operator's program
            // (memory.lucid.command), run by the daemon with a fixed argv shape (memory text
            // only as separate arguments, no shell), never an agent's child.
            "crates/warren-memory/src/lucid.rs",
        ],
    },
    Gate {
        what: "file tools reach the disk only through warren_security::confined (PERM-6)",
        pattern: "std::fs::",
        allowed_in: &[
            "crates/warren-security/",
            "crates/warren-config/",
            "crates/warren-runtime/",
            // The engine's clients (issue 34) are daemon-side code like the runtime they left:
            // the finer PERM-6 gate below governs them module by module.
            "crates/warren-jobs/",
            "crates/warren-admin/",
            "crates/warren-daemon/",
            // The gateway touches only its own state files at InstallRoot paths (devices.db,
            // gateway.json), never a path a model or request names.
            "crates/warren-gateway/",
            "crates/warren-cli/",
            "crates/warren-testkit/",
            "crates/warren-memory/",
            "crates/warren-store/",
            // The script provider reads the script file config names (not an agent's files).
            "crates/warren-providers/src/script.rs",
            // The ACP attach socket data/daemon.sock, an InstallRoot file under data/.
            "crates/warren-acp/src/attach.rs",
        ],
    },
    Gate {
        what: "install-root paths come only from InstallRoot (LAYOUT-3)",
        pattern: "\"config.toml\"",
        // The test kit sits below every crate and writes fixtures by name.
        allowed_in: &[
            "crates/warren-config/src/paths.rs",
            "crates/warren-testkit/",
        ],
    },
    Gate {
        what: "the secret key path comes only from InstallRoot (CFG-6)",
        pattern: "\".secret_key\"",
        allowed_in: &["crates/warren-config/src/paths.rs"],
    },
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            // Tests and benchmarks may do anything; the gates are about shipped code.
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !matches!(name.as_str(), "tests" | "benches" | "target") {
                rust_sources(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Lines of `source` (outside `#[cfg(test)]` modules) that break `gate`, if `file` is not allowed.
fn violations(gate: &Gate, file: &str, source: &str) -> Vec<String> {
    if gate.allowed_in.iter().any(|a| file.starts_with(a)) {
        return Vec::new();
    }
    let shipped = source.split("#[cfg(test)]").next().unwrap_or(source);
    shipped
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//") && line.contains(gate.pattern))
        .map(|(n, line)| format!("{file}:{}: {} — {}", n + 1, line.trim(), gate.what))
        .collect()
}

#[test]
fn each_gate_fires_on_a_planted_violation() {
    let planted = [
        (
            "crates/warren-tools/src/evil.rs",
            "fn f() { std::process::Command::new(\"sh\").spawn(); }",
        ),
        (
            "crates/warren-tools/src/evil.rs",
            "fn f() { let _ = std::fs::read(\"/etc/passwd\"); }",
        ),
        (
            "crates/warren-runtime/src/evil.rs",
            "fn f() { root.join(\"config.toml\") }",
        ),
        (
            "crates/warren-gateway/src/evil.rs",
            "fn f() { root.join(\".secret_key\") }",
        ),
    ];
    for (gate, (file, source)) in GATES.iter().zip(planted) {
        assert_eq!(
            violations(gate, file, source).len(),
            1,
            "gate '{}' did not fire",
            gate.what
        );
    }
    // And it stays quiet where the pattern is allowed or only in a test module.
    assert!(
        violations(
            &GATES[0],
            "crates/warren-security/src/sandbox/mod.rs",
            "Command::new(x)"
        )
        .is_empty()
    );
    assert!(
        violations(
            &GATES[0],
            "crates/warren-tools/src/x.rs",
            "#[cfg(test)]\nmod t { Command::new(x) }"
        )
        .is_empty()
    );
}

#[test]
fn the_workspace_passes_every_gate() {
    let root = workspace_root();
    let mut files = Vec::new();
    rust_sources(&root.join("crates"), &mut files);
    assert!(
        files.len() > 20,
        "found the sources ({} files)",
        files.len()
    );
    let mut found = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .to_string_lossy()
            .replace("\\", "/");
        let source = fs::read_to_string(&file).unwrap_or_default();
        for gate in GATES {
            found.extend(violations(gate, &rel, &source));
        }
    }
    assert!(
        found.is_empty(),
        "architecture gates broken:\n{}",
        found.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Daemon-side file access (PERM-6, issue 13 deliverable 6).
//
// The rule, concretely:
// 1. In every crate not listed in `NOT_DAEMON_SIDE` — warren-memory, warren-runtime,
//    warren-tools today, and any crate added later (delegate results, skills, MCP config) —
//    shipped code uses no plain file-system API (`PLAIN_FS`): agent-writable places are reached
//    through `warren_security::confined_dir::ConfinedDir` (or `warren_config::confined` below
//    warren-security). The modules in `PLAIN_FS_ALLOWED` are the exceptions, each touching only
//    daemon-owned paths that `InstallRoot` names, with the reason beside it.
// 2. Everywhere (allowed modules and exempt crates too, except the homes of the confined
//    handles and the test kit), a line that uses a plain file-system API may not name a
//    workspace (`workspace`, `ws`), unless the module is in `WORKSPACE_FS_ALLOWED`.
// ---------------------------------------------------------------------------------------------

/// Crates that are not daemon-side code over agent-writable places, and why.
const NOT_DAEMON_SIDE: &[(&str, &str)] = &[
    ("warren-core", "vocabulary only, no I/O"),
    (
        "warren-config",
        "the install root's own files (config, secrets); home of the confined handles",
    ),
    (
        "warren-security",
        "path decisions, the confined handles and the sandbox themselves",
    ),
    (
        "warren-store",
        "each store opens its own file at an InstallRoot path under data/",
    ),
    (
        "warren-providers",
        "the script provider reads the script file the config names",
    ),
    (
        "warren-gateway",
        "its own state files at InstallRoot paths (devices.db, gateway.json)",
    ),
    (
        "warren-cli",
        "the front end: files the user names on the command line, the install root",
    ),
    ("warren-testkit", "test fixtures (a dev-dependency only)"),
];

/// Modules of daemon-side crates that may use a plain file-system API, and why.
const PLAIN_FS_ALLOWED: &[(&str, &str)] = &[
    (
        "crates/warren-memory/src/sqlite/mod.rs",
        "data/memory/memory.db (InstallRoot::memory_db), opened by SQLite",
    ),
    (
        "crates/warren-memory/src/sqlite/rows.rs",
        "data/memory/memory.db (InstallRoot::memory_db): looked for before a read-only open",
    ),
    (
        "crates/warren-memory/src/lucid.rs",
        "the Lucid projects under data/memory/lucid/ (InstallRoot::memory_dir), which no agent can reach, and a look for the configured `lucid` program",
    ),
    (
        "crates/warren-runtime/src/appendfile.rs",
        "append-only daemon files under data/state (cost ledger, runtime trace)",
    ),
    (
        "crates/warren-runtime/src/cost/ledger.rs",
        "the cost ledger and its lock under data/state",
    ),
    (
        "crates/warren-runtime/src/cost/tracker.rs",
        "the cost ledger under data/state (its length and inode, read back)",
    ),
    (
        "crates/warren-runtime/src/actions.rs",
        "data/state/actions.db (the max_actions_per_hour window), opened by SQLite; only looked for before a rename or purge",
    ),
    (
        "crates/warren-memory/src/qdrant/rest.rs",
        "data/memory/qdrant.lock (the Qdrant write lock) and its directory under data/memory, which no agent can reach",
    ),
    (
        "crates/warren-runtime/src/trace.rs",
        "its own rotated trace files under data/state",
    ),
    (
        "crates/warren-acp/src/attach.rs",
        "data/daemon.sock, the daemon's own ACP socket under data/ (bind, mode, owner, remove), and removing its key data/daemon.key",
    ),
    (
        "crates/warren-runtime/src/lock.rs",
        "daemon.lock and daemon.json under data/",
    ),
    ("crates/warren-daemon/src/lib.rs", "daemon.json under data/"),
    (
        "crates/warren-runtime/src/stores.rs",
        "looks whether a store's file under data/ (an InstallRoot path) exists before a reader opens it",
    ),
    (
        "crates/warren-admin/src/backup/",
        "the backup's own output (the operator's DEST, refused inside the install root) and its staging under data/; agent workspaces are read only through ConfinedDir handles (links kept as links); restore builds a fresh root beside the target, refusing a root a daemon runs on, so no agent runs in what it writes",
    ),
    (
        "crates/warren-runtime/src/metrics.rs",
        "/proc/self/status, the daemon's own resident memory",
    ),
    (
        "crates/warren-admin/src/lifecycle/",
        "the lifecycle journal under data/, archives under data/agents/_deleted/, and whole-workspace moves (see WORKSPACE_FS_ALLOWED)",
    ),
];

/// Modules that may apply a plain file-system API to a workspace path, and why.
const WORKSPACE_FS_ALLOWED: &[(&str, &str)] = &[(
    "crates/warren-admin/src/lifecycle/",
    "rename/delete/restore move, archive and checksum an agent's whole workspace while the \
     agent is stopped; links are copied as links (lstat first), never followed. Still to move \
     onto confined handles: the copy and checksum open files by path after the lstat.",
)];

/// Where the gates do not look at all: the homes of the confined handles, and fixtures.
const FS_GATE_HOMES: &[&str] = &[
    "crates/warren-config/",
    "crates/warren-security/",
    "crates/warren-testkit/",
];

/// The plain file-system API of the gate: `std::fs`/`tokio::fs` (any `fs::` path but rustix's),
/// `File`/`OpenOptions` opens, and the `Path` methods that touch the disk. (`is_file`/`is_dir`
/// are left out: they also name `FileType` methods.)
fn plain_fs(line: &str) -> Option<&'static str> {
    let code = line.replace("rustix::fs::", "");
    [
        "fs::",
        "File::open",
        "File::create",
        "File::options",
        "OpenOptions",
        ".read_dir(",
        ".metadata(",
        ".symlink_metadata(",
        ".canonicalize(",
        ".read_link(",
        ".exists()",
        ".try_exists(",
    ]
    .into_iter()
    .find(|p| {
        // `fs::` as a path of its own, not the tail of a name (`defs::render`).
        code.match_indices(p).any(|(at, _)| {
            !p.starts_with(char::is_alphanumeric)
                || !code[..at]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    })
}

/// Whether a line names a workspace path (`workspace`, `agent_workspace`, `ws`...).
fn names_workspace(line: &str) -> bool {
    line.to_ascii_lowercase().contains("workspace")
        || line
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(|w| w == "ws" || w.starts_with("ws_") || w.ends_with("_ws"))
}

fn listed(file: &str, list: &[(&str, &str)]) -> bool {
    list.iter().any(|(prefix, _)| file.starts_with(prefix))
}

/// Lines of one source file (shipped part: before `#[cfg(test)]`) that break the rule.
fn daemon_fs_violations_in(file: &str, source: &str) -> Vec<String> {
    if FS_GATE_HOMES.iter().any(|h| file.starts_with(h)) {
        return Vec::new();
    }
    let crate_name = file
        .strip_prefix("crates/")
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_default();
    let daemon_side = !NOT_DAEMON_SIDE.iter().any(|(c, _)| *c == crate_name);
    let shipped = source.split("#[cfg(test)]").next().unwrap_or(source);
    let mut out = Vec::new();
    for (n, line) in shipped.lines().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        let Some(api) = plain_fs(line) else {
            continue;
        };
        let why = if daemon_side && !listed(file, PLAIN_FS_ALLOWED) {
            "daemon-side code reaches agent-writable places only through confined handles \
             (warren_security::confined_dir); add the module to PLAIN_FS_ALLOWED only if it \
             touches nothing but InstallRoot's own files"
        } else if names_workspace(line) && !listed(file, WORKSPACE_FS_ALLOWED) {
            "a workspace path is opened with a plain file-system API; use a ConfinedDir on the \
             workspace (warren_security::confined_dir)"
        } else {
            continue;
        };
        out.push(format!(
            "{file}:{}: `{api}` in `{}` — {why} (PERM-6)",
            n + 1,
            line.trim()
        ));
    }
    out
}

/// Every break of the daemon-side file rule in the crates under `root/crates`.
fn daemon_fs_violations(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_sources(&root.join("crates"), &mut files);
    let mut found = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .to_string_lossy()
            .replace("\\", "/");
        let source = fs::read_to_string(&file).unwrap_or_default();
        found.extend(daemon_fs_violations_in(&rel, &source));
    }
    found
}

#[test]
fn daemon_side_file_access_goes_through_confined_handles_perm6() {
    let found = daemon_fs_violations(&workspace_root());
    assert!(
        found.is_empty(),
        "daemon-side file gate broken:\n{}",
        found.join("\n")
    );
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
    let entries = fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    for entry in entries.flatten() {
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if src.is_dir() {
            copy_dir(&src, &dst);
        } else {
            fs::copy(&src, &dst).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
        }
    }
}

/// Prepends `code` to `file` (so it lands before any `#[cfg(test)]`).
fn plant(file: &Path, code: &str) {
    let source = fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    fs::write(file, format!("{code}\n{source}"))
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
}

/// The gate run on a copy of real crates: clean, it passes; with a plain `std::fs` read of a
/// workspace path planted — in a daemon module, in a module allowed plain `std::fs` for its
/// own files, and in a crate added later — it fails, naming the planted line.
#[test]
fn the_daemon_side_file_gate_fails_on_a_planted_std_fs_call_perm6() {
    const PLANTED: &str = "fn planted(workspace: &std::path::Path) -> String { \
        std::fs::read_to_string(workspace.join(\"x\")).unwrap_or_default() }";
    let real = workspace_root();
    let copies = [
        ("warren-memory", "markdown.rs"),
        ("warren-memory", "sqlite/mod.rs"),
        ("warren-runtime", "prompt.rs"),
    ];
    for (krate, module) in copies {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let src = Path::new("crates").join(krate).join("src");
        copy_dir(&real.join(&src), &tmp.path().join(&src));
        assert_eq!(
            daemon_fs_violations(tmp.path()),
            Vec::<String>::new(),
            "the clean copy of {krate} passes"
        );
        plant(&tmp.path().join(&src).join(module), PLANTED);
        let found = daemon_fs_violations(tmp.path());
        let want = format!("crates/{krate}/src/{module}:1: `fs::`");
        assert!(
            found.len() == 1 && found[0].starts_with(&want),
            "planted call in {krate}/{module} not caught: {found:?}"
        );
    }
    // A crate added later is daemon-side unless listed otherwise.
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let lib = tmp.path().join("crates/warren-skills/src/lib.rs");
    fs::create_dir_all(lib.parent().unwrap_or(tmp.path())).unwrap_or_else(|e| panic!("{e}"));
    fs::write(&lib, "//! Skills.\n").unwrap_or_else(|e| panic!("{e}"));
    assert!(daemon_fs_violations(tmp.path()).is_empty());
    plant(
        &lib,
        "fn f(ws: &std::path::Path) -> bool { ws.join(\"SKILL.md\").exists() }",
    );
    assert_eq!(daemon_fs_violations(tmp.path()).len(), 1);
    // Rustix calls, comments and test modules are not plain file-system use.
    assert!(
        daemon_fs_violations_in(
            "crates/warren-tools/src/x.rs",
            "// std::fs::read(workspace)\nfn f() { rustix::fs::fsync(fd); }\n#[cfg(test)]\nmod t { fn g() { std::fs::read(\"workspace\"); } }"
        )
        .is_empty()
    );
}
