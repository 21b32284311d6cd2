//! Across processes: N copies of this program, each with its own handle, contend for one
//! lock; fair mode (the queue on the server, direct handoff) against the default mode
//! (a release publishes and every waiting process makes one attempt: the pub/sub herd
//! Redisson's lock has too).
//!
//! - **Handoff** (4 and 16 processes, one contender each, holding the lock 1 ms and
//!   thinking 2 ms as in the in-process handoff figures): the time from a release call
//!   to the next holder having the lock, when that holder was already waiting;
//!   attempts (script calls of `lock()`) per acquire; fairness as the longest wait over
//!   the mean wait.
//! - **Hot lock** (8 processes, 4 tasks each, no hold time): grants per second and
//!   script calls per grant on the server (`INFO commandstats`).
//!
//! Every process stamps its events on `CLOCK_MONOTONIC`, which all processes of the
//! machine share; each child prints one line per grant.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use lockscript::Locks;
use lockscript_test::history::monotonic_ns as now_ns;

use crate::BoxError;
use crate::measure::percentile;

/// The argument that makes this program a contender process.
pub const CHILD: &str = "--xproc-child";

/// One grant as a child saw it, in ns on the shared clock.
struct Grant {
    asked: u64,
    acquired: u64,
    releasing: u64,
    attempts: u32,
}

/// A contender process: `--xproc-child URL fair|herd TASKS HOLD_US THINK_US START_NS
/// STOP_NS`. Prints `asked acquired releasing attempts` per grant.
pub fn child(args: &[String]) -> Result<(), BoxError> {
    let [url, mode, tasks, hold, think, start, stop] = args else {
        return Err(format!("{CHILD} needs 7 arguments, got {}", args.len()).into());
    };
    let (tasks, hold, think): (usize, u64, u64) = (tasks.parse()?, hold.parse()?, think.parse()?);
    let (start, stop): (u64, u64) = (start.parse()?, stop.parse()?);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let lines = runtime.block_on(async {
        let locks = Locks::connect(&redis::Client::open(url.as_str())?)
            .await?
            .fair(mode == "fair")
            .wait_timeout(Duration::from_secs(60));
        // Every process starts at the same instant, its channel subscribed already.
        let warm = locks.try_lock("bench:xproc-warm").await?;
        drop(warm);
        tokio::time::sleep(Duration::from_nanos(start.saturating_sub(now_ns()))).await;
        let mut handles = Vec::new();
        for _ in 0..tasks {
            let locks = locks.clone();
            handles.push(tokio::spawn(async move {
                let mut lines = Vec::new();
                while now_ns() < stop {
                    let asked = now_ns();
                    let guard = locks.lock("bench:xproc").await?;
                    let acquired = now_ns();
                    if hold > 0 {
                        tokio::time::sleep(Duration::from_micros(hold)).await;
                    }
                    let releasing = now_ns();
                    let attempts = guard.attempts();
                    guard.release().await?;
                    lines.push(format!("{asked} {acquired} {releasing} {attempts}"));
                    if think > 0 {
                        tokio::time::sleep(Duration::from_micros(think)).await;
                    }
                }
                Ok::<_, BoxError>(lines)
            }));
        }
        let mut lines = Vec::new();
        for h in handles {
            lines.extend(h.await??);
        }
        Ok::<_, BoxError>(lines)
    })?;
    for line in lines {
        println!("{line}");
    }
    Ok(())
}

