//! On a Redis Cluster, a handle asks every primary what it offers besides scripts and
//! uses only what all of them offer: a lease's key may live on any primary, and a slot
//! may move to another. Told apart by each primary's command counts, on both faces, on
//! a cluster whose primaries agree and on one where a primary lacks `DELIFEQ` (renamed
//! away, as an operator or an older node would leave it). And the question costs no
//! lease: a primary frozen while it is asked (the handle's first question, or one asked
//! again after the frozen primary's own calls failed) costs only the leases it holds;
//! so does a primary cut off at its address (connections accepted and never answered,
//! or refused), while calls to the others go on.

use std::time::{Duration, Instant};

use lockscript::NativeCommands;
use lockscript_test::cluster::RedisCluster;
use lockscript_test::command_calls;
use lockscript_test::proxy::Proxy;
use lockscript_test::server::RedisServer;

/// What this server build offers, asked of a plain server of the same binary the
/// cluster runs (the same question the library asks, sent by the test itself).
fn offered_by_this_build() -> NativeCommands {
    let server = RedisServer::start();
    let docs: redis::Value = redis::cmd("COMMAND")
        .arg("DOCS")
        .arg("SET")
        .arg("DELEX")
        .arg("DELIFEQ")
        .query(&mut server.connection())
        .unwrap_or(redis::Value::Nil);
    // RESP2: a flat list of name, doc; each doc as text.
    let redis::Value::Array(flat) = docs else {
        return NativeCommands::default();
    };
    let doc = |command: &str| {
        flat.chunks(2).find_map(|pair| match pair {
            [redis::Value::BulkString(name), doc]
                if name.eq_ignore_ascii_case(command.as_bytes()) =>
            {
                Some(format!("{doc:?}").to_ascii_lowercase())
            }
            _ => None,
        })
    };
    let takes_ifeq = |command: &str| doc(command).is_some_and(|d| d.contains("ifeq"));
    let mut found = NativeCommands::default();
    found.set_ifeq = takes_ifeq("set");
    found.delifeq = doc("delifeq").is_some();
    found.delex_ifeq = takes_ifeq("delex");
    found
}

/// `DELIFEQ` calls on each primary.
fn delifeq_calls(cluster: &RedisCluster) -> Vec<u64> {
    cluster
        .masters()
        .into_iter()
        .map(|m| command_calls(&mut cluster.node(m).connection(), "delifeq"))
        .collect()
}

/// A cluster of three primaries; with `lacking`, primary 1 has no `DELIFEQ`.
fn cluster(lacking: bool) -> RedisCluster {
    RedisCluster::start_with(3, 0, |i, node| {
        if lacking && i == 1 {
            node.arg("--rename-command")
                .arg("DELIFEQ")
                .arg("DELIFEQ_RENAMED_AWAY")
        } else {
            node
        }
    })
}

/// A lease renewed every 100 ms, held across several renewals.
const TTL: Duration = Duration::from_millis(300);
const HOLD: Duration = Duration::from_millis(700);

/// Takes one lock on each primary with both faces, holds them across several renewals
/// (native where offered) and releases them; what each handle found
/// and the `DELIFEQ` calls each primary ran.
fn lock_on_every_master(cluster: &RedisCluster) -> (Vec<Option<NativeCommands>>, Vec<u64>) {
    let names = cluster.one_lock_name_per_master("native");
    let before = delifeq_calls(cluster);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let found_async = runtime.block_on(async {
        let locks = lockscript::Locks::connect_cluster(cluster.urls())
            .await
            .expect("connect_cluster")
            .ttl(TTL);
        let mut held = Vec::new();
        for (name, _) in &names {
            held.push(locks.try_lock(name).await.expect("try_lock").expect("free"));
        }
        tokio::time::sleep(HOLD).await;
        for guard in held {
            guard.release().await.expect("renewed, so still ours");
        }
        locks.offered_commands()
    });
    let locks = lockscript::blocking::Locks::new(cluster.connection()).ttl(TTL);
    let held: Vec<_> = names
        .iter()
        .map(|(name, _)| locks.try_lock(name).expect("try_lock").expect("free"))
        .collect();
    std::thread::sleep(HOLD);
    for guard in held {
        guard.release().expect("renewed, so still ours");
    }
    let found_blocking = locks.offered_commands();
    let after = delifeq_calls(cluster);
    let ran = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    (vec![found_async, found_blocking], ran)
}

