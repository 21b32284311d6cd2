//! The report on stdout: a table of the cycle per connection kind, every figure, the
//! targets, and the ratios that explain them.

use std::collections::BTreeMap;

use crate::measure::{RoundRatios, Samples};

/// The connection kinds, by figure prefix, as the report names them.
const KINDS: [(&str, &str); 4] = [
    (
        "sync",
        "redis::Connection, blocking::Locks::new, main thread",
    ),
    (
        "ct",
        "MultiplexedConnection, current-thread runtime, Locks::new",
    ),
    (
        "mt",
        "MultiplexedConnection, multi-thread runtime (2 workers), Locks::new, block_on",
    ),
    (
        "mtw",
        "MultiplexedConnection, multi-thread runtime (2 workers), Locks::new, on a worker",
    ),
];

/// Each kind's per-round ratios of its cycle to its script floor.
pub fn round_ratios(samples: &Samples) -> BTreeMap<&'static str, RoundRatios> {
    KINDS
        .iter()
        .filter_map(|(kind, _)| {
            let ratios = samples.round_ratios(
                &format!("{kind}_cycle_us"),
                &format!("{kind}_floor_script_cycle_us"),
            )?;
            Some((*kind, ratios))
        })
        .collect()
}

/// Prints the figures and the targets; `ratios` holds each kind's per-round ratios of
/// its cycle to its script floor, and `samples` counts the handoffs
/// measured: one handle, a handle each, one blocking handle, raw floor, polling.
pub fn print(
    figures: &BTreeMap<String, f64>,
    ratios: &BTreeMap<&str, RoundRatios>,
    quick: bool,
    samples: [usize; 5],
) {
    let [handoffs, separate, blocking, floors, polls] = samples;
    let get = |k: &str| figures.get(k).copied().unwrap_or(f64::NAN);
    println!(
        "lockscript bench ({}; {} cores; redis-server on loopback)\n",
        if quick { "--quick" } else { "full" },
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
    );
    kinds(&get);
    println!("\n{:<44} {:>12}", "figure", "value");
    for (k, v) in figures {
        // Ratios and core counts are small: show them to two places.
        let places = if v.abs() < 10.0 { 2 } else { 1 };
        println!("{k:<44} {v:>12.places$}");
    }
    println!(
        "\n(handoff samples: {handoffs} one handle, {separate} a handle each, {blocking} one blocking handle, {floors} raw floor, {polls} polling)"
    );
    targets(&get, ratios);
    explaining(&get);
}

/// A table per connection kind: the round trip, both floors and the face, wall time and
/// client CPU per cycle, and the ratios to the floors.
fn kinds(get: &impl Fn(&str) -> f64) {
    println!("the cycle per connection kind (medians; µs per cycle; client CPU of all threads):");
    for (kind, what) in KINDS {
        println!("\n{kind}: {what}");
        println!(
            "  {:<36} {:>9} {:>11} {:>9} {:>9}",
            "", "wall µs", "client CPU", "/ script", "/ SET"
        );
        println!(
            "  {:<36} {:>9.1}",
            "PING round trip",
            get(&format!("{kind}_rtt_p50_us"))
        );
        let script = get(&format!("{kind}_floor_script_cycle_us"));
        let set = get(&format!("{kind}_floor_set_cycle_us"));
        let mut rows = vec![
            (
                "floor: SET NX PX + compare-del",
                format!("{kind}_floor_set"),
            ),
            (
                "floor: acquire.lua + compare-del",
                format!("{kind}_floor_script"),
            ),
            ("face: try_lock + release", kind.to_owned()),
            (
                "floor: FCALL acquire + compare-del",
                format!("{kind}_floor_fcall"),
            ),
            ("face by Functions (FCALL)", format!("{kind}_functions")),
        ];
        if kind == "sync" {
            rows.push(("face made with connect", "sync_connect".to_owned()));
        }
        for (label, stem) in rows {
            let wall = get(&format!("{stem}_cycle_us"));
            println!(
                "  {label:<36} {wall:>9.1} {:>11.1} {:>9.2} {:>9.2}",
                get(&format!("{stem}_cycle_client_cpu_us")),
                wall / script,
                wall / set
            );
        }
    }
}

