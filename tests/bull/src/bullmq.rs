//! Every one of BullMQ's 49 scripts (BullMQ 5.61.0, `dist/cjs/commands`), unchanged, each
//! declared with the Rust type that reads what BullMQ's own callers (`dist/cjs/classes/
//! scripts.js` and its users) take from it: `#[lock_script]` checks each declaration
//! against every `return` of the script and the files it `--- @include`s, and none is
//! refused.
//!
//! BullMQ's callers send what its file names say: `name-N.lua` takes N keys. A reply
//! that is one thing or another (a negative error code or a tuple) is `redis::Value`, as
//! Rust has no union of the two; an array whose length varies by path (`{nil, nil}` is an
//! empty array) is a `Vec`, which reads any length, where a tuple needs exactly its own.

// BullMQ's scripts take up to 14 keys and 9 arguments, each a parameter.
#![allow(clippy::too_many_arguments)]

use lockscript::lock_script;

/// Adds a delayed job. BullMQ reads `string | number`: the new job's id, or a negative
/// error code (-5: the parent is missing), which `String` reads as its digits.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/addDelayedJob-6.lua")]
pub fn add_delayed_job(
    #[key] marker: &str,
    #[key] meta: &str,
    #[key] id: &str,
    #[key] delayed: &str,
    #[key] completed: &str,
    #[key] events: &str,
    args: &[u8],
    data: &str,
    opts: &[u8],
) -> String;

/// Adds or updates a job scheduler and its next job. BullMQ reads `[string, number]` (the
/// job's id, its delay) or a negative error code: a union, so `redis::Value`.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/addJobScheduler-11.lua")]
pub fn add_job_scheduler(
    #[key] repeat: &str,
    #[key] delayed: &str,
    #[key] wait: &str,
    #[key] paused: &str,
    #[key] meta: &str,
    #[key] prioritized: &str,
    #[key] marker: &str,
    #[key] id: &str,
    #[key] events: &str,
    #[key] pc: &str,
    #[key] active: &str,
    next_milliseconds: &str,
    opts: &[u8],
    job_scheduler_id: &str,
    template_data: &str,
    template_opts: &[u8],
    delayed_opts: &[u8],
    timestamp: &str,
    prefix: &str,
    producer: &str,
) -> redis::Value;

/// Adds a line to a job's log. BullMQ reads a number: the log's length (a Lua number from
/// `math.min`, a whole number), or -1 when the job is missing.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/addLog-2.lua")]
pub fn add_log(
    #[key] job_id: &str,
    #[key] job_logs: &str,
    id: &str,
    log: &str,
    keep_logs: &str,
) -> i64;

/// Adds a job that waits for its children. As `add_delayed_job`: `String`.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/addParentJob-5.lua")]
pub fn add_parent_job(
    #[key] meta: &str,
    #[key] id: &str,
    #[key] delayed: &str,
    #[key] completed: &str,
    #[key] events: &str,
    args: &[u8],
    data: &str,
    opts: &[u8],
) -> String;

/// Adds a job with a priority. As `add_delayed_job`: `String`.
#[lock_script(
    "../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/addPrioritizedJob-9.lua"
)]
pub fn add_prioritized_job(
    #[key] marker: &str,
    #[key] meta: &str,
    #[key] id: &str,
    #[key] prioritized: &str,
    #[key] delayed: &str,
    #[key] completed: &str,
    #[key] active: &str,
    #[key] events: &str,
    #[key] pc: &str,
    args: &[u8],
    data: &str,
    opts: &[u8],
) -> String;

/// Adds a repeatable job (the legacy API). BullMQ reads `string`: the repeat key.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/addRepeatableJob-2.lua")]
pub fn add_repeatable_job(
    #[key] repeat: &str,
    #[key] delayed: &str,
    next_milliseconds: &str,
    opts: &[u8],
    legacy_custom_key: &str,
    custom_key: &str,
    prefix: &str,
) -> String;

/// Adds a job to the wait list. As `add_delayed_job`: `String`.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/addStandardJob-9.lua")]
pub fn add_standard_job(
    #[key] wait: &str,
    #[key] paused: &str,
    #[key] meta: &str,
    #[key] id: &str,
    #[key] completed: &str,
    #[key] delayed: &str,
    #[key] active: &str,
    #[key] events: &str,
    #[key] marker: &str,
    args: &[u8],
    data: &str,
    opts: &[u8],
) -> String;

