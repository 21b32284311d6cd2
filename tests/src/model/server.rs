//! The model's Redis: one lock name's keys with their TTLs on the server's clock, each
//! script the lock protocol sends run as one atomic step, and a restart that loses the
//! data.
//!
//! The steps are the scripts' meaning, written from `scripts/*.lua` (and the native
//! `SET … IFEQ` / `DELIFEQ`, which mean the same): acquire-with-retry.lua (`SET NX PX`,
//! the fencing counter raised or restarted from the server's clock), renew.lua
//! (`PEXPIRE` only while the key holds the caller's token) and compare-del.lua.
//!
//! **Time passes on the server during a step.** The fencing counter restarts from the
//! server's clock in microseconds, and acquire-with-retry.lua relies on the counter
//! never running ahead of that clock, since a grant takes the server more than a
//! microsecond. The model's clock moves in ticks, and several grants may run in one
//! tick; so each grant runs at its own microsecond, one past the last step's at least.
//!
//! **Checked against the scripts.** A property test below runs random steps here and
//! the scripts themselves on the model's Redis ([`super::store`], itself checked against
//! a real one), and compares every answer. One difference is chosen: a key here is gone
//! at its expiry instant, a millisecond before Redis lets it go (Redis keeps it while
//! the clock reads at most its expiry, `PTTL` 0); at the model's 100 ms ticks an instant
//! stands for the moment after it too, and a key gone is the adversarial side for
//! exclusion. The test's store takes keys the same way.

use std::hash::{Hash, Hasher};

use lockscript::__private::model::Transacted;

/// What a step answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    /// acquire-with-retry.lua: `{1, fence}` or `{0, pttl}`, and the server's epoch (how
    /// many restarts without data it had been through) when it ran.
    Acquire(i64, i64, u32),
    /// renew.lua, compare-del.lua (or `SET … IFEQ`, `DELIFEQ`): whether the key held the
    /// caller's token.
    Done(bool),
    /// `TIME`, in microseconds.
    Time(u64),
    /// The acquire transaction's `EXEC` (see [`Server::transact`]), and the server's
    /// epoch when it ran.
    Transacted(Transacted, u32),
    /// raise-fence.lua: the counter afterwards.
    Raised(u64),
    /// A native command the server does not have (`ERR unknown command`, `ERR syntax
    /// error`): nothing ran.
    Unknown,
    /// `COMMAND DOCS`: whether it documents `SET … IFEQ` and `DELIFEQ`.
    Docs(bool),
    /// The user's ACL refuses the command (in a script, the command inside it that it
    /// refuses): nothing ran.
    NoPerm,
    /// `DELIFEQ`'s answer, and the `PUBLISH` beside it refused by the user's ACL.
    Unnotified(bool),
}

/// What the lock user's ACL refuses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Denied {
    /// Nothing the lock sends.
    #[default]
    Nothing,
    /// `SET … IFEQ` and `DELIFEQ`, which `COMMAND DOCS` still documents (the ACL was
    /// written before the commands were used).
    Native,
    /// `PUBLISH` on the release channel (`resetchannels`, the default for new users
    /// since Redis 7): a native release's notification is refused, and compare-del.lua
    /// fails at its `PUBLISH` before it deletes.
    Publish,
}

/// A key and when it expires, in milliseconds of the server's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Expiring<T> {
    value: T,
    until_ms: u64,
}

/// A fencing counter that went down or repeated: the grant order's rule broken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FenceFault {
    /// The highest fence granted before.
    pub before: u64,
    /// The fence this grant got.
    pub granted: u64,
}

