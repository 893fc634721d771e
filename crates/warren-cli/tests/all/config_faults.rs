//! Config under concurrency and bad input (issue 15 items 1 and 6):
//! - concurrent writers (CFG-1..5, STATE-19): `warren config set` child processes on different
//!   keys race in-process `ConfigStore` writers and reloads that share one store (as the
//!   daemon's PATCH and SIGHUP paths do). Every acknowledged write must be on disk at the end,
//!   no CLI set may fail (it writes onto the file as it is under the lock) and no store writer
//!   with anything but a stale-read refusal (retried after a reload); and the same against the
//!   real daemon: CLI sets, a `PATCH /api/config` loop and a SIGHUP every 50 ms at once;
//! - an empty or agent-less config.toml (CFG-7, STATE-16, STATE-19) is refused by
//!   `config validate`, by a starting daemon and by a reload, and the device registry keeps its
//!   names and creation dates.

use crate::common::bin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use warren_config::{ConfigError, ConfigStore, InstallRoot, KeyPath};
use warren_testkit::{DaemonChild, TempRoot, free_port, http, pair, text};

type R = Result<(), Box<dyn std::error::Error>>;

const CLI_WRITERS: usize = 3;
const STORE_WRITERS: usize = 3;
const CLI_SETS: u32 = 100;

fn rate_key(name: &str) -> String {
    format!("cost.rates.{name}.input_per_mtok")
}

/// The last acknowledged value per writer, and every unexpected failure.
type Acked = Arc<Mutex<Vec<(String, f64)>>>;
type Failures = Arc<Mutex<Vec<String>>>;

fn push(list: &Failures, what: String) {
    if let Ok(mut l) = list.lock() {
        l.push(what);
    }
}

/// `writers` threads, each running `warren config set` on its own key `sets` times. Every set
/// must succeed (the CLI writes onto the file as it is under the lock, never a stale-read
/// refusal); a failure is recorded, each success counted in `acks`, and each writer's last
/// acknowledged value kept in `acked`.
fn spawn_cli_setters(
    temp: &Arc<TempRoot>,
    writers: usize,
    sets: u32,
    acked: &Acked,
    failures: &Failures,
    acks: &Arc<AtomicU32>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..writers)
        .map(|w| {
            let (temp, acked, failures, acks) =
                (temp.clone(), acked.clone(), failures.clone(), acks.clone());
            std::thread::spawn(move || {
                let name = format!("cli{w}");
                let mut last = None;
                for i in 1..=sets {
                    let value = format!("{i}.5");
                    let out = match temp.run(bin(), &["config", "set", &rate_key(&name), &value]) {
                        Ok(out) => out,
                        Err(e) => {
                            push(&failures, format!("{name}: spawn: {e}"));
                            break;
                        }
                    };
                    let (_, stderr) = text(&out);
                    if out.status.success() {
                        acks.fetch_add(1, Ordering::Relaxed);
                        last = Some(f64::from(i) + 0.5);
                    } else {
                        push(&failures, format!("{name} set {value}: {}", stderr.trim()));
                    }
                }
                if let (Some(v), Ok(mut a)) = (last, acked.lock()) {
                    a.push((name, v));
                }
            })
        })
        .collect()
}

/// The value on disk of every `cost.rates.<name>.input_per_mtok`, read by a fresh process.
fn on_disk(root: &InstallRoot) -> Result<Vec<(String, f64)>, ConfigError> {
    let store = ConfigStore::load(root.clone())?;
    Ok(store
        .snapshot()
        .cost
        .rates
        .iter()
        .map(|(k, r)| (k.clone(), r.input_per_mtok))
        .collect())
}