#[test]
fn a_cluster_whose_primaries_agree_releases_natively_on_every_primary() {
    let build = offered_by_this_build();
    let cluster = cluster(false);
    let (found, ran) = lock_on_every_master(&cluster);
    for f in &found {
        assert_eq!(*f, Some(build), "each face asked every primary");
    }
    // Each face released one lock on each primary: natively where the build has it.
    let expected = if build.delifeq { 2 } else { 0 };
    assert_eq!(ran, vec![expected; 3], "DELIFEQ calls per primary");
}

#[test]
fn a_cluster_where_one_primary_lacks_a_command_uses_it_on_none() {
    let build = offered_by_this_build();
    if !build.delifeq {
        // Nothing to take away: this server has no DELIFEQ (Redis; Valkey before 9.0).
        // The test above shows such a cluster on scripts.
        eprintln!("skipped: this server has no DELIFEQ");
        return;
    }
    let cluster = cluster(true);
    let (found, ran) = lock_on_every_master(&cluster);
    let mut without = build;
    without.delifeq = false;
    for f in &found {
        assert_eq!(*f, Some(without), "the primary without DELIFEQ counts");
    }
    assert_eq!(
        ran,
        vec![0; 3],
        "no primary ran DELIFEQ: releases were scripts"
    );
}

// A stalled primary and the question. What a cluster offers is asked of every primary;
// one that stops answering (SIGSTOP: the kernel still accepts its TCP, nothing replies)
// must cost only the leases whose keys it holds, whichever call meets the question.

/// A lease renewed about every 670 ms, lost 2 s after its last confirmed renewal.
const STALL_TTL: Duration = Duration::from_secs(2);
/// How long the primary stays frozen: two leases' worth, so its own leases are lost.
const STALL: Duration = Duration::from_secs(4);
/// Each call's bound (the default, named for the assertions).
const RESPONSE: Duration = lockscript::DEFAULT_RESPONSE_TIMEOUT;

/// Which question the frozen primary meets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Meets {
    /// The handle's first: the handle is made first, the primary frozen, then leases are
    /// taken on the two healthy primaries (their first renewal asks, while it is frozen).
    FirstQuestion,
    /// One asked again: three leases on each primary, the question answered, then the
    /// freeze; the frozen primary's renewals get no reply, which re-opens the question.
    QuestionAskedAgain,
}

/// What became of the leases on the healthy primaries while another was frozen.
#[derive(Debug, Default)]
struct Healthy {
    /// Leases watched through the freeze.
    leases: usize,
    /// Those that went suspect (a renewal failed or got no reply within the response
    /// timeout) or were lost during it.
    suspect: Vec<String>,
    /// Those not held when the freeze ended, or whose key had no time to live left.
    lost: Vec<String>,
    /// The slowest release of one of them, made while the primary was still frozen.
    slowest_release: Duration,
    /// What the handle found the cluster to offer, as the freeze ended.
    offered: Option<NativeCommands>,
}

impl Healthy {
    fn assert_unharmed(&self, face: &str, meets: Meets) {
        assert!(self.leases >= 6, "{face} {meets:?}: {} leases", self.leases);
        assert!(
            self.suspect.is_empty() && self.lost.is_empty(),
            "{face} {meets:?}: of {} leases on healthy primaries, {} went suspect ({:?}) \
             and {} were lost ({:?}) while another primary was frozen for {STALL:?}",
            self.leases,
            self.suspect.len(),
            self.suspect,
            self.lost.len(),
            self.lost,
        );
        // A release returns within one response timeout, and one on a healthy primary
        // waits for nothing on the frozen one, which would take all of it.
        assert!(
            self.slowest_release < RESPONSE / 2,
            "{face} {meets:?}: a release on a healthy primary took {:?} (response timeout \
             {RESPONSE:?})",
            self.slowest_release
        );
        // The question met the frozen primary and its outcome was kept: no answer from
        // one primary, nothing native on any (until a failure opens it again).
        assert_eq!(
            self.offered,
            Some(NativeCommands::default()),
            "{face} {meets:?}: what the question asked during the freeze found"
        );
    }
}

