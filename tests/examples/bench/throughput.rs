//! Throughput: 64 tasks on distinct keys over one multiplexed connection, on the
//! workers of the multi-thread runtime (figures `mtw_...`), for the `SET` floor, the
//! script floor and the face; and what each cycle costs the server's and the client's
//! CPU under that load.

use std::time::{Duration, Instant};

use lockscript::Locks;
use redis::aio::MultiplexedConnection;

use crate::BoxError;
use crate::kind::{Take, floor_cycle};
use crate::measure::{Samples, server_cpu_s, threads_cpu_ns};

/// Tasks in each throughput window.
const TASKS: usize = 64;

/// What one throughput window measured.
struct Throughput {
    /// Cycles per second.
    rate: f64,
    /// The server's CPU microseconds per cycle.
    server_cpu_us: f64,
    /// This process's (the client's) CPU microseconds per cycle.
    client_cpu_us: f64,
    /// Client + server CPU seconds over wall seconds: the cores kept busy.
    cores_busy: f64,
}

impl Throughput {
    /// Pushes the window's figures: `<stem>_throughput_cycles_per_s`,
    /// `<stem>_server_cpu_us_per_cycle`, `<stem>_client_cpu_us_per_cycle`,
    /// `<stem>_cores_busy`.
    fn push(&self, samples: &mut Samples, stem: &str) {
        samples.push(format!("{stem}_throughput_cycles_per_s"), self.rate);
        samples.push(
            format!("{stem}_server_cpu_us_per_cycle"),
            self.server_cpu_us,
        );
        samples.push(
            format!("{stem}_client_cpu_us_per_cycle"),
            self.client_cpu_us,
        );
        samples.push(format!("{stem}_cores_busy"), self.cores_busy);
    }
}

/// [`TASKS`] tasks, each running `cycle` on its own key (`lock:{bench:tp:<i>}` for the
/// floors, lock `bench:tp:<i>` for the face: the same keys) until `run_for` has passed.
async fn window<F, Fut>(
    stats: &mut MultiplexedConnection,
    run_for: Duration,
    cycle: F,
) -> Result<Throughput, BoxError>
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), BoxError>> + Send,
{
    let server_before = server_cpu_s(stats).await?;
    let client_before = threads_cpu_ns()?;
    let started = Instant::now();
    let stop = started + run_for;
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let cycle = cycle.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < stop {
                cycle(i).await?;
                n += 1;
            }
            Ok::<u64, BoxError>(n)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    let wall = started.elapsed().as_secs_f64();
    #[allow(clippy::cast_precision_loss)]
    let client = threads_cpu_ns()?.saturating_sub(client_before) as f64 / 1e9;
    let server = server_cpu_s(stats).await? - server_before;
    #[allow(clippy::cast_precision_loss)]
    let total = total as f64;
    Ok(Throughput {
        rate: total / run_for.as_secs_f64(),
        server_cpu_us: server * 1e6 / total,
        client_cpu_us: client * 1e6 / total,
        cores_busy: (client + server) / wall,
    })
}

/// One round of the throughput windows, the `SET` floor's, the script floor's and the
/// face's, each for `run_for`, over `conn` (the face is `Locks::new` on a clone of it);
/// figures `mtw_floor_set_*`, `mtw_floor_script_*` and `mtw_*`.
pub async fn round(
    conn: &MultiplexedConnection,
    face: &Locks<MultiplexedConnection>,
    run_for: Duration,
    samples: &mut Samples,
) -> Result<(), BoxError> {
    let mut stats = conn.clone();
    for take in Take::BOTH {
        let floor_conn = conn.clone();
        let tp = window(&mut stats, run_for, move |i| {
            let mut conn = floor_conn.clone();
            async move {
                let key = format!("lock:{{bench:tp:{i}}}");
                let (fence, holders) = (format!("{key}:fence"), format!("{key}:holders"));
                floor_cycle(&mut conn, &key, &fence, &holders, take).await
            }
        })
        .await?;
        tp.push(samples, &format!("mtw_{}", take.stem()));
    }
    let locks = face.clone();
    let tp = window(&mut stats, run_for, move |i| {
        let locks = locks.clone();
        async move {
            let guard = locks
                .try_lock(&format!("bench:tp:{i}"))
                .await?
                .ok_or("free")?;
            guard.release().await?;
            Ok(())
        }
    })
    .await?;
    tp.push(samples, "mtw");
    Ok(())
}
