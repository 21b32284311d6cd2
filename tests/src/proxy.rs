//! A small TCP proxy for fault tests: it forwards clients to a redis-server on
//! loopback and can, on demand:
//!
//! - delay every reply ([`Proxy::set_delay`]);
//! - black-hole: accept connections and hold everything in both directions until it
//!   ends, so clients wait for replies that do not come ([`Proxy::set_blackhole`]);
//! - reset every open connection ([`Proxy::reset`]);
//! - act once on a request that contains given bytes (e.g. a script's digest): hold the
//!   request itself back ([`Proxy::delay_request_to`]; later requests on that connection
//!   wait behind it, as TCP would deliver them), delay
//!   the reply to it ([`Proxy::delay_reply_to`]) or forward it and then cut the
//!   connection before the reply comes back ([`Proxy::reset_after`]), so the command
//!   ran but its reply is lost;
//! - put another server behind its address ([`Proxy::replace_upstream`]), as a failover
//!   to another node or a rolling upgrade or downgrade does.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A proxy on a free loopback port in front of `127.0.0.1:upstream`.
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
}

/// A one-shot action on the next request that contains `pattern`.
struct Trigger {
    pattern: Vec<u8>,
    action: Action,
}

#[derive(Clone, Copy)]
enum Action {
    /// Hold the request (and the connection's later ones) back this long.
    DelayRequest(Duration),
    /// Delay the next reply on that connection by this much.
    DelayReply(Duration),
    /// Forward the request, then cut the connection before the reply.
    Reset,
    /// Forward the request and its reply, then cut the connection.
    ResetAfterReply,
}

struct Shared {
    /// The server's port: where new connections go.
    upstream: AtomicU16,
    delay_us: AtomicU64,
    /// Every connection's link, to fault one of them alone.
    links: Mutex<Vec<std::sync::Weak<Link>>>,
    blackhole: AtomicBool,
    refusing: AtomicBool,
    stopped: AtomicBool,
    open: Mutex<Vec<TcpStream>>,
    triggers: Mutex<Vec<Trigger>>,
}

