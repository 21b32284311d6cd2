//! The lock scripts' replies, read in place.

/// What an acquire call answered, read from acquire-with-retry.lua's `{1, fence}` /
/// `{0, pttl}` or from fair-queue.lua's `{1, fence, lease, now}` / `{0, 0, pttl, now}`
/// (`{2, ..}`, handed before, cannot happen to the fresh token of an attempt: read as
/// held), as the pair `(acquired, fence or pttl)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Acquired(pub(crate) i64, pub(crate) i64);

impl redis::FromRedisValue for Acquired {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        // Read in place, without collecting: this is every acquire's reply.
        let redis::Value::Array(values) = v else {
            return Err(String::from("an acquire reply that is not an array").into());
        };
        let n = values.len();
        let mut values = values.into_iter().map(i64::from_redis_value);
        let mut next = || {
            values
                .next()
                .unwrap_or_else(|| Err(String::from("a short acquire reply").into()))
        };
        match (n, next()?, next()?) {
            (2, acquired, value) => Ok(Self(acquired, value)),
            (4, 1, fence) => Ok(Self(1, fence)),
            (4, _, _) => Ok(Self(0, next()?)),
            _ => Err(format!("an acquire reply of {n} values").into()),
        }
    }
}

/// What a release, renewal or check answered: `1`/`0` from compare-del.lua or renew.lua
/// (or from `DELIFEQ`/`DELEX`), `OK`/nil from `SET … IFEQ`, or the first value of
/// fair-queue.lua's reply; whether it was done (the token held).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Confirmed(pub(crate) bool);

impl redis::FromRedisValue for Confirmed {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        let status = match v {
            redis::Value::Okay => 1,
            redis::Value::Nil => 0,
            redis::Value::Array(values) => match values.into_iter().next() {
                Some(first) => i64::from_redis_value(first)?,
                None => return Err(String::from("an empty script reply").into()),
            },
            other => i64::from_redis_value(other)?,
        };
        Ok(Self(status == 1))
    }
}

/// What handover.lua answered: the next holder's fencing token, or `None` (`0`) when the
/// releasing token no longer held the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Handed(pub(crate) Option<u64>);

impl redis::FromRedisValue for Handed {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        let fence = i64::from_redis_value(v)?;
        Ok(Self(u64::try_from(fence).ok().filter(|f| *f > 0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquire_replies_of_both_scripts_read_alike() {
        use redis::{FromRedisValue, Value};
        let ints = |v: &[i64]| Value::Array(v.iter().map(|&i| Value::Int(i)).collect());
        let read = |v: &[i64]| Acquired::from_redis_value(ints(v));
        assert_eq!(read(&[1, 7]).unwrap(), Acquired(1, 7));
        assert_eq!(read(&[0, 250]).unwrap(), Acquired(0, 250));
        assert_eq!(read(&[1, 7, 30_000, 5]).unwrap(), Acquired(1, 7));
        assert_eq!(read(&[0, 0, 250, 5]).unwrap(), Acquired(0, 250));
        assert!(read(&[1]).is_err());
        assert!(read(&[1, 2, 3]).is_err());
        assert!(Acquired::from_redis_value(Value::Int(1)).is_err());
        assert_eq!(
            Confirmed::from_redis_value(ints(&[1, 0, 0, 5])).unwrap(),
            Confirmed(true)
        );
        assert_eq!(
            Confirmed::from_redis_value(Value::Int(0)).unwrap(),
            Confirmed(false)
        );
        let handed = |i| Handed::from_redis_value(Value::Int(i)).unwrap();
        assert_eq!(
            (handed(8), handed(0), handed(-1)),
            (Handed(Some(8)), Handed(None), Handed(None))
        );
    }
}
