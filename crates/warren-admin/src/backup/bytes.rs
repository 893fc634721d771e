//! The bytes of a backup's files: each file created new (never over one), copied with a large
//! buffer and hashed as it is written ([`HashWriter`]); a ledger copied up to its last complete
//! line ([`complete_lines`]). Used by [`super::create`], [`super::check`] and
//! [`super::restore`].

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::BackupError;

/// A reader that remembers its read error (so a failing source is named as the source, not
/// as the output the copy was writing).
pub(super) struct ReadErr<R> {
    pub(super) inner: R,
    pub(super) path: PathBuf,
}

impl<R: Read> Read for ReadErr<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner
            .read(buf)
            .map_err(|e| std::io::Error::other(format!("reading {}: {e}", self.path.display())))
    }
}

/// How many bytes of the first `len` end with the last newline (a ledger's complete lines).
pub(super) fn complete_lines(file: &mut File, len: u64) -> std::io::Result<u64> {
    let mut end = len;
    let mut buf = vec![0u8; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(buf.len() as u64);
        let n = (end - start) as usize;
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut buf[..n])?;
        if let Some(i) = buf[..n].iter().rposition(|&b| b == b'\n') {
            file.seek(SeekFrom::Start(0))?;
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    file.seek(SeekFrom::Start(0))?;
    Ok(0)
}

/// Creates a new file (never replacing one) with `mode`.
pub(super) fn create_file(path: &Path, mode: u32) -> Result<File, BackupError> {
    // One creation at a time: two threads creating in one directory contend for its lock in
    // the kernel, and the waiting one spun on a core (9% of a backup's CPU samples); here it
    // sleeps, and the core copies or hashes for the other thread.
    static CREATING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| BackupError::io(dir, e))?;
    }
    let _one = CREATING.lock().unwrap_or_else(|p| p.into_inner());
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| BackupError::io(path, e))
}

/// Size and SHA-256 (hex) of a file.
pub(super) fn hash_file(path: &Path) -> Result<(u64, String), BackupError> {
    let mut f = File::open(path).map_err(|e| BackupError::io(path, e))?;
    let mut h = HashWriter::new(std::io::sink());
    copy_big(&mut f, &mut h).map_err(|e| BackupError::io(path, e))?;
    h.finish().map_err(|e| BackupError::io(path, e))
}

/// `io::copy` with a 1 MiB buffer (its own is 8 KiB: many more system calls).
pub(super) fn copy_big(input: &mut impl Read, out: &mut impl Write) -> std::io::Result<u64> {
    // One buffer per thread, reused: a fresh 1 MiB per file costs its page faults every time.
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BUF.with_borrow_mut(|buf| {
        if buf.len() < COPY_BUF {
            buf.resize(COPY_BUF, 0);
        }
        copy_with(input, out, buf)
    })
}

fn copy_with(input: &mut impl Read, out: &mut impl Write, buf: &mut [u8]) -> std::io::Result<u64> {
    let mut total = 0u64;
    loop {
        let n = match input.read(buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        out.write_all(&buf[..n])?;
        total += n as u64;
    }
}

/// Buffer of [`copy_big`].
pub(super) const COPY_BUF: usize = 1024 * 1024;

/// A writer that hashes and counts what passes through.
pub(super) struct HashWriter<W: Write> {
    inner: W,
    sha: Sha256,
    n: u64,
}

impl<W: Write> HashWriter<W> {
    pub(super) fn new(inner: W) -> Self {
        Self {
            inner,
            sha: Sha256::new(),
            n: 0,
        }
    }

    /// Flushes; the byte count and the hex digest.
    pub(super) fn finish(mut self) -> std::io::Result<(u64, String)> {
        self.inner.flush()?;
        Ok((self.n, warren_core::hex::encode(&self.sha.finalize())))
    }
}

impl<W: Write> Write for HashWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.sha.update(&buf[..n]);
        self.n += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
