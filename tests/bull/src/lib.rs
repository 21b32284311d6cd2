//! Two of bull's scripts (bull 4.16.5, `lib/commands`), unchanged: each `--- @include`s
//! shared files of `lib/commands/includes`, which `#[lock_script]` expands at build time.
//! BullMQ's, every one, in [`bullmq`].
#![forbid(unsafe_code)]

use lockscript::lock_script;

pub mod bullmq;

/// Adds a job: a new id from the counter (or the caller's), the job's hash, then the
/// delayed set or the wait list (by priority), and a `waiting` or `delayed` event.
/// Returns the job id. Includes `addJobWithPriority`, `debounceJob` and
/// `getTargetQueueList`.
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/addJob-6.lua")]
#[allow(clippy::too_many_arguments)]
pub fn add_job(
    #[key] wait: &str,
    #[key] paused: &str,
    #[key] meta_paused: &str,
    #[key] id: &str,
    #[key] delayed: &str,
    #[key] priority: &str,
    prefix: &str,
    custom_id: &str,
    name: &str,
    data: &str,
    opts: &[u8],
    timestamp: u64,
    delay: u64,
    delayed_timestamp: u64,
    job_priority: u64,
    push: &str,
    token: &str,
    debounce_key: &str,
    debounce_id: &str,
    debounce_ttl: &str,
) -> String;

/// Moves a delayed job to the wait list (by its priority). Returns 0, or -1 when the job
/// is not delayed. Includes `addJobWithPriority` and `getTargetQueueList`.
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/promote-5.lua")]
pub fn promote(
    #[key] delayed: &str,
    #[key] wait: &str,
    #[key] paused: &str,
    #[key] meta_paused: &str,
    #[key] priority: &str,
    prefix: &str,
    job_id: &str,
    token: &str,
) -> i64;