/// Runs `processes` contender processes in `mode` for `run_for`; every grant they saw.
fn run(
    url: &str,
    mode: &str,
    processes: usize,
    tasks: usize,
    hold_us: u64,
    think_us: u64,
    run_for: Duration,
) -> Result<Vec<Grant>, BoxError> {
    let exe = std::env::current_exe()?;
    // Time to start the processes and connect, on a busy machine.
    let start = now_ns() + 1_500_000_000 + 100_000_000 * processes as u64;
    let stop = start + u64::try_from(run_for.as_nanos())?;
    let children = (0..processes)
        .map(|_| {
            Command::new(&exe)
                .arg(CHILD)
                .args([url, mode])
                .arg(tasks.to_string())
                .args([hold_us, think_us, start, stop].map(|v| v.to_string()))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut grants = Vec::new();
    for child in children {
        let out = child.wait_with_output()?;
        if !out.status.success() {
            return Err(format!(
                "a contender process failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let v: Vec<u64> = line.split(' ').map(str::parse).collect::<Result<_, _>>()?;
            if let [asked, acquired, releasing, attempts] = v[..] {
                grants.push(Grant {
                    asked,
                    acquired,
                    releasing,
                    attempts: u32::try_from(attempts)?,
                });
            }
        }
    }
    grants.sort_by_key(|g| g.acquired);
    Ok(grants)
}

/// Handoff latencies (µs, sorted), attempts per acquire, and the longest wait over the
/// mean wait.
fn handoffs(grants: &[Grant]) -> (Vec<f64>, f64, f64) {
    #[allow(clippy::cast_precision_loss)]
    let us = |ns: u64| ns as f64 / 1e3;
    let mut samples: Vec<f64> = grants
        .windows(2)
        .filter(|w| w[1].asked < w[0].releasing)
        .map(|w| us(w[1].acquired.saturating_sub(w[0].releasing)))
        .collect();
    samples.sort_by(f64::total_cmp);
    let n = grants.len().max(1);
    let attempts: u64 = grants.iter().map(|g| u64::from(g.attempts)).sum();
    let waits: Vec<f64> = grants
        .iter()
        .map(|g| us(g.acquired.saturating_sub(g.asked)))
        .collect();
    #[allow(clippy::cast_precision_loss)]
    let (per_acquire, mean) = (
        attempts as f64 / n as f64,
        waits.iter().sum::<f64>() / n as f64,
    );
    let longest = waits.iter().copied().fold(0.0, f64::max);
    (samples, per_acquire, longest / mean)
}

/// Script calls the server ran so far (`EVALSHA`, `EVAL`, `FCALL`).
fn script_calls(conn: &mut redis::Connection) -> Result<u64, BoxError> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn)?;
    let mut calls = 0;
    for line in info.lines() {
        let Some((name, stats)) = line.split_once(':') else {
            continue;
        };
        if matches!(
            name,
            "cmdstat_evalsha" | "cmdstat_eval" | "cmdstat_fcall" | "cmdstat_fcall_ro"
        ) && let Some(n) = stats.split(',').find_map(|kv| kv.strip_prefix("calls="))
        {
            calls += n.parse::<u64>()?;
        }
    }
    Ok(calls)
}

/// The cross-process figures, fair mode and the herd, in one run.
pub struct CrossProcess {
    pub figures: BTreeMap<String, f64>,
    /// Handoff latencies (µs, sorted) with 4 processes: fair, herd.
    pub fair4: Vec<f64>,
    pub herd4: Vec<f64>,
}

impl CrossProcess {
    pub fn measure(url: &str, run_for: Duration) -> Result<Self, BoxError> {
        let client = redis::Client::open(url)?;
        let mut conn = client.get_connection()?;
        let mut figures = BTreeMap::new();
        let mut kept = BTreeMap::new();
        for (mode, prefix) in [("fair", "xproc"), ("herd", "xproc_herd")] {
            for processes in [4, 16] {
                let grants = run(url, mode, processes, 1, 1_000, 2_000, run_for)?;
                let (samples, attempts, unfair) = handoffs(&grants);
                let key = if processes == 4 {
                    prefix.to_owned()
                } else {
                    prefix.replacen("xproc", "xproc16", 1)
                };
                figures.insert(format!("{key}_handoff_p50_us"), percentile(&samples, 0.5));
                figures.insert(format!("{key}_handoff_p99_us"), percentile(&samples, 0.99));
                figures.insert(format!("{key}_attempts_per_acquire"), attempts);
                figures.insert(format!("{key}_longest_wait_over_mean"), unfair);
                if processes == 4 {
                    kept.insert(mode, samples);
                }
            }
            let before = script_calls(&mut conn)?;
            let grants = run(url, mode, 8, 4, 0, 0, run_for)?;
            let calls = script_calls(&mut conn)? - before;
            #[allow(clippy::cast_precision_loss)]
            let (n, secs) = (grants.len() as f64, run_for.as_secs_f64());
            let key = prefix.replacen("xproc", "xproc8", 1);
            figures.insert(format!("{key}_grants_per_s"), n / secs);
            #[allow(clippy::cast_precision_loss)]
            figures.insert(format!("{key}_calls_per_grant"), calls as f64 / n.max(1.0));
        }
        Ok(Self {
            figures,
            fair4: kept.remove("fair").unwrap_or_default(),
            herd4: kept.remove("herd").unwrap_or_default(),
        })
    }
}
