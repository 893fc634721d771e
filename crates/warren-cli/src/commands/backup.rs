//! `warren backup [DEST] [--encrypt]`, `warren backup verify SRC`, `warren restore SRC [--to
//! DIR] [--force]` and `warren doctor` (issue 22; BAK-1, BEYOND-2, BEYOND-11). The work is in
//! `warren_admin::backup`; this parses, asks for the passphrase, draws the progress bar on
//! stderr (hidden when stderr is not a terminal) and prints.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use warren_admin::backup::{self, PASSPHRASE_ENV, Progress};
use warren_config::InstallRoot;

use crate::cli::{BackupArgs, BackupCommand};

/// `warren backup`.
pub fn backup(root: &InstallRoot, args: BackupArgs, json: bool) -> anyhow::Result<ExitCode> {
    if let Some(BackupCommand::Verify { src }) = args.command {
        return verify(&src, json);
    }
    if !root.root().is_dir() {
        bail!(
            "no install at {} (nothing to back up)",
            root.root().display()
        );
    }
    let dest = match args.dest {
        Some(d) => d,
        None => default_dest()?,
    };
    let passphrase = if args.encrypt {
        Some(passphrase(true)?)
    } else {
        None
    };
    let bar = Bar::new();
    let cap = (args.max_agent_mb > 0).then(|| args.max_agent_mb.saturating_mul(1_000_000));
    let summary = backup::create(root, &dest, passphrase.as_deref(), cap, &bar)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "backup written to {}: {} files, {:.1} MB ({} databases) in {:.1}s ({:.0} MB/s)",
            summary.path.display(),
            summary.files,
            summary.bytes as f64 / 1e6,
            summary.databases,
            summary.seconds,
            summary.mb_per_s
        );
        for w in &summary.warnings {
            println!("warning: {w}");
        }
        if !summary.encrypted {
            println!(
                "note: the backup holds .secret_key in clear (without it the secrets in config.toml cannot be decrypted): keep it as safe as the key itself, or use --encrypt"
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn default_dest() -> anyhow::Result<PathBuf> {
    let home = std::env::var_os("HOME").context("HOME is not set; give the backup a DEST")?;
    let t = time::OffsetDateTime::now_utc();
    Ok(PathBuf::from(home).join("warren-backups").join(format!(
        "{}{:02}{:02}T{:02}{:02}{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )))
}

fn verify(src: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let pass = needs_passphrase(src)?;
    let report = backup::verify(src, pass.as_deref())?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "backup {} is good: {} files, {:.1} MB, {} databases pass integrity_check, {} secrets decrypt with its key{}",
            src.display(),
            report.files,
            report.bytes as f64 / 1e6,
            report.databases.len(),
            report.secrets_decrypted,
            if report.encrypted { " (encrypted)" } else { "" }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `warren restore`.
pub fn restore(
    root: &InstallRoot,
    src: &Path,
    to: Option<PathBuf>,
    force: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let target = match to {
        Some(dir) => InstallRoot::at(dir),
        None => root.clone(),
    };
    let pass = needs_passphrase(src)?;
    let bar = Bar::new();
    let report = backup::restore(src, &target, force, pass.as_deref(), &bar)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "restored {} files ({:.1} MB) from {} into {}",
            report.files,
            report.bytes as f64 / 1e6,
            report.from.display(),
            report.root.display()
        );
        if let Some(aside) = &report.moved_aside {
            println!(
                "the previous install was moved to {} (kept)",
                aside.display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `warren doctor`.
pub fn doctor(root: &InstallRoot, json: bool) -> anyhow::Result<ExitCode> {
    let mut report = backup::doctor(root);
    // The external memory backends (Qdrant: its URL and why, while it does not answer).
    let store = warren_config::ConfigStore::load(root.clone()).ok();
    let memory = store
        .as_ref()
        .and_then(|store| super::memory::backends_health(root, store.snapshot().config()));
    // Secrets written in plaintext in config.toml, by key only (issue 35 §9).
    let warnings = store
        .as_ref()
        .map(super::config::plaintext_warnings)
        .unwrap_or_default();
    for (status, line) in memory.iter().flat_map(super::memory::backend_lines) {
        if status == "error" {
            report.problems.push(format!("memory backend {line}"));
        }
    }
    // What the running daemon could not open (issue 36 §1): each store by name and file.
    if report.daemon_running {
        let health = super::status::daemon_health(root);
        report
            .problems
            .extend(health.iter().flat_map(super::status::degraded_lines));
    }
    if json {
        let mut value = serde_json::to_value(&report)?;
        value["memory_backends"] = memory.unwrap_or_default();
        value["warnings"] = serde_json::json!(warnings);
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        println!("install root {}", report.root.display());
        println!(
            "daemon: {}",
            if report.daemon_running {
                "running"
            } else {
                "not running"
            }
        );
        println!("databases:");
        for db in &report.databases {
            let schema = match (db.schema, db.expected) {
                (Some(v), Some(e)) => format!("schema {v} (this warren: {e})"),
                _ => String::new(),
            };
            println!(
                "  {:<14} {:<8} {:<10} {:>10}  {}  {}",
                db.store,
                db.state,
                db.status,
                human(db.bytes),
                schema,
                db.path.display()
            );
            for s in &db.snapshots {
                println!("      pre-migration snapshot {}", s.display());
            }
        }
        println!("disk use:");
        for (name, bytes) in &report.disk_use {
            println!("  {:<24} {:>10}", name, human(*bytes));
        }
        print!("  total {}", human(report.total_bytes));
        match report.free_bytes {
            Some(f) => println!(", {} free on its file system", human(f)),
            None => println!(),
        }
        for (_, line) in memory.iter().flat_map(super::memory::backend_lines) {
            println!("memory backend {line}");
        }
        for w in &warnings {
            println!("warning: {w}");
        }
        for p in &report.problems {
            println!("problem: {p}");
        }
    }
    Ok(if report.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn human(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// The passphrase of an encrypted backup at `src`, if it is one.
fn needs_passphrase(src: &Path) -> anyhow::Result<Option<String>> {
    let m = backup::Manifest::read(src)?;
    if m.encryption.is_none() {
        return Ok(None);
    }
    passphrase(false).map(Some)
}

/// From `$WARREN_BACKUP_PASSPHRASE`, else asked on the terminal (never from argv).
fn passphrase(confirm: bool) -> anyhow::Result<String> {
    if let Ok(p) = std::env::var(PASSPHRASE_ENV) {
        if p.is_empty() {
            bail!("{PASSPHRASE_ENV} is empty");
        }
        return Ok(p);
    }
    if !std::io::stdin().is_terminal() {
        bail!("set {PASSPHRASE_ENV} to the backup's passphrase (no terminal to ask on)");
    }
    let first = prompt("backup passphrase: ")?;
    if first.is_empty() {
        bail!("the passphrase is empty");
    }
    if confirm && prompt("again: ")? != first {
        bail!("the passphrases differ");
    }
    Ok(first)
}

/// Reads one line from the terminal with echo off.
fn prompt(label: &str) -> anyhow::Result<String> {
    use rustix::termios::{LocalModes, OptionalActions, tcgetattr, tcsetattr};
    let stdin = std::io::stdin();
    eprint!("{label}");
    std::io::stderr().flush().ok();
    let saved = tcgetattr(&stdin).ok();
    if let Some(t) = &saved {
        let mut quiet = t.clone();
        quiet.local_modes.remove(LocalModes::ECHO);
        let _ = tcsetattr(&stdin, OptionalActions::Now, &quiet);
    }
    let mut line = String::new();
    let read = stdin.lock().read_line(&mut line);
    if let Some(t) = &saved {
        let _ = tcsetattr(&stdin, OptionalActions::Now, t);
    }
    eprintln!();
    read.context("reading the passphrase")?;
    Ok(line.trim_end_matches(['\n', '\r']).to_string())
}

/// The progress bar: bytes and files, on stderr, hidden when stderr is not a terminal.
struct Bar {
    bar: ProgressBar,
    files: AtomicU64,
    total_files: AtomicU64,
}

impl Bar {
    fn new() -> Self {
        let bar = ProgressBar::hidden();
        if std::io::stderr().is_terminal() {
            bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        if let Ok(style) = ProgressStyle::with_template(
            "{bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec} {msg}",
        ) {
            bar.set_style(style);
        }
        Self {
            bar,
            files: AtomicU64::new(0),
            total_files: AtomicU64::new(0),
        }
    }
}

impl Progress for Bar {
    fn start(&self, files: u64, bytes: u64) {
        self.total_files.store(files, Ordering::Relaxed);
        self.bar.set_length(bytes);
    }
    fn file_done(&self, _path: &str, bytes: u64) {
        let n = self.files.fetch_add(1, Ordering::Relaxed) + 1;
        self.bar.inc(bytes);
        self.bar.set_message(format!(
            "files {n}/{}",
            self.total_files.load(Ordering::Relaxed)
        ));
    }
    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
