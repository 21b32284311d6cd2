//! The two faces of the lock API behind one trait, so that a behavioural test is
//! written once and runs on both: the async face (`lockscript::Locks` on a multi-thread
//! tokio runtime of the test's own, its calls made with `block_on` from the test's
//! thread) and the blocking face (`lockscript::blocking::Locks`).
//!
//! ```no_run
//! use lockscript_test::faces::Face;
//!
//! fn fences_rise<F: Face>() {
//!     let server = lockscript_test::server::RedisServer::start();
//!     let locks = F::connect(&server, F::settings());
//!     let first = locks.try_lock("x").unwrap().expect("free");
//!     let fence = lockscript_test::faces::Held::fencing_token(&first);
//!     lockscript_test::faces::Held::release(first).unwrap();
//!     let next = locks.try_lock("x").unwrap().expect("free");
//!     assert!(lockscript_test::faces::Held::fencing_token(&next) > fence);
//! }
//! lockscript_test::on_both_faces!(fences_rise);
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockscript::LockError;

use crate::server::RedisServer;

/// What a test sets on a handle; the rest is the library's defaults.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// The lease.
    pub ttl: Duration,
    /// How long `lock()` waits.
    pub wait_timeout: Duration,
    /// Whether guards are renewed.
    pub watchdog: bool,
    /// The retry policy between attempts, when not the library's.
    pub retry: Option<lockscript::RetryPolicy>,
    /// `wait_for_replicas(replicas, timeout)`, when set.
    pub replicas: Option<(usize, Duration)>,
    /// `native_commands(on)`.
    pub native: bool,
}

/// A lock handle, whichever face.
pub trait Face: Clone + Send + 'static {
    /// Its guard.
    type Guard: Held;

    /// The face's name, for messages.
    const NAME: &'static str;

    /// The library's defaults (watchdog on), with a 10 s wait.
    #[must_use]
    fn settings() -> Settings {
        Settings {
            ttl: Duration::from_secs(30),
            wait_timeout: Duration::from_secs(10),
            watchdog: true,
            retry: None,
            replicas: None,
            native: true,
        }
    }

    /// A handle on `server` as `connect` makes it (release notifications on).
    fn connect(server: &RedisServer, settings: Settings) -> Self {
        Self::connect_client(&server.client(), settings)
    }

    /// A handle through `client` (a user of its own, say) as `connect` makes it.
    fn connect_client(client: &redis::Client, settings: Settings) -> Self;

    /// One attempt.
    fn try_lock(&self, name: &str) -> Result<Option<Self::Guard>, LockError>;

    /// Waits for the lock.
    fn lock(&self, name: &str) -> Result<Self::Guard, LockError>;

    /// See `Locks::offered_commands`.
    fn offered_commands(&self) -> Option<lockscript::NativeCommands>;

    /// Runs `work` with the lock held (the watchdog on); the work gets the fencing token.
    fn with_lock<T: Send + 'static>(
        &self,
        name: &str,
        work: impl FnOnce(u64) -> T + Send + 'static,
    ) -> Result<T, LockError>;
}

/// A guard, whichever face.
pub trait Held: Send + 'static {
    /// See `Lease::fencing_token`.
    fn fencing_token(&self) -> u64;
    /// See `Lease::is_lost`.
    fn is_lost(&self) -> bool;
    /// See `Lease::valid_until`.
    fn valid_until(&self) -> Instant;
    /// See `Lease::attempts`.
    fn attempts(&self) -> u32;
    /// Blocks until the lease is lost or `timeout` passes; whether it was lost.
    fn lost_within(&self, timeout: Duration) -> bool;
    /// See `Lease::is_suspect`.
    fn is_suspect(&self) -> bool;
    /// Waits until the lease is suspect or lost, or `timeout` passes (the async face
    /// awaits `Lease::suspect`); whether it is.
    fn suspect_within(&self, timeout: Duration) -> bool;
    /// See `LockGuard::is_held`.
    fn is_held(&self) -> Result<bool, LockError>;
    /// See `LockGuard::extend`.
    fn extend(&self, ttl: Duration) -> Result<(), LockError>;
    /// See `LockGuard::release`.
    fn release(self) -> Result<(), LockError>;
}

/// The async face, driven from the test's thread.
#[derive(Clone)]
pub struct Async {
    runtime: Arc<tokio::runtime::Runtime>,
    locks: lockscript::Locks,
}

/// An async guard and the runtime its calls run on.
pub struct AsyncGuard {
    runtime: Arc<tokio::runtime::Runtime>,
    guard: lockscript::LockGuard,
}

impl Face for Async {
    type Guard = AsyncGuard;
    const NAME: &'static str = "async";

    fn connect_client(client: &redis::Client, settings: Settings) -> Self {
        let runtime = Arc::new(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("the async face's runtime"),
        );
        let mut locks = runtime
            .block_on(lockscript::Locks::connect(client))
            .expect("connect")
            .ttl(settings.ttl)
            .wait_timeout(settings.wait_timeout)
            .watchdog(settings.watchdog)
            .native_commands(settings.native);
        if let Some(retry) = settings.retry {
            locks = locks.retry(retry);
        }
        if let Some((replicas, timeout)) = settings.replicas {
            locks = locks.wait_for_replicas(replicas, timeout);
        }
        Self { runtime, locks }
    }