/// Changes a delayed job's delay. BullMQ reads a number: 0, or a negative error code.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/changeDelay-4.lua")]
pub fn change_delay(
    #[key] delayed: &str,
    #[key] meta: &str,
    #[key] marker: &str,
    #[key] events: &str,
    delay: &str,
    timestamp: &str,
    job_id: &str,
    job_key: &str,
) -> i64;

/// Changes a job's priority. BullMQ reads a number: 0, or a negative error code.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/changePriority-7.lua")]
pub fn change_priority(
    #[key] wait: &str,
    #[key] paused: &str,
    #[key] meta: &str,
    #[key] prioritized: &str,
    #[key] active: &str,
    #[key] pc: &str,
    #[key] marker: &str,
    priority_value: &str,
    prefix: &str,
    job_id: &str,
    lifo: &str,
) -> i64;

/// Removes jobs older than a timestamp from one state. BullMQ reads `string[]`: the ids
/// removed.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/cleanJobsInSet-3.lua")]
pub fn clean_jobs_in_set(
    #[key] set: &str,
    #[key] events: &str,
    #[key] repeat: &str,
    job_prefix: &str,
    timestamp: &str,
    limit: &str,
    set_name: &str,
) -> Vec<String>;

/// Removes every waiting (and optionally delayed) job. BullMQ ignores the reply (nil).
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/drain-5.lua")]
pub fn drain(
    #[key] wait: &str,
    #[key] paused: &str,
    #[key] delayed: &str,
    #[key] prioritized: &str,
    #[key] repeat: &str,
    queue_prefix: &str,
    clean_delayed: &str,
);

/// Extends a job's lock. BullMQ reads a number: 1 when extended, 0 when not.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/extendLock-2.lua")]
pub fn extend_lock(
    #[key] lock: &str,
    #[key] stalled: &str,
    token: &str,
    lock_duration: &str,
    job_id: &str,
) -> i64;

/// Extends several jobs' locks. BullMQ reads `string[]`: the ids it could not extend.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/extendLocks-1.lua")]
pub fn extend_locks(
    #[key] stalled: &str,
    base: &str,
    tokens: &[u8],
    job_ids: &[u8],
    lock_duration: &str,
) -> Vec<String>;

/// Counts the jobs in each state named. BullMQ reads `number[]`.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/getCounts-1.lua")]
pub fn get_counts(#[key] prefix: &str, types: &[&str]) -> Vec<i64>;

/// Counts the jobs of each priority named. BullMQ reads `number[]`.
#[lock_script(
    "../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/getCountsPerPriority-4.lua"
)]
pub fn get_counts_per_priority(
    #[key] wait: &str,
    #[key] paused: &str,
    #[key] meta: &str,
    #[key] prioritized: &str,
    priorities: &[&str],
) -> Vec<i64>;

/// Counts a job's children in each kind named. BullMQ reads `number[]`.
#[lock_script(
    "../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/getDependencyCounts-4.lua"
)]
pub fn get_dependency_counts(
    #[key] processed: &str,
    #[key] unprocessed: &str,
    #[key] ignored: &str,
    #[key] failed: &str,
    types: &[&str],
) -> Vec<i64>;

