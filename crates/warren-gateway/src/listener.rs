//! The gateway's listening socket and its client connections (issue 15 §4, §5).
//!
//! One [`Listening`] serves an address for as long as `[gateway] bind`/`port` stay the same:
//! config generations come and go underneath it. Each request is routed to the router of the
//! generation installed at that moment ([`Listening::install`]); between a generation's stop
//! and the next one's start, requests wait for the new router. So a reload closes no
//! connection — keep-alive connections carry on into the new generation — and a generation's
//! stop waits for its own in-flight requests to finish (drain).
//!
//! Client connections are bounded: a request's header block must arrive within
//! `header_read_timeout_secs` of its first byte (or of connecting), an idle keep-alive
//! connection is closed after `idle_timeout_secs`, and at most `max_connections` are open —
//! further ones wait in the kernel's listen backlog, and reaching the cap is logged.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::connect_info::ConnectInfo;
use axum::http::{Request, Response, StatusCode};
use axum::response::IntoResponse;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::{Service as _, service_fn};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;

use crate::error::ApiError;

/// Limits on client connections, from `[gateway]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// A request's whole header block must arrive within this of its first byte (the first
    /// request's: of connecting).
    pub header_read: Duration,
    /// An idle keep-alive connection is closed after this.
    pub idle: Duration,
    /// Open connections at most; further ones wait in the listen backlog.
    pub max_connections: usize,
}

impl ConnLimits {
    /// The limits of a `[gateway]` section.
    pub fn of(gateway: &warren_config::schema::GatewayConfig) -> Self {
        Self {
            header_read: Duration::from_secs(gateway.header_read_timeout_secs),
            idle: Duration::from_secs(gateway.idle_timeout_secs),
            max_connections: usize::try_from(gateway.max_connections).unwrap_or(usize::MAX),
        }
    }
}

/// Reaching the connection cap is logged at most this often.
const CAP_LOG_EVERY: Duration = Duration::from_secs(60);

/// How long a request waits for the next generation's routes while a reload swaps them.
const BETWEEN_GENERATIONS: Duration = Duration::from_secs(30);

/// One generation's routes, as the listener serves them.
#[derive(Clone)]
pub(crate) struct Serving {
    /// Unique per installed generation (not the config generation).
    pub id: u64,
    pub router: Router,
    pub limits: ConnLimits,
    /// Held by each request of this generation until its response body ends; the
    /// generation's stop waits until every clone is gone.
    pub drain: mpsc::Sender<()>,
}

/// What a connection routes its requests by: the installed generation, and whether one was
/// ever installed (what the probes answer meanwhile).
#[derive(Clone)]
struct Routes {
    slot: watch::Receiver<Option<Serving>>,
    served: Arc<AtomicBool>,
}

/// A listening socket with its accept loop (stops when dropped).
pub(crate) struct Listening {
    pub bind: String,
    pub port: u16,
    pub addr: SocketAddr,
    slot: Arc<watch::Sender<Option<Serving>>>,
    stop: watch::Sender<bool>,
    /// A generation was installed once (the daemon was ready): the gaps after it are reloads.
    served: Arc<AtomicBool>,
}

impl Listening {
    /// Starts accepting on `listener` with `limits` (until a generation brings its own):
    /// `/health` is answered at once, other requests wait until a generation is installed.
    pub fn start(
        listener: TcpListener,
        bind: &str,
        port: u16,
        limits: ConnLimits,
    ) -> io::Result<Self> {
        let addr = listener.local_addr()?;
        let (slot, _) = watch::channel(None::<Serving>);
        let slot = Arc::new(slot);
        let (stop, stopped) = watch::channel(false);
        let served = Arc::new(AtomicBool::new(false));
        let routes = Routes {
            slot: slot.subscribe(),
            served: Arc::clone(&served),
        };
        tokio::spawn(accept_loop(listener, limits, routes, stopped));
        Ok(Self {
            bind: bind.to_string(),
            port,
            addr,
            slot,
            stop,
            served,
        })
    }

    /// Routes every following request to `serving`.
    pub fn install(&self, serving: Serving) {
        self.served.store(true, Ordering::Release);
        self.slot.send_replace(Some(serving));
    }

