//! Every one of bull's 26 scripts (bull 4.16.5, `lib/commands`), unchanged, each declared
//! with the Rust type that reads what bull's own callers (`lib/scripts.js`, and `job.js`,
//! `queue.js`, `getters.js`, `repeatable.js` that use it) take from it: `#[lock_script]`
//! checks each declaration against every `return` of the script and the files it
//! `--- @include`s, and none is refused.
//!
//! bull's callers send what its file names say: `name-N.lua` takes N keys. The arguments
//! are the ones each script reads (the macro holds the highest `ARGV[n]` to their count):
//! where bull sends one more that the script never reads (`removeJob`'s lock token), the
//! declaration leaves it out. Where bull tests a reply only for truth (`if (removed)`,
//! `lock || false`, `result === 1`), `bool`; where it compares numbers, `i64`; a reply
//! that is one thing or another (a negative error code or the next job) is `redis::Value`,
//! as Rust has no union of the two.

// bull's scripts take up to 11 keys and 14 arguments, each a parameter.
#![allow(clippy::too_many_arguments)]

use std::collections::HashMap;

use lockscript::lock_script;

/// Adds a job: a new id from the counter (or the caller's), the job's hash, then the
/// delayed set or the wait list (by priority), and a `waiting` or `delayed` event.
/// bull reads the job's id. Includes `addJobWithPriority`, `debounceJob` and
/// `getTargetQueueList`.
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/addJob-6.lua")]
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