/// Reads a job scheduler. BullMQ reads `[any, string | null]`: its fields (`HGETALL`) and
/// its next time, or `{nil, nil}` (an empty array) when there is none; an array of 0 or 2
/// elements, which only a `Vec` reads.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/getJobScheduler-1.lua")]
pub fn get_job_scheduler(#[key] repeat: &str, id: &str) -> Vec<redis::Value>;

/// Reads a state's metrics. BullMQ reads `[string[], string[], number]`; the first is
/// `HMGET` of fields that may be missing (BullMQ's own caller reads `meta[0] || '0'`).
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/getMetrics-2.lua")]
pub fn get_metrics(
    #[key] metrics: &str,
    #[key] metrics_data: &str,
    start_index: &str,
    end_index: &str,
) -> (Vec<Option<String>>, Vec<String>, i64);

/// Lists the job ids of each state named. BullMQ reads `[string][]`: one list per state.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/getRanges-1.lua")]
pub fn get_ranges(
    #[key] prefix: &str,
    start: &str,
    end: &str,
    asc: &str,
    types: &[&str],
) -> Vec<Vec<String>>;

/// Reads the rate limiter's time to live. BullMQ reads a number (milliseconds).
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/getRateLimitTtl-2.lua")]
pub fn get_rate_limit_ttl(#[key] limiter: &str, #[key] meta: &str, max_jobs: &str) -> i64;

/// Finds which state a job is in (servers before 6.0.6). BullMQ reads `string`.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/getState-8.lua")]
pub fn get_state(
    #[key] completed: &str,
    #[key] failed: &str,
    #[key] delayed: &str,
    #[key] active: &str,
    #[key] wait: &str,
    #[key] paused: &str,
    #[key] waiting_children: &str,
    #[key] prioritized: &str,
    job_id: &str,
) -> String;

/// Finds which state a job is in (`LPOS`). BullMQ reads `string`.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/getStateV2-8.lua")]
pub fn get_state_v2(
    #[key] completed: &str,
    #[key] failed: &str,
    #[key] delayed: &str,
    #[key] active: &str,
    #[key] wait: &str,
    #[key] paused: &str,
    #[key] waiting_children: &str,
    #[key] prioritized: &str,
    job_id: &str,
) -> String;

/// Says whether a job finished. BullMQ reads `number | [number, string]`: the code alone,
/// or with the return value or reason when asked: a union, so `redis::Value`.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/isFinished-3.lua")]
pub fn is_finished(
    #[key] completed: &str,
    #[key] failed: &str,
    #[key] job_key: &str,
    job_id: &str,
    return_value: &str,
) -> redis::Value;

/// Finds a job in a list (servers before 6.0.6). BullMQ reads `Number.isInteger(result)`:
/// the index, or nil.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/isJobInList-1.lua")]
pub fn is_job_in_list(#[key] list: &str, job_id: &str) -> Option<i64>;

/// Says whether the queue is at its concurrency limit. BullMQ reads `!!result`.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/isMaxed-2.lua")]
pub fn is_maxed(#[key] meta: &str, #[key] active: &str) -> bool;

/// Moves an active job back to wait (manual rate limiting). BullMQ reads a number: the
/// limiter's time to live, or a negative error code.
#[lock_script(
    "../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/moveJobFromActiveToWait-9.lua"
)]
pub fn move_job_from_active_to_wait(
    #[key] active: &str,
    #[key] wait: &str,
    #[key] stalled: &str,
    #[key] paused: &str,
    #[key] meta: &str,
    #[key] limiter: &str,
    #[key] prioritized: &str,
    #[key] marker: &str,
    #[key] event: &str,
    job_id: &str,
    lock_token: &str,
    job_key: &str,
) -> i64;

/// Moves up to `count` failed, completed or delayed jobs to wait. BullMQ reads a number: 1
/// when jobs are left to move, 0 when done.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/moveJobsToWait-8.lua")]
pub fn move_jobs_to_wait(
    #[key] base: &str,
    #[key] events: &str,
    #[key] state: &str,
    #[key] wait: &str,
    #[key] paused: &str,
    #[key] meta: &str,
    #[key] active: &str,
    #[key] marker: &str,
    count: &str,
    timestamp: &str,
    prev_state: &str,
) -> i64;

/// Moves stalled jobs back to wait (or fails them). BullMQ reads `string[]`: the ids.
#[lock_script(
    "../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/moveStalledJobsToWait-8.lua"
)]
pub fn move_stalled_jobs_to_wait(
    #[key] stalled: &str,
    #[key] wait: &str,
    #[key] active: &str,
    #[key] stalled_check: &str,
    #[key] meta: &str,
    #[key] paused: &str,
    #[key] marker: &str,
    #[key] events: &str,
    max_stalled_count: &str,
    prefix: &str,
    timestamp: &str,
    max_check_time: &str,
) -> Vec<String>;

/// Takes the next job. BullMQ reads `[job fields | 0, id | 0, rate limit delay, next delayed
/// time]`: a tuple whose first member is the job's `HGETALL` or 0, so `redis::Value` there.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/moveToActive-11.lua")]
pub fn move_to_active(
    #[key] wait: &str,
    #[key] active: &str,
    #[key] prioritized: &str,
    #[key] events: &str,
    #[key] stalled: &str,
    #[key] rate_limiter: &str,
    #[key] delayed: &str,
    #[key] paused: &str,
    #[key] meta: &str,
    #[key] pc: &str,
    #[key] marker: &str,
    prefix: &str,
    timestamp: &str,
    opts: &[u8],
) -> (redis::Value, String, i64, i64);

