//! On a Redis Cluster, a handle asks every primary what it offers besides scripts and
//! uses only what all of them offer: a lease's key may live on any primary, and a slot
//! may move to another. Told apart by each primary's command counts, on both faces, on
//! a cluster whose primaries agree and on one where a primary lacks `DELIFEQ` (renamed
//! away, as an operator or an older node would leave it).

use std::time::Duration;

use lockscript::NativeCommands;
use lockscript_test::cluster::RedisCluster;
use lockscript_test::command_calls;
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