/// A runtime of two threads, as the tests' own.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Three lock names on each primary, with the primary (node index) owning each.
fn names_on_every_master(cluster: &RedisCluster) -> Vec<(String, usize)> {
    ["a", "b", "c"]
        .iter()
        .flat_map(|set| cluster.one_lock_name_per_master(&format!("stall-{set}")))
        .collect()
}

/// Whether `name`'s lock key still has time to live on primary `master`.
fn key_lives(cluster: &RedisCluster, name: &str, master: usize) -> bool {
    let pttl: i64 = redis::cmd("PTTL")
        .arg(format!("lock:{{{name}}}"))
        .query(&mut cluster.node(master).connection())
        .expect("PTTL on a healthy primary");
    pttl > 0
}

/// Three primaries, no replicas, that keep serving their own slots while another is
/// down (`cluster-require-full-coverage no`): otherwise the healthy ones answer
/// `CLUSTERDOWN` once the frozen one is flagged as failing, a second in, and every lease
/// is lost whatever the client does.
fn partial_cluster() -> RedisCluster {
    let cluster = RedisCluster::start_with(3, 0, |_, node| {
        node.arg("--cluster-require-full-coverage").arg("no")
    });
    // Every script cached on every primary: a script's first call would otherwise load
    // it, and a sync cluster connection sends the keyless `SCRIPT LOAD` to every node,
    // the frozen one included.
    lockscript::load_scripts(&mut cluster.connection()).expect("load_scripts");
    cluster
}

