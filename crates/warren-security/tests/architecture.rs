//! Architecture gates (STYLE "one seam per decision"): child processes are started only by the
//! sandbox module, file tools reach the disk only through `confined`, and install-root paths are
//! joined only in `InstallRoot`. Each gate is first shown to fire on a planted violation.

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
        ],
    },
    Gate {
        what: "file tools reach the disk only through warren_security::confined (PERM-6)",
        pattern: "std::fs::",
        allowed_in: &[
            "crates/warren-security/",
            "crates/warren-config/",
            "crates/warren-runtime/",
            // The gateway touches only its own state files at InstallRoot paths (devices.db,
            // gateway.json), never a path a model or request names.
            "crates/warren-gateway/",
            "crates/warren-cli/",
            "crates/warren-testkit/",
            "crates/warren-memory/",
            "crates/warren-store/",
            // The script provider reads the script file config names (not an agent's files).
            "crates/warren-providers/src/script.rs",
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
