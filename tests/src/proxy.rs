//! A small TCP proxy for fault tests: it forwards a client to a redis-server on
//! loopback, can delay every reply, and can reset every open connection.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// A proxy on a free loopback port in front of `127.0.0.1:upstream`.
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
}

struct Shared {
    delay_us: AtomicU64,
    stopped: AtomicBool,
    open: Mutex<Vec<TcpStream>>,
}

impl Proxy {
    /// Starts forwarding to the redis-server listening on `upstream`.
    ///
    /// ```no_run
    /// let server = lockscript_tests::server::RedisServer::start();
    /// let proxy = lockscript_tests::proxy::Proxy::start(server.port());
    /// proxy.set_delay(std::time::Duration::from_millis(50));
    /// ```
    pub fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let shared = Arc::new(Shared {
            delay_us: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
            open: Mutex::new(Vec::new()),
        });
        let accepting = Arc::clone(&shared);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                if let (Ok(c), Ok(s)) = (client.try_clone(), server.try_clone()) {
                    let mut open = accepting
                        .open
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    open.push(c);
                    open.push(s);
                }
                pump(
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                    None,
                );
                pump(server, client, Some(Arc::clone(&accepting)));
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

    /// Delays every reply chunk from the server by `delay` from now on.
    pub fn set_delay(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.shared.delay_us.store(us, Ordering::SeqCst);
    }

    /// Resets every connection open through the proxy (new ones still work).
    pub fn reset(&self) {
        let mut open = self
            .shared
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for stream in open.drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.reset();
        // Wake the accept loop so it sees `stopped`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Copies `from` to `to` on a thread, delaying each chunk when `delayed` is given.
fn pump(mut from: TcpStream, mut to: TcpStream, delayed: Option<Arc<Shared>>) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if let Some(shared) = &delayed {
                let us = shared.delay_us.load(Ordering::SeqCst);
                if us > 0 {
                    std::thread::sleep(Duration::from_micros(us));
                }
            }
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Both);
    });
}
