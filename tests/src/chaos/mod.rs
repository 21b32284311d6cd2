//! The chaos checker: random faults against real servers, many worker processes doing
//! what users do, one timeline, and a checker that reads the whole history.
//!
//! `cargo run --release -p lockscript-harness --features chaos --bin chaos -- run --topology all --seed 1`
//! (or `./run chaos`) starts the servers a topology needs, a fault-injecting proxy in
//! front of each, and several worker processes; a nemesis drives faults from the seed
//! while the workers take, hold, write under and release locks; then every worker's
//! history and the nemesis's go through [`checker::check`].

pub mod checker;
pub mod clock;
pub mod history;
pub mod nemesis;
pub mod pool;
pub mod run;
pub mod servers;
pub mod watch;
pub mod worker;
