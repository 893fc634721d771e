//! A server-sent-events reader: `data:` lines joined per event, events split by a blank line.
//! Comments (`:`) and other fields are ignored. Read by the providers' streamed replies and by
//! MCP `url` servers' event-stream answers.

use std::io::{self, BufRead};

#[derive(Debug)]
pub struct SseReader<R> {
    inner: R,
    line: String,
}

impl<R: BufRead> SseReader<R> {
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            line: String::new(),
        }
    }

    /// Reads what is left of a stream that ended with its last event (OpenAI's `[DONE]`; at
    /// most 64 KiB): the HTTP client returns a connection to its pool only once the body was
    /// read to its end, so without this every streamed request opened a new connection.
    pub fn finish(mut self) {
        use std::io::Read;
        let _ = io::copy(&mut (&mut self.inner).take(64 * 1024), &mut io::sink());
    }

    /// The data of the next event; `None` at the end of the stream.
    pub fn next_event(&mut self) -> io::Result<Option<String>> {
        let mut data: Option<String> = None;
        loop {
            self.line.clear();
            if self.inner.read_line(&mut self.line)? == 0 {
                return Ok(data);
            }
            let line = self.line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                if data.is_some() {
                    return Ok(data);
                }
                continue;
            }
            if let Some(rest) = line.strip_prefix("data:") {
                let rest = rest.strip_prefix(' ').unwrap_or(rest);
                match &mut data {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(rest);
                    }
                    None => data = Some(rest.to_string()),
                }
            }
        }
    }
}

/// The data of every event of a whole body.
pub fn events(body: &str) -> Vec<String> {
    let mut reader = SseReader::new(body.as_bytes());
    let mut out = Vec::new();
    // Reading from a byte slice cannot fail.
    while let Ok(Some(data)) = reader.next_event() {
        out.push(data);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_split_on_blank_lines_and_multiline_data_joined() {
        let text =
            ": comment\ndata: {\"a\":1}\n\nevent: x\ndata: one\ndata: two\n\ndata: [DONE]\n\n";
        let mut r = SseReader::new(text.as_bytes());
        let mut out = Vec::new();
        while let Ok(Some(e)) = r.next_event() {
            out.push(e);
        }
        assert_eq!(out, vec!["{\"a\":1}", "one\ntwo", "[DONE]"]);
    }
}