/// Moves an active job to delayed. BullMQ reads a number: 0, or a negative error code.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/moveToDelayed-8.lua")]
pub fn move_to_delayed(
    #[key] marker: &str,
    #[key] active: &str,
    #[key] prioritized: &str,
    #[key] delayed: &str,
    #[key] job_key: &str,
    #[key] events: &str,
    #[key] meta: &str,
    #[key] stalled: &str,
    prefix: &str,
    timestamp: &str,
    job_id: &str,
    token: &str,
    delay_value: &str,
    skip_attempt: &str,
    fields_to_update: &[u8],
) -> i64;

/// Completes or fails a job, and takes the next one when asked. BullMQ reads a negative
/// error code, 0, or the next job as `move_to_active` replies it: a union, so `redis::Value`.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/moveToFinished-14.lua")]
pub fn move_to_finished(
    #[key] wait: &str,
    #[key] active: &str,
    #[key] prioritized: &str,
    #[key] events: &str,
    #[key] stalled: &str,
    #[key] rate_limiter: &str,
    #[key] delayed: &str,
    #[key] paused: &str,
    #[key] meta: &str,
    #[key] pc: &str,
    #[key] finished: &str,
    #[key] job_key: &str,
    #[key] metrics: &str,
    #[key] marker: &str,
    job_id: &str,
    timestamp: &str,
    property: &str,
    value: &str,
    target: &str,
    fetch_next: &str,
    keys_prefix: &str,
    opts: &[u8],
    fields_to_update: &[u8],
) -> redis::Value;

/// Moves an active job to waiting-children. BullMQ reads a number: 0 moved, 1 no pending
/// children, or a negative error code.
#[lock_script(
    "../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/moveToWaitingChildren-7.lua"
)]
pub fn move_to_waiting_children(
    #[key] active: &str,
    #[key] wait_children: &str,
    #[key] job_key: &str,
    #[key] job_dependencies: &str,
    #[key] job_unsuccessful: &str,
    #[key] stalled: &str,
    #[key] events: &str,
    token: &str,
    child: &str,
    timestamp: &str,
    job_id: &str,
) -> i64;

/// Removes the whole queue, `count` jobs at a time. BullMQ reads a number: 0 done, 1 more
/// to remove, or a negative error code.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/obliterate-2.lua")]
pub fn obliterate(#[key] meta: &str, #[key] base: &str, count: &str, force: &str) -> i64;

/// Pages through a set or a hash. BullMQ reads `[cursor, offset, items, total, jobs?]`:
/// four elements for a missing key, five otherwise, of mixed types: a `Vec` of values.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/paginate-1.lua")]
pub fn paginate(
    #[key] key: &str,
    start: &str,
    end: &str,
    cursor: &str,
    offset: &str,
    max_iterations: &str,
    fetch_jobs: &str,
) -> Vec<redis::Value>;

/// Pauses or resumes the queue. BullMQ ignores the reply (nil).
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/pause-7.lua")]
pub fn pause(
    #[key] from: &str,
    #[key] to: &str,
    #[key] meta: &str,
    #[key] prioritized: &str,
    #[key] events: &str,
    #[key] delayed: &str,
    #[key] marker: &str,
    event: &str,
);

/// Moves a delayed job to wait. BullMQ reads a number: 0, or a negative error code.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/promote-9.lua")]
pub fn promote(
    #[key] delayed: &str,
    #[key] wait: &str,
    #[key] paused: &str,
    #[key] meta: &str,
    #[key] prioritized: &str,
    #[key] active: &str,
    #[key] pc: &str,
    #[key] events: &str,
    #[key] marker: &str,
    prefix: &str,
    job_id: &str,
) -> i64;

/// Releases a job's lock (kept for older callers). Replies 1 when released, 0 when not.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/releaseLock-1.lua")]
pub fn release_lock(#[key] lock: &str, token: &str) -> i64;

/// Removes a child from its parent's dependencies. BullMQ reads a number: 0 removed, 1
/// not a dependency, or a negative error code.
#[lock_script(
    "../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/removeChildDependency-1.lua"
)]
pub fn remove_child_dependency(#[key] prefix: &str, job_key: &str, parent: &str) -> i64;

/// Removes a job (and its children when asked). BullMQ reads a number: 1 removed, 0
/// missing, or a negative error code.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/removeJob-2.lua")]
pub fn remove_job(
    #[key] job_key: &str,
    #[key] repeat: &str,
    job_id: &str,
    remove_children: &str,
    queue_prefix: &str,
) -> i64;

/// Removes a job scheduler. BullMQ reads a number: 0 removed, 1 missing.
#[lock_script(
    "../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/removeJobScheduler-3.lua"
)]
pub fn remove_job_scheduler(
    #[key] repeat: &str,
    #[key] delayed: &str,
    #[key] events: &str,
    job_scheduler_id: &str,
    prefix: &str,
) -> i64;

