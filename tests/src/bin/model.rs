//! The model checker's deeper search, by hand (`./run model --depth N`): the world of
//! the bounded search CI runs, searched further; prints the states explored, the depth
//! reached and the time, and a shortest history of the first violation found (then
//! exits with 1).
//!
//! ```text
//! model [--depth N] [--horizon TICKS] [--clients N] [--try-locks N] [--rounds N]
//!       [--restarts N] [--restarts-keeping N] [--cancels 0|1] [--extends 0|1] [--drops 0|1]
//!       [--faults N] [--native 0|1] [--downgrades N] [--denied 0|1|2]
//!       [--clock-back TICKS] [--clock-ahead TICKS] [--wall-ahead TICKS]
//!       [--acl-changes N] [--acl-to 0|1|2]
//! ```
//!
//! `--queue KINDS`: the queue's world instead (fair locks, readers and writers,
//! permits, mixed on one name), one client per kind in the comma-separated list: `fair`,
//! `read`, `write`, `permits:N` (e.g. `--queue fair,fair,fair`), given first; after it
//! `--depth`, `--horizon`, `--faults`, `--restarts`, `--restarts-keeping`, `--cancels`,
//! `--lost-letters 0|1`, `--ttl TICKS` and `--defect K` (a defect put in fair-queue.lua,
//! the K-th of `Defect::ALL`, for the checker's own tests) apply to it.
//!
//! `--denied`: what the lock user's ACL refuses: nothing (0), `SET … IFEQ` and
//! `DELIFEQ` (1), `PUBLISH` (2). `--clock-back`, `--clock-ahead`: the server's wall
//! clock may step back or jump ahead that many ticks, once a history; `--wall-ahead`: a
//! client's wall clock may (one clock step a history in all). `--acl-changes`: the ACL
//! may change that many times a history, between `--denied` and `--acl-to`.

use std::process::ExitCode;

use lockscript::__private::model::Grants;
use lockscript_test::model::queue::{Defect, QueueConfig, explore_queue};
use lockscript_test::model::server::Denied;
use lockscript_test::model::{Config, Report, explore};

/// `--queue`'s list: one kind of grant per client.
fn grants(list: &str) -> Option<Vec<Grants>> {
    list.split(',')
        .map(|kind| match kind.trim() {
            "fair" => Some(Grants::FairLock),
            "read" => Some(Grants::Read),
            "write" => Some(Grants::Write),
            other => {
                let n = other.strip_prefix("permits:")?.parse().ok()?;
                Some(Grants::Permits(n))
            }
        })
        .collect()
}

/// `--denied`'s and `--acl-to`'s values.
fn denied(value: u32) -> Denied {
    match value {
        0 => Denied::Nothing,
        1 => Denied::Native,
        _ => Denied::Publish,
    }
}

fn main() -> ExitCode {
    let mut config = Config::default();
    let mut queue: Option<QueueConfig> = None;
    let mut lost_letters = true;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--queue" {
            let Some(kinds) = args.next().as_deref().and_then(grants) else {
                eprintln!("--queue takes kinds: fair, read, write, permits:N (comma-separated)");
                return ExitCode::from(2);
            };
            queue = Some(QueueConfig::of(&kinds));
            continue;
        }
        let value = args.next().and_then(|v| v.parse::<u32>().ok());
        let Some(value) = value else {
            eprintln!(
                "usage: model [--depth N] [--horizon TICKS] [--clients N] [--try-locks N] \
                 [--rounds N] [--restarts N] [--restarts-keeping N] [--cancels 0|1] \
                 [--extends 0|1] [--drops 0|1] [--faults N] [--native 0|1] [--downgrades N] \
                 [--denied 0|1|2] [--clock-back TICKS] [--clock-ahead TICKS] \
                 [--wall-ahead TICKS] [--acl-changes N] [--acl-to 0|1|2] \
                 [--queue KINDS [--lost-letters 0|1]]"
            );
            return ExitCode::from(2);
        };
        match flag.as_str() {
            "--depth" | "--horizon" | "--faults" | "--restarts" | "--restarts-keeping"
            | "--cancels" | "--ttl" | "--defect"
                if queue.is_some() =>
            {
                if let Some(q) = &mut queue {
                    match flag.as_str() {
                        "--depth" => q.depth = value as usize,
                        "--horizon" => q.horizon = value,
                        "--ttl" => q.ttl = value,
                        "--defect" => q.defect = Defect::ALL.get(value as usize).copied(),
                        "--faults" => q.faults = value,
                        "--restarts" => q.events.restarts = value,
                        "--restarts-keeping" => q.events.restarts_keeping = value,
                        _ => q.events.cancels = value != 0,
                    }
                }
            }
            "--lost-letters" => lost_letters = value != 0,
            "--depth" => config.depth = value as usize,
            "--horizon" => config.horizon = value,
            "--clients" => config.clients = value as usize,
            "--rounds" => config.rounds = u8::try_from(value).unwrap_or(u8::MAX),
            "--try-locks" => config.try_locks = value as usize,
            "--restarts" => config.events.restarts = value,
            "--restarts-keeping" => config.events.restarts_keeping = value,
            "--cancels" => config.events.cancels = value != 0,
            "--extends" => config.events.extends = value != 0,
            "--drops" => config.events.drops = value != 0,
            "--faults" => config.faults = value,
            "--native" => config.native = value != 0,
            "--downgrades" => config.events.downgrades = value,
            "--clock-back" => config.events.clock_back = value,
            "--clock-ahead" => config.events.clock_ahead = value,
            "--wall-ahead" => config.events.wall_ahead = value,
            "--acl-changes" => config.events.acl_changes = value,
            "--acl-to" => config.events.acl_to = denied(value),
            "--denied" => config.denied = denied(value),
            other => {
                eprintln!("unknown flag {other}");
                return ExitCode::from(2);
            }
        }
    }
    let report: Report = if let Some(mut q) = queue {
        q.events.lost_letters = lost_letters;
        println!("searching {q:?}");
        explore_queue(&q)
    } else {
        println!("searching {config:?}");
        explore(&config)
    };
    println!("{report}");
    if report.violation.is_some() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
