//! A local OTLP/HTTP trace receiver speaking the real wire format: `POST /v1/traces` with an
//! `application/x-protobuf` `ExportTraceServiceRequest`, decoded with messages derived by
//! `prost` from the field numbers of opentelemetry-proto (`collector/trace/v1`,
//! `trace/v1/trace.proto`, `common/v1/common.proto`, `resource/v1/resource.proto`) — an
//! implementation independent of Warren's hand-written encoder. Answers 200 with an empty
//! `ExportTraceServiceResponse`; a body that does not decode answers 400 and is recorded as
//! an error.

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use prost::Message;
use serde_json::Value;

/// opentelemetry-proto messages (only what a trace export carries).
pub mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ExportTraceServiceRequest {
        #[prost(message, repeated, tag = "1")]
        pub resource_spans: Vec<ResourceSpans>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ResourceSpans {
        #[prost(message, optional, tag = "1")]
        pub resource: Option<Resource>,
        #[prost(message, repeated, tag = "2")]
        pub scope_spans: Vec<ScopeSpans>,
        #[prost(string, tag = "3")]
        pub schema_url: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Resource {
        #[prost(message, repeated, tag = "1")]
        pub attributes: Vec<KeyValue>,
        #[prost(uint32, tag = "2")]
        pub dropped_attributes_count: u32,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ScopeSpans {
        #[prost(message, optional, tag = "1")]
        pub scope: Option<InstrumentationScope>,
        #[prost(message, repeated, tag = "2")]
        pub spans: Vec<Span>,
        #[prost(string, tag = "3")]
        pub schema_url: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct InstrumentationScope {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub version: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Span {
        #[prost(bytes = "vec", tag = "1")]
        pub trace_id: Vec<u8>,
        #[prost(bytes = "vec", tag = "2")]
        pub span_id: Vec<u8>,
        #[prost(string, tag = "3")]
        pub trace_state: String,
        #[prost(bytes = "vec", tag = "4")]
        pub parent_span_id: Vec<u8>,
        #[prost(string, tag = "5")]
        pub name: String,
        #[prost(int32, tag = "6")]
        pub kind: i32,
        #[prost(fixed64, tag = "7")]
        pub start_time_unix_nano: u64,
        #[prost(fixed64, tag = "8")]
        pub end_time_unix_nano: u64,
        #[prost(message, repeated, tag = "9")]
        pub attributes: Vec<KeyValue>,
        #[prost(uint32, tag = "10")]
        pub dropped_attributes_count: u32,
        #[prost(message, optional, tag = "15")]
        pub status: Option<Status>,
        #[prost(fixed32, tag = "16")]
        pub flags: u32,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Status {
        #[prost(string, tag = "2")]
        pub message: String,
        #[prost(int32, tag = "3")]
        pub code: i32,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValue {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<AnyValue>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AnyValue {
        #[prost(oneof = "any_value::Value", tags = "1, 2, 3, 4, 7")]
        pub value: Option<any_value::Value>,
    }
    pub mod any_value {
        #[derive(Clone, PartialEq, prost::Oneof)]
        pub enum Value {
            #[prost(string, tag = "1")]
            StringValue(String),
            #[prost(bool, tag = "2")]
            BoolValue(bool),
            #[prost(int64, tag = "3")]
            IntValue(i64),
            #[prost(double, tag = "4")]
            DoubleValue(f64),
            #[prost(bytes, tag = "7")]
            BytesValue(Vec<u8>),
        }
    }
}

/// One received span, flattened for assertions (ids in hex; attributes as JSON values).
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    pub service_name: Option<String>,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    pub kind: i32,
    pub start_time_unix_nano: u64,
    pub end_time_unix_nano: u64,
    pub attributes: BTreeMap<String, Value>,
    /// `STATUS_CODE_*`: 0 unset, 1 ok, 2 error.
    pub status_code: i32,
}

#[derive(Default)]
struct Shared {
    spans: Mutex<Vec<ReceivedSpan>>,
    /// Raw bodies as received (a test searches them for text that must not be there).
    bodies: Mutex<Vec<Vec<u8>>>,
    /// Requests that were not a decodable OTLP trace export, with why.
    errors: Mutex<Vec<String>>,
}

/// The receiver; runs until the process exits.
pub struct OtlpReceiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl OtlpReceiver {
    pub fn start() -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let s = Arc::clone(&shared);
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let s = Arc::clone(&s);
                thread::spawn(move || {
                    let _ = serve(stream, &s);
                });
            }
        });
        Ok(Self { addr, shared })
    }

    /// The endpoint to configure as `[telemetry] otlp_endpoint`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn spans(&self) -> Vec<ReceivedSpan> {
        lock(&self.shared.spans).clone()
    }

    pub fn bodies(&self) -> Vec<Vec<u8>> {
        lock(&self.shared.bodies).clone()
    }

    pub fn errors(&self) -> Vec<String> {
        lock(&self.shared.errors).clone()
    }

    /// Waits up to `timeout` until `done` holds for the spans received so far.
    pub fn wait_for(
        &self,
        timeout: Duration,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let deadline = Instant::now() + timeout;
        loop {
            let spans = self.spans();
            if done(&spans) || Instant::now() > deadline {
                return spans;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn any_to_json(v: Option<&proto::AnyValue>) -> Value {
    use proto::any_value::Value as V;
    match v.and_then(|a| a.value.as_ref()) {
        Some(V::StringValue(s)) => Value::String(s.clone()),
        Some(V::BoolValue(b)) => Value::Bool(*b),
        Some(V::IntValue(i)) => Value::from(*i),
        Some(V::DoubleValue(d)) => Value::from(*d),
        Some(V::BytesValue(b)) => Value::String(hex(b)),
        None => Value::Null,
    }
}

fn attributes(kvs: &[proto::KeyValue]) -> BTreeMap<String, Value> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), any_to_json(kv.value.as_ref())))
        .collect()
}

/// Decodes an export body into flattened spans.
pub fn decode(body: &[u8]) -> Result<Vec<ReceivedSpan>, prost::DecodeError> {
    let request = proto::ExportTraceServiceRequest::decode(body)?;
    let mut out = Vec::new();
    for rs in request.resource_spans {
        let resource = rs
            .resource
            .as_ref()
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        let service_name = resource
            .get("service.name")
            .and_then(Value::as_str)
            .map(str::to_string);
        for ss in rs.scope_spans {
            for s in ss.spans {
                out.push(ReceivedSpan {
                    service_name: service_name.clone(),
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent_span_id: hex(&s.parent_span_id),
                    name: s.name,
                    kind: s.kind,
                    start_time_unix_nano: s.start_time_unix_nano,
                    end_time_unix_nano: s.end_time_unix_nano,
                    attributes: attributes(&s.attributes),
                    status_code: s.status.map(|st| st.code).unwrap_or(0),
                });
            }
        }
    }
    Ok(out)
}

fn serve(stream: TcpStream, shared: &Shared) -> io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or_default().to_string(),
            parts.next().unwrap_or_default().to_string(),
        );
        let (mut length, mut content_type) = (0usize, String::new());
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                if k.trim().eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap_or(0);
                } else if k.trim().eq_ignore_ascii_case("content-type") {
                    content_type = v.trim().to_ascii_lowercase();
                }
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        let problem = if method != "POST" || path != "/v1/traces" {
            Some(format!("{method} {path}: not an OTLP trace export"))
        } else if content_type != "application/x-protobuf" {
            Some(format!(
                "content type {content_type:?} is not application/x-protobuf"
            ))
        } else {
            match decode(&body) {
                Ok(spans) => {
                    lock(&shared.bodies).push(body);
                    lock(&shared.spans).extend(spans);
                    None
                }
                Err(e) => Some(format!("body does not decode: {e}")),
            }
        };
        let status = match &problem {
            None => "200 OK",
            Some(p) => {
                lock(&shared.errors).push(p.clone());
                "400 Bad Request"
            }
        };
        write!(
            out,
            "HTTP/1.1 {status}\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n"
        )?;
        out.flush()?;
    }
}