    /// A handle that takes generation `id` out of service again.
    pub fn vacater(&self, id: u64) -> Vacate {
        Vacate {
            slot: Arc::clone(&self.slot),
            id,
        }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        // The accept loop ends; open connections finish their request and close.
        let _ = self.stop.send(true);
    }
}

/// Takes one generation out of service (see [`Listening::vacater`]).
pub(crate) struct Vacate {
    slot: Arc<watch::Sender<Option<Serving>>>,
    id: u64,
}

impl Vacate {
    /// New requests wait for the next generation; those already routed go on.
    pub fn vacate(&self) {
        self.slot.send_if_modified(|current| {
            if current.as_ref().is_some_and(|s| s.id == self.id) {
                *current = None;
                true
            } else {
                false
            }
        });
    }
}

/// Open connections, and a wake-up when one closes.
#[derive(Default)]
struct OpenCount {
    open: AtomicUsize,
    closed: Notify,
}

/// Counts one open connection until dropped.
struct OpenGuard(Arc<OpenCount>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        self.0.closed.notify_one();
    }
}

async fn accept_loop(
    listener: TcpListener,
    initial: ConnLimits,
    routes: Routes,
    mut stop: watch::Receiver<bool>,
) {
    let count = Arc::new(OpenCount::default());
    let mut current = initial;
    // Reaching the cap is logged at most once a minute (a flood would otherwise flood the log).
    let mut warned: Option<Instant> = None;
    let mut reached = 0u64;
    loop {
        if let Some(serving) = routes.slot.borrow().as_ref() {
            current = serving.limits;
        }
        // The cap: wait (in the kernel's backlog) until a connection closes.
        let closed = count.closed.notified();
        tokio::pin!(closed);
        closed.as_mut().enable();
        let open = count.open.load(Ordering::Acquire);
        if open >= current.max_connections {
            reached += 1;
            if warned.is_none_or(|at| at.elapsed() >= CAP_LOG_EVERY) {
                warned = Some(Instant::now());
                tracing::warn!(
                    open,
                    times_reached = reached,
                    "gateway connection limit reached ([gateway] max_connections = {}): new connections wait in the listen backlog until one closes",
                    current.max_connections
                );
                reached = 0;
            }
            tokio::select! {
                () = closed => {}
                // A reload may raise the cap.
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.changed() => return,
            }
            continue;
        }
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors or a connection reset while queued: keep going.
                    tracing::warn!("gateway cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        count.open.fetch_add(1, Ordering::AcqRel);
        let guard = OpenGuard(Arc::clone(&count));
        tokio::spawn(serve_connection(
            stream,
            peer,
            current,
            routes.clone(),
            stop.clone(),
            guard,
        ));
    }
}

/// What one connection is doing, for its timeouts.
struct Activity {
    state: Mutex<ActivityState>,
    changed: Notify,
}

struct ActivityState {
    /// Requests whose response has not ended.
    in_flight: usize,
    /// When the first byte of the next request head arrived (none read yet: `None`).
    head_started: Option<Instant>,
    /// When the connection opened or its last response ended.
    idle_since: Instant,
    /// Whether a request was served already (before: the header timeout counts from connect).
    served: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expiry {
    Header,
    Idle,
}

impl Activity {
    fn new() -> Self {
        Self {
            state: Mutex::new(ActivityState {
                in_flight: 0,
                head_started: None,
                idle_since: Instant::now(),
                served: false,
            }),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ActivityState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes arrived from the client.
    fn read(&self) {
        let mut s = self.lock();
        if s.in_flight == 0 && s.head_started.is_none() {
            s.head_started = Some(Instant::now());
            drop(s);
            self.changed.notify_one();
        }
    }

    /// A request head was parsed: its handler runs until the returned guard drops.
    fn begin(self: &Arc<Self>) -> Busy {
        {
            let mut s = self.lock();
            s.in_flight += 1;
            s.head_started = None;
        }
        self.changed.notify_one();
        Busy(Arc::clone(self))
    }

    /// When the connection expires next, and why; `None` while a request runs.
    fn deadline(&self, limits: ConnLimits) -> Option<(Instant, Expiry)> {
        let s = self.lock();
        if s.in_flight > 0 {
            return None;
        }
        Some(match s.head_started {
            Some(t) => (t + limits.header_read, Expiry::Header),
            None if !s.served => (s.idle_since + limits.header_read, Expiry::Header),
            None => (s.idle_since + limits.idle, Expiry::Idle),
        })
    }
}

/// One request in flight on a connection (see [`Activity::begin`]).
struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        {
            let mut s = self.0.lock();
            s.in_flight = s.in_flight.saturating_sub(1);
            s.idle_since = Instant::now();
            s.served = true;
        }
        self.0.changed.notify_one();
    }
}

/// The client's socket, telling its [`Activity`] when bytes arrive.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    limits: ConnLimits,
    routes: Routes,
    mut stop: watch::Receiver<bool>,
    _open: OpenGuard,
) {
    let _ = stream.set_nodelay(true);
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        inner: stream,
        activity: Arc::clone(&activity),
    });
    let service = {
        let activity = Arc::clone(&activity);
        service_fn(move |req| route(req, peer, Arc::clone(&activity), routes.clone()))
    };
    let conn = http1::Builder::new()
        .keep_alive(true)
        // Timeouts are ours (below): hyper's would also cut idle keep-alive connections.
        .header_read_timeout(None)
        .serve_connection(io, service);
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        let deadline = activity.deadline(limits);
        let wake = deadline.map_or_else(|| Instant::now() + limits.idle, |(at, _)| at);
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    tracing::debug!(%peer, "gateway connection ended: {e}");
                }
                return;
            }
            () = activity.changed.notified() => {}
            () = tokio::time::sleep_until(wake), if !closing => {
                match activity.deadline(limits) {
                    Some((at, Expiry::Header)) if at <= Instant::now() => {
                        tracing::debug!(%peer, "gateway connection closed: no complete request header within {:?} ([gateway] header_read_timeout_secs)", limits.header_read);
                        return; // dropped: the socket closes
                    }
                    Some((at, Expiry::Idle)) if at <= Instant::now() => {
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                    }
                    _ => {}
                }
            }
            _ = stop.changed(), if !closing => {
                conn.as_mut().graceful_shutdown();
                closing = true;
            }
        }
    }
}

