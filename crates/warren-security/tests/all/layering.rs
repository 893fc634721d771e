//! The structure rules as tests (issue 34 §6, docs/architecture.md), each shown to fire on a
//! planted violation first:
//! 1. crate dependencies point down, against the one layer table [`LAYERS`] (the `check-layers`
//!    the docs name); `warren-testkit` only as a dev-dependency;
//! 2. no import circle between the top-level modules of a crate, except [`CIRCLES_ALLOWED`],
//!    each entry with its reason;
//! 3. the process-wide store handles (control plane, cron, SOP runs, the action window, the
//!    cost ledger) are opened only by their owner, `warren_runtime::stores::Stores`, and by the
//!    store crate itself ([`STORE_OPENERS_ALLOWED`]).
//! 4. errors are typed: no `Result<_, String>` in the shipped code of any crate but `warren-cli`
//!    (issue 34 §5), except in the CLI and the test kit.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every workspace crate and its layer: a crate may depend only on crates of a lower layer.
const LAYERS: &[(&str, u8)] = &[
    ("warren-core", 0),
    ("warren-config", 1),
    ("warren-security", 2),
    ("warren-memory", 2),
    ("warren-store", 2),
    ("warren-providers", 2),
    ("warren-tools", 3),
    ("warren-runtime", 4),
    ("warren-jobs", 5),
    ("warren-admin", 5),
    ("warren-channels", 5),
    ("warren-daemon", 6),
    ("warren-gateway", 7),
    ("warren-acp", 7),
    ("warren-cli", 8),
];

/// The test kit: a dev-dependency of anyone, a normal dependency of no one.
const TEST_KIT: &str = "warren-testkit";

/// Import circles between top-level modules that stay for now, and why.
const CIRCLES_ALLOWED: &[(&str, &[&str], &str)] = &[
    (
        "warren-security",
        &["control_socket", "sandbox"],
        "the control socket's peer check counts the seccomp filters the sandbox gives every \
         child, and the selftest serves a socket with that very guard to probe it",
    ),
    (
        "warren-security",
        &["paths", "policy", "quota"],
        "issue 35 §8: the sealed policy owns each workspace's disk limits (quota::DiskLimits, \
         built in SecurityPolicy::for_agent), which measure the roots its path decisions \
         resolve; to fold: the limits as a field type defined below both",
    ),
    (
        "warren-config",
        &["error", "redact", "schema"],
        "validation errors redact secret values of the schema they report on",
    ),
    (
        "warren-cli",
        &["cli", "commands", "logging"],
        "the binary's argument types, their commands and the log set-up the commands start",
    ),
    (
        "warren-acp",
        &["approver", "server"],
        "the approver answers permission requests on the server's connection and the server \
         builds one per session; one concept split in two files",
    ),
    (
        "warren-memory",
        &["hybrid", "sqlite"],
        "the hybrid ranker merges the SQLite store's vector and keyword rows; the store \
         calls it for recall",
    ),
];

/// Store types whose handles one owner holds, and the names of their constructors.
const OWNED_STORES: &[&str] = &[
    "CronStore::open",
    "ControlPlane::open",
    "SopStore::open",
    "SopStore::in_memory",
    "ActionWindow::open",
    "CostTracker::open",
    "ChannelStore::open",
];

/// Where those constructors may be called, and why.
const STORE_OPENERS_ALLOWED: &[(&str, &str)] = &[
    (
        "crates/warren-store/",
        "the stores themselves (constructors and their own tests)",
    ),
    (
        "crates/warren-runtime/src/stores.rs",
        "the owner: one handle per store and process",
    ),
    (
        "crates/warren-runtime/src/cost.rs",
        "the cost ledger's own module (its constructor)",
    ),
    (
        "crates/warren-runtime/src/actions.rs",
        "the action window's own module (its constructor)",
    ),
    (
        "crates/warren-runtime/src/heartbeat.rs",
        "the heartbeat task drops a handle that opened read-only (a migration lock held \
         elsewhere) and reopens it at the next tick, which a shared handle cannot do for its \
         other borrowers",
    ),
];

/// Files outside the crates below that may still return `Result<_, String>`: none since issue 34
/// §5 landed. A file added here needs a reason.
const STRING_ERRORS_ALLOWED: &[&str] = &[];

/// The crates whose errors may be plain text: the binary prints them and exits; the test kit's
/// helpers fail tests with a message.
const STRING_ERRORS_CRATES: &[&str] = &["crates/warren-cli/", "crates/warren-testkit/"];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|e| panic!("workspace root: {e}"))
}