#[test]
fn concurrent_cli_sets_store_writes_and_reloads_keep_every_acknowledged_value_cfg3() -> R {
    let temp = TempRoot::new()?;
    temp.write_config("[agents.main]\n")?;
    let root = InstallRoot::at(temp.path());
    let store = ConfigStore::load(root.clone())?;
    let temp = Arc::new(temp);
    let done = Arc::new(AtomicBool::new(false));
    // (key, last acknowledged value) per writer, and every unexpected failure.
    let acked: Acked = Arc::default();
    let failures: Failures = Arc::default();
    let (cli_acks, store_acks) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));

    let cli = spawn_cli_setters(&temp, CLI_WRITERS, CLI_SETS, &acked, &failures, &cli_acks);

    let mut inproc = Vec::new();
    for w in 0..STORE_WRITERS {
        let (store, done, acked, failures, acks) = (
            store.clone(),
            done.clone(),
            acked.clone(),
            failures.clone(),
            store_acks.clone(),
        );
        inproc.push(std::thread::spawn(move || {
            let name = format!("store{w}");
            let Ok(key) = rate_key(&name).parse::<KeyPath>() else {
                return;
            };
            let mut last = None;
            let mut i = 0u32;
            while !done.load(Ordering::Relaxed) {
                i += 1;
                let value = format!("{i}.25");
                let result = store
                    .write_blocking()
                    .and_then(|mut txn| {
                        txn.set_from_str(&key, &value)?;
                        txn.commit()
                    })
                    .or_else(|e| match e {
                        // A CLI process changed the file since our last read: catch up, retry.
                        ConfigError::Stale { .. } => store.reload_blocking().and_then(|_| {
                            let mut txn = store.write_blocking()?;
                            txn.set_from_str(&key, &value)?;
                            txn.commit()
                        }),
                        other => Err(other),
                    });
                match result {
                    Ok(_) => {
                        acks.fetch_add(1, Ordering::Relaxed);
                        last = Some(f64::from(i) + 0.25);
                    }
                    Err(ConfigError::Stale { .. }) => {}
                    Err(e) => push(&failures, format!("{name} set {value}: {e}")),
                }
            }
            if let (Some(v), Ok(mut a)) = (last, acked.lock()) {
                a.push((name, v));
            }
        }));
    }

    let reloader = {
        let (store, done, failures) = (store.clone(), done.clone(), failures.clone());
        std::thread::spawn(move || {
            let mut reloads = 0u32;
            while !done.load(Ordering::Relaxed) {
                if let Err(e) = store.reload_blocking() {
                    push(&failures, format!("reload: {e}"));
                }
                reloads += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            reloads
        })
    };

    let started = Instant::now();
    for t in cli {
        t.join().map_err(|_| "CLI writer panicked")?;
    }
    done.store(true, Ordering::Relaxed);
    for t in inproc {
        t.join().map_err(|_| "store writer panicked")?;
    }
    let reloads = reloader.join().map_err(|_| "reloader panicked")?;
    eprintln!(
        "{} of {} CLI sets and {} store writes acknowledged, {reloads} reloads, in {:?}",
        cli_acks.load(Ordering::Relaxed),
        CLI_WRITERS as u32 * CLI_SETS,
        store_acks.load(Ordering::Relaxed),
        started.elapsed()
    );

    let failures = failures.lock().map_err(|_| "poisoned")?.clone();
    assert_eq!(failures, Vec::<String>::new(), "unexpected writer failures");
    let mut acked = acked.lock().map_err(|_| "poisoned")?.clone();
    acked.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        acked.len(),
        CLI_WRITERS + STORE_WRITERS,
        "every writer had a write acknowledged: {acked:?}"
    );
    assert_eq!(
        on_disk(&root)?,
        acked,
        "every acknowledged value is on disk"
    );
    let leftovers: Vec<String> = std::fs::read_dir(temp.path())?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect();
    assert_eq!(leftovers, Vec::<String>::new(), "no temp file left behind");
    Ok(())
}

/// A paired device as `warren tokens list --json` shows it: (id, name, created).
type Listed = (String, String, u64);

const WAIT: Duration = Duration::from_secs(20);

/// The texts a truncation, a stray `> config.toml` or a bad hand edit leaves.
const EMPTY_CONFIGS: [(&str, &str, &str); 4] = [
    ("0-byte", "", "the file is empty"),
    ("whitespace-only", "\n  \n\t\n", "the file is empty"),
    ("comment-only", "# agents come later\n", "the file is empty"),
    (
        "agent-less",
        "[gateway]\nbind = \"127.0.0.1\"\n",
        "no agent is configured",
    ),
];

