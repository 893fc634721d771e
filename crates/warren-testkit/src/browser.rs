//! A real headless browser for the dashboard tests (issue 21): Debian's `chromium` driven by
//! its `chromedriver` over the W3C WebDriver protocol (plain HTTP + JSON, spoken here over a
//! `TcpStream`, so no client crate and no Python are needed). Console messages are collected
//! through chromedriver's browser log (`goog:loggingPrefs`), screenshots saved as PNG.
//!
//! [`Browser::start`] fails — it never skips — when `chromium` or `chromedriver` is missing:
//! `.ci/run` installs both.

use std::io::{self, BufRead, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The W3C element reference key.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver child with one browser session; both end on drop.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

/// The browser's executable: `WARREN_TEST_CHROMIUM` or Debian's `/usr/bin/chromium`.
fn chromium() -> PathBuf {
    std::env::var_os("WARREN_TEST_CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

impl Browser {
    /// Starts `chromedriver` on a free port and a headless chromium session with a
    /// `width`×`height` window and a fresh profile.
    pub fn start(width: u32, height: u32) -> io::Result<Self> {
        let binary = chromium();
        if !binary.exists() {
            return Err(io::Error::other(format!(
                "{} is missing: install Debian's chromium and chromium-driver (.ci/run does)",
                binary.display()
            )));
        }
        let port = crate::free_port()?;
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                io::Error::other(format!(
                    "chromedriver did not start ({e}): install Debian's chromium-driver (.ci/run does)"
                ))
            })?;
        let profile = tempfile::tempdir()?;
        let mut browser = Self {
            driver,
            port,
            session: String::new(),
            _profile: profile,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match browser.request("GET", "/status", None) {
                Ok(v) if v["value"]["ready"] == true => break,
                _ if Instant::now() > deadline => {
                    return Err(io::Error::other(
                        "chromedriver did not become ready in 20 s",
                    ));
                }
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {
                "binary": binary,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--no-first-run", "--disable-extensions", "--disable-background-networking",
                    format!("--window-size={width},{height}"),
                    format!("--user-data-dir={}", browser._profile.path().display()),
                ],
            },
        }}});
        let created = browser.request("POST", "/session", Some(&caps))?;
        browser.session = created["value"]["sessionId"]
            .as_str()
            .ok_or_else(|| io::Error::other(format!("no session from chromedriver: {created}")))?
            .to_string();
        Ok(browser)
    }

    /// One WebDriver command; `Err` carries the driver's error value.
    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> io::Result<Value> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        let body = body.map(Value::to_string).unwrap_or_default();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        )?;
        // chromedriver keeps the connection open whatever the request says: read the head,
        // then exactly its Content-Length (or the chunks up to the last one).
        let mut reader = io::BufReader::new(stream);
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 || line == "\r\n" {
                break;
            }
            head.push_str(&line.to_ascii_lowercase());
        }
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok());
        let body = match length {
            Some(n) => {
                let mut buf = vec![0; n];
                reader.read_exact(&mut buf)?;
                String::from_utf8_lossy(&buf).into_owned()
            }
            None if head.contains("transfer-encoding: chunked") => read_chunks(&mut reader)?,
            None => {
                let mut rest = String::new();
                reader.read_to_string(&mut rest)?;
                rest
            }
        };
        let value: Value = serde_json::from_str(&body)
            .map_err(|e| io::Error::other(format!("{method} {path}: not JSON ({e}): {body}")))?;
        if value["value"].get("error").is_some() {
            return Err(io::Error::other(format!(
                "{method} {path}: {}: {}",
                value["value"]["error"],
                value["value"]["message"].as_str().unwrap_or("")
            )));
        }
        Ok(value)
    }

    fn command(&self, method: &str, path: &str, body: Option<Value>) -> io::Result<Value> {
        let path = format!("/session/{}{path}", self.session);
        self.request(method, &path, body.as_ref())
            .map(|v| v["value"].clone())
    }

    /// Navigates to `url` and waits for its load.
    pub fn goto(&self, url: &str) -> io::Result<()> {
        self.command("POST", "/url", Some(json!({"url": url})))
            .map(drop)
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and returns its value.
    pub fn eval(&self, script: &str, args: Value) -> io::Result<Value> {
        self.command(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
    }

    /// The first element matching the CSS `selector`, or `Err`.
    pub fn find(&self, selector: &str) -> io::Result<String> {
        let found = self.command(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": selector})),
        )?;
        found[ELEMENT]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| io::Error::other(format!("no element for {selector}")))
    }

    /// Waits up to `timeout` for an element matching `selector` (and, when `text` is given,
    /// whose text contains it); returns the element.
    pub fn wait_for(
        &self,
        selector: &str,
        text: Option<&str>,
        timeout: Duration,
    ) -> io::Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let found = self.find(selector);
            if let Ok(el) = &found {
                match text {
                    None => return Ok(el.clone()),
                    Some(t) if self.text(el).is_ok_and(|have| have.contains(t)) => {
                        return Ok(el.clone());
                    }
                    Some(_) => {}
                }
            }
            if Instant::now() > deadline {
                let body = self
                    .eval("return document.body.innerText", json!([]))
                    .unwrap_or_default();
                return Err(io::Error::other(format!(
                    "no '{selector}'{} within {timeout:?} ({}); the page shows:\n{}",
                    text.map(|t| format!(" containing '{t}'"))
                        .unwrap_or_default(),
                    found.err().map(|e| e.to_string()).unwrap_or_default(),
                    body.as_str().unwrap_or("")
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The rendered text of `element`.
    pub fn text(&self, element: &str) -> io::Result<String> {
        let v = self.command("GET", &format!("/element/{element}/text"), None)?;
        Ok(v.as_str().unwrap_or_default().to_string())
    }

    /// Clicks `element` (scrolled into view, as a user would).
    pub fn click(&self, element: &str) -> io::Result<()> {
        self.command(
            "POST",
            &format!("/element/{element}/click"),
            Some(json!({})),
        )
        .map(drop)
    }

    /// Types `text` into `element` (focused first), key by key.
    pub fn type_text(&self, element: &str, text: &str) -> io::Result<()> {
        self.command(
            "POST",
            &format!("/element/{element}/value"),
            Some(json!({"text": text})),
        )
        .map(drop)
    }

    /// Clears an input.
    pub fn clear(&self, element: &str) -> io::Result<()> {
        self.command(
            "POST",
            &format!("/element/{element}/clear"),
            Some(json!({})),
        )
        .map(drop)
    }

    /// Presses keys on the focused element (WebDriver key codes, e.g. "\u{E004}" = Tab).
    pub fn keys(&self, keys: &str) -> io::Result<()> {
        let actions: Vec<Value> = keys
            .chars()
            .flat_map(|c| {
                [
                    json!({"type": "keyDown", "value": c.to_string()}),
                    json!({"type": "keyUp", "value": c.to_string()}),
                ]
            })
            .collect();
        self.command(
            "POST",
            "/actions",
            Some(json!({"actions": [{"type": "key", "id": "kbd", "actions": actions}]})),
        )
        .map(drop)
    }

    /// Switches into the `index`th frame of the current page, or back to the top with `None`.
    pub fn frame(&self, index: Option<u32>) -> io::Result<()> {
        self.command("POST", "/frame", Some(json!({"id": index})))
            .map(drop)
    }

    /// The current URL.
    pub fn url(&self) -> io::Result<String> {
        Ok(self
            .command("GET", "/url", None)?
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    /// Resizes the window.
    pub fn resize(&self, width: u32, height: u32) -> io::Result<()> {
        self.command(
            "POST",
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        )
        .map(drop)
    }

    /// The browser console since the last call: `(level, message)` pairs (levels `SEVERE`,
    /// `WARNING`, `INFO`, ...). Failed loads, CSP violations and uncaught errors are `SEVERE`.
    pub fn console(&self) -> io::Result<Vec<(String, String)>> {
        let v = self.command("POST", "/se/log", Some(json!({"type": "browser"})))?;
        Ok(v.as_array()
            .map(|entries| {
                entries
                    .iter()
                    .map(|e| {
                        (
                            e["level"].as_str().unwrap_or_default().to_string(),
                            e["message"].as_str().unwrap_or_default().to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Saves a PNG screenshot of the viewport to `path` (its directory is created).
    pub fn screenshot(&self, path: &Path) -> io::Result<()> {
        let v = self.command("GET", "/screenshot", None)?;
        let png = base64_decode(v.as_str().unwrap_or_default())
            .ok_or_else(|| io::Error::other("screenshot: not base64"))?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, png)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.request("DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn read_chunks(reader: &mut impl BufRead) -> io::Result<String> {
    let mut out = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size)?;
        let n = usize::from_str_radix(size.trim(), 16)
            .map_err(|e| io::Error::other(format!("bad chunk size {size:?}: {e}")))?;
        let mut chunk = vec![0; n + 2];
        reader.read_exact(&mut chunk)?;
        if n == 0 {
            break;
        }
        out.extend_from_slice(&chunk[..n]);
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Standard base64 (with padding), as WebDriver sends screenshots.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for chunk in bytes.chunks(4) {
        let pad = chunk.iter().rev().take_while(|&&b| b == b'=').count();
        let mut n = 0u32;
        for (i, &b) in chunk.iter().enumerate() {
            let v = if i >= chunk.len() - pad { 0 } else { value(b)? };
            n |= v << (18 - 6 * i);
        }
        let n = n.to_be_bytes();
        out.extend_from_slice(&n[1..4 - pad]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_decodes_padded_and_unpadded_tails() {
        assert_eq!(super::base64_decode("aGVsbG8="), Some(b"hello".to_vec()));
        assert_eq!(super::base64_decode("aGk="), Some(b"hi".to_vec()));
        assert_eq!(super::base64_decode("aGV5"), Some(b"hey".to_vec()));
        assert_eq!(super::base64_decode("a$=="), None);
    }
}
