//! Streamed requests reuse one pooled connection when the server keeps it open (as OpenAI,
//! llama.cpp and vLLM do): the provider reads a stream to its end after `[DONE]`, so the HTTP
//! client can pool the connection. The local server below speaks HTTP/1.1 keep-alive with a
//! chunked SSE body and counts the connections it accepts.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use warren_core::ChatMessage;
use warren_providers::{ChatRequest, OpenAiProvider, Provider, no_events};

/// Answers every request on a connection with a two-event SSE stream (a text delta, then
/// `[DONE]`), chunked, keeping the connection open.
fn serve(stream: TcpStream) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                return Ok(()); // the client closed the connection
            }
            let header = line.trim_end().to_ascii_lowercase();
            if header.is_empty() {
                break;
            }
            if let Some(v) = header.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body)?;
        out.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
        )?;
        for event in [
            r#"data: {"choices":[{"delta":{"content":"hi"}}]}"#,
            "data: [DONE]",
        ] {
            let chunk = format!("{event}\n\n");
            out.write_all(format!("{:x}\r\n{chunk}\r\n", chunk.len()).as_bytes())?;
            out.flush()?;
        }
        // The end of the body comes a moment after `[DONE]`, as a real server's may.
        std::thread::sleep(Duration::from_millis(20));
        out.write_all(b"0\r\n\r\n")?;
        out.flush()?;
    }
}

#[test]
fn streamed_requests_reuse_one_pooled_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            counter.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || serve(stream));
        }
    });
    let provider = OpenAiProvider::new(
        "local",
        format!("http://127.0.0.1:{port}"),
        None,
        Duration::from_secs(5),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    for _ in 0..3 {
        let request = Arc::new(ChatRequest {
            model: "m".into(),
            messages: vec![ChatMessage::user("hello")],
            ..ChatRequest::default()
        });
        let answer = rt
            .block_on(provider.chat(request, no_events()))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(answer.text, "hi");
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "three streamed requests over one kept-alive connection"
    );
}
