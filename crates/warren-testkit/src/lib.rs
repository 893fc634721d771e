//! Test helpers shared by Warren's crates (dev-dependency only): temporary install roots, a
//! runner for the real `warren` binary, the failpoint crash runner, a daemon child handle, the
//! local fake LLM server ([`fake_llm`]) and the local fake Telegram Bot API ([`telegram`]).
//!
//! Nothing here mutates the test process's environment: every child gets its environment
//! explicitly (`WARREN_HOME` and `FAILPOINTS` removed unless a test sets them).

pub mod browser;
pub mod fake_llm;
pub mod otlp;
pub mod qdrant;
pub mod telegram;

use std::fs;
use std::io::{self, BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Writes an executable script (mode 0755) that a test will later execute directly (a git hook,
/// an external diff program). The bytes are written by a `sh` child, never through a file
/// descriptor of this test process: a test binary runs many tests on many threads, and a
/// sibling thread's fork (a sandboxed spawn sets up Landlock and seccomp between fork and exec)
/// would inherit a writable descriptor of the script and make its `execve` fail with
/// "Text file busy" (ETXTBSY).
pub fn write_executable(path: &Path, contents: &str) -> io::Result<()> {
    use std::io::Write;
    let mut child = Command::new("sh")
        .args(["-c", "cat > \"$1\" && chmod 755 \"$1\"", "sh"])
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .ok_or_else(|| io::Error::other("no stdin"))?
        .write_all(contents.as_bytes())?;
    let status = child.wait()?;
    if !status.success() {
        return Err(io::Error::other(format!(
            "writing {} failed: {status}",
            path.display()
        )));
    }
    Ok(())
}

/// The PostgreSQL server the PostgreSQL tests run against (`WARREN_TEST_POSTGRES_URL`), or
/// `None`: then the first caller in this test binary says so once, on the process's stderr
/// (written directly, so the test harness's capture does not hide it), and the caller skips its
/// PostgreSQL part. Every PostgreSQL test asks here, so a machine without the server is told
/// instead of passing silently.
pub fn postgres_url() -> Option<String> {
    let url = std::env::var("WARREN_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.trim().is_empty());
    if url.is_none() {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            let _ = io::Write::write_all(
                &mut io::stderr(),
                b"skipped: set WARREN_TEST_POSTGRES_URL (e.g. postgres://postgres@127.0.0.1:5432/test) \
                  to run the PostgreSQL tests of this binary\n",
            );
        });
    }
    url
}

/// A TCP port on 127.0.0.1 that was free a moment ago: the kernel picks it (bind port 0) and
/// the listener is closed before returning. Daemon tests use it instead of the default 42617,
/// so tests running in parallel never fight over one port.
pub fn free_port() -> io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Makes the session store in `sessions_dir` impossible to build (MIG-7): a live `k.jsonl`
/// next to its staged import `k.jsonl.importing`.
pub fn unbuildable_sessions(sessions_dir: &Path) -> io::Result<()> {
    fs::create_dir_all(sessions_dir)?;
    fs::write(
        sessions_dir.join("k.jsonl"),
        "{\"role\":\"user\",\"content\":\"hi\"}\n",
    )?;
    fs::write(sessions_dir.join("k.jsonl.importing"), "")
}

/// A temporary install root that is removed when dropped.
pub struct TempRoot {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl TempRoot {
    pub fn new() -> io::Result<Self> {
        let dir = tempfile::tempdir()?;
        let root = dir.path().join("warren");
        Ok(Self { _dir: dir, root })
    }

    /// The install root (not created until `init` or a write).
    pub fn path(&self) -> &Path {
        &self.root
    }

    pub fn config_path(&self) -> PathBuf {
        self.root.join("config.toml")
    }

    /// Writes config.toml (creating the root).
    pub fn write_config(&self, text: &str) -> io::Result<()> {
        fs::create_dir_all(&self.root)?;
        fs::write(self.config_path(), text)
    }

    /// Writes config.toml as `text` plus `[gateway] port = <free port>`; returns the port.
    /// `text` must not have a `[gateway]` table of its own.
    pub fn write_config_on_free_port(&self, text: &str) -> io::Result<u16> {
        let port = free_port()?;
        self.write_config(&format!("{text}\n[gateway]\nport = {port}\n"))?;
        Ok(port)
    }

    pub fn read_config(&self) -> io::Result<String> {
        fs::read_to_string(self.config_path())
    }

    /// `warren --config-dir <root> args...` with a clean environment for Warren's variables.
    pub fn warren(&self, bin: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin);
        cmd.arg("--config-dir").arg(&self.root).args(args);
        cmd.env_remove("WARREN_HOME")
            .env_remove("FAILPOINTS")
            .env_remove("RUST_BACKTRACE")
            // `warren init` picks its starter provider from these.
            .env_remove("OPENAI_API_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OLLAMA_HOST");
        cmd
    }

    /// Runs `warren args...` with `stdin` fed in, and returns its output.
    pub fn run(&self, bin: &Path, args: &[&str]) -> io::Result<Output> {
        self.warren(bin, args).stdin(Stdio::null()).output()
    }
}

/// Output as text, for assertions and failure messages.
pub fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Runs `cmd` with the crash point `failpoint` armed and checks the child died by SIGABRT
/// there (not earlier, not later). Returns the output.
pub fn run_until_crash(mut cmd: Command, failpoint: &str) -> io::Result<Output> {
    cmd.env("FAILPOINTS", format!("{failpoint}=return"))
        .stdin(Stdio::null());
    let output = cmd.output()?;
    let signal = output.status.signal();
    let stderr = String::from_utf8_lossy(&output.stderr);
    if signal != Some(libc_sigabrt()) || !stderr.contains(failpoint) {
        return Err(io::Error::other(format!(
            "expected a crash at {failpoint}; got status {:?}, stderr: {stderr}",
            output.status
        )));
    }
    Ok(output)
}

const fn libc_sigabrt() -> i32 {
    6
}

/// A running `warren daemon` whose stderr is read line by line in the background.
pub struct DaemonChild {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl DaemonChild {
    pub fn spawn(mut cmd: Command) -> io::Result<Self> {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let stderr: ChildStderr = child
            .stderr
            .take()
            .ok_or_else(|| io::Error::other("no stderr"))?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Self {
            child,
            lines,
            seen: Vec::new(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until a stderr line contains `needle`; returns it.
    pub fn wait_for(&mut self, needle: &str, timeout: Duration) -> io::Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return Ok(line);
                    }
                }
                Err(_) => {
                    return Err(io::Error::other(format!(
                        "daemon did not print {needle:?} within {timeout:?}; stderr so far:\n{}",
                        self.seen.join("\n")
                    )));
                }
            }
        }
    }

    /// Like [`DaemonChild::wait_for`], but a line already read counts too: for a line whose
    /// order against another awaited one is not fixed (a trigger starting beside "ready").
    pub fn saw_or_wait_for(&mut self, needle: &str, timeout: Duration) -> io::Result<String> {
        if let Some(line) = self.seen.iter().find(|l| l.contains(needle)) {
            return Ok(line.clone());
        }
        self.wait_for(needle, timeout)
    }

    /// Sends `signal` (e.g. `libc::SIGHUP`) with the `kill` command.
    pub fn signal(&self, signal: &str) -> io::Result<()> {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(io::Error::other(format!("kill -{signal} failed")))
        }
    }

    /// Waits for exit (up to `timeout`).
    pub fn wait(&mut self, timeout: Duration) -> io::Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                return Err(io::Error::other("daemon did not exit in time"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every stderr line read so far.
    pub fn stderr_seen(&self) -> &[String] {
        &self.seen
    }
}

impl Drop for DaemonChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How long [`http`] waits for an answer.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(30);

/// One HTTP/1.1 request to `127.0.0.1:port` on a fresh connection (`Connection: close`), with a
/// bearer `token` when given and `body` as JSON; returns (status, JSON body). A chunked body is
/// reassembled; a body that is not JSON comes back as `Null`. Waits at most [`HTTP_TIMEOUT`];
/// `Err` when nothing listens.
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> io::Result<(u16, serde_json::Value)> {
    let answer = http_text(port, method, path, token, body)?;
    Ok((
        answer.status,
        serde_json::from_str(&answer.body).unwrap_or_default(),
    ))
}

/// An answer of [`http_text`].
#[derive(Debug, Clone)]
pub struct HttpText {
    pub status: u16,
    /// The `Content-Type` header's value (empty without one).
    pub content_type: String,
    pub body: String,
}

/// [`http`], with the body as text and its content type (`/metrics`, pages).
pub fn http_text(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> io::Result<HttpText> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(HTTP_TIMEOUT))?;
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    let body = if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let mut out = String::new();
        let mut rest = body;
        while let Some((size, tail)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            out.push_str(tail.get(..n).unwrap_or(""));
            rest = tail.get(n + 2..).unwrap_or("");
        }
        out
    } else {
        body.to_string()
    };
    Ok(HttpText {
        status,
        content_type: header("content-type").unwrap_or_default(),
        body,
    })
}

/// Pairs a device named `device` with the daemon of `root` listening on `port`, as an operator
/// does: `warren pair --json` prints a one-time code, `POST /pair` exchanges it for a bearer
/// token, which is returned. Any step failing is an error saying which.
pub fn pair(root: &TempRoot, bin: &Path, port: u16, device: &str) -> io::Result<String> {
    let out = root.run(bin, &["pair", "--json"])?;
    let (stdout, stderr) = text(&out);
    if !out.status.success() {
        return Err(io::Error::other(format!("warren pair failed: {stderr}")));
    }
    let code = serde_json::from_str::<serde_json::Value>(&stdout)
        .ok()
        .and_then(|v| v["code"].as_str().map(str::to_string))
        .ok_or_else(|| io::Error::other(format!("no code in `warren pair --json`: {stdout}")))?;
    let body = serde_json::json!({"code": code, "device": device}).to_string();
    let (status, paired) = http(port, "POST", "/pair", None, &body)?;
    if status != 200 {
        return Err(io::Error::other(format!(
            "POST /pair answered {status}: {paired}"
        )));
    }
    paired["token"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| io::Error::other(format!("no token in {paired}")))
}
