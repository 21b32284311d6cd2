//! Property tests that search the edges of `#[lock_script]`: generated declarations
//! (signatures and script bytes) built into a crate of their own and run on a real
//! server, on every delivery.
//!
//! A proc macro cannot be handed new signatures at run time, so the test draws N cases
//! from a seed (see `edges/generate.rs`), writes a small crate (one module per case: the
//! declaration and a call of it with drawn values; the script files byte for byte; the
//! driver `edges/driver.rs` as `main.rs`), builds it with cargo offline in this
//! workspace's target directory (only the crate itself compiles), and runs it against
//! the test's server. For every case it checks:
//!
//! - (a) the digest the macro computed (`script().sha1()`) is the SHA1 of the script's
//!   bytes (with its `@include`s expanded), `script().bytes()` are those bytes, and they
//!   are what every delivery sends: the server caches that digest after EVALSHA (cold
//!   and cached) and after EVAL (a user that may not `SCRIPT LOAD`), the Functions
//!   library holds the bytes verbatim in a function named by that digest, and the script
//!   returns a marker made of the bytes its string literals hold (raw, escaped, long,
//!   from included files) on every delivery: EVALSHA, EVAL, async, Functions (sync,
//!   async), pipelines and MULTI/EXEC (where the second call goes as EVALSHA);
//! - (b) the KEYS and ARGV the script sees are exactly the parameters in order, as
//!   redis-rs encodes them (each script returns `{#KEYS, #ARGV, marker, KEYS..., ARGV...}`),
//!   and a single-slot parameter that encodes to other than one argument is
//!   `LockError::Argument` naming it;
//! - (c) a script that compiles runs on the server, or fails with `LockError::ServerTooOld`
//!   naming the command it needs; and a script every server refuses (a byte order mark
//!   before its first line, an empty shebang flag) does not compile;
//! - every declaration compiles: the generator draws only valid signatures;
//! - and, for all the scripts at once, `lockscript::load_scripts` caches every digest.
//!
//! Input classes that found a defect can be left out while its fix is pending
//! (`LOCKSCRIPT_EDGES_OFF`, listed in `edges/switches.rs`); all are in by default, and
//! `the_bounded_run_draws_every_input_class` holds the default seed to drawing each.
//!
//! The first run in a target directory also builds the dependencies once with the
//! generated crate's features (about a minute on two cores); after that the crate
//! builds in about a second and runs in well under one per server.
//!
//! Settings, from the environment:
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `LOCKSCRIPT_EDGES_SEED` | 38 | the run's seed (38: the first whose 40 cases draw every class the test names) |
//! | `LOCKSCRIPT_EDGES_CASES` | 40 | how many cases (more by hand: 300 build in about 6 s) |
//! | `LOCKSCRIPT_EDGES_ONLY` | | draw only this case (a failure message names it) |
//! | `LOCKSCRIPT_EDGES_OFF` | | input classes to leave out, comma-separated (`edges/switches.rs` lists them) |
//! | `LOCKSCRIPT_EDGES_KEEP` | | keep the generated crate, and print where it is |
//! | `LOCKSCRIPT_EDGES_DETAIL` | 6 | how many failing cases the message shows in full |
//!
//! With `REDIS_SERVER_BIN` naming several servers the crate is built once and run on
//! each. On a server before Redis 7.0 a script with a shebang must fail with the typed
//! error that names it, and every Functions call with `Unsupported`.

// A test crate's root finds modules beside it: these live in edges/.
#[path = "edges/generate.rs"]
mod generate;
#[path = "edges/model.rs"]
mod model;
#[path = "edges/project.rs"]
mod project;
#[path = "edges/switches.rs"]
mod switches;
#[path = "edges/verdict.rs"]
mod verdict;

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

use lockscript_test::TestRedis;

use model::Case;
use project::Built;
use switches::Switches;
use verdict::Server;

/// The bounded run's seed, chosen so that its cases hold every class of [`CLASSES`].
const DEFAULT_SEED: u64 = 38;
const DEFAULT_CASES: usize = 40;

/// Input classes the bounded run must draw (see
/// `the_bounded_run_draws_every_input_class`): each known defect's, and each kind of
/// bytes, signature and option the generator makes.
const CLASSES: &[&str] = &[
    "reserved-name:invocation",
    "reserved-name:__LOCK_SCRIPT",
    "reserved-name:__LOCK_SCRIPT_REGISTERED",
    "option-key-slice-miscounted",
    "tuple-key-slice-miscounted",
    "option-arg-slice",
    "tuple-arg-slice",
    "generic-param",
    "raw-ident",
    "lifetime",
    "empty-slice",
    "argument-error",
    "non-utf8",
    "nul-byte",
    "bom-inside",
    "crlf",
    "lone-cr",
    "cr-after-comment",
    "cr-hides-code",
    "cr-include",
    "cr-include-dropped",
    "include",
    "no-final-newline",
    "shebang",
    "shebang-without-flags",
    "no-writes",
    "refused:empty-shebang-flag",
    "refused:leading-bom",
    "floor:DELIFEQ",
    "floor:XACKDEL",
    "floor:HGETDEL",
    "floor:HTTL",
    "floor-pcall",
    "sha1-pin",
    "sha1-pin-uppercase",
    "requires",
    "crate-renamed",
];