/// The async face through one freeze of primary 3.
fn stall_async(meets: Meets) -> Healthy {
    let cluster = partial_cluster();
    let stalled = cluster.masters()[2];
    let names = names_on_every_master(&cluster);
    let runtime = runtime();
    runtime.block_on(async {
        let locks = lockscript::Locks::connect_cluster(cluster.urls())
            .await
            .expect("connect_cluster")
            .ttl(STALL_TTL);
        let take = |names: Vec<(String, usize)>| {
            let locks = locks.clone();
            async move {
                let mut held = Vec::new();
                for (name, master) in names {
                    let guard = locks.try_lock(&name).await.expect("try_lock");
                    held.push((name, master, guard.expect("free")));
                }
                held
            }
        };
        let mut held = Vec::new();
        if meets == Meets::QuestionAskedAgain {
            held = take(names.clone()).await;
            // The first renewal asks; its answer comes within a lease.
            let start = Instant::now();
            while locks.offered_commands().is_none() {
                assert!(
                    start.elapsed() < STALL_TTL,
                    "the question was never answered"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        cluster.node(stalled).signal("STOP");
        let frozen = Instant::now();
        if meets == Meets::FirstQuestion {
            let healthy = names.iter().filter(|(_, m)| *m != stalled).cloned();
            held = take(healthy.collect()).await;
        }
        let (healthy, on_stalled): (Vec<_>, Vec<_>) =
            held.into_iter().partition(|(_, m, _)| *m != stalled);
        let watched = healthy.iter().map(|(name, _, guard)| {
            let lease = guard.lease();
            let (name, left) = (name.clone(), STALL.saturating_sub(frozen.elapsed()));
            tokio::spawn(async move {
                let suspect = tokio::time::timeout(left, lease.suspect()).await.is_ok();
                suspect.then_some(name)
            })
        });
        let mut outcome = Healthy {
            leases: healthy.len(),
            ..Healthy::default()
        };
        for watcher in watched.collect::<Vec<_>>() {
            outcome.suspect.extend(watcher.await.expect("a watcher"));
        }
        outcome.offered = locks.offered_commands();
        for (name, master, guard) in healthy {
            if guard.lease().is_lost() || !key_lives(&cluster, &name, master) {
                outcome.lost.push(name.clone());
            }
            let start = Instant::now();
            let released = guard.release().await;
            outcome.slowest_release = outcome.slowest_release.max(start.elapsed());
            if released.is_err() && !outcome.lost.contains(&name) {
                outcome.lost.push(name);
            }
        }
        cluster.node(stalled).signal("CONT");
        drop(on_stalled);
        outcome
    })
}

/// The blocking face (one sync cluster connection for the handle) through one freeze
/// of primary 3 that its first question meets.
fn stall_blocking() -> Healthy {
    let cluster = partial_cluster();
    let stalled = cluster.masters()[2];
    let names = names_on_every_master(&cluster);
    // As a user should make it: no re-sends of a script after an I/O error, and every
    // read bounded by the response timeout.
    let mut conn = cluster
        .client_builder()
        .retries(0)
        .connection_timeout(RESPONSE)
        .response_timeout(RESPONSE)
        .build()
        .expect("a cluster client")
        .get_connection()
        .expect("a cluster connection");
    // Connected to every primary before the freeze.
    let every = redis::cluster_routing::RoutingInfo::MultiNode((
        redis::cluster_routing::MultipleNodeRoutingInfo::AllMasters,
        None,
    ));
    conn.route_command(&redis::cmd("PING"), every)
        .expect("PING every primary");
    let locks = lockscript::blocking::Locks::new(conn).ttl(STALL_TTL);
    cluster.node(stalled).signal("STOP");
    let frozen = Instant::now();
    let healthy: Vec<_> = (names.iter())
        .filter(|(_, m)| *m != stalled)
        .map(|(name, master)| {
            let guard = locks.try_lock(name).expect("try_lock").expect("free");
            (name.clone(), *master, guard)
        })
        .collect();
    let suspect = std::thread::scope(|scope| {
        let watched: Vec<_> = healthy
            .iter()
            .map(|(name, _, guard)| {
                let lease = guard.lease();
                let left = STALL.saturating_sub(frozen.elapsed());
                scope.spawn(move || lease.suspect_within(left).then(|| name.clone()))
            })
            .collect();
        watched
            .into_iter()
            .filter_map(|w| w.join().expect("a watcher"))
            .collect()
    });
    let mut outcome = Healthy {
        leases: healthy.len(),
        suspect,
        offered: locks.offered_commands(),
        ..Healthy::default()
    };
    for (name, master, guard) in healthy {
        if guard.lease().is_lost() || !key_lives(&cluster, &name, master) {
            outcome.lost.push(name.clone());
        }
        let start = Instant::now();
        let released = guard.release();
        outcome.slowest_release = outcome.slowest_release.max(start.elapsed());
        if released.is_err() && !outcome.lost.contains(&name) {
            outcome.lost.push(name);
        }
    }
    cluster.node(stalled).signal("CONT");
    outcome
}

#[test]
fn a_stalled_primary_met_by_the_first_question_costs_no_lease_elsewhere() {
    let meets = Meets::FirstQuestion;
    let faces = [
        ("Locks", stall_async(meets)),
        ("blocking", stall_blocking()),
    ];
    for (face, healthy) in &faces {
        eprintln!("{face} {meets:?}: {healthy:?}");
    }
    for (face, healthy) in &faces {
        healthy.assert_unharmed(face, meets);
    }
}

/// The async face only: the blocking face's one connection carries the frozen
/// primary's own renewals too, each holding it for the response timeout, so renewals
/// behind them in the same round trip fail with or without the question (measured with
/// scripts only: 4 of 6 leases on the healthy primaries lost).
#[test]
fn a_stalled_primary_met_by_a_question_asked_again_costs_no_lease_elsewhere() {
    let meets = Meets::QuestionAskedAgain;
    let healthy = stall_async(meets);
    eprintln!("Locks {meets:?}: {healthy:?}");
    healthy.assert_unharmed("Locks", meets);
}

/// A lease's ttl in the restart test: a renewal every 200 ms, 400 ms left when it goes.
const RESTART_TTL: Duration = Duration::from_millis(600);

/// How long the restart test's primary stays down: longer than what is left of a lease
/// when its renewal goes, shorter than the node timeout (no failover: its replica keeps
/// answering `MOVED` to it).
const DOWN: Duration = Duration::from_millis(800);

/// A primary killed (SIGKILL) and restarted empty costs only the leases it holds, with a
/// response timeout longer than a lease. While it is down, a renewal on its slots meets
/// its replica's `MOVED` (or no connection) and is sent again until it is answered or
/// the response timeout passes; the renewals of the leases on the healthy primaries,
/// due at the same time and sent in the same round, are answered at once, and each is
/// applied as it comes (measured before: every lease of a round that held one on the
/// killed primary lost at its validity end, its answer held until the round ended).
#[test]
fn a_primary_killed_and_restarted_empty_costs_no_lease_elsewhere() {
    let mut cluster = RedisCluster::start_with(3, 1, |_, node| {
        node.arg("--cluster-require-full-coverage").arg("no")
    });
    lockscript::load_scripts(&mut cluster.connection()).expect("load_scripts");
    let killed = cluster.masters()[0];
    let names = names_on_every_master(&cluster);
    let probe = (cluster.one_lock_name_per_master("probe").into_iter())
        .find(|(_, m)| *m == killed)
        .expect("a lock name on the killed primary");
    let runtime = runtime();
    let locks = runtime.block_on(async {
        lockscript::Locks::connect_cluster(cluster.urls())
            .await
            .expect("connect_cluster")
            .ttl(RESTART_TTL)
            .response_timeout(Duration::from_secs(2))
    });
    // Taken together: their renewals go in the same rounds.
    let held: Vec<_> = runtime.block_on(async {
        let mut held = Vec::new();
        for (name, master) in names {
            let guard = locks.try_lock(&name).await.expect("try_lock");
            held.push((name, master, guard.expect("free")));
        }
        held
    });
    std::thread::sleep(RESTART_TTL);
    let (healthy, on_killed): (Vec<_>, Vec<_>) =
        held.into_iter().partition(|(_, m, _)| *m != killed);
    let watched: Vec<_> = healthy
        .iter()
        .map(|(name, _, guard)| {
            let (lease, name) = (guard.lease(), name.clone());
            runtime.spawn(async move {
                let watch = DOWN + RESTART_TTL * 2;
                let suspect = tokio::time::timeout(watch, lease.suspect()).await.is_ok();
                suspect.then_some(name)
            })
        })
        .collect();
    cluster.node(killed).signal("KILL");
    // The handle learns at once that the primary is gone (a call on its slots meets the
    // closed connection): the next rounds send to its slots while it is down.
    let probed = runtime.block_on(locks.try_lock(&probe.0));
    assert!(probed.is_err(), "a lock on the killed primary: {probed:?}");
    std::thread::sleep(DOWN);
    cluster.node_mut(killed).restart();
    let suspect: Vec<String> = runtime.block_on(async {
        let mut suspect = Vec::new();
        for watcher in watched {
            suspect.extend(watcher.await.expect("a watcher"));
        }
        suspect
    });
    let lost: Vec<&String> = (healthy.iter())
        .filter(|(name, master, guard)| {
            guard.lease().is_lost() || !key_lives(&cluster, name, *master)
        })
        .map(|(name, _, _)| name)
        .collect();
    eprintln!(
        "healthy {}: suspect {suspect:?}, lost {lost:?}",
        healthy.len()
    );
    assert!(
        suspect.is_empty() && lost.is_empty(),
        "leases on the healthy primaries while another was killed and restarted empty: \
         suspect {suspect:?}, lost {lost:?} (of {})",
        healthy.len()
    );
    drop(on_killed);
    runtime.block_on(async {
        for (_, _, guard) in healthy {
            guard
                .release()
                .await
                .expect("a release on a healthy primary");
        }
    });
}

// A primary cut off. A node that accepts connections and never answers (a restart or a
// partition behind a proxy, a load balancer or a dead host's address) or refuses them.
// redis-rs's cluster connection, meeting it, reads the slots again and makes its
// connections holding every call to every node, for the connection timeout, again
// and again: every lease on every primary was lost (measured with it in this very test:
// `Silent`, 6 of 6 leases on the healthy primaries suspect and lost, calls on them
// failing with no reply; `Refusing` passed with it too).

/// How long the primary stays cut off: more than three leases of [`RESTART_TTL`].
const CUT_OFF: Duration = Duration::from_secs(2);

/// How a primary is cut off.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// Its connections reset, new ones accepted and held: nothing answers.
    Silent,
    /// Its connections reset, new ones closed at once (redis-rs's connection came
    /// through this one too: the refusal is quick).
    Refusing,
}

/// What calls and leases on the healthy primaries went through while another was cut
/// off.
#[derive(Debug, Default)]
struct Through {
    /// Leases on the healthy primaries watched through the cut.
    leases: usize,
    suspect: Vec<String>,
    lost: Vec<String>,
    /// `try_lock` + release rounds on the healthy primaries during the cut.
    calls: usize,
    failed: Vec<String>,
    slowest: Duration,
}

/// Three primaries behind proxies; primary 3 is cut off at its proxy for [`CUT_OFF`]
/// while leases are held on all three and calls go on to the other two.
fn cut_off(cut: Cut) -> Through {
    let cluster = partial_cluster();
    let proxies = cluster.behind_proxies();
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let cut_node = cluster.masters()[2];
    let names = names_on_every_master(&cluster);
    let runtime = runtime();
    runtime.block_on(async {
        let locks = lockscript::Locks::connect_cluster(urls)
            .await
            .expect("connect_cluster")
            .ttl(RESTART_TTL);
        let mut held = Vec::new();
        for (name, master) in names.clone() {
            let guard = locks.try_lock(&name).await.expect("try_lock");
            held.push((name, master, guard.expect("free")));
        }
        let (healthy, on_cut): (Vec<_>, Vec<_>) =
            held.into_iter().partition(|(_, m, _)| *m != cut_node);
        let watched: Vec<_> = (healthy.iter())
            .map(|(name, _, guard)| {
                let (lease, name) = (guard.lease(), name.clone());
                tokio::spawn(async move {
                    let suspect = tokio::time::timeout(CUT_OFF, lease.suspect()).await;
                    suspect.is_ok().then_some(name)
                })
            })
            .collect();
        let probes: Vec<String> = (cluster.one_lock_name_per_master("probe").into_iter())
            .filter(|(_, m)| *m != cut_node)
            .map(|(name, _)| name)
            .collect();
        match cut {
            Cut::Silent => {
                proxies[cut_node].reset();
                proxies[cut_node].set_blackhole(true);
            }
            Cut::Refusing => proxies[cut_node].set_refusing(true),
        }
        let start = Instant::now();
        let mut through = Through {
            leases: healthy.len(),
            ..Through::default()
        };
        while start.elapsed() < CUT_OFF {
            for probe in &probes {
                let call = Instant::now();
                let taken = locks.try_lock(probe).await;
                let released = match taken {
                    Ok(Some(guard)) => guard.release().await,
                    Ok(None) => Ok(()),
                    Err(e) => Err(e),
                };
                through.slowest = through.slowest.max(call.elapsed());
                through.calls += 1;
                if let Err(e) = released {
                    through.failed.push(format!("{probe}: {e}"));
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for watcher in watched {
            through.suspect.extend(watcher.await.expect("a watcher"));
        }
        for (name, master, guard) in healthy {
            if guard.lease().is_lost() || !key_lives(&cluster, &name, master) {
                through.lost.push(name.clone());
            }
            if guard.release().await.is_err() && !through.lost.contains(&name) {
                through.lost.push(name);
            }
        }
        proxies[cut_node].set_blackhole(false);
        proxies[cut_node].set_refusing(false);
        drop(on_cut);
        through
    })
}

fn assert_through(cut: Cut) {
    let through = cut_off(cut);
    eprintln!("{cut:?}: {through:?}");
    assert!(through.leases >= 6, "{cut:?}: {} leases", through.leases);
    assert!(
        through.suspect.is_empty() && through.lost.is_empty(),
        "{cut:?}: of {} leases on the healthy primaries while another was cut off for \
         {CUT_OFF:?}, suspect {:?}, lost {:?}",
        through.leases,
        through.suspect,
        through.lost
    );
    assert!(
        through.calls >= 10 && through.failed.is_empty(),
        "{cut:?}: calls on the healthy primaries failed: {:?} (of {})",
        through.failed,
        through.calls
    );
    // Each call on a healthy primary waits for nothing on the cut one, which would hold
    // it for the connection timeout (1 s) or the response timeout (500 ms).
    assert!(
        through.slowest < RESPONSE / 2,
        "{cut:?}: a call on a healthy primary took {:?}",
        through.slowest
    );
}

#[test]
fn a_primary_that_accepts_connections_and_never_answers_costs_no_lease_elsewhere() {
    assert_through(Cut::Silent);
}

#[test]
fn a_primary_that_refuses_connections_costs_no_lease_elsewhere() {
    assert_through(Cut::Refusing);
}