/// Removes a repeatable job (the legacy API). BullMQ reads a number: 0 removed, 1 missing.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/removeRepeatable-3.lua")]
pub fn remove_repeatable(
    #[key] repeat: &str,
    #[key] delayed: &str,
    #[key] events: &str,
    legacy_repeat_job_id: &str,
    repeat_concat_options: &str,
    repeat_job: &str,
    prefix: &str,
) -> i64;

/// Removes a job's children that have not run. BullMQ ignores the reply (nil).
#[lock_script(
    "../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/removeUnprocessedChildren-2.lua"
)]
pub fn remove_unprocessed_children(
    #[key] job_key: &str,
    #[key] meta: &str,
    prefix: &str,
    job_id: &str,
);

/// Moves a finished job back to wait. BullMQ reads a number: 1, or a negative error code.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/reprocessJob-8.lua")]
pub fn reprocess_job(
    #[key] job_key: &str,
    #[key] events: &str,
    #[key] job_state: &str,
    #[key] wait: &str,
    #[key] meta: &str,
    #[key] paused: &str,
    #[key] active: &str,
    #[key] marker: &str,
    job_id: &str,
    push_cmd: &[u8],
    property: &str,
    prev_state: &str,
) -> i64;

/// Moves an active job back to wait to retry it. BullMQ reads a number: 0, or a negative
/// error code.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/retryJob-11.lua")]
pub fn retry_job(
    #[key] active: &str,
    #[key] wait: &str,
    #[key] paused: &str,
    #[key] job_key: &str,
    #[key] meta: &str,
    #[key] events: &str,
    #[key] delayed: &str,
    #[key] prioritized: &str,
    #[key] pc: &str,
    #[key] marker: &str,
    #[key] stalled: &str,
    prefix: &str,
    timestamp: &str,
    push_cmd: &str,
    job_id: &str,
    token: &str,
    fields_to_update: &[u8],
) -> i64;

/// Saves a job's stack trace (kept for older callers). Replies 0, or -1 when the job is
/// missing.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/saveStacktrace-1.lua")]
pub fn save_stacktrace(#[key] job_key: &str, stacktrace: &str, failed_reason: &str) -> i64;

/// Replaces a job's data. BullMQ reads a number: 0, or a negative error code.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/updateData-1.lua")]
pub fn update_data(#[key] job_id: &str, data: &str) -> i64;

/// Schedules a job scheduler's next job. BullMQ reads `string | null`: the next job's id,
/// or nil when it already exists.
#[lock_script(
    "../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/updateJobScheduler-12.lua"
)]
pub fn update_job_scheduler(
    #[key] repeat: &str,
    #[key] delayed: &str,
    #[key] wait: &str,
    #[key] paused: &str,
    #[key] meta: &str,
    #[key] prioritized: &str,
    #[key] marker: &str,
    #[key] id: &str,
    #[key] events: &str,
    #[key] pc: &str,
    #[key] producer: &str,
    #[key] active: &str,
    next_milliseconds: &str,
    job_scheduler_id: &str,
    template_data: &str,
    delayed_opts: &[u8],
    timestamp: &str,
    prefix: &str,
    producer_id: &str,
) -> Option<String>;

/// Updates a job's progress. BullMQ reads a number: 0, or a negative error code.
#[lock_script("../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/updateProgress-3.lua")]
pub fn update_progress(
    #[key] job_id: &str,
    #[key] events: &str,
    #[key] meta: &str,
    id: &str,
    progress: &str,
) -> i64;

/// Moves a repeatable job's next time (the legacy API). BullMQ reads `string`: the repeat
/// key, or `''` when there is none.
#[lock_script(
    "../../target/corpus/bullmq-5.61.0/package/dist/cjs/commands/updateRepeatableJobMillis-1.lua"
)]
pub fn update_repeatable_job_millis(
    #[key] repeat: &str,
    next_milliseconds: &str,
    custom_key: &str,
    legacy_custom_key: &str,
) -> String;