/// The classes of [`CLASSES`] that `cases` cases of `seed` do not draw.
fn missing_classes(seed: u64, cases: usize) -> Vec<&'static str> {
    let switches = Switches::default();
    let drawn: BTreeSet<String> = (0..cases)
        .flat_map(|i| generate::case(seed, i, &switches).tags())
        .collect();
    CLASSES
        .iter()
        .copied()
        .filter(|class| !drawn.contains(*class))
        .collect()
}

/// `cargo test` alone exercises every input class: the default seed's cases draw each.
#[test]
fn the_bounded_run_draws_every_input_class() {
    let missing = missing_classes(DEFAULT_SEED, DEFAULT_CASES);
    assert!(
        missing.is_empty(),
        "seed {DEFAULT_SEED} draws no case of {missing:?} in {DEFAULT_CASES} cases: choose a \
         seed that does"
    );
}

struct Settings {
    seed: u64,
    cases: usize,
    only: Option<usize>,
    keep: bool,
    detail: usize,
    switches: Switches,
}

fn number<T: std::str::FromStr>(name: &str) -> Option<T> {
    let value = std::env::var(name).ok().filter(|v| !v.is_empty())?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value} is not a number")),
    )
}

fn settings() -> &'static Settings {
    static SETTINGS: OnceLock<Settings> = OnceLock::new();
    SETTINGS.get_or_init(|| Settings {
        seed: number("LOCKSCRIPT_EDGES_SEED").unwrap_or(DEFAULT_SEED),
        cases: number("LOCKSCRIPT_EDGES_CASES").unwrap_or(DEFAULT_CASES),
        only: number("LOCKSCRIPT_EDGES_ONLY"),
        keep: std::env::var_os("LOCKSCRIPT_EDGES_KEEP").is_some_and(|v| !v.is_empty()),
        detail: number("LOCKSCRIPT_EDGES_DETAIL").unwrap_or(6),
        switches: Switches::from_env(),
    })
}

/// The cases and their crate, drawn and built once for every server of the matrix.
fn built() -> &'static (Vec<Case>, Built) {
    static BUILT: OnceLock<(Vec<Case>, Built)> = OnceLock::new();
    BUILT.get_or_init(|| {
        let s = settings();
        let indices: Vec<usize> = match s.only {
            Some(only) => vec![only],
            None => (0..s.cases).collect(),
        };
        let cases: Vec<Case> = indices
            .into_iter()
            .map(|i| generate::case(s.seed, i, &s.switches))
            .collect();
        let built = project::build(&cases, s.seed, s.keep);
        eprintln!(
            "edges: seed {}, {} cases{}: the generated crate built in {:.1} s{}",
            s.seed,
            cases.len(),
            s.switches.off().fold(String::new(), |mut off, class| {
                off.push_str(", ");
                off.push_str(class);
                off.push_str(" off");
                off
            }),
            built.seconds,
            if s.keep {
                format!(" (kept at {})", built.dir.display())
            } else {
                String::new()
            }
        );
        (cases, built)
    })
}

/// Generated declarations hash, send and receive exactly what they declare, on every
/// delivery, or fail with the typed error their case calls for.
#[lockscript_test::test]
fn generated_declarations_send_their_exact_bytes_and_parameters_on_every_delivery(
    server: &TestRedis,
) {
    let s = settings();
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut server.connection())
        .expect("INFO server");
    let target = Server::of(&info, server.describe());
    let (cases, built) = built();
    let started = Instant::now();
    let output = Command::new(&built.binary)
        .env("LOCKSCRIPT_EDGES_URL", server.url())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", built.binary.display()));
    eprintln!(
        "edges: ran on {} in {:.1} s",
        target.described,
        started.elapsed().as_secs_f64()
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let failures = verdict::judge(cases, &built.compile_errors, &stdout, &target, &s.switches);
    let stopped = if output.status.success() {
        String::new()
    } else {
        format!(
            "\nthe driver stopped ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
    };
    assert!(
        failures.is_empty() && output.status.success(),
        "{}{stopped}",
        verdict::report(cases, &failures, s.seed, &target, s.detail, project::shown)
    );
}
