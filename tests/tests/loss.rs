//! The loss bound, measured. For every handle (async `Locks`, `blocking::Locks`,
//! `Redlock`, `Locks` on a Cluster) and every fault (the server killed with SIGKILL or
//! SIGTERM, frozen with SIGSTOP, paused with `CLIENT PAUSE ALL`; a proxy that holds
//! everything, delays replies past the lease, or keeps resetting every connection
//! while holding what new ones send), the holder's
//! `lost()` fires at the lease's validity end: not before it (nothing refused the
//! lease) and at most [`SLACK`] after it. A holder whose signal waited for a reconnect
//! or a renewal in flight misses the bound by seconds.
//!
//! On the Cluster the faults hit the master that holds the lock, which clients reach
//! through a proxy it announces (`cluster-announce-port`).

use std::time::{Duration, Instant};

use lockscript::{Locks, Redlock, blocking};
use lockscript_test::cluster::RedisCluster;
use lockscript_test::proxy::{Proxy, Resetting};
use lockscript_test::server::RedisServer;

/// The lease of every test here.
const TTL: Duration = Duration::from_millis(300);

/// How late `lost()` may fire after the validity end: the guide's figure.
const SLACK: Duration = Duration::from_millis(100);

/// A hang guard only: the bound is asserted on the measured instant.
const PATIENCE: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// SIGKILL, not restarted.
    Kill,
    /// SIGTERM: the server shuts down and closes its connections.
    Term,
    /// SIGSTOP: the server's sockets stay open and nothing answers.
    Stop,
    /// `CLIENT PAUSE 3000 ALL`.
    PauseAll,
    /// The proxy holds every byte (a partition).
    Blackhole,
    /// The proxy delays every reply by 700 ms, past the lease.
    Delay,
    /// The proxy resets every connection, and holds every byte of the new ones:
    /// reconnecting does not help.
    Resets,
}

/// Faults on the server process itself.
fn inject(server: &mut RedisServer, fault: Fault) {
    match fault {
        Fault::Kill => server.stop(),
        Fault::Term => server.signal("TERM"),
        Fault::Stop => server.signal("STOP"),
        Fault::PauseAll => {
            let _: () = redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(3_000)
                .arg("ALL")
                .query(&mut server.connection())
                .unwrap();
        }
        Fault::Blackhole | Fault::Delay | Fault::Resets => {}
    }
}

/// Lets a frozen server go on, so the harness can stop it.
fn heal(server: &RedisServer) {
    if server.is_running() {
        server.signal("CONT");
    }
}

/// A server behind a fault-injecting proxy.
struct Target {
    server: RedisServer,
    proxy: Proxy,
    resetting: Option<Resetting>,
}

impl Target {
    fn start() -> Self {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        Self {
            server,
            proxy,
            resetting: None,
        }
    }

    fn client(&self) -> redis::Client {
        redis::Client::open(self.proxy.url()).unwrap()
    }