/// The server's state.
#[derive(Clone, Debug, Default)]
pub struct Server {
    /// `lock:{name}`: the holder's owner token.
    lock: Option<Expiring<String>>,
    /// `lock:{name}:fence`.
    fence: Option<Expiring<u64>>,
    /// The microsecond the last step ran at.
    step_us: u64,
    /// Restarts without data so far.
    pub epoch: u32,
    /// The highest fence granted so far (on this name, across restarts).
    highest: u64,
    /// The first grant whose fence was not above every earlier one.
    pub fence_fault: Option<FenceFault>,
    /// The first counter restarted more than 2 ms ahead of the server's clock (where it
    /// started, and the clock), the clock not having stepped back: 1 ms is the margin the
    /// transaction starts ahead by, and up to 1 ms more the microseconds this server
    /// counts within a tick (one per step, back to the tick's at the next). Tokens rise
    /// across restarts because a counter never runs ahead of the clock it restarts from;
    /// one that does, a later restart (after it idles out, or a restart without the
    /// data) would repeat. Checked with the fences, in the same short histories.
    pub counter_ahead: Option<(u64, u64)>,
    /// The clock stepped back: a counter may then be ahead of it within the promise.
    stepped_back: bool,
    /// It has `SET … IFEQ` and `DELIFEQ` (Valkey 9); else a native command answers
    /// `ERR unknown command` (Redis 7.0).
    pub offers: bool,
    /// What the lock user's ACL refuses.
    pub denied: Denied,
}

impl Server {
    /// The holder's token at `now_ms`, if the key is there.
    pub fn holder(&self, now_ms: u64) -> Option<&str> {
        self.lock
            .as_ref()
            .filter(|k| now_ms < k.until_ms)
            .map(|k| k.value.as_str())
    }

    /// Keys whose TTL has passed at `now_ms` are gone (the server's own expiry; every
    /// step also checks the TTL itself, so this only keeps equal states equal).
    pub fn expire(&mut self, now_ms: u64) {
        if self.lock.as_ref().is_some_and(|k| now_ms >= k.until_ms) {
            self.lock = None;
        }
        if self.fence.as_ref().is_some_and(|k| now_ms >= k.until_ms) {
            self.fence = None;
        }
    }

    /// acquire-with-retry.lua for `token`: a lease of `ttl_ms`, the counter kept
    /// `fence_ms` past the grant. `restart_from_one` plants a defect in the model server
    /// (a counter that restarts from 1, not from the clock), for the fence check's test.
    pub fn acquire(
        &mut self,
        token: &str,
        ttl_ms: u64,
        fence_ms: u64,
        now_ms: u64,
        restart_from_one: bool,
    ) -> Answer {
        self.expire(now_ms);
        if let Some(held) = &self.lock {
            let pttl = i64::try_from(held.until_ms - now_ms).unwrap_or(i64::MAX);
            return Answer::Acquire(0, pttl, self.epoch);
        }
        self.lock = Some(Expiring {
            value: token.to_owned(),
            until_ms: now_ms + ttl_ms,
        });
        let clock_us = self.tick_us(now_ms);
        let fence = match &self.fence {
            Some(counter) => counter.value + 1,
            None if restart_from_one => 1,
            None => clock_us,
        };
        self.fence = Some(Expiring {
            value: fence,
            until_ms: now_ms + fence_ms,
        });
        self.granted(fence);
        Answer::Acquire(1, i64::try_from(fence).unwrap_or(i64::MAX), self.epoch)
    }

    /// The microsecond a step at `now_ms` runs at: one past the last step's at least.
    fn tick_us(&mut self, now_ms: u64) -> u64 {
        self.step_us = (now_ms * 1_000).max(self.step_us + 1);
        self.step_us
    }

    /// The server's wall clock stepped (`back` or ahead) and now reads `now_ms`: `TIME`
    /// follows it from here (a step back included), one microsecond past the last step's
    /// within one millisecond as before.
    pub fn stepped(&mut self, now_ms: u64, back: bool) {
        self.stepped_back |= back;
        self.step_us = (now_ms * 1_000).saturating_sub(1);
    }

    /// The microsecond the last step ran at (its `TIME`, and a counter it restarted).
    pub fn clock_us(&self) -> u64 {
        self.step_us
    }

    /// `TIME` at `now_ms`.
    pub fn time(&mut self, now_ms: u64) -> Answer {
        Answer::Time(self.tick_us(now_ms))
    }

