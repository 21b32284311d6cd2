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
//! `--denied`: what the lock user's ACL refuses: nothing (0), `SET … IFEQ` and
//! `DELIFEQ` (1), `PUBLISH` (2). `--clock-back`, `--clock-ahead`: the server's wall
//! clock may step back or jump ahead that many ticks, once a history; `--wall-ahead`: a
//! client's wall clock may (one clock step a history in all). `--acl-changes`: the ACL
//! may change that many times a history, between `--denied` and `--acl-to`.

use std::process::ExitCode;

use lockscript_test::model::server::Denied;
use lockscript_test::model::{Config, explore};

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
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().and_then(|v| v.parse::<u32>().ok());
        let Some(value) = value else {
            eprintln!(
                "usage: model [--depth N] [--horizon TICKS] [--clients N] [--try-locks N] \
                 [--rounds N] [--restarts N] [--restarts-keeping N] [--cancels 0|1] \
                 [--extends 0|1] [--drops 0|1] [--faults N] [--native 0|1] [--downgrades N] \
                 [--denied 0|1|2] [--clock-back TICKS] [--clock-ahead TICKS] \
                 [--wall-ahead TICKS] [--acl-changes N] [--acl-to 0|1|2]"
            );
            return ExitCode::from(2);
        };
        match flag.as_str() {
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
    println!("searching {config:?}");
    let report = explore(&config);
    println!("{report}");
    if report.violation.is_some() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
