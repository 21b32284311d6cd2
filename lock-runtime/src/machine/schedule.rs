//! The watchdogs' deadline queue, as plain data: items ordered by when they are due,
//! and the time the driver (a tokio task or a thread) will look next.
//!
//! Granting or releasing a lock only inserts into or removes from the queue. The
//! driver is woken only when an item is due before the time it already planned to look
//! (`armed`), so back-to-back grants, each released long before its first renewal, cost
//! no wake-up at all.
//!
//! **A background release never delays a renewal** on a driver that makes one round
//! trip at a time (the blocking face's thread, see [`releases_at`]).

use std::collections::{BTreeMap, HashMap};
#[cfg(any(feature = "blocking", test))]
use std::time::Duration;
use std::time::Instant;

/// When background releases due at `now` go, on a driver that makes one round trip at a
/// time and also renews leases (the blocking face's thread): `None`, now, with the
/// renewals that go now (`renewing`: one round trip for all), or on their own if that
/// round trip, bounded by `bound` (its response timeout), ends before the next lease is
/// due to be looked at (`next_lease`); otherwise at that time, to go with its renewal.
/// Each release taking a round trip of its own ahead of a renewal (on a paused server,
/// a response timeout each) delayed the renewal, and the lease's suspicion, by seconds.
#[cfg(any(feature = "blocking", test))]
pub(crate) fn releases_at(
    now: Instant,
    bound: Duration,
    renewing: bool,
    next_lease: Option<Instant>,
) -> Option<Instant> {
    if renewing {
        return None;
    }
    next_lease.filter(|&at| at < now + bound)
}

/// Items of type `T`, each with an id, due at an instant.
pub(crate) struct Schedule<T> {
    due: BTreeMap<(Instant, u64), T>,
    /// When each queued id is due.
    at: HashMap<u64, Instant>,
    /// When the driver looks next at the latest; `None` while it sleeps until woken. It
    /// stays armed after its item leaves (one idle look later), which is what spares
    /// back-to-back grants a wake-up each.
    armed: Option<Instant>,
}

impl<T> Default for Schedule<T> {
    fn default() -> Self {
        Self {
            due: BTreeMap::new(),
            at: HashMap::new(),
            armed: None,
        }
    }
}

impl<T> Schedule<T> {
    /// Queues (or re-queues) item `id` at `at`. Returns whether the driver must be woken:
    /// it would otherwise look later than `at`.
    pub(crate) fn insert(&mut self, id: u64, at: Instant, item: T) -> bool {
        self.remove(id);
        self.at.insert(id, at);
        self.due.insert((at, id), item);
        let sooner = self.armed.is_none_or(|armed| at < armed);
        if sooner {
            self.armed = Some(at);
        }
        sooner
    }

    /// Takes item `id` out of the queue, if it is there.
    pub(crate) fn remove(&mut self, id: u64) -> Option<T> {
        let at = self.at.remove(&id)?;
        self.due.remove(&(at, id))
    }

    /// Takes every item due at `now`; returns them and when the driver should look next:
    /// the first remaining item's time, or the armed time if that is sooner and still
    /// ahead. `None`: sleep until woken.
    pub(crate) fn take_due(&mut self, now: Instant) -> (Vec<T>, Option<Instant>) {
        let mut due = Vec::new();
        let first = loop {
            let Some(entry) = self.due.first_entry() else {
                break None;
            };
            let (at, id) = *entry.key();
            if at > now {
                break Some(at);
            }
            self.at.remove(&id);
            due.push(entry.remove());
        };
        let armed = self.armed.filter(|&armed| armed > now);
        let next = first.into_iter().chain(armed).min();
        self.armed = next;
        (due, next)
    }

