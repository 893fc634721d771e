//! Config save latency (CFG-4) as a ratio to a plain durable replace of the same bytes, measured
//! in the same run: temp file + fsync + rename + directory fsync. Target: median ratio ≤ 1.5.
//!
//! Run: `cargo bench -p warren-config --bench config_save`. Iterations alternate between the two
//! so disk and cache drift hit both equally.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use warren_config::{ConfigStore, InstallRoot, KeyPath, STARTER_CONFIG};

const ITERATIONS: usize = 1000;
const TARGET: f64 = 1.5;

/// The sequence CFG-4 requires, without Warren's logic: temp + fsync, directory fsync,
/// rename, directory fsync. The floor any conforming save pays.
fn cfg4_floor(target: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = target.parent().unwrap_or(Path::new("."));
    let temp = dir.join(".floor.tmp");
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&temp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    File::open(dir)?.sync_all()?;
    fs::rename(&temp, target)?;
    File::open(dir)?.sync_all()
}

fn plain_durable_replace(target: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = target.parent().unwrap_or(Path::new("."));
    let temp = dir.join(".baseline.tmp");
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&temp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    fs::rename(&temp, target)?;
    File::open(dir)?.sync_all()
}

/// Reads without touching the access time, so the read itself adds no journal work to the
/// next measured fsync.
fn read_noatime(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut bytes = Vec::new();
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOATIME)
        .open(path)?
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir_in(
        std::env::var_os("BENCH_DIR").unwrap_or_else(|| std::env::temp_dir().into()),
    )?;
    let root = InstallRoot::at(dir.path().join("warren"));
    warren_config::init(&root)?;
    let mut text = STARTER_CONFIG.to_string();
    for i in 0..20 {
        text.push_str(&format!(
            "\n[agents.agent{i}]\nmodel = \"m{i}\" # agent {i}\n"
        ));
    }
    fs::write(root.config_file(), &text)?;
    let store = ConfigStore::load(root.clone())?;
    let port: KeyPath = "gateway.port".parse()?;
    // The baseline gets a directory of its own, like the install root.
    let baseline_dir = dir.path().join("baseline");
    fs::create_dir(&baseline_dir)?;
    let baseline_target = baseline_dir.join("config.toml");

    let floor_dir = dir.path().join("floor");
    fs::create_dir(&floor_dir)?;
    let floor_target = floor_dir.join("config.toml");
    let (mut ours, mut base, mut floor) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..ITERATIONS {
        let value = (20000 + i).to_string();
        let t = Instant::now();
        let mut txn = store.write_blocking()?;
        txn.set_from_str(&port, &value)?;
        txn.commit()?;
        ours.push(t.elapsed());

        let bytes = read_noatime(&root.config_file())?;
        let t = Instant::now();
        plain_durable_replace(&baseline_target, &bytes)?;
        base.push(t.elapsed());

        let t = Instant::now();
        cfg4_floor(&floor_target, &bytes)?;
        floor.push(t.elapsed());
    }
    let (ours, base, floor) = (median(ours), median(base), median(floor));
    let ratio = ours.as_secs_f64() / base.as_secs_f64();
    println!(
        "config save (ConfigStore commit: lock, edit, validate, encrypt, atomic save, publish)"
    );
    println!("  warren save median:         {ours:?}");
    println!("  plain durable replace:      {base:?}");
    println!(
        "  ratio:                      {ratio:.2}x (target <= {TARGET}x, {ITERATIONS} iterations each)"
    );
    println!(
        "  CFG-4 floor (the same fsyncs plus the directory fsync before the rename): {floor:?} = {:.2}x the baseline; warren = {:.2}x the floor",
        floor.as_secs_f64() / base.as_secs_f64(),
        ours.as_secs_f64() / floor.as_secs_f64()
    );
    if ratio > TARGET {
        return Err(format!("config save ratio {ratio:.2}x exceeds the {TARGET}x target").into());
    }
    Ok(())
}
