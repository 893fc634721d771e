//! bench/footprint's server probe (Rust, so the prober adds no interpreter's latency):
//! `probe RUNS PORT -- CMD...` spawns CMD RUNS times and measures spawn → first `GET /health`
//! answered 200 on PORT; then spawns it once more, asks `/health` once, waits 3 s and reads
//! `/proc/PID/status`. Prints `median_ms VmRSS_KiB VmHWM_KiB threads`. With PROBE_SMAPS=FILE
//! it also copies `/proc/PID/smaps` there (for the breakdown in docs/operations.md).
//!
//! `probe --peak-smaps FILE -- CMD...` runs CMD once (stdin, stdout and stderr to /dev/null),
//! reads its `/proc/PID/smaps` over and over until it exits and writes the reading with the
//! largest total Rss to FILE: where the memory of a short run (`warren agent -m`) is near its
//! peak. Prints that Rss in KiB.
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

type E = Box<dyn std::error::Error>;

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

fn spawn(cmd: &[String], port: u16) -> Result<(Child, Duration), E> {
    let start = Instant::now();
    let mut child = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    while !health_ok(port) {
        if child.try_wait()?.is_some() || start.elapsed() > Duration::from_secs(10) {
            return Err(format!("{} did not answer /health on port {port}", cmd[0]).into());
        }
    }
    Ok((child, start.elapsed()))
}

fn stop(mut child: Child) -> Result<(), E> {
    Command::new("kill").arg(child.id().to_string()).status()?;
    child.wait()?;
    Ok(())
}

fn status(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn peak_smaps(file: &str, cmd: &[String]) -> Result<(), E> {
    let mut child = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let path = format!("/proc/{}/smaps", child.id());
    let (mut best, mut best_rss) = (String::new(), 0u64);
    // A zombie (exited, not yet reaped: we have not waited) has an empty smaps.
    while let Ok(text) = std::fs::read_to_string(&path) {
        if text.is_empty() {
            break;
        }
        let rss: u64 = text
            .lines()
            .filter_map(|l| l.strip_prefix("Rss:"))
            .filter_map(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .sum();
        if rss > best_rss {
            (best, best_rss) = (text, rss);
        }
    }
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("{} exited with {status}", cmd[0]).into());
    }
    std::fs::write(file, best)?;
    println!("{best_rss}");
    Ok(())
}

fn main() -> Result<(), E> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() >= 4 && args[0] == "--peak-smaps" && args[2] == "--" {
        return peak_smaps(&args[1], &args[3..]);
    }
    if args.len() < 4 || args[2] != "--" {
        return Err("usage: probe RUNS PORT -- CMD...".into());
    }
    let runs: usize = args[0].parse()?;
    let port: u16 = args[1].parse()?;
    let cmd = &args[3..];
    let mut times = Vec::new();
    for _ in 0..runs {
        let (child, took) = spawn(cmd, port)?;
        times.push(took);
        stop(child)?;
    }
    times.sort();
    let (child, _) = spawn(cmd, port)?;
    health_ok(port);
    std::thread::sleep(Duration::from_secs(3));
    let text = std::fs::read_to_string(format!("/proc/{}/status", child.id()))?;
    if let Some(path) = std::env::var_os("PROBE_SMAPS").filter(|p| !p.is_empty()) {
        std::fs::copy(format!("/proc/{}/smaps", child.id()), path)?;
    }
    stop(child)?;
    println!(
        "{:.2} {} {} {}",
        times[times.len() / 2].as_secs_f64() * 1000.0,
        status(&text, "VmRSS"),
        status(&text, "VmHWM"),
        status(&text, "Threads")
    );
    Ok(())
}
