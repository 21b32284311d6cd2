//! The lockscript benchmark: the lock cycle on each connection kind against that kind's
//! own floors, handoffs, throughput and a peer, measured in one interleaved run against
//! a private redis-server.
//!
//! ```text
//! cargo run --release -p lockscript-harness --features peers --example bench [-- --quick]
//! ```
//!
//! The cycle (`try_lock` + `release`, watchdog on) is measured on each kind of
//! connection against two floors on the same kind of connection, with the plain redis
//! crate: `SET NX PX` + `EVALSHA` compare-del.lua, and `EVALSHA` acquire-with-retry.lua
//! and `EVALSHA` compare-del.lua (the very scripts the face sends); and, for Redis
//! Functions, the same scripts by `FCALL` against the face with `Delivery::Functions`.
//! The kinds:
//!
//! - `sync_`: a plain `redis::Connection` on the main thread, outside any runtime; the
//!   face is `blocking::Locks::new` (and, as `sync_connect_`, `blocking::Locks::connect`);
//! - `ct_`: a `MultiplexedConnection` on a current-thread tokio runtime, contenders in
//!   its `block_on`; the face is `Locks::new`;
//! - `mt_`: the same on a multi-thread runtime with 2 workers, contenders in its
//!   `block_on` on the main thread (as the body of `#[tokio::main]` runs), while the
//!   connection's driver task runs on a worker;
//! - `mtw_`: the same runtime and kind of connection, contenders spawned as a task on a
//!   worker (where a service's request handlers run).
//!
//! rslock runs as an `mt_` contender (as the cycle did before kinds were split), the
//! `PING` after an idle millisecond as an `mt_` and an `mtw_` one; throughput (`mtw_`)
//! and the handoffs as tasks on the workers of the multi-thread runtime.
//!
//! Across processes (`xproc*` figures): 4 and 16 copies of this program contend for one
//! lock in fair mode and in the default mode (the pub/sub herd), and 8 copies with 4
//! tasks each hammer one hot lock; see `xproc.rs`.
//!
//! Every figure comes from the same run: rounds alternate the contenders (A B C ... A B
//! C ...) and the medians of the rounds are reported, so a noisy neighbour shifts all of
//! them alike; within a round, each kind's face and floors run interleaved in short
//! blocks (`measure::Interleaved`), so a face and its floor share the same seconds. The table goes to stdout; all figures to `target/bench/summary.json`, and
//! the handoff latency distributions (ours against 10 ms polling and the raw pub/sub
//! floor) to `target/bench/handoff.svg`.

mod chart;
mod handoff;
mod kind;
mod measure;
mod report;
mod throughput;
mod xproc;

use std::time::{Duration, Instant};

use lockscript_test::server::RedisServer;

use crate::handoff::Handoffs;
use crate::kind::{AsyncKind, SyncKind};
use crate::measure::{PerCycle, Samples};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How much to measure.
struct Plan {
    rounds: usize,
    cycles: usize,
    throughput_for: Duration,
    handoff_for: Duration,
}

impl Plan {
    fn new(quick: bool) -> Self {
        if quick {
            Self {
                rounds: 3,
                cycles: 1_500,
                throughput_for: Duration::from_millis(700),
                handoff_for: Duration::from_millis(1_500),
            }
        } else {
            Self {
                rounds: 7,
                cycles: 5_000,
                throughput_for: Duration::from_secs(2),
                handoff_for: Duration::from_secs(4),
            }
        }
    }
}