/// One request: to the installed generation's router (waiting for one during a reload).
async fn route(
    mut req: Request<Incoming>,
    peer: SocketAddr,
    activity: Arc<Activity>,
    routes: Routes,
) -> Result<Response<Body>, Infallible> {
    let Routes { mut slot, served } = routes;
    let busy = activity.begin();
    let installed = slot.borrow_and_update().clone();
    let serving = match installed {
        Some(serving) => Ok(serving),
        // The probes need no generation (issue 26: the daemon binds before its start-up work;
        // a reload's gap answers them too): liveness says `starting` until the daemon was
        // ready once, readiness is 503 while no generation serves (issue 36 §4).
        None if let Some(probe) = crate::health::probe_of(req.method(), req.uri().path()) => {
            drop(busy);
            return Ok(crate::health::probe_response(
                probe,
                served.load(Ordering::Acquire),
                false,
            ));
        }
        None => {
            match tokio::time::timeout(BETWEEN_GENERATIONS, slot.wait_for(Option::is_some)).await {
                Ok(Ok(serving)) => serving.clone().ok_or("no generation"),
                Ok(Err(_)) => Err(
                    "this address stopped serving: a reload changed [gateway] bind/port (see data/gateway.json)",
                ),
                Err(_) => {
                    Err("the gateway is between config generations and none started in time; retry")
                }
            }
        }
    };
    let serving = match serving {
        Ok(serving) => serving,
        Err(why) => {
            return Ok(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                format!("{} {}: {why}", req.method(), req.uri().path()),
            )
            .into_response());
        }
    };
    req.extensions_mut().insert(ConnectInfo(peer));
    let response = TowerToHyperService::new(serving.router.clone())
        .call(req)
        .await?;
    Ok(response.map(|inner| {
        Body::new(Tracked {
            inner,
            _busy: busy,
            _drain: serving.drain,
        })
    }))
}

/// A response body that keeps its request counted (connection and generation) until it ends.
struct Tracked {
    inner: Body,
    _busy: Busy,
    _drain: mpsc::Sender<()>,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