#[test]
fn config_validate_and_daemon_start_refuse_an_empty_or_agentless_config_cfg7() -> R {
    for (what, config, expected) in EMPTY_CONFIGS {
        let root = TempRoot::new()?;
        root.write_config(config)?;
        let file = root.config_path().display().to_string();
        for args in [&["config", "validate"][..], &["daemon"][..]] {
            let out = root.run(bin(), args)?;
            let (_, stderr) = text(&out);
            assert_eq!(out.status.code(), Some(1), "{what}: {args:?}: {stderr}");
            assert!(
                stderr.contains(&format!("error: {file}")) && stderr.contains(expected),
                "{what}: {args:?} must name {file} and say why: {stderr}"
            );
        }
        assert_eq!(
            root.read_config()?,
            config,
            "{what}: the file is left as it was"
        );
    }
    // An empty install root still gets a starter config (and a valid one).
    let root = TempRoot::new()?;
    let out = root.run(bin(), &["init"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    let out = root.run(bin(), &["config", "validate"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(
        text(&out).0.contains("is valid (1 agent)"),
        "{:?}",
        text(&out)
    );
    Ok(())
}

/// The daemon reloads (SIGHUP) into each empty or agent-less text: the reload is refused, the
/// running generation keeps serving the paired device, and the device keeps its name and
/// creation date once the config is back.
#[test]
fn a_reload_into_an_empty_config_keeps_serving_and_keeps_every_device_state16_state19() -> R {
    let root = TempRoot::new()?;
    let port = free_port()?;
    let good = format!("[agents.main]\n\n[gateway]\nport = {port}\n");
    root.write_config(&good)?;
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    let token = pair(&root, bin(), port, "laptop")?;
    // (id, name, created): what a reconciliation that drops rows loses for good.
    let listed = |root: &TempRoot| -> Result<Vec<Listed>, Box<dyn std::error::Error>> {
        let out = root.run(bin(), &["tokens", "list", "--json"])?;
        assert!(out.status.success(), "{:?}", text(&out));
        let devices: serde_json::Value = serde_json::from_str(&text(&out).0)?;
        Ok(devices
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| {
                (
                    d["id"].as_str().unwrap_or_default().to_string(),
                    d["name"].as_str().unwrap_or_default().to_string(),
                    d["created_unix"].as_u64().unwrap_or_default(),
                )
            })
            .collect())
    };
    let before = listed(&root)?;
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0].1, "laptop", "{before:?}");
    // The pairing rewrote config.toml (the token hash); keep that text to restore.
    let good = root.read_config()?;

    for (what, config, expected) in EMPTY_CONFIGS {
        root.write_config(config)?;
        daemon.signal("HUP")?;
        let refused = daemon.wait_for("reload refused", WAIT)?;
        assert!(refused.contains(expected), "{what}: {refused}");
        daemon.wait_for("warren daemon ready", WAIT)?;
        let (status, _) = http(port, "GET", "/api/status", Some(&token), "")?;
        assert_eq!(
            status, 200,
            "{what}: the old generation keeps serving the device"
        );
    }
    root.write_config(&good)?;
    daemon.signal("HUP")?;
    daemon.wait_for("config reloaded", WAIT)?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    assert_eq!(listed(&root)?, before, "name and creation date kept");
    daemon.signal("TERM")?;
    daemon.wait(WAIT)?;
    Ok(())
}

/// Issue 15 item 8: an io error under a config save prints its cause once, not
/// "Is a directory (os error 21): Is a directory (os error 21)".
#[test]
fn a_failed_config_save_names_its_cause_once() -> R {
    let root = TempRoot::new()?;
    root.write_config("[agents.main]\n")?;
    // A directory where config.toml.bak goes: the save fails before its rename.
    std::fs::create_dir_all(root.path().join("config.toml.bak/x"))?;
    let out = root.run(bin(), &["config", "set", "gateway.port", "4242"])?;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.starts_with("error"))
            .collect::<Vec<_>>(),
        [format!(
            "error: cannot save {}: keep .bak: Is a directory (os error 21)",
            root.config_path().display()
        )],
        "one line, the cause once"
    );
    assert_eq!(root.read_config()?, "[agents.main]\n", "nothing changed");
    Ok(())
}