/// rslock's `lock` + `unlock`, `n` times, on its own connection.
async fn rslock_cycles(rl: rslock::LockManager, n: usize) -> Result<(), BoxError> {
    for _ in 0..n {
        let lock = rl
            .lock("bench:rslock", Duration::from_secs(30))
            .await
            .map_err(|e| format!("rslock: {e:?}"))?;
        rl.unlock(&lock).await;
    }
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(xproc::CHILD) {
        return xproc::child(&args[2..]);
    }
    let quick = std::env::args().any(|a| a == "--quick");
    let plan = Plan::new(quick);
    let server = RedisServer::start();
    let client = server.client();
    lockscript::load_scripts(&mut client.get_connection()?)?;
    lockscript::load_functions(&mut client.get_connection()?)?;
    let current_thread = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let multi_thread = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut sync = SyncKind::new(&client)?;
    let ct = AsyncKind::new("ct", &current_thread, false, &client)?;
    let mt = AsyncKind::new("mt", &multi_thread, false, &client)?;
    let mtw = AsyncKind::new("mtw", &multi_thread, true, &client)?;
    let rslock = rslock::LockManager::new(vec![server.url()]);

    let mut samples = Samples::default();
    let started = Instant::now();
    for round in 0..plan.rounds {
        eprint!("\rround {}/{}", round + 1, plan.rounds);
        let n = plan.cycles;
        sync.round(n, &mut samples)?;
        ct.round(n, &mut samples)?;
        mt.round(n, &mut samples)?;
        mtw.round(n, &mut samples)?;
        let idle = Duration::from_millis(1);
        samples.push("mt_rtt_after_idle_p50_us", mt.rtt_p50_us(n / 10, idle)?);
        samples.push("mtw_rtt_after_idle_p50_us", mtw.rtt_p50_us(n / 10, idle)?);
        let rl = rslock.clone();
        PerCycle::measure(n, || mt.run(rslock_cycles(rl, n)))?.push(&mut samples, "mt_rslock");
        multi_thread.block_on(throughput::round(
            &mtw.conn,
            &mtw.face,
            plan.throughput_for,
            &mut samples,
        ))?;
    }
    eprintln!(" ({:.0} s)", started.elapsed().as_secs_f64());

    let handoffs = multi_thread.block_on(Handoffs::measure(
        &client,
        &server.url(),
        &mtw.face,
        plan.handoff_for,
    ))?;
    eprintln!("across processes...");
    let xproc = xproc::CrossProcess::measure(&server.url(), plan.handoff_for)?;
    let ratios = report::round_ratios(&samples);
    let mut figures = samples.medians();
    handoffs.figures(&mut figures);
    figures.extend(xproc.figures.clone());
    // Were the machine CPU bound, the best throughput ratio ours could reach with a
    // client as cheap as the floor's: the floor's CPU per cycle over ours with its client.
    let fig = |k: &str| figures.get(k).copied().unwrap_or(f64::NAN);
    let floor_client = fig("mtw_floor_set_client_cpu_us_per_cycle");
    let cpu_bound_ratio = (floor_client + fig("mtw_floor_set_server_cpu_us_per_cycle"))
        / (floor_client + fig("mtw_server_cpu_us_per_cycle"));
    figures.insert("mtw_throughput_cpu_bound_ratio".to_owned(), cpu_bound_ratio);
    // What each kind's target checks: the median of its rounds' cycle / script floor.
    for (kind, r) in &ratios {
        figures.insert(
            format!("{kind}_cycle_over_script_floor_rounds_median"),
            r.median,
        );
    }

    report::print(
        &figures,
        &ratios,
        quick,
        [
            handoffs.shared.len(),
            handoffs.separate.len(),
            handoffs.blocking.len(),
            handoffs.floor.len(),
            handoffs.polling.len(),
        ],
    );
    write(&figures, &handoffs, &xproc)?;
    drop((sync, ct, mt, mtw));
    drop(server);
    Ok(())
}

/// Writes every figure to `target/bench/summary.json` and the handoff distributions to
/// `target/bench/handoff.svg`.
fn write(
    figures: &std::collections::BTreeMap<String, f64>,
    handoffs: &Handoffs,
    xproc: &xproc::CrossProcess,
) -> Result<(), BoxError> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    std::fs::create_dir_all(&dir)?;
    let json = serde_json::to_string_pretty(figures)?;
    std::fs::write(dir.join("summary.json"), json + "\n")?;
    std::fs::write(
        dir.join("handoff.svg"),
        chart::cdf_svg(&[
            (
                "lockscript, one handle (handover)",
                "#1f77b4",
                &handoffs.shared,
            ),
            (
                "lockscript, a handle each (notified)",
                "#9467bd",
                &handoffs.separate,
            ),
            ("raw pub/sub floor", "#2ca02c", &handoffs.floor),
            ("10 ms polling", "#d62728", &handoffs.polling),
            ("4 processes, fair (queue)", "#ff7f0e", &xproc.fair4),
            ("4 processes, herd (default)", "#8c564b", &xproc.herd4),
        ]),
    )?;
    println!(
        "\nwrote {} and handoff.svg",
        dir.join("summary.json").display()
    );
    Ok(())
}
