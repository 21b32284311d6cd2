//! The Redis names of a lock, and the kind of grant they serve.

use crate::LockError;
use crate::machine::limit::check_name;

/// The Redis names of one lock. They share the hash tag `{name}`, so on a Cluster all
/// of them live in one slot.
#[derive(Clone, Debug)]
pub struct Keys {
    /// What a grant of this name is.
    pub(crate) kind: Kind,
    /// The name the user gave.
    pub(crate) name: String,
    /// `lock:{name}`: holds the owner's token.
    pub(crate) lock: String,
    /// `lock:{name}:fence`: the fencing counter.
    pub(crate) fence: String,
    /// `lock:{name}:released`: the release channel compare-del publishes on.
    pub(crate) channel: String,
}

impl Keys {
    /// `lock:{name}:queue`: the waiters by arrival (fair-queue.lua).
    pub(crate) fn queue(&self) -> String {
        [self.lock.as_str(), ":queue"].concat()
    }

    /// `lock:{name}:alive`: the waiters by deadline (fair-queue.lua).
    pub(crate) fn alive(&self) -> String {
        [self.lock.as_str(), ":alive"].concat()
    }

    /// `lock:{name}:leader`: an election's leader record (proclaim.lua).
    pub(crate) fn leader(&self) -> String {
        [self.lock.as_str(), ":leader"].concat()
    }

    /// `lock:{name}:proclaimed`: the channel proclaim.lua tells observers on.
    pub(crate) fn proclaimed(&self) -> String {
        [self.lock.as_str(), ":proclaimed"].concat()
    }

    /// `lock:{name}:holders`: readers or permit holders by the end of their lease
    /// (fair-queue.lua).
    pub(crate) fn holders(&self) -> String {
        [self.lock.as_str(), ":holders"].concat()
    }

    /// `lock:{name}:fences`: the fencing token of each reader or permit holder
    /// (fair-queue.lua).
    pub(crate) fn fences(&self) -> String {
        [self.lock.as_str(), ":fences"].concat()
    }
}

/// What a grant of a name is: the kind fair-queue.lua serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A lock ([`crate::Locks`]): the token in the lock key.
    Lock,
    /// The write side of a read/write lock: the token in the lock key, like a lock.
    Write,
    /// The read side of a read/write lock: a member of the holders.
    Read,
    /// A permit of a semaphore with this many permits: a member of the holders.
    Permit(u32),
}

impl Kind {
    /// The kind's letter in fair-queue.lua.
    pub(crate) fn code(self) -> &'static str {
        match self {
            Kind::Lock | Kind::Write => "x",
            Kind::Read => "r",
            Kind::Permit(_) => "p",
        }
    }

    /// What a grant of this kind is, in an error message.
    pub(crate) fn noun(self) -> &'static str {
        match self {
            Kind::Lock => "a lock",
            Kind::Write => "a write lock",
            Kind::Read => "a read lock",
            Kind::Permit(_) => "a semaphore permit",
        }
    }

    /// Whether its holders are members of `lock:{name}:holders` (not the lock key).
    pub(crate) fn shared(self) -> bool {
        matches!(self, Kind::Read | Kind::Permit(_))
    }

    pub(crate) fn permits(self) -> u64 {
        match self {
            Kind::Permit(n) => u64::from(n),
            _ => 0,
        }
    }
}

impl Keys {
    /// The key names of `name` (under `prefix`) for grants of `kind`, after checking
    /// the name.
    pub(crate) fn new(prefix: &str, name: &str, kind: Kind) -> Result<Self, LockError> {
        check_name(name)?;
        // Built by hand: this runs on every call, and three `format!`s cost about
        // 2,000 instructions per call (callgrind, 4,000 try_lock+release cycles).
        let mut lock = String::with_capacity(prefix.len() + name.len() + 2);
        lock.push_str(prefix);
        lock.push('{');
        lock.push_str(name);
        lock.push('}');
        Ok(Keys {
            kind,
            fence: [lock.as_str(), ":fence"].concat(),
            channel: [lock.as_str(), ":released"].concat(),
            lock,
            name: name.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::settings::Settings;

    #[test]
    fn keys_share_one_hash_tag() {
        let keys = Settings::default().keys("orders:42").unwrap();
        assert_eq!(keys.lock, "lock:{orders:42}");
        assert_eq!(keys.fence, "lock:{orders:42}:fence");
        assert_eq!(keys.channel, "lock:{orders:42}:released");
    }

    #[test]
    fn bad_names_are_refused() {
        let s = Settings::default();
        assert!(matches!(s.keys(""), Err(LockError::InvalidName { .. })));
        assert!(matches!(
            s.keys(&"x".repeat(513)),
            Err(LockError::InvalidName { .. })
        ));
        assert!(s.keys(&"x".repeat(512)).is_ok());
        assert!(matches!(s.keys("a}b"), Err(LockError::InvalidName { .. })));
    }
}