/// Adds a line to a job's log. bull reads a number: the log's length (a Lua number from
/// `math.min` when logs are capped), or -1 when the job is missing.
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/addLog-2.lua")]
pub fn add_log(#[key] job: &str, #[key] logs: &str, id: &str, log: &str, keep_logs: &str) -> i64;

/// Removes the jobs of a set older than a time. bull reads the ids removed (the `cleaned`
/// event's list).
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/cleanJobsInSet-3.lua")]
pub fn clean_jobs_in_set(
    #[key] set: &str,
    #[key] priority: &str,
    #[key] limiter: &str,
    prefix: &str,
    max_timestamp: &str,
    limit: &str,
    set_name: &str,
) -> Vec<String>;

/// Extends a job's lock. bull reads `if (lock)`: 1 when extended, 0 when not.
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/extendLock-2.lua")]
pub fn extend_lock(
    #[key] lock: &str,
    #[key] stalled: &str,
    token: &str,
    duration: &str,
    job_id: &str,
) -> bool;

/// Counts the jobs of each priority named. bull reads `number[]`, one per priority.
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/getCountsPerPriority-4.lua")]
pub fn get_counts_per_priority(
    #[key] wait: &str,
    #[key] paused: &str,
    #[key] meta_paused: &str,
    #[key] priority: &str,
    priorities: &[&str],
) -> Vec<i64>;

/// Says whether a job finished. bull reads `status > 0` and `status == 2`: 1 completed,
/// 2 failed, and otherwise the job's score in the failed set, which the line before has
/// just found missing: nil.
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/isFinished-2.lua")]
pub fn is_finished(#[key] completed: &str, #[key] failed: &str, job_id: &str) -> Option<i64>;

/// Finds a job in a list. bull reads `result === 1`: 1 when found, nil when not.
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/isJobInList-1.lua")]
pub fn is_job_in_list(#[key] list: &str, job_id: &str) -> bool;

/// Moves the active jobs whose lock expired back to wait, or to failed past the stalled
/// limit. bull reads `[failed, stalled]`: two lists of job ids.
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/moveStalledJobsToWait-7.lua")]
pub fn move_stalled_jobs_to_wait(
    #[key] stalled: &str,
    #[key] wait: &str,
    #[key] active: &str,
    #[key] failed: &str,
    #[key] stalled_check: &str,
    #[key] meta_paused: &str,
    #[key] paused: &str,
    max_stalled_count: &str,
    prefix: &str,
    timestamp: &str,
    max_check_time: &str,
) -> (Vec<String>, Vec<String>);

/// Takes the next job (or the one named), locks it and reads it. bull's `raw2jobData`
/// reads `[fields, id]` (the job's `HGETALL` and its id), or nothing (nil) when no job
/// waits or the rate limiter holds it back.
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/moveToActive-8.lua")]
pub fn move_to_active(
    #[key] wait: &str,
    #[key] active: &str,
    #[key] priority: &str,
    #[key] active_event: &str,
    #[key] stalled: &str,
    #[key] limiter: &str,
    #[key] delayed: &str,
    #[key] drained: &str,
    prefix: &str,
    token: &str,
    lock_duration: &str,
    timestamp: &str,
    job_id: &str,
    limiter_max: &str,
    limiter_duration: &str,
    bounce_back: &str,
    group_key: &str,
) -> Option<(HashMap<String, String>, String)>;

/// Moves an active job to the delayed set. bull reads a code: 0, or -1 (missing), -2 /
/// -6 (the lock), -3 (not active).
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/moveToDelayed-4.lua")]
pub fn move_to_delayed(
    #[key] active: &str,
    #[key] delayed: &str,
    #[key] job: &str,
    #[key] stalled: &str,
    delayed_timestamp: &str,
    job_id: &str,
    token: &str,
) -> i64;

/// Moves an active job to completed or failed, and may take the next job. bull reads
/// `result < 0` (an error code), `0`, or `[fields, id]` of the next job: a union, so
/// `redis::Value`.
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/moveToFinished-9.lua")]
pub fn move_to_finished(
    #[key] active: &str,
    #[key] finished: &str,
    #[key] job: &str,
    #[key] wait: &str,
    #[key] priority: &str,
    #[key] active_event: &str,
    #[key] delayed: &str,
    #[key] stalled: &str,
    #[key] metrics: &str,
    job_id: &str,
    timestamp: &str,
    property: &str,
    value: &str,
    token: &str,
    keep_jobs: &[u8],
    event_data: &str,
    fetch_next: &str,
    prefix: &str,
    lock_duration: &str,
    next_token: &str,
    max_metrics_size: &str,
) -> redis::Value;

/// Removes a paused queue's jobs and keys, a batch at a time. bull reads a number: -1
/// (not paused), -2 (active jobs), 1 (more to do), 0 (done).
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/obliterate-2.lua")]
pub fn obliterate(#[key] meta_paused: &str, #[key] base: &str, count: &str, force: &str) -> i64;

/// Pauses or resumes a queue. bull ignores the reply: the script ends without a `return`
/// (nil).
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/pause-5.lua")]
pub fn pause(
    #[key] src: &str,
    #[key] dst: &str,
    #[key] meta_paused: &str,
    #[key] event: &str,
    #[key] meta: &str,
    state: &str,
);

/// Moves a delayed job to the wait list (by its priority). bull reads `result === -1`:
/// 0, or -1 when the job is not delayed. Includes `addJobWithPriority` and
/// `getTargetQueueList`.
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

/// Releases a job's lock if it holds our token. bull reads `unlocked != 1`: `DEL`'s
/// count, or 0.
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/releaseLock-1.lua")]
pub fn release_lock(#[key] lock: &str, token: &str) -> i64;

/// Removes an unlocked job from every set and its data. bull reads `if (removed)`: 1, or
/// 0 when the job is locked. (bull also sends its token, which the script never reads.)
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/removeJob-11.lua")]
pub fn remove_job(
    #[key] active: &str,
    #[key] wait: &str,
    #[key] delayed: &str,
    #[key] paused: &str,
    #[key] completed: &str,
    #[key] failed: &str,
    #[key] priority: &str,
    #[key] job: &str,
    #[key] logs: &str,
    #[key] limiter: &str,
    #[key] prefix: &str,
    job_id: &str,
) -> bool;

/// Removes the unlocked jobs whose keys match a pattern, one `SCAN` step at a time. bull
/// reads `[cursor, removed]`: the next cursor and the ids removed.
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/removeJobs-8.lua")]
pub fn remove_jobs(
    #[key] active: &str,
    #[key] wait: &str,
    #[key] delayed: &str,
    #[key] paused: &str,
    #[key] completed: &str,
    #[key] failed: &str,
    #[key] priority: &str,
    #[key] limiter: &str,
    prefix: &str,
    pattern: &str,
    cursor: &str,
) -> (String, Vec<String>);

/// Removes a repeatable job and its next delayed job. bull ignores the reply: the script
/// ends without a `return` (nil).
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/removeRepeatable-2.lua")]
pub fn remove_repeatable(
    #[key] repeat: &str,
    #[key] delayed: &str,
    repeat_job_id: &str,
    repeat_job_key: &str,
    queue_key: &str,
);

/// Moves a failed (or completed) job back to wait. bull reads a code: 1 done, 0 missing,
/// -1 locked, -2 not in that state.
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/reprocessJob-6.lua")]
pub fn reprocess_job(
    #[key] job: &str,
    #[key] lock: &str,
    #[key] state: &str,
    #[key] wait: &str,
    #[key] meta_paused: &str,
    #[key] paused: &str,
    job_id: &str,
    push: &str,
    token: &str,
    timestamp: &str,
) -> i64;

/// Moves an active job back to wait to retry it. bull reads `code < 0`: 0, or -1, -2,
/// -3, -6 as `move_to_delayed`.
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/retryJob-7.lua")]
pub fn retry_job(
    #[key] active: &str,
    #[key] wait: &str,
    #[key] job: &str,
    #[key] meta_paused: &str,
    #[key] paused: &str,
    #[key] stalled: &str,
    #[key] priority: &str,
    push: &str,
    job_id: &str,
    token: &str,
) -> i64;

/// Moves a batch of failed jobs back to wait. bull loops `while (cursor)`: 1 while there
/// may be more, 0 when done.
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/retryJobs-5.lua")]
pub fn retry_jobs(
    #[key] base: &str,
    #[key] failed: &str,
    #[key] wait: &str,
    #[key] meta_paused: &str,
    #[key] paused: &str,
    count: &str,
) -> i64;

/// Saves a failed attempt's stack trace and reason. bull reads a code: 0, or -1 when the
/// job is missing.
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/saveStacktrace-1.lua")]
pub fn save_stacktrace(
    #[key] job: &str,
    stacktrace: &str,
    failed_reason: &str,
    attempts_made: &str,
) -> i64;

/// Takes a job's lock if it is free. bull reads `lock || false`: 1 when taken, 0 when not.
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/takeLock-1.lua")]
pub fn take_lock(#[key] lock: &str, token: &str, duration: &str) -> bool;

/// Replaces a job's data. bull reads `code < 0`: 0, or -1 when the job is missing.
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/updateData-1.lua")]
pub fn update_data(#[key] job: &str, data: &str) -> i64;

/// Moves the delayed jobs that are due to wait, and reads the next one's time. bull reads
/// `nextTimestamp ? nextTimestamp / 4096 : ...`: the next delayed job's score (`ZRANGE
/// ... WITHSCORES`' second element, text that JavaScript's `/` reads as a number), or nil
/// when none is delayed.
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/updateDelaySet-6.lua")]
pub fn update_delay_set(
    #[key] delayed: &str,
    #[key] active: &str,
    #[key] wait: &str,
    #[key] priority: &str,
    #[key] paused: &str,
    #[key] meta_paused: &str,
    prefix: &str,
    delayed_timestamp: &str,
    token: &str,
) -> Option<f64>;

/// Sets a job's progress. bull reads `code < 0`: 0, or -1 when the job is missing.
#[lock_script("../../target/corpus/bull-4.16.5/package/lib/commands/updateProgress-2.lua")]
pub fn update_progress(
    #[key] job: &str,
    #[key] progress_event: &str,
    progress: &str,
    event_data: &str,
) -> i64;