/// What one connection's two pumps share.
#[derive(Default)]
struct Link {
    /// A one-shot delay for the next reply, in microseconds.
    next_reply_delay_us: AtomicU64,
    /// The connection is being cut: replies are no longer forwarded.
    cut: AtomicBool,
    /// Cut the connection after forwarding the next reply.
    cut_after_reply: AtomicBool,
    /// Hold every request of this connection back this long, in microseconds.
    request_delay_us: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Proxy {
    /// Starts forwarding to the redis-server listening on `upstream`.
    ///
    /// ```no_run
    /// let server = lockscript_test::server::RedisServer::start();
    /// let proxy = lockscript_test::proxy::Proxy::start(server.port());
    /// proxy.set_delay(std::time::Duration::from_millis(50));
    /// ```
    pub fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", crate::server::free_port()))
            .or_else(|_| TcpListener::bind("127.0.0.1:0"))
            .expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let shared = Arc::new(Shared {
            upstream: AtomicU16::new(upstream),
            delay_us: AtomicU64::new(0),
            links: Mutex::new(Vec::new()),
            blackhole: AtomicBool::new(false),
            refusing: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            open: Mutex::new(Vec::new()),
            triggers: Mutex::new(Vec::new()),
        });
        let accepting = Arc::clone(&shared);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                if accepting.refusing.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let upstream = accepting.upstream.load(Ordering::SeqCst);
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    // As a dead server would: the connection closes at once.
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                if let (Ok(c), Ok(s)) = (client.try_clone(), server.try_clone()) {
                    let mut open = lock(&accepting.open);
                    open.push(c);
                    open.push(s);
                }
                let link = Arc::new(Link::default());
                {
                    let mut links = lock(&accepting.links);
                    links.retain(|l| l.strong_count() > 0);
                    links.push(Arc::downgrade(&link));
                }
                pump(
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                    Arc::clone(&accepting),
                    Arc::clone(&link),
                    Direction::Request,
                );
                pump(
                    server,
                    client,
                    Arc::clone(&accepting),
                    link,
                    Direction::Reply,
                );
            }
        });
        Self { port, shared }
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<proxy port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Delays every reply chunk from the server by `delay` (counted from when the proxy
    /// read it) from now on, the chunks waiting included: a delay set to zero releases
    /// at once a reply held by the one before, and the replies queued behind it.
    pub fn set_delay(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.shared.delay_us.store(us, Ordering::SeqCst);
    }

    /// While on, the proxy accepts connections and holds every byte in both directions:
    /// requests do not reach the server, replies do not reach the client, until it is
    /// turned off (then they flow on, in order, as TCP would deliver them after a
    /// partition heals).
    pub fn set_blackhole(&self, on: bool) {
        self.shared.blackhole.store(on, Ordering::SeqCst);
    }

    /// While on, the server is unreachable: every open connection is reset, and new
    /// ones are closed at once. Nothing sent meanwhile reaches the server.
    pub fn set_refusing(&self, on: bool) {
        self.shared.refusing.store(on, Ordering::SeqCst);
        if on {
            self.shared.reset();
        }
    }

    /// Resets every connection open through the proxy (new ones still work).
    pub fn reset(&self) {
        self.shared.reset();
    }

    /// Puts the server on `upstream` behind the proxy's address: every open connection
    /// is reset, and new ones go to it, as after a failover to another node or a server
    /// replaced by another version on the same port.
    ///
    /// ```no_run
    /// let (old, new) = (lockscript_test::server::RedisServer::start(), lockscript_test::server::RedisServer::start());
    /// let proxy = lockscript_test::proxy::Proxy::start(old.port());
    /// proxy.replace_upstream(new.port());
    /// ```
    pub fn replace_upstream(&self, upstream: u16) {
        self.shared.upstream.store(upstream, Ordering::SeqCst);
        self.shared.reset();
    }

    /// Resets every open connection every `period`, until the returned value is
    /// dropped.
    pub fn keep_resetting(&self, period: Duration) -> Resetting {
        let on = Arc::new(AtomicBool::new(true));
        let (shared, flag) = (Arc::clone(&self.shared), Arc::clone(&on));
        let thread = std::thread::spawn(move || {
            while flag.load(Ordering::SeqCst) {
                shared.reset();
                std::thread::sleep(period);
            }
        });
        Resetting {
            on,
            thread: Some(thread),
        }
    }

    /// Once: the reply to the next request that contains `pattern` is held back for
    /// `delay`.
    pub fn delay_reply_to(&self, pattern: &[u8], delay: Duration) {
        lock(&self.shared.triggers).push(Trigger {
            pattern: pattern.to_vec(),
            action: Action::DelayReply(delay),
        });
    }

    /// Holds back every request of one open connection (the `pick`-th of those open,
    /// modulo their number) by `delay`, and of that one alone: its commands reach the
    /// server after those another connection sent later. Returns whether one was open.
    /// `delay` zero ends it for every connection.
    pub fn delay_one_connection(&self, pick: usize, delay: Duration) -> bool {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        let links: Vec<Arc<Link>> = lock(&self.shared.links)
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .collect();
        if us == 0 {
            for link in &links {
                link.request_delay_us.store(0, Ordering::SeqCst);
            }
            return true;
        }
        let Some(link) = links.get(pick % links.len().max(1)) else {
            return false;
        };
        link.request_delay_us.store(us, Ordering::SeqCst);
        true
    }

    /// Once: the next request that contains `pattern` reaches the server `delay` late;
    /// the requests behind it on that connection wait too (other connections do not).
    pub fn delay_request_to(&self, pattern: &[u8], delay: Duration) {
        lock(&self.shared.triggers).push(Trigger {
            pattern: pattern.to_vec(),
            action: Action::DelayRequest(delay),
        });
    }

    /// Once: the next request that contains `pattern` and its reply are forwarded, then
    /// the connection is cut: the next command on it fails, and the client reconnects.
    pub fn reset_after_reply(&self, pattern: &[u8]) {
        lock(&self.shared.triggers).push(Trigger {
            pattern: pattern.to_vec(),
            action: Action::ResetAfterReply,
        });
    }

    /// Once: the next request that contains `pattern` is forwarded, then its connection
    /// is cut before the reply comes back. The command runs; the client gets an I/O
    /// error.
    pub fn reset_after(&self, pattern: &[u8]) {
        lock(&self.shared.triggers).push(Trigger {
            pattern: pattern.to_vec(),
            action: Action::Reset,
        });
    }
}