/// The targets: each kind's cycle within 1.10 x its script floor (the median of the
/// per-round ratios, with their range; the ratio of the two medians beside it), and the
/// handoffs.
fn targets(get: &impl Fn(&str) -> f64, ratios: &BTreeMap<&str, RoundRatios>) {
    println!(
        "\ntargets (a face against its floor: the median of the rounds' ratios; the rest: ratios of this run's medians):"
    );
    let mut checks: Vec<(String, f64, f64, String)> = KINDS
        .iter()
        .map(|(kind, _)| {
            let cycle = format!("{kind}_cycle_us");
            let floor = format!("{kind}_floor_script_cycle_us");
            let of_medians = get(&cycle) / get(&floor);
            let (ratio, range) = ratios.get(kind).map_or((of_medians, String::new()), |r| {
                (
                    r.median,
                    format!(
                        "  (rounds {:.2}..{:.2}; ratio of medians {of_medians:.2})",
                        r.lo, r.hi
                    ),
                )
            });
            (format!("{cycle} <= 1.10 x {floor}"), ratio, 1.10, range)
        })
        .collect();
    // The `metrics` feature with a recorder taking every figure, against the same face
    // without one, on the kinds that run the face on the main thread.
    for kind in ["sync", "ct", "mt"] {
        checks.push((
            format!("{kind}_metrics_cycle_us <= 1.02 x {kind}_cycle_us"),
            get(&format!("{kind}_metrics_cycle_us")) / get(&format!("{kind}_cycle_us")),
            1.02,
            String::new(),
        ));
    }
    checks.push((
        "handoff_p50_us <= 3 x mt_rtt_p50_us".to_owned(),
        get("handoff_p50_us") / get("mt_rtt_p50_us"),
        3.0,
        String::new(),
    ));
    checks.push((
        "attempts_per_acquire <= 2".to_owned(),
        get("attempts_per_acquire"),
        2.0,
        String::new(),
    ));
    // Fair mode across processes: handoff at the raw pub/sub floor, one call per
    // acquire, and a p99 that does not grow from 4 to 16 waiting processes.
    for (what, ratio, bound) in [
        (
            "xproc_handoff_p50_us <= 1.2 x floor_handoff_p50_us",
            get("xproc_handoff_p50_us") / get("floor_handoff_p50_us"),
            1.2,
        ),
        (
            "xproc16_handoff_p50_us <= 1.2 x floor_handoff_p50_us",
            get("xproc16_handoff_p50_us") / get("floor_handoff_p50_us"),
            1.2,
        ),
        (
            "xproc_attempts_per_acquire <= 1.1",
            get("xproc_attempts_per_acquire"),
            1.1,
        ),
        (
            "xproc16_attempts_per_acquire <= 1.1",
            get("xproc16_attempts_per_acquire"),
            1.1,
        ),
        (
            "xproc16_handoff_p99_us <= 1.25 x xproc_handoff_p99_us",
            get("xproc16_handoff_p99_us") / get("xproc_handoff_p99_us"),
            1.25,
        ),
    ] {
        checks.push((what.to_owned(), ratio, bound, String::new()));
    }
    for (what, ratio, bound, range) in checks {
        let status = if ratio <= bound { "holds" } else { "MISSED" };
        let line = format!("  {what:<56} {ratio:>6.2}  {status:<6}{range}");
        println!("{}", line.trim_end());
    }
}

/// Ratios that explain the targets, and the client CPU each face adds to its floor.
fn explaining(get: &impl Fn(&str) -> f64) {
    let mut ratios: Vec<(String, String)> = Vec::new();
    for (kind, _) in KINDS {
        ratios.push((
            format!("{kind}_cycle_us"),
            format!("{kind}_floor_set_cycle_us"),
        ));
        ratios.push((
            format!("{kind}_floor_script_cycle_us"),
            format!("{kind}_floor_set_cycle_us"),
        ));
    }
    for (kind, _) in KINDS {
        ratios.push((
            format!("{kind}_floor_fcall_cycle_us"),
            format!("{kind}_floor_script_cycle_us"),
        ));
        ratios.push((
            format!("{kind}_functions_cycle_us"),
            format!("{kind}_cycle_us"),
        ));
    }
    for (num, den) in [
        ("sync_connect_cycle_us", "sync_floor_script_cycle_us"),
        ("mt_rslock_cycle_us", "mt_cycle_us"),
        ("mt_rslock_cycle_us", "mt_floor_set_cycle_us"),
        (
            "mtw_throughput_cycles_per_s",
            "mtw_floor_script_throughput_cycles_per_s",
        ),
        (
            "mtw_throughput_cycles_per_s",
            "mtw_floor_set_throughput_cycles_per_s",
        ),
        (
            "mtw_floor_script_throughput_cycles_per_s",
            "mtw_floor_set_throughput_cycles_per_s",
        ),
        ("handoff_p50_us", "floor_handoff_p50_us"),
        ("handoff_p50_us", "mt_rtt_after_idle_p50_us"),
        // The handoff's contenders are tasks on workers: their own round trip.
        ("handoff_p50_us", "mtw_rtt_p50_us"),
        ("handoff_p50_us", "mtw_rtt_after_idle_p50_us"),
        ("handoff_separate_p50_us", "floor_handoff_p50_us"),
        ("handoff_separate_p50_us", "mt_rtt_p50_us"),
        // The blocking face's handover between threads, beside the async one's.
        ("blocking_handoff_p50_us", "handoff_p50_us"),
        ("blocking_handoff_p50_us", "sync_rtt_p50_us"),
        ("xproc_herd_handoff_p50_us", "floor_handoff_p50_us"),
        ("xproc16_herd_handoff_p50_us", "floor_handoff_p50_us"),
        ("xproc16_handoff_p99_us", "xproc16_herd_handoff_p99_us"),
        ("xproc8_grants_per_s", "xproc8_herd_grants_per_s"),
    ] {
        ratios.push((num.to_owned(), den.to_owned()));
    }
    println!("\nexplaining ratios:");
    for (num, den) in ratios {
        println!("  {num} / {den}: {:.2}", get(&num) / get(&den));
    }
    println!("\nclient CPU per cycle beyond the script floor's (µs):");
    for (kind, _) in KINDS {
        println!(
            "  {kind}: {:+.1}",
            get(&format!("{kind}_cycle_client_cpu_us"))
                - get(&format!("{kind}_floor_script_cycle_client_cpu_us"))
        );
    }
}
