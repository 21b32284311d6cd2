//! bull's scripts (bull 4.16.5, `lib/commands`) in [`bull`] and BullMQ's (5.61.0) in
//! [`bullmq`], every one unchanged and declared with the type its own callers read. Each
//! `--- @include`s shared files, which `#[lock_script]` expands at build time.
#![forbid(unsafe_code)]

pub mod bull;
pub mod bullmq;
