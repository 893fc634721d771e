//! Holes in sparse files (issue 35 §8): a backup stores only a file's data extents, found with
//! `SEEK_DATA`/`SEEK_HOLE`, and a restore writes them back at their offsets and leaves the rest
//! a hole. Two 1,000 MB sparse files in a workspace took 2.1 GB in a backup before; now they
//! take the size of their data. The layout is the manifest's [`Sparse`] (a backup holding one
//! is written as [`super::manifest::VERSION_SPARSE`]; files without holes are stored as
//! before, so version 1 backups read the same).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;

use rustix::fs::SeekFrom;
use rustix::io::Errno;

use super::manifest::Sparse;

/// At most this many extents are recorded per file: beyond it, the closest extents are merged
/// (the zeros between them are stored) so a file of many small holes keeps a small manifest.
const MAX_EXTENTS: usize = 1024;

/// The data extents of the first `len` bytes of `file`, or `None` when the file has no hole
/// there (or the file system cannot tell: then it is copied whole, as before).
pub fn layout(file: &File, len: u64) -> Option<Sparse> {
    let mut data: Vec<[u64; 2]> = Vec::new();
    let mut pos = 0u64;
    while pos < len {
        let start = match rustix::fs::seek(file, SeekFrom::Data(pos)) {
            Ok(s) => s,
            // No data after `pos`: the rest is a hole.
            Err(Errno::NXIO) => break,
            Err(_) => return None,
        };
        if start >= len {
            break;
        }
        let end = match rustix::fs::seek(file, SeekFrom::Hole(start)) {
            Ok(e) => e.min(len),
            Err(_) => return None,
        };
        if end <= start {
            return None;
        }
        data.push([start, end - start]);
        pos = end;
    }
    // The reads that follow are positioned (`read_at`), but leave the offset where it was.
    let _ = rustix::fs::seek(file, SeekFrom::Start(0));
    if data.len() == 1 && data[0] == [0, len] || len == 0 {
        return None;
    }
    coalesce(&mut data);
    Some(Sparse { len, data })
}

/// Merges the extents separated by the smallest holes until at most [`MAX_EXTENTS`] are left.
fn coalesce(data: &mut Vec<[u64; 2]>) {
    let mut gap = 4096u64;
    while data.len() > MAX_EXTENTS {
        let mut merged: Vec<[u64; 2]> = Vec::with_capacity(data.len());
        for &[off, n] in data.iter() {
            match merged.last_mut() {
                Some(last) if off - (last[0] + last[1]) <= gap => last[1] = off + n - last[0],
                _ => merged.push([off, n]),
            }
        }
        *data = merged;
        gap = gap.saturating_mul(2);
    }
}

/// Reads the data extents of a file one after another (what a backup stores of it). A file
/// that shrank while read ends early; [`Self::read_layout`] then says what was read.
pub struct ExtentReader<'f> {
    file: &'f File,
    layout: Sparse,
    index: usize,
    done: u64,
    short: bool,
}

impl<'f> ExtentReader<'f> {
    pub fn new(file: &'f File, layout: Sparse) -> Self {
        Self {
            file,
            layout,
            index: 0,
            done: 0,
            short: false,
        }
    }

    /// The layout of what was actually read: the planned one, cut where the file ended.
    pub fn read_layout(mut self) -> Sparse {
        if self.short {
            self.layout.data.truncate(self.index + 1);
            if let Some(last) = self.layout.data.last_mut() {
                last[1] = self.done;
                self.layout.len = last[0] + self.done;
            }
            self.layout.data.retain(|&[_, n]| n > 0);
        }
        self.layout
    }
}

impl Read for ExtentReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.short {
                return Ok(0);
            }
            let Some(&[off, n]) = self.layout.data.get(self.index) else {
                return Ok(0);
            };
            if self.done == n {
                self.index += 1;
                self.done = 0;
                continue;
            }
            let want = usize::try_from(n - self.done)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            let got = self.file.read_at(&mut buf[..want], off + self.done)?;
            if got == 0 {
                self.short = true;
                return Ok(0);
            }
            self.done += got as u64;
            return Ok(got);
        }
    }
}

/// Writes a stream of stored data back at the offsets of its extents (the gaps stay holes);
/// [`Self::finish`] checks every extent was filled and sets the file's length.
pub struct ExtentWriter<'f> {
    file: &'f File,
    layout: &'f Sparse,
    index: usize,
    done: u64,
    written: u64,
}

impl<'f> ExtentWriter<'f> {
    pub fn new(file: &'f File, layout: &'f Sparse) -> Self {
        Self {
            file,
            layout,
            index: 0,
            done: 0,
            written: 0,
        }
    }

    /// `Ok` when the stream filled the extents exactly, else the bytes got and wanted.
    pub fn finish(self) -> Result<(), (u64, u64)> {
        let want = self.layout.data_bytes();
        if self.written != want {
            return Err((self.written, want));
        }
        self.file
            .set_len(self.layout.len)
            .map_err(|_| (self.written, want))
    }
}

impl Write for ExtentWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            let Some(&[off, n]) = self.layout.data.get(self.index) else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "more stored data than the manifest's extents hold",
                ));
            };
            if self.done == n {
                self.index += 1;
                self.done = 0;
                continue;
            }
            let take = usize::try_from(n - self.done)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            let wrote = self.file.write_at(&buf[..take], off + self.done)?;
            self.done += wrote as u64;
            self.written += wrote as u64;
            return Ok(wrote);
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_extents_merge_down_to_the_cap() {
        let mut data: Vec<[u64; 2]> = (0..3000u64).map(|i| [i * 8192, 4096]).collect();
        coalesce(&mut data);
        assert!(data.len() <= MAX_EXTENTS, "{}", data.len());
        assert_eq!(data.first().map(|e| e[0]), Some(0));
        let end = data.last().map(|e| e[0] + e[1]);
        assert_eq!(end, Some(2999 * 8192 + 4096));
    }

    #[test]
    fn a_sparse_file_is_read_and_written_back_with_its_holes() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let src = dir.path().join("src");
        let f = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&src)
            .unwrap_or_else(|e| panic!("{e}"));
        let len = 64u64 << 20;
        f.set_len(len).unwrap_or_else(|e| panic!("{e}"));
        f.write_at(b"head", 0).unwrap_or_else(|e| panic!("{e}"));
        f.write_at(b"middle", 32 << 20)
            .unwrap_or_else(|e| panic!("{e}"));
        let layout = layout(&f, len).unwrap_or_else(|| panic!("no holes found"));
        assert!(layout.data_bytes() < 1 << 20, "{layout:?}");
        let mut stored = Vec::new();
        let mut r = ExtentReader::new(&f, layout.clone());
        r.read_to_end(&mut stored).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.read_layout(), layout);
        let out = File::create(dir.path().join("out")).unwrap_or_else(|e| panic!("{e}"));
        let mut w = ExtentWriter::new(&out, &layout);
        w.write_all(&stored).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(w.finish(), Ok(()));
        let (a, b) = (std::fs::read(&src), std::fs::read(dir.path().join("out")));
        assert!(a.is_ok() && a.ok() == b.ok());
        let blocks = rustix::fs::fstat(&out).map_or(u64::MAX, |s| s.st_blocks as u64);
        assert!(
            blocks * 512 < 1 << 20,
            "restored with its holes: {blocks} blocks"
        );
    }
}