// ---- 1. crate layering ------------------------------------------------------------------------

/// The workspace dependencies of one manifest: (name, is_dev).
fn workspace_deps(manifest: &str) -> Vec<(String, bool)> {
    let value: toml::Table = manifest
        .parse()
        .unwrap_or_else(|e| panic!("Cargo.toml: {e}"));
    let mut deps = Vec::new();
    for (section, dev) in [
        ("dependencies", false),
        ("build-dependencies", false),
        ("dev-dependencies", true),
    ] {
        if let Some(table) = value.get(section).and_then(toml::Value::as_table) {
            for name in table.keys().filter(|n| n.starts_with("warren-")) {
                deps.push((name.clone(), dev));
            }
        }
    }
    deps
}

/// Violations of the layer rule in `manifests` (crate name → manifest text).
fn layering_violations(manifests: &BTreeMap<String, String>) -> Vec<String> {
    let layer: BTreeMap<&str, u8> = LAYERS.iter().copied().collect();
    let mut bad = Vec::new();
    for (name, manifest) in manifests {
        if name != TEST_KIT && !layer.contains_key(name.as_str()) {
            bad.push(format!(
                "{name}: not in the layer table (add it to LAYERS and docs/architecture.md)"
            ));
            continue;
        }
        for (dep, dev) in workspace_deps(manifest) {
            if dep == TEST_KIT {
                if !dev {
                    bad.push(format!(
                        "{name} -> {dep}: the test kit is a dev-dependency only"
                    ));
                }
                continue;
            }
            if dev || name == TEST_KIT {
                continue;
            }
            match (layer.get(name.as_str()), layer.get(dep.as_str())) {
                (Some(from), Some(to)) if to >= from => bad.push(format!(
                    "{name} (layer {from}) -> {dep} (layer {to}): dependencies point down"
                )),
                (_, None) => bad.push(format!("{name} -> {dep}: {dep} is not in the layer table")),
                _ => {}
            }
        }
    }
    bad
}

fn manifests(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(root.join("crates")).unwrap_or_else(|e| panic!("{e}")) {
        let dir = entry.unwrap_or_else(|e| panic!("{e}")).path();
        let manifest = dir.join("Cargo.toml");
        if let Ok(text) = std::fs::read_to_string(&manifest) {
            let name = dir
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_string();
            out.insert(name, text);
        }
    }
    out
}

#[test]
fn the_layer_rule_fires_on_an_upward_dependency_and_a_normal_test_kit_dependency_issue34() {
    let mut planted = BTreeMap::new();
    planted.insert(
        "warren-runtime".to_string(),
        "[dependencies]\nwarren-jobs.workspace = true\nwarren-core.workspace = true\n".to_string(),
    );
    planted.insert(
        "warren-tools".to_string(),
        "[dependencies]\nwarren-testkit.workspace = true\n".to_string(),
    );
    planted.insert(
        "warren-admin".to_string(),
        "[dependencies]\nwarren-jobs.workspace = true\n[dev-dependencies]\nwarren-daemon.workspace = true\n"
            .to_string(),
    );
    planted.insert("warren-extra".to_string(), "[dependencies]\n".to_string());
    let bad = layering_violations(&planted);
    assert_eq!(
        bad,
        vec![
            "warren-admin (layer 5) -> warren-jobs (layer 5): dependencies point down".to_string(),
            "warren-extra: not in the layer table (add it to LAYERS and docs/architecture.md)"
                .to_string(),
            "warren-runtime (layer 4) -> warren-jobs (layer 5): dependencies point down"
                .to_string(),
            "warren-tools -> warren-testkit: the test kit is a dev-dependency only".to_string(),
        ]
    );
}

#[test]
fn crate_dependencies_point_down_issue34() {
    let bad = layering_violations(&manifests(&workspace_root()));
    assert!(bad.is_empty(), "layering violations:\n{}", bad.join("\n"));
}

// ---- 2. module circles ------------------------------------------------------------------------