    /// A grant's fence is known: the rule that fences rise in grant order is checked.
    fn granted(&mut self, fence: u64) {
        if fence <= self.highest && self.fence_fault.is_none() {
            self.fence_fault = Some(FenceFault {
                before: self.highest,
                granted: fence,
            });
        }
        self.highest = self.highest.max(fence);
    }

    /// The acquire transaction for `token` (`MULTI`: `SET lock token NX PX ttl_ms`,
    /// `SET fence start_us NX PX fence_ms`, `INCR fence`, `PEXPIRE fence fence_ms`,
    /// `PTTL lock`, `EXISTS holders`, `TIME`; `EXEC`), every command run whatever the
    /// first answered. A grant's fence is checked here unless the client raises it
    /// first (it restarted the counter at a value the server's clock has passed: then
    /// in [`raise`](Self::raise)). `restart_from_one` plants the counter that restarts
    /// from 1.
    pub fn transact(
        &mut self,
        token: &str,
        ttl_ms: u64,
        fence_ms: u64,
        start_us: u64,
        now_ms: u64,
        restart_from_one: bool,
    ) -> Answer {
        self.expire(now_ms);
        let time_us = self.tick_us(now_ms);
        let granted = self.lock.is_none();
        if granted {
            self.lock = Some(Expiring {
                value: token.to_owned(),
                until_ms: now_ms + ttl_ms,
            });
        }
        let started = self.fence.is_none();
        let value = match &self.fence {
            Some(counter) => counter.value + 1,
            None if restart_from_one => 1,
            None => start_us + 1,
        };
        self.fence = Some(Expiring {
            value,
            until_ms: now_ms + fence_ms,
        });
        let pttl = (self.lock.as_ref()).map_or(-2, |k| {
            i64::try_from(k.until_ms.saturating_sub(now_ms)).unwrap_or(i64::MAX)
        });
        if granted && !(started && time_us >= start_us) {
            self.granted(value);
        }
        if started && value > time_us + 2_000 && !self.stepped_back && self.counter_ahead.is_none()
        {
            self.counter_ahead = Some((value, time_us));
        }
        Answer::Transacted(
            Transacted {
                granted,
                started,
                fence: value,
                pttl,
                time_us,
            },
            self.epoch,
        )
    }

    /// raise-fence.lua: the counter raised to at least `floor`, kept `fence_ms` from now;
    /// its value afterwards is the fence of the grant that asked (see
    /// [`transact`](Self::transact)).
    pub fn raise(&mut self, floor: u64, fence_ms: u64, now_ms: u64) -> Answer {
        self.expire(now_ms);
        self.tick_us(now_ms);
        let value = self.fence.as_ref().map_or(floor, |c| c.value.max(floor));
        self.fence = Some(Expiring {
            value,
            until_ms: now_ms + fence_ms,
        });
        self.granted(value);
        Answer::Raised(value)
    }

    /// renew.lua for `token`: a lease of `ttl_ms` from now, only if the key is ours.
    pub fn renew(&mut self, token: &str, ttl_ms: u64, now_ms: u64) -> Answer {
        self.expire(now_ms);
        match &mut self.lock {
            Some(held) if held.value == token => {
                held.until_ms = now_ms + ttl_ms;
                Answer::Done(true)
            }
            _ => Answer::Done(false),
        }
    }

    /// `SET key token IFEQ token PX ttl` (`native`) or renew.lua: see
    /// [`renew`](Self::renew); a server without the command runs nothing.
    pub fn renew_as(&mut self, token: &str, ttl_ms: u64, now_ms: u64, native: bool) -> Answer {
        if let Some(refused) = self.refusal(native) {
            return refused;
        }
        self.renew(token, ttl_ms, now_ms)
    }

    /// How a native command (`native`) is refused, if it is: unknown to an older server,
    /// or denied by the user's ACL.
    fn refusal(&self, native: bool) -> Option<Answer> {
        if !native {
            None
        } else if !self.offers {
            Some(Answer::Unknown)
        } else if self.denied == Denied::Native {
            Some(Answer::NoPerm)
        } else {
            None
        }
    }

