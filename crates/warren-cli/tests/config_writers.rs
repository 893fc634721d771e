//! Concurrent config writers (CFG-1..5, STATE-19, issue 15 item 1): `warren config set` child
//! processes on different keys race in-process `ConfigStore` writers and reloads that share one
//! store (as the daemon's PATCH and SIGHUP paths do). Every write that was acknowledged must be
//! on disk at the end, and no writer may fail with anything but a stale-read refusal.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use warren_config::{ConfigError, ConfigStore, InstallRoot, KeyPath};
use warren_testkit::{TempRoot, text};

type R = Result<(), Box<dyn std::error::Error>>;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_warren"))
}

const CLI_WRITERS: usize = 3;
const STORE_WRITERS: usize = 3;
const CLI_SETS: u32 = 100;

fn rate_key(name: &str) -> String {
    format!("cost.rates.{name}.input_per_mtok")
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
    let acked: Arc<Mutex<Vec<(String, f64)>>> = Arc::default();
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let (cli_acks, store_acks) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let push = |list: &Arc<Mutex<Vec<String>>>, what: String| {
        if let Ok(mut l) = list.lock() {
            l.push(what);
        }
    };

    let mut cli = Vec::new();
    for w in 0..CLI_WRITERS {
        let (temp, acked, failures, acks) = (
            temp.clone(),
            acked.clone(),
            failures.clone(),
            cli_acks.clone(),
        );
        cli.push(std::thread::spawn(move || {
            let name = format!("cli{w}");
            let mut last = None;
            for i in 1..=CLI_SETS {
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
                } else if !stderr.contains("changed on disk") {
                    push(&failures, format!("{name} set {value}: {}", stderr.trim()));
                }
            }
            if let (Some(v), Ok(mut a)) = (last, acked.lock()) {
                a.push((name, v));
            }
        }));
    }

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