    fn inject(&mut self, fault: Fault) {
        inject(&mut self.server, fault);
        match fault {
            Fault::Blackhole => self.proxy.set_blackhole(true),
            Fault::Delay => self.proxy.set_delay(Duration::from_millis(700)),
            Fault::Resets => {
                self.resetting = Some(self.proxy.keep_resetting(Duration::from_millis(10)));
                self.proxy.set_blackhole(true);
            }
            _ => {}
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.resetting = None;
        heal(&self.server);
    }
}

fn assert_on_time(what: &str, fired: Instant, valid_until: Instant) {
    assert!(
        fired >= valid_until,
        "{what}: lost() fired {:?} before the validity end, though nothing refused the lease",
        valid_until - fired
    );
    let late = fired - valid_until;
    assert!(
        late <= SLACK,
        "{what}: lost() fired {late:?} after the validity end (the bound is {SLACK:?})"
    );
    println!("{what}: lost() fired {late:?} after the validity end");
}

async fn async_locks(fault: Fault) {
    let mut target = Target::start();
    let locks = Locks::connect(&target.client()).await.unwrap().ttl(TTL);
    let guard = locks.lock("loss").await.unwrap();
    // At least one renewal first, so the bound holds after renewals too.
    tokio::time::sleep(TTL / 2).await;
    target.inject(fault);
    tokio::time::timeout(PATIENCE, guard.lost())
        .await
        .unwrap_or_else(|_| panic!("{fault:?}: lost() never fired"));
    let fired = Instant::now();
    assert_on_time(&format!("async {fault:?}"), fired, guard.valid_until());
    assert!(guard.is_lost());
}

fn blocking_locks(fault: Fault) {
    let mut target = Target::start();
    let locks = blocking::Locks::connect(&target.client()).unwrap().ttl(TTL);
    let guard = locks.lock("loss").unwrap();
    std::thread::sleep(TTL / 2);
    target.inject(fault);
    assert!(
        guard.lost_within(PATIENCE),
        "{fault:?}: lost_within never saw the loss"
    );
    let fired = Instant::now();
    assert_on_time(&format!("blocking {fault:?}"), fired, guard.valid_until());
}

async fn redlock(fault: Fault) {
    let mut targets: Vec<Target> = (0..3).map(|_| Target::start()).collect();
    let clients: Vec<redis::Client> = targets.iter().map(Target::client).collect();
    let redlock = Redlock::connect(&clients)
        .await
        .unwrap()
        .ttl(TTL)
        .node_timeout(Duration::from_millis(50));
    let guard = redlock.lock("loss").await.unwrap();
    tokio::time::sleep(TTL / 2).await;
    // A majority fails.
    for target in &mut targets[..2] {
        target.inject(fault);
    }
    tokio::time::timeout(PATIENCE, guard.lost())
        .await
        .unwrap_or_else(|_| panic!("{fault:?}: lost() never fired"));
    let fired = Instant::now();
    assert_on_time(&format!("redlock {fault:?}"), fired, guard.valid_until());
}

async fn cluster(fault: Fault) {
    let mut cluster = RedisCluster::start(3, 0);
    let master = cluster.master_for_key("lock:{loss}");
    // Clients reach the lock's master through a proxy it announces.
    let proxy = Proxy::start(cluster.node(master).port());
    cluster.announce_port(master, proxy.port());
    let locks = Locks::connect_cluster(cluster.urls())
        .await
        .unwrap()
        .ttl(TTL);
    let guard = locks.lock("loss").await.unwrap();
    tokio::time::sleep(TTL / 2).await;
    inject(cluster.node_mut(master), fault);
    let _resetting = match fault {
        Fault::Blackhole => {
            proxy.set_blackhole(true);
            None
        }
        Fault::Delay => {
            proxy.set_delay(Duration::from_millis(700));
            None
        }
        Fault::Resets => {
            let resetting = proxy.keep_resetting(Duration::from_millis(10));
            proxy.set_blackhole(true);
            Some(resetting)
        }
        _ => None,
    };
    tokio::time::timeout(PATIENCE, guard.lost())
        .await
        .unwrap_or_else(|_| panic!("{fault:?}: lost() never fired"));
    let fired = Instant::now();
    heal(cluster.node(master));
    assert_on_time(&format!("cluster {fault:?}"), fired, guard.valid_until());
}

macro_rules! async_cases {
    ($run:ident: $($name:ident => $fault:ident),* $(,)?) => {
        mod $run {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$run(super::Fault::$fault).await;
                }
            )*
        }
    };
}

macro_rules! blocking_cases {
    ($run:ident: $($name:ident => $fault:ident),* $(,)?) => {
        mod $run {
            $(
                #[test]
                fn $name() {
                    super::$run(super::Fault::$fault);
                }
            )*
        }
    };
}

/// Every fault, as test names, for `$cases!($run: ...)`.
macro_rules! every_fault {
    ($cases:ident, $run:ident) => {
        $cases!($run:
            killed => Kill,
            terminated => Term,
            frozen => Stop,
            paused => PauseAll,
            black_holed => Blackhole,
            delayed_past_the_lease => Delay,
            reset_again_and_again => Resets,
        );
    };
}

every_fault!(async_cases, async_locks);
every_fault!(blocking_cases, blocking_locks);
every_fault!(async_cases, redlock);
every_fault!(async_cases, cluster);