    /// Takes the items due by `until` that `pick` chooses (the renewals due soon, to send
    /// with those due now), leaving when the driver looks next as it was.
    pub(crate) fn take_soon(&mut self, until: Instant, pick: impl Fn(&T) -> bool) -> Vec<T> {
        let chosen: Vec<(Instant, u64)> = self
            .due
            .range(..=(until, u64::MAX))
            .filter(|(_, item)| pick(item))
            .map(|(key, _)| *key)
            .collect();
        chosen
            .into_iter()
            .filter_map(|(at, id)| {
                self.at.remove(&id);
                self.due.remove(&(at, id))
            })
            .collect()
    }

    /// When the first item that `pick` chooses is due (the blocking face's thread asks
    /// when its next renewal is).
    #[cfg(any(feature = "blocking", test))]
    pub(crate) fn first_at(&self, pick: impl Fn(&T) -> bool) -> Option<Instant> {
        (self.due.iter())
            .find(|(_, item)| pick(item))
            .map(|(&(at, _), _)| at)
    }

    /// How many items are queued.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.due.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn items_come_out_in_time_order_and_requeueing_moves_them() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut s = Schedule::default();
        assert!(s.insert(1, ms(30), "a"), "the first item wakes the driver");
        assert!(s.insert(2, ms(10), "b"), "a sooner one too");
        assert!(!s.insert(3, ms(20), "c"), "a later one does not");
        assert!(!s.insert(1, ms(40), "a"), "re-queued later");
        assert_eq!(s.len(), 3);
        let (due, next) = s.take_due(ms(25));
        assert_eq!(due, vec!["b", "c"]);
        assert_eq!(next, Some(ms(40)));
        assert_eq!(s.remove(1), Some("a"));
        assert_eq!(s.remove(1), None);
        // The armed time stays: the driver looks once more at 40 ms, finds nothing.
        let (due, next) = s.take_due(ms(26));
        assert!(due.is_empty());
        assert_eq!(next, Some(ms(40)));
        let (_, next) = s.take_due(ms(41));
        assert_eq!(next, None, "then it sleeps until woken");
    }

    #[test]
    fn items_due_soon_can_be_taken_with_those_due_now() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut s = Schedule::default();
        s.insert(1, ms(10), 1);
        s.insert(2, ms(20), 2);
        s.insert(3, ms(25), 3);
        s.insert(4, ms(90), 4);
        let (due, next) = s.take_due(ms(10));
        assert_eq!((due, next), (vec![1], Some(ms(20))));
        assert_eq!(s.take_soon(ms(30), |&n| n != 3), vec![2]);
        assert_eq!(s.len(), 2, "3 was not picked, 4 is not due soon");
        assert_eq!(s.take_due(ms(26)).0, vec![3]);
    }

    #[test]
    fn background_releases_go_with_a_renewal_or_in_a_gap_before_the_next_one() {
        // Issue 37, defect 7: four releases, each a response timeout on a paused server,
        // went one by one before the renewal due meanwhile.
        let now = Instant::now();
        let bound = Duration::from_millis(500);
        let ms = |n| now + Duration::from_millis(n);
        assert_eq!(
            releases_at(now, bound, true, Some(ms(10))),
            None,
            "with the renewals going now, in their round trip"
        );
        assert_eq!(
            releases_at(now, bound, false, None),
            None,
            "no lease to renew: now"
        );
        assert_eq!(
            releases_at(now, bound, false, Some(ms(500))),
            None,
            "the round trip ends before the next renewal: now"
        );
        assert_eq!(
            releases_at(now, bound, false, Some(ms(200))),
            Some(ms(200)),
            "it could end after the next renewal is due: with that renewal"
        );
        let mut s = Schedule::default();
        s.insert(1, ms(300), "release");
        s.insert(2, ms(400), "lease");
        assert_eq!(s.first_at(|&job| job == "lease"), Some(ms(400)));
        assert_eq!(s.first_at(|&job| job == "other"), None);
    }

    #[test]
    fn an_item_due_before_the_armed_time_wakes_the_driver() {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        s.insert(1, t0 + Duration::from_millis(100), ());
        s.remove(1);
        assert!(!s.insert(2, t0 + Duration::from_millis(150), ()));
        assert!(s.insert(3, t0 + Duration::from_millis(50), ()));
    }
}