/// The code of a file without its comments and its `#[cfg(test)]` tail.
fn shipped(source: &str) -> String {
    let code = match source.find("#[cfg(test)]") {
        Some(at) => &source[..at],
        None => source,
    };
    code.lines()
        .map(|l| {
            if l.trim_start().starts_with("//") {
                ""
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules a file's code names through `crate::` (grouped imports included).
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        // `warren_crate::x` is another crate's path, not ours.
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut item = String::new();
            let mut items = Vec::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => items.push(std::mem::take(&mut item)),
                    _ if depth == 1 => item.push(c),
                    _ => {}
                }
            }
            items.push(item);
            for item in items {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    refs.insert(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                refs.insert(name);
            }
        }
    }
    refs
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module graph of the crate whose `src/` is `src`: module → modules it names.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let top = |file: &Path| -> Option<String> {
        let rel = file.strip_prefix(src).ok()?;
        let first = rel.components().next()?.as_os_str().to_str()?.to_string();
        let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
        (name != "lib" && name != "main").then_some(name)
    };
    let modules: BTreeSet<String> = files.iter().filter_map(|f| top(f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some(module) = top(file) else { continue };
        let source = std::fs::read_to_string(file).unwrap_or_default();
        let edges = graph.entry(module.clone()).or_default();
        for name in crate_refs(&shipped(&source)) {
            if name != module && modules.contains(&name) {
                edges.insert(name);
            }
        }
    }
    graph
}

/// The circles of `graph`: its strongly connected components of more than one module.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            for next in graph.get(&m).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|m| (m, reach(m))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for (m, r) in &reaches {
        let scc: BTreeSet<String> = r
            .iter()
            .filter(|o| *o != *m && reaches.get(o).is_some_and(|back| back.contains(*m)))
            .cloned()
            .chain(std::iter::once((*m).clone()))
            .collect();
        if scc.len() > 1 && !out.contains(&scc) {
            out.push(scc);
        }
    }
    out
}

fn circle_violations(krate: &str, graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    circles(graph)
        .into_iter()
        .filter(|scc| {
            !CIRCLES_ALLOWED.iter().any(|(c, allowed, _)| {
                *c == krate && scc.iter().all(|m| allowed.contains(&m.as_str()))
            })
        })
        .map(|scc| {
            format!(
                "{krate}: import circle between top-level modules {}",
                scc.into_iter().collect::<Vec<_>>().join(" <-> ")
            )
        })
        .collect()
}

#[test]
fn the_circle_rule_fires_on_a_planted_circle_issue34() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("cron")).unwrap_or_else(|e| panic!("{e}"));
    let write = |rel: &str, code: &str| {
        std::fs::write(src.join(rel), code).unwrap_or_else(|e| panic!("{e}"));
    };
    write("lib.rs", "pub mod host;\npub mod cron;\npub mod turn;\n");
    write(
        "host.rs",
        "use crate::{turn::Runner, cron::{self, Scheduler}};\n",
    );
    write("cron/mod.rs", "mod run;\n");
    write("cron/run.rs", "fn f(h: &crate::host::AgentHost) {}\n");
    write(
        "turn.rs",
        "// crate::host in a comment is no edge\nuse warren_crate::host;\n#[cfg(test)]\nmod tests { use crate::host; }\n",
    );
    let graph = module_graph(&src);
    assert_eq!(
        circle_violations("warren-runtime", &graph),
        vec!["warren-runtime: import circle between top-level modules cron <-> host".to_string()]
    );
}

#[test]
fn no_import_circle_between_the_top_level_modules_of_a_crate_issue34() {
    let root = workspace_root();
    let mut bad = Vec::new();
    for name in manifests(&root).keys() {
        let src = root.join("crates").join(name).join("src");
        bad.extend(circle_violations(name, &module_graph(&src)));
    }
    assert!(bad.is_empty(), "module circles:\n{}", bad.join("\n"));
}

// ---- 3. store handles have one owner ----------------------------------------------------------

fn store_open_violations(file: &str, source: &str) -> Vec<String> {
    if STORE_OPENERS_ALLOWED
        .iter()
        .any(|(allowed, _)| file.starts_with(allowed))
    {
        return Vec::new();
    }
    let code = shipped(source);
    let mut bad = Vec::new();
    for (n, line) in code.lines().enumerate() {
        for opener in OWNED_STORES {
            if line.contains(opener) {
                bad.push(format!(
                    "{file}:{}: `{opener}`: borrow it from warren_runtime::stores::Stores",
                    n + 1
                ));
            }
        }
    }
    bad
}

#[test]
fn the_store_owner_rule_fires_on_a_planted_open_issue34() {
    let planted = "fn list(root: &InstallRoot) {\n    let s = CronStore::open_existing(&root.cron_db());\n}\n";
    assert_eq!(
        store_open_violations("crates/warren-gateway/src/cron_api.rs", planted),
        vec![
            "crates/warren-gateway/src/cron_api.rs:2: `CronStore::open`: borrow it from warren_runtime::stores::Stores"
                .to_string()
        ]
    );
    assert!(store_open_violations("crates/warren-runtime/src/stores.rs", planted).is_empty());
    assert!(
        store_open_violations(
            "crates/warren-cli/src/commands/cron.rs",
            "#[cfg(test)]\nmod tests { fn f() { CronStore::open(p); } }\n"
        )
        .is_empty(),
        "tests may open their own stores"
    );
}