/// Issue 15 §1 as reported, against the real daemon: `warren config set` loops on different
/// keys, a `PATCH /api/config` loop and a SIGHUP every 50 ms, all at once. No PATCH answers a
/// 5xx (the reported `rename temp file over target` and `keep .bak` errors), no CLI set fails,
/// and every acknowledged value is on disk and served at the end.
#[test]
fn daemon_patches_cli_sets_and_sighups_at_once_keep_every_acknowledged_value_cfg3() -> R {
    const SETS: u32 = 25;
    let temp = Arc::new(TempRoot::new()?);
    let port = free_port()?;
    temp.write_config(&format!("[agents.main]\n\n[gateway]\nport = {port}\n"))?;
    let mut daemon = DaemonChild::spawn(temp.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    let token = pair(&temp, bin(), port, "ci")?;
    let done = Arc::new(AtomicBool::new(false));
    let acked: Acked = Arc::default();
    let failures: Failures = Arc::default();
    let cli_acks = Arc::new(AtomicU32::new(0));

    let cli = spawn_cli_setters(&temp, 2, SETS, &acked, &failures, &cli_acks);
    let patcher = {
        let (done, acked, failures, token) =
            (done.clone(), acked.clone(), failures.clone(), token.clone());
        std::thread::spawn(move || {
            let (mut last, mut i, mut ok) = (None, 0u32, 0u32);
            while !done.load(Ordering::Relaxed) {
                i += 1;
                let value = f64::from(i) + 0.25;
                let body = format!(r#"{{"{}": {value}}}"#, rate_key("patch"));
                match http(port, "PATCH", "/api/config", Some(&token), &body) {
                    Ok((200, _)) => {
                        ok += 1;
                        last = Some(value);
                    }
                    // Another writer changed the file again during the retry: refused, not lost.
                    Ok((409, b)) if b["error"] == "config_changed_externally" => {}
                    Ok((status, b)) => push(&failures, format!("PATCH {value}: {status} {b}")),
                    Err(e) => push(&failures, format!("PATCH {value}: {e}")),
                }
            }
            if let (Some(v), Ok(mut a)) = (last, acked.lock()) {
                a.push(("patch".to_string(), v));
            }
            (i, ok)
        })
    };
    let pid = daemon.pid();
    let hupper = {
        let (done, failures) = (done.clone(), failures.clone());
        std::thread::spawn(move || {
            let mut sent = 0u32;
            while !done.load(Ordering::Relaxed) {
                let killed = std::process::Command::new("kill")
                    .args(["-HUP", &pid.to_string()])
                    .status();
                if !killed.is_ok_and(|s| s.success()) {
                    push(&failures, "kill -HUP failed".to_string());
                    break;
                }
                sent += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            sent
        })
    };

    let started = Instant::now();
    for t in cli {
        t.join().map_err(|_| "CLI writer panicked")?;
    }
    done.store(true, Ordering::Relaxed);
    let (patches, patched) = patcher.join().map_err(|_| "PATCH loop panicked")?;
    let hups = hupper.join().map_err(|_| "SIGHUP loop panicked")?;
    eprintln!(
        "{} of {} CLI sets and {patched} of {patches} PATCHes acknowledged, {hups} SIGHUPs, \
         in {:?}",
        cli_acks.load(Ordering::Relaxed),
        2 * SETS,
        started.elapsed()
    );
    let failures = failures.lock().map_err(|_| "poisoned")?.clone();
    assert_eq!(failures, Vec::<String>::new(), "unexpected writer failures");
    let mut acked = acked.lock().map_err(|_| "poisoned")?.clone();
    acked.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        acked.len(),
        3,
        "every writer had a write acknowledged: {acked:?}"
    );
    let root = InstallRoot::at(temp.path());
    assert_eq!(
        on_disk(&root)?,
        acked,
        "every acknowledged value is on disk"
    );

    // Once the last SIGHUP's reload is through (one more, awaited), the daemon serves them.
    let (status, _) = http(port, "POST", "/admin/reload", Some(&token), "")?;
    assert_eq!(status, 200);
    let (status, config) = http(port, "GET", "/api/config", Some(&token), "")?;
    assert_eq!(status, 200);
    for (name, value) in &acked {
        assert_eq!(
            config["config"]["cost"]["rates"][name]["input_per_mtok"], *value,
            "{name} served: {config}"
        );
    }
    daemon.signal("TERM")?;
    daemon.wait_for("warren daemon stopped", WAIT)?;
    daemon.wait(WAIT)?;
    let errors: Vec<&String> = daemon
        .stderr_seen()
        .iter()
        .filter(|l| l.contains(" answered 5"))
        .collect();
    assert!(errors.is_empty(), "5xx answers logged: {errors:?}");
    Ok(())
}