    fn offered_commands(&self) -> Option<lockscript::NativeCommands> {
        self.locks.offered_commands()
    }

    fn try_lock(&self, name: &str) -> Result<Option<AsyncGuard>, LockError> {
        let guard = self.runtime.block_on(self.locks.try_lock(name))?;
        Ok(guard.map(|guard| self.guard(guard)))
    }

    fn lock(&self, name: &str) -> Result<AsyncGuard, LockError> {
        let guard = self.runtime.block_on(self.locks.lock(name))?;
        Ok(self.guard(guard))
    }

    fn with_lock<T: Send + 'static>(
        &self,
        name: &str,
        work: impl FnOnce(u64) -> T + Send + 'static,
    ) -> Result<T, LockError> {
        self.runtime.block_on(
            self.locks
                .with_lock(name, |lease| async move { work(lease.fencing_token()) }),
        )
    }
}

impl Async {
    fn guard(&self, guard: lockscript::LockGuard) -> AsyncGuard {
        AsyncGuard {
            runtime: Arc::clone(&self.runtime),
            guard,
        }
    }
}

impl Held for AsyncGuard {
    fn fencing_token(&self) -> u64 {
        self.guard.fencing_token()
    }

    fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    fn valid_until(&self) -> Instant {
        self.guard.valid_until()
    }

    fn attempts(&self) -> u32 {
        self.guard.attempts()
    }

    fn lost_within(&self, timeout: Duration) -> bool {
        self.guard.lease().lost_within(timeout)
    }

    fn is_suspect(&self) -> bool {
        self.guard.is_suspect()
    }

    fn suspect_within(&self, timeout: Duration) -> bool {
        let suspect = self.guard.suspect();
        self.runtime
            .block_on(async { tokio::time::timeout(timeout, suspect).await.is_ok() })
    }

    fn is_held(&self) -> Result<bool, LockError> {
        self.runtime.block_on(self.guard.is_held())
    }

    fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        self.runtime.block_on(self.guard.extend(ttl))
    }

    fn release(self) -> Result<(), LockError> {
        self.runtime.block_on(self.guard.release())
    }
}

/// The blocking face.
#[derive(Clone)]
pub struct Blocking(lockscript::blocking::Locks);

impl Face for Blocking {
    type Guard = lockscript::blocking::LockGuard;
    const NAME: &'static str = "blocking";

    fn connect_client(client: &redis::Client, settings: Settings) -> Self {
        let mut locks = lockscript::blocking::Locks::connect(client)
            .expect("connect")
            .ttl(settings.ttl)
            .wait_timeout(settings.wait_timeout)
            .watchdog(settings.watchdog)
            .native_commands(settings.native);
        if let Some(retry) = settings.retry {
            locks = locks.retry(retry);
        }
        if let Some((replicas, timeout)) = settings.replicas {
            locks = locks.wait_for_replicas(replicas, timeout);
        }
        Self(locks)
    }

    fn offered_commands(&self) -> Option<lockscript::NativeCommands> {
        self.0.offered_commands()
    }

    fn try_lock(&self, name: &str) -> Result<Option<Self::Guard>, LockError> {
        self.0.try_lock(name)
    }

    fn lock(&self, name: &str) -> Result<Self::Guard, LockError> {
        self.0.lock(name)
    }

    fn with_lock<T: Send + 'static>(
        &self,
        name: &str,
        work: impl FnOnce(u64) -> T + Send + 'static,
    ) -> Result<T, LockError> {
        self.0.with_lock(name, |guard| work(guard.fencing_token()))
    }
}

impl Held for lockscript::blocking::LockGuard {
    fn fencing_token(&self) -> u64 {
        lockscript::Lease::fencing_token(self)
    }

    fn is_lost(&self) -> bool {
        lockscript::Lease::is_lost(self)
    }

    fn valid_until(&self) -> Instant {
        lockscript::Lease::valid_until(self)
    }

    fn attempts(&self) -> u32 {
        lockscript::Lease::attempts(self)
    }

    fn lost_within(&self, timeout: Duration) -> bool {
        lockscript::Lease::lost_within(self, timeout)
    }

    fn is_suspect(&self) -> bool {
        lockscript::Lease::is_suspect(self)
    }

    fn suspect_within(&self, timeout: Duration) -> bool {
        lockscript::Lease::suspect_within(self, timeout)
    }

    fn is_held(&self) -> Result<bool, LockError> {
        lockscript::blocking::LockGuard::is_held(self)
    }

    fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        lockscript::blocking::LockGuard::extend(self, ttl)
    }

    fn release(self) -> Result<(), LockError> {
        lockscript::blocking::LockGuard::release(self)
    }
}

/// Runs the generic test function `$test::<F: Face>()` once per face, as the tests
/// `$test::on_async` and `$test::on_blocking`.
#[macro_export]
macro_rules! on_both_faces {
    ($($test:ident),+ $(,)?) => {
        $(
            mod $test {
                #[test]
                fn on_async() {
                    super::$test::<$crate::faces::Async>();
                }

                #[test]
                fn on_blocking() {
                    super::$test::<$crate::faces::Blocking>();
                }
            }
        )+
    };
}