    /// `DELIFEQ key token` (`native`) or compare-del.lua: see [`delete`](Self::delete); a
    /// server without the command runs nothing.
    pub fn delete_as(&mut self, token: &str, now_ms: u64, native: bool) -> Answer {
        let publish_denied = self.denied == Denied::Publish;
        if !native {
            // compare-del.lua publishes before it deletes, and only a key that is ours.
            if publish_denied && self.holder(now_ms) == Some(token) {
                return Answer::NoPerm;
            }
            return self.delete(token, now_ms);
        }
        if let Some(refused) = self.refusal(native) {
            return refused;
        }
        match self.delete(token, now_ms) {
            Answer::Done(done) if publish_denied => Answer::Unnotified(done),
            answer => answer,
        }
    }

    /// The server replaced by an older one with the same data (a failover to a replica
    /// of an older version, a rolling downgrade): native commands are unknown from now.
    pub fn downgrade(&mut self) {
        self.offers = false;
    }

    /// compare-del.lua for `token`: the key deleted only if it is ours.
    pub fn delete(&mut self, token: &str, now_ms: u64) -> Answer {
        self.expire(now_ms);
        if self.lock.as_ref().is_some_and(|held| held.value == token) {
            self.lock = None;
            return Answer::Done(true);
        }
        Answer::Done(false)
    }

    /// A restart without persistence: every key is gone; the clock (the machine's, not
    /// the data) goes on.
    pub fn restart_empty(&mut self) {
        self.lock = None;
        self.fence = None;
        self.epoch += 1;
    }