#[test]
fn store_handles_are_opened_only_by_their_owner_issue34() {
    let root = workspace_root();
    let mut bad = Vec::new();
    for name in manifests(&root).keys() {
        let mut files = Vec::new();
        rust_files(&root.join("crates").join(name).join("src"), &mut files);
        for file in files {
            let rel = file
                .strip_prefix(&root)
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            let source = std::fs::read_to_string(&file).unwrap_or_default();
            bad.extend(store_open_violations(&rel, &source));
        }
    }
    assert!(
        bad.is_empty(),
        "stores opened outside their owner:\n{}",
        bad.join("\n")
    );
}

// ---- 4. typed errors --------------------------------------------------------------------------

/// The lines of `code` that name a `Result` whose error type is `String` (`Result<T, String>`,
/// nested generics, tuples and closures' `->` inside `T` included).
fn string_error_lines(code: &str) -> Vec<usize> {
    let mut lines = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("Result<") {
        let start = from + at;
        from = start + "Result<".len();
        // `io::Result<T>` is another alias; `MyResult<` is another type.
        if code[..start]
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let mut depth = 1i32;
        let mut args = vec![String::new()];
        let mut prev = ' ';
        for c in code[from..].chars() {
            match c {
                '<' | '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                '>' if prev != '-' => depth -= 1,
                _ => {}
            }
            if depth <= 0 {
                break;
            }
            match (depth, c) {
                (1, ',') => args.push(String::new()),
                _ => args.last_mut().into_iter().for_each(|a| a.push(c)),
            }
            prev = c;
        }
        // A trailing comma leaves an empty last argument.
        if args.len() > 1 && args.last().is_some_and(|a| a.trim().is_empty()) {
            args.pop();
        }
        if args.len() == 2
            && matches!(
                args.last().map(|a| a.trim()),
                Some("String" | "std::string::String")
            )
        {
            lines.push(code[..start].matches('\n').count() + 1);
        }
    }
    lines
}

fn typed_error_violations(file: &str, source: &str) -> Vec<String> {
    if STRING_ERRORS_CRATES.iter().any(|c| file.starts_with(c))
        || STRING_ERRORS_ALLOWED.contains(&file)
    {
        return Vec::new();
    }
    string_error_lines(&shipped(source))
        .into_iter()
        .map(|line| {
            format!(
                "{file}:{line}: `Result<_, String>`: name the path, key or alias at fault in a \
                 thiserror enum (issue 34 §5)"
            )
        })
        .collect()
}

#[test]
fn the_typed_error_rule_fires_on_a_planted_string_error_issue34() {
    let planted = "\
//! Planted.
fn load(p: &Path) -> Result<Config, String> {
    todo!()
}
fn pair() -> Result<(Vec<u8>, BTreeMap<String, u32>), String> { todo!() }
fn typed() -> Result<String, LoadError> { todo!() }
fn io() -> std::io::Result<String> { todo!() }
// fn old() -> Result<(), String>
type Hook = Box<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send>;
fn long() -> Result<
    Vec<u8>,
    String,
> { todo!() }
#[cfg(test)]
mod tests { fn t() -> Result<(), String> { Ok(()) } }
";
    let bad = |line: usize| {
        format!(
            "crates/warren-runtime/src/planted.rs:{line}: `Result<_, String>`: name the path, key \
             or alias at fault in a thiserror enum (issue 34 §5)"
        )
    };
    assert_eq!(
        typed_error_violations("crates/warren-runtime/src/planted.rs", planted),
        vec![bad(2), bad(5), bad(9), bad(10)]
    );
    assert!(
        typed_error_violations("crates/warren-cli/src/commands/agents.rs", planted).is_empty(),
        "the CLI prints its errors and exits"
    );
}

#[test]
fn typed_errors_outside_cli() {
    let root = workspace_root();
    let mut bad = Vec::new();
    for name in manifests(&root).keys() {
        let mut files = Vec::new();
        rust_files(&root.join("crates").join(name).join("src"), &mut files);
        for file in files {
            let rel = file
                .strip_prefix(&root)
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            let source = std::fs::read_to_string(&file).unwrap_or_default();
            bad.extend(typed_error_violations(&rel, &source));
        }
    }
    assert!(
        bad.is_empty(),
        "`Result<_, String>` outside warren-cli:\n{}",
        bad.join("\n")
    );
}
