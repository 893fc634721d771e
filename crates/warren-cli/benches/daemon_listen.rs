//! `warren daemon` with 3 agents: time from spawn to the first `GET /health` answered with 200,
//! and idle RSS after it settled. Targets: issue 26's `LISTEN_MS` and `IDLE_RSS_MIB` of
//! `bench/footprint-targets` (issue 8's were 5 ms and 12 MB). The figures are reported against
//! spawning `/bin/true` (the process-spawn floor) measured in the same run; `bench/footprint`
//! sets them beside a minimal axum server.
//!
//! Run: `cargo bench -p warren-cli --bench daemon_listen`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{E, target};

const RUNS: usize = 15;

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn health_ok(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let mut head = [0u8; 12];
    stream
        .write_all(b"GET /health HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
        .and_then(|()| stream.read_exact(&mut head))
        .is_ok_and(|()| head.ends_with(b" 200"))
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

fn main() -> Result<(), E> {
    let (listen_ms, rss_mib) = (target("LISTEN_MS")?, target("IDLE_RSS_MIB")?);
    let bin = env!("CARGO_BIN_EXE_warren");
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("warren");
    std::fs::create_dir_all(&root)?;
    let port = free_port()?;
    std::fs::write(
        root.join("config.toml"),
        format!("[agents.main]\n[agents.ops]\n[agents.research]\n\n[gateway]\nport = {port}\n"),
    )?;
    let mut floor = Vec::new();
    let mut listen = Vec::new();
    let mut rss = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        Command::new("/bin/true").status()?;
        floor.push(t.elapsed());

        let start = Instant::now();
        let mut child = Command::new(bin)
            .arg("--config-dir")
            .arg(&root)
            .arg("daemon")
            .env_remove("WARREN_HOME")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let deadline = start + Duration::from_secs(10);
        loop {
            if health_ok(port) {
                listen.push(start.elapsed());
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err("the daemon did not listen within 10 s".into());
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        std::thread::sleep(Duration::from_millis(500));
        if let Some(kib) = rss_kib(child.id()) {
            rss.push(kib);
        }
        Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()?;
        child.wait()?;
    }
    floor.sort();
    listen.sort();
    rss.sort_unstable();
    let (f, l) = (floor[RUNS / 2], listen[RUNS / 2]);
    let r = rss.get(rss.len() / 2).copied().unwrap_or(0);
    println!("spawn floor (/bin/true)   median {f:>9.2?}");
    println!(
        "daemon start -> /health   median {l:>9.2?} ({:.1}x the floor; target <= {listen_ms} ms)",
        l.as_secs_f64() / f.as_secs_f64()
    );
    println!(
        "idle RSS, 3 agents        median {:.1} MiB (target <= {rss_mib} MiB)",
        r as f64 / 1024.0
    );
    if l.as_secs_f64() * 1000.0 > listen_ms || r as f64 > rss_mib * 1024.0 {
        eprintln!("missed a target");
        std::process::exit(1);
    }
    Ok(())
}