    /// The state, tokens named by `name` (see [`super::world::World::digest`]).
    pub fn digest<'a>(&'a self, state: &mut impl Hasher, name: &mut impl FnMut(&'a str) -> u32) {
        let lock = self.lock.as_ref().map(|k| (name(&k.value), k.until_ms));
        let fence = self.fence.as_ref().map(|k| (k.value, k.until_ms));
        (lock, fence, self.step_us, self.epoch, self.highest).hash(state);
        (self.offers, self.denied).hash(state);
        self.fence_fault.map(|f| (f.before, f.granted)).hash(state);
        (self.counter_ahead, self.stepped_back).hash(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::store::{Reply, Store, builtin};
    use proptest::prelude::*;

    /// One step of both servers.
    #[derive(Clone, Debug)]
    enum Step {
        Advance(u64),
        Acquire(usize, u64),
        Transact(usize, u64, i64),
        Raise(i64),
        Renew(usize, u64),
        Delete(usize),
        Restart,
    }

    const TOKENS: [&str; 3] = ["a", "b", "c"];
    const FENCE_MS: u64 = 700;

    fn step() -> impl Strategy<Value = Step> {
        let ttl = prop_oneof![Just(100u64), Just(300), Just(600)];
        prop_oneof![
            3 => (0u64..400).prop_map(Step::Advance),
            3 => (0..3usize, ttl.clone()).prop_map(|(t, ttl)| Step::Acquire(t, ttl)),
            3 => (0..3usize, ttl.clone(), -3_000i64..3_000)
                .prop_map(|(t, ttl, ahead)| Step::Transact(t, ttl, ahead)),
            1 => (-3_000i64..3_000).prop_map(Step::Raise),
            2 => (0..3usize, ttl).prop_map(|(t, ttl)| Step::Renew(t, ttl)),
            2 => (0..3usize).prop_map(Step::Delete),
            1 => Just(Step::Restart),
        ]
    }

    fn int(reply: &Reply) -> i64 {
        match reply {
            Reply::Int(n) => *n,
            other => panic!("an integer: {other}"),
        }
    }

    fn ok(reply: &Reply) -> bool {
        matches!(reply, Reply::Status(s) if s == "OK")
    }

    fn cmd(words: &[&str]) -> Vec<Vec<u8>> {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    /// What the scripts (and the transaction's commands) answer on `store` for `step`,
    /// at `now_us`, written as this server's answers; `start_us` is [`given`].
    fn scripted(store: &mut Store, step: &Step, now_us: u64, start_us: u64) -> Option<Answer> {
        let (lock, fence, holders) = (
            b"lock:{m}".as_slice(),
            b"lock:{m}:fence".as_slice(),
            b"lock:{m}:holders".as_slice(),
        );
        let fence_ms = FENCE_MS.to_string();
        Some(match *step {
            Step::Acquire(t, ttl) => {
                let ttl = ttl.to_string();
                let reply = store.eval(
                    builtin("acquire-with-retry.lua").source(),
                    &[lock, fence, holders],
                    &[TOKENS[t].as_bytes(), ttl.as_bytes(), fence_ms.as_bytes()],
                    now_us,
                );
                let Reply::Array(items) = reply else {
                    panic!("{reply}")
                };
                Answer::Acquire(int(&items[0]), int(&items[1]), 0)
            }
            Step::Transact(t, ttl, _) => {
                let (ttl, start) = (ttl.to_string(), start_us.to_string());
                let lk = "lock:{m}";
                let fk = "lock:{m}:fence";
                let granted =
                    ok(&store.command(&cmd(&["SET", lk, TOKENS[t], "NX", "PX", &ttl]), now_us));
                let started =
                    ok(&store.command(&cmd(&["SET", fk, &start, "NX", "PX", &fence_ms]), now_us));
                let value = int(&store.command(&cmd(&["INCR", fk]), now_us));
                store.command(&cmd(&["PEXPIRE", fk, &fence_ms]), now_us);
                let pttl = int(&store.command(&cmd(&["PTTL", lk]), now_us));
                let Reply::Array(time) = store.command(&cmd(&["TIME"]), now_us) else {
                    panic!()
                };
                let part = |r: &Reply| match r {
                    Reply::Bulk(b) => String::from_utf8_lossy(b).parse::<u64>().unwrap(),
                    other => panic!("{other}"),
                };
                Answer::Transacted(
                    Transacted {
                        granted,
                        started,
                        fence: u64::try_from(value).unwrap(),
                        pttl,
                        time_us: part(&time[0]) * 1_000_000 + part(&time[1]),
                    },
                    0,
                )
            }
            Step::Raise(_) => {
                let floor = start_us.to_string();
                let reply = store.eval(
                    builtin("raise-fence.lua").source(),
                    &[fence],
                    &[floor.as_bytes(), fence_ms.as_bytes()],
                    now_us,
                );
                Answer::Raised(u64::try_from(int(&reply)).unwrap())
            }
            Step::Renew(t, ttl) => {
                let ttl = ttl.to_string();
                let reply = store.eval(
                    builtin("renew.lua").source(),
                    &[lock],
                    &[TOKENS[t].as_bytes(), ttl.as_bytes()],
                    now_us,
                );
                Answer::Done(int(&reply) == 1)
            }
            Step::Delete(t) => {
                let reply = store.eval(
                    builtin("compare-del.lua").source(),
                    &[lock],
                    &[TOKENS[t].as_bytes()],
                    now_us,
                );
                Answer::Done(int(&reply) == 1)
            }
            Step::Advance(_) | Step::Restart => return None,
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

        /// The hand-written steps answer what the scripts answer (run on the model's
        /// Redis), step by step: the grant, the holder's PTTL, the fence, a counter's
        /// restart from the clock, renewals and releases of owned and foreign tokens,
        /// the transaction's seven replies and the raise.
        #[test]
        fn the_steps_mean_what_the_scripts_do(steps in proptest::collection::vec(step(), 1..40)) {
            let mut server = Server::default();
            let mut store = Store::expiring_at_the_instant();
            let mut now_ms = 1_000u64;
            for (i, step) in steps.iter().enumerate() {
                let ours = match *step {
                    Step::Advance(ms) => {
                        now_ms += ms;
                        continue;
                    }
                    Step::Restart => {
                        server.restart_empty();
                        store = Store::expiring_at_the_instant();
                        continue;
                    }
                    Step::Acquire(t, ttl) => server.acquire(TOKENS[t], ttl, FENCE_MS, now_ms, false),
                    Step::Transact(t, ttl, _) => {
                        server.transact(TOKENS[t], ttl, FENCE_MS, given(step, now_ms), now_ms, false)
                    }
                    Step::Raise(_) => server.raise(given(step, now_ms), FENCE_MS, now_ms),
                    Step::Renew(t, ttl) => server.renew(TOKENS[t], ttl, now_ms),
                    Step::Delete(t) => server.delete(TOKENS[t], now_ms),
                };
                // The microsecond the step ran at (renewals and releases take none).
                let at = server.clock_us().max(now_ms * 1_000);
                let theirs = scripted(&mut store, step, at, given(step, now_ms));
                prop_assert_eq!(Some(strip(ours)), theirs, "step {}: {:?}", i, step);
            }
        }
    }

    /// The value a step hands the server beside its keys: the transaction's `<start>`,
    /// the raise's floor (the clock at `now_ms` moved by the step's `ahead`), else 0.
    fn given(step: &Step, now_ms: u64) -> u64 {
        match *step {
            Step::Transact(_, _, ahead) | Step::Raise(ahead) => {
                (now_ms * 1_000).saturating_add_signed(ahead)
            }
            _ => 0,
        }
    }

    /// An answer without the server's epoch (the store has none).
    fn strip(answer: Answer) -> Answer {
        match answer {
            Answer::Acquire(a, b, _) => Answer::Acquire(a, b, 0),
            Answer::Transacted(t, _) => Answer::Transacted(t, 0),
            other => other,
        }
    }

    #[test]
    fn a_grant_raises_the_counter_and_a_held_lock_answers_its_pttl() {
        let mut s = Server::default();
        let Answer::Acquire(1, first, 0) = s.acquire("a", 600, 700, 0, false) else {
            panic!("granted")
        };
        assert_eq!(
            first, 1,
            "the counter restarts from the clock (1 µs at time 0)"
        );
        assert_eq!(
            s.acquire("b", 600, 700, 100, false),
            Answer::Acquire(0, 500, 0)
        );
        assert_eq!(s.delete("b", 100), Answer::Done(false), "not b's");
        assert_eq!(s.renew("a", 600, 200), Answer::Done(true));
        assert_eq!(s.delete("a", 300), Answer::Done(true));
        assert_eq!(
            s.acquire("b", 600, 700, 300, false),
            Answer::Acquire(1, 2, 0)
        );
        assert!(s.fence_fault.is_none());
    }

    #[test]
    fn keys_expire_on_the_servers_clock_and_a_counter_restarts_above_every_fence() {
        let mut s = Server::default();
        s.acquire("a", 600, 700, 1_000, false);
        assert_eq!(s.holder(1_599), Some("a"));
        assert_eq!(s.holder(1_600), None);
        assert_eq!(s.renew("a", 600, 1_600), Answer::Done(false), "expired");
        // Grants in one tick each take a microsecond; a counter lost then restarts above.
        let mut fences = Vec::new();
        for (i, token) in ["b", "c", "d"].into_iter().enumerate() {
            s.restart_empty();
            let Answer::Acquire(1, fence, epoch) = s.acquire(token, 600, 700, 2_000, false) else {
                panic!("granted")
            };
            assert_eq!(epoch as usize, i + 1);
            fences.push(fence);
        }
        assert_eq!(fences, [2_000_000, 2_000_001, 2_000_002]);
        assert!(s.fence_fault.is_none());
        // A counter that restarts from 1 repeats: the fault is recorded.
        s.restart_empty();
        s.acquire("e", 600, 700, 2_000, true);
        assert_eq!(
            s.fence_fault,
            Some(FenceFault {
                before: 2_000_002,
                granted: 1
            })
        );
    }
}