impl Shared {
    fn reset(&self) {
        for stream in lock(&self.open).drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

/// Keeps resetting a proxy's connections while it lives; see [`Proxy::keep_resetting`].
pub struct Resetting {
    on: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Resetting {
    fn drop(&mut self) {
        self.on.store(false, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.reset();
        // Wake the accept loop so it sees `stopped`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        crate::server::release_port(self.port);
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Request,
    Reply,
}

/// Holds a reply chunk read now back by the proxy's delay (`delay_us`, read again as it
/// waits, so a delay lowered meanwhile applies to this chunk too: "from now on" includes
/// the chunk waiting) or by `once_us`, whichever is longer.
fn hold_reply(delay_us: &AtomicU64, once_us: u64) {
    let read = Instant::now();
    loop {
        let us = delay_us.load(Ordering::SeqCst).max(once_us);
        let Some(left) = Duration::from_micros(us).checked_sub(read.elapsed()) else {
            return;
        };
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(2)));
    }
}

/// Holds a request back by its connection's own delay, if it has one.
fn hold_request(link: &Link) {
    let us = link.request_delay_us.load(Ordering::SeqCst);
    if us > 0 {
        std::thread::sleep(Duration::from_micros(us));
    }
}

/// The action of the first trigger whose pattern `chunk` contains; it is used up.
fn fire(shared: &Shared, chunk: &[u8]) -> Option<Action> {
    let mut triggers = lock(&shared.triggers);
    let i = triggers.iter().position(|t| {
        !t.pattern.is_empty() && chunk.windows(t.pattern.len()).any(|w| w == t.pattern)
    })?;
    Some(triggers.remove(i).action)
}

/// Copies `from` to `to` on a thread, applying the proxy's faults.
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    shared: Arc<Shared>,
    link: Arc<Link>,
    dir: Direction,
) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            // A black hole holds bytes, it never drops them: TCP delivers a stream in
            // order or breaks the connection, and a client that pipelines on one
            // connection (a multiplexed one) matches replies to requests by their order.
            while shared.blackhole.load(Ordering::SeqCst) {
                if shared.stopped.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            let chunk = &buf[..n];
            let mut reset = false;
            if dir == Direction::Request {
                hold_request(&link);
            }
            match dir {
                Direction::Request => match fire(&shared, chunk) {
                    Some(Action::DelayRequest(d)) => std::thread::sleep(d),
                    Some(Action::DelayReply(d)) => {
                        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
                        link.next_reply_delay_us.store(us, Ordering::SeqCst);
                    }
                    Some(Action::Reset) => {
                        link.cut.store(true, Ordering::SeqCst);
                        reset = true;
                    }
                    Some(Action::ResetAfterReply) => {
                        link.cut_after_reply.store(true, Ordering::SeqCst);
                    }
                    None => {}
                },
                Direction::Reply => {
                    if link.cut.load(Ordering::SeqCst) {
                        break;
                    }
                    let once = link.next_reply_delay_us.swap(0, Ordering::SeqCst);
                    hold_reply(&shared.delay_us, once);
                }
            }
            if to.write_all(chunk).is_err() {
                break;
            }
            if dir == Direction::Reply && link.cut_after_reply.swap(false, Ordering::SeqCst) {
                let _ = from.shutdown(Shutdown::Both);
                break;
            }
            if reset {
                // Give the server the request, then cut before its reply is read.
                std::thread::sleep(Duration::from_millis(5));
                let _ = from.shutdown(Shutdown::Both);
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Both);
    });
}
