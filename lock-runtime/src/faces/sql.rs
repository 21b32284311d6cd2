//! Fencing for data in a SQL database (PostgreSQL): statements that refuse a write made
//! with a fencing token lower than one already seen.
//!
//! A lock alone cannot stop a holder that was paused past its lease (GC, swap, SIGSTOP)
//! from writing when it resumes; the store must refuse it. Two ways, each one statement
//! (one round trip), so no other writer can come between the check and the write:
//!
//! - **One fence per lock** ([`LockFencedUpsert`], [`LockFencedDelete`]): a fence table
//!   keeps, per lock name, the highest token any write of that lock has carried. Each
//!   write raises it and is refused when a higher token has written through it, **for
//!   every row** the lock protects: an update of a row the newer holder never touched,
//!   the insert of a new row, the re-insert of a row the newer holder deleted, a delete.
//!   This is the fence Kleppmann describes: the storage refuses any token lower than one
//!   it has seen for that lock. Use it.
//! - **One fence per row** ([`FencedUpsert`]): each row keeps the highest token that wrote
//!   it. It refuses a stale write only to a row a newer holder has already written: a
//!   holder paused past its lease can still write every other row, insert new ones and
//!   re-insert a row the newer holder deleted. Enough when a lock protects exactly one row
//!   that is never deleted.
//!
//! ```no_run
//! use lockscript::sql::LockFencedUpsert;
//!
//! // CREATE TABLE lock_fences (lock TEXT PRIMARY KEY, fence BIGINT NOT NULL);
//! // CREATE TABLE reports (id TEXT PRIMARY KEY, body TEXT NOT NULL);
//! let write = LockFencedUpsert::new("reports", &["id"], &["body"])?;
//! // With tokio-postgres: the keys, the values, the lock's name, the guard's token; one
//! // row back, `accepted` false when a higher token has written under this lock.
//! // let token = i64::try_from(guard.fencing_token())?;
//! // let row = client.query_one(&write.sql(), &[&"r-1", &"contents", &"report", &token]).await?;
//! // if !row.get::<_, bool>("accepted") { /* a newer holder has written: stop */ }
//! # Ok::<(), lockscript::LockError>(())
//! ```
//!
//! # Why the per-lock statement is correct under concurrency
//!
//! The statement is a data-modifying CTE (PostgreSQL 9.5 and later):
//!
//! ```sql
//! WITH fence AS (
//!   INSERT INTO lock_fences AS seen (lock, fence) VALUES ($lock, $token)
//!   ON CONFLICT (lock) DO UPDATE SET fence = EXCLUDED.fence
//!   WHERE seen.fence <= EXCLUDED.fence
//!   RETURNING 1
//! ), written AS (
//!   INSERT INTO reports (id, body) SELECT $1, $2 FROM fence      -- or DELETE ... AND EXISTS (SELECT 1 FROM fence)
//!   ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body
//!   RETURNING 1
//! )
//! SELECT EXISTS (SELECT 1 FROM fence) AS accepted, (SELECT count(*) FROM written) AS rows
//! ```
//!
//! - `INSERT ... ON CONFLICT DO UPDATE` on the fence row is atomic in every isolation
//!   level: two first writes of a lock cannot both insert (the second waits for the first
//!   to commit and takes the update path), and the update path locks the row and reads its
//!   **latest committed** version, not the statement's snapshot, waiting for any
//!   transaction that holds it. So the `WHERE` compares with the highest token committed
//!   so far, never a stale one.
//! - The fence row stays locked until the writing transaction ends, even when the `WHERE`
//!   is false (PostgreSQL locks the conflicting row either way). Every write of one lock
//!   therefore runs its data step while holding that row lock: writes of a lock are
//!   serialized in fence order, and a write whose token is below one committed before its
//!   fence step is refused. There is no window between the check and the write.
//! - The data step reads the fence step only through its `RETURNING` rows (the CTEs
//!   share one snapshot and cannot see each other's table changes): no row from `fence`,
//!   no data write. The data upsert's `ON CONFLICT` finds the row through its unique index
//!   whatever the snapshot, so an update, a new row and a re-inserted row are all handled
//!   by the same rule.
//! - One caveat, for deletes in `READ COMMITTED`: a `DELETE` finds its rows in the
//!   statement's snapshot, taken before it waited for the fence row. A row that a writer
//!   with a token not above this one (an accepted write, not a stale one) inserted and
//!   committed during that wait is not seen, so it survives the delete. No stale write is
//!   ever accepted; run such deletes in `REPEATABLE READ` to turn that race into a
//!   serialization error to retry (both behaviours are tested against a real server).
//!
//! Fencing tokens fit a `BIGINT`: they are at most the server's clock in microseconds plus
//! the number of grants.

use crate::LockError;

/// What an upsert names, checked and quoted: its table, the columns of the row's unique
/// key, and the columns it writes. Both fenced upserts start from it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Upserted {
    table: String,
    keys: Vec<String>,
    values: Vec<String>,
}

impl Upserted {
    fn new(table: &str, keys: &[&str], values: &[&str]) -> Result<Self, LockError> {
        if keys.is_empty() || values.is_empty() {
            return Err(LockError::InvalidSettings(
                "a fenced upsert needs at least one key column (the row's unique key) and one \
                 value column"
                    .to_owned(),
            ));
        }
        Ok(Self {
            table: qualified(table)?,
            keys: quote_all(keys)?,
            values: quote_all(values)?,
        })
    }

    /// The columns written (the keys, the values, then `extra`), their parameters (`$1`
    /// on), and the `SET` list of the values and `extra`, each joined with `, `.
    fn parts(&self, extra: Option<&String>) -> (String, String, String) {
        let written = self.keys.iter().chain(&self.values).chain(extra);
        let columns: Vec<&str> = written.map(String::as_str).collect();
        let params: Vec<String> = (1..=columns.len()).map(|n| format!("${n}")).collect();
        let updates: Vec<String> = (self.values.iter().chain(extra))
            .map(|c| format!("{c} = EXCLUDED.{c}"))
            .collect();
        (columns.join(", "), params.join(", "), updates.join(", "))
    }
}

/// An upsert that applies only with a fencing token at least **the row's**: one fence per
/// row, kept in a column of the table itself. It refuses a stale holder only on rows a
/// newer holder has written; see the [module docs](self), and prefer
/// [`LockFencedUpsert`], which refuses it on every row.
///
/// ```no_run
/// let write = lockscript::sql::FencedUpsert::new("reports", &["id"], &["body"])?;
/// assert_eq!(
///     write.sql(),
///     "INSERT INTO \"reports\" AS stored (\"id\", \"body\", \"fence\") VALUES ($1, $2, $3) \
///      ON CONFLICT (\"id\") DO UPDATE SET \"body\" = EXCLUDED.\"body\", \"fence\" = EXCLUDED.\"fence\" \
///      WHERE stored.\"fence\" <= EXCLUDED.\"fence\""
/// );
/// # Ok::<(), lockscript::LockError>(())
/// ```
///
/// ```no_run
/// let write = lockscript::sql::FencedUpsert::new("accounts", &["id"], &["balance"])?
///     .fence_column("lock_fence")?;
/// println!("{}", write.sql());
/// # Ok::<(), lockscript::LockError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FencedUpsert {
    upsert: Upserted,
    fence: String,
}

impl FencedUpsert {
    /// A write of `values` to the row of `table` whose primary key (or other unique
    /// constraint) is `keys`. The table may be schema-qualified (`billing.accounts`). The
    /// fencing token goes to column `fence` unless [`fence_column`](Self::fence_column)
    /// says otherwise.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidSettings`] when there is no key or no value column, or a name is
    /// empty or contains a NUL byte (names are quoted, so any other character is fine).
    ///
    /// ```no_run
    /// let write = lockscript::sql::FencedUpsert::new("billing.accounts", &["id"], &["balance"])?;
    /// # Ok::<(), lockscript::LockError>(())
    /// ```
    pub fn new(table: &str, keys: &[&str], values: &[&str]) -> Result<Self, LockError> {
        Ok(Self {
            upsert: Upserted::new(table, keys, values)?,
            fence: quote("fence")?,
        })
    }

    /// The column that keeps each row's highest fencing token (`BIGINT NOT NULL`).
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new), for a bad name.
    ///
    /// ```no_run
    /// let write = lockscript::sql::FencedUpsert::new("t", &["id"], &["v"])?.fence_column("token")?;
    /// # Ok::<(), lockscript::LockError>(())
    /// ```
    pub fn fence_column(mut self, name: &str) -> Result<Self, LockError> {
        self.fence = quote(name)?;
        Ok(self)
    }

    /// The statement. Its parameters are the key columns, then the value columns, in the
    /// order given, then the fencing token (`$n`, as PostgreSQL numbers them). It affects
    /// one row when written and none when refused.
    ///
    /// ```no_run
    /// let sql = lockscript::sql::FencedUpsert::new("t", &["id"], &["v"])?.sql();
    /// assert!(sql.ends_with("WHERE stored.\"fence\" <= EXCLUDED.\"fence\""));
    /// # Ok::<(), lockscript::LockError>(())
    /// ```
    #[must_use]
    pub fn sql(&self) -> String {
        let (columns, params, updates) = self.upsert.parts(Some(&self.fence));
        format!(
            "INSERT INTO {table} AS stored ({columns}) VALUES ({params}) ON CONFLICT ({keys}) \
             DO UPDATE SET {updates} WHERE stored.{fence} <= EXCLUDED.{fence}",
            table = self.upsert.table,
            keys = self.upsert.keys.join(", "),
            fence = self.fence,
        )
    }
}

/// The fence table's name when none is given: `lock_fences`.
pub const DEFAULT_FENCE_TABLE: &str = "lock_fences";

/// The per-lock fence both per-lock statements start with: a table of `lock TEXT PRIMARY
/// KEY, fence BIGINT NOT NULL`, raised and checked in one `INSERT ... ON CONFLICT`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct LockFence {
    table: String,
}

impl LockFence {
    fn new() -> Self {
        Self {
            table: format!("\"{DEFAULT_FENCE_TABLE}\""),
        }
    }

    /// The `fence` CTE, its lock name and token in parameters `$lock` and `$lock + 1`;
    /// one row when the write may go on, none when a higher token has written.
    fn cte(&self, lock: usize) -> String {
        format!(
            "fence AS (INSERT INTO {table} AS seen (\"lock\", \"fence\") VALUES (${lock}, ${token}) \
             ON CONFLICT (\"lock\") DO UPDATE SET \"fence\" = EXCLUDED.\"fence\" \
             WHERE seen.\"fence\" <= EXCLUDED.\"fence\" RETURNING 1)",
            table = self.table,
            token = lock + 1,
        )
    }

    /// The whole statement around the data step `written` (a CTE body that reads `fence`).
    fn statement(&self, lock: usize, written: &str) -> String {
        format!(
            "WITH {fence}, written AS ({written}) SELECT EXISTS (SELECT 1 FROM fence) AS \
             accepted, (SELECT count(*) FROM written) AS rows",
            fence = self.cte(lock),
        )
    }

    /// `CREATE TABLE IF NOT EXISTS` for it.
    fn create(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} (\"lock\" TEXT PRIMARY KEY, \"fence\" BIGINT NOT NULL)",
            self.table
        )
    }
}

/// An upsert (update, insert, or re-insert of a deleted row) fenced by **its lock's**
/// highest token: refused when any write of the same lock, to any row, has carried a
/// higher one. See the [module docs](self) for the statement and why it holds under
/// concurrency.
///
/// Parameters: the key columns, then the value columns, in the order given, then the
/// lock's name (`TEXT`), then the fencing token (`BIGINT`). One row comes back, with
/// `accepted` (`boolean`: the fence let the write through) and `rows` (`bigint`: data
/// rows written, 1 when accepted).
///
/// ```no_run
/// use lockscript::sql::LockFencedUpsert;
///
/// let write = LockFencedUpsert::new("reports", &["id"], &["body"])?.fence_table("billing.fences")?;
/// // Once: CREATE TABLE IF NOT EXISTS "billing"."fences" ("lock" TEXT PRIMARY KEY, "fence" BIGINT NOT NULL)
/// println!("{}\n{}", write.create_fence_table(), write.sql());
/// # Ok::<(), lockscript::LockError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockFencedUpsert {
    upsert: Upserted,
    fence: LockFence,
}

impl LockFencedUpsert {
    /// A write of `values` to the row of `table` whose primary key (or other unique
    /// constraint) is `keys`, fenced in the table [`DEFAULT_FENCE_TABLE`] unless
    /// [`fence_table`](Self::fence_table) says otherwise. The data table needs no fence
    /// column.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidSettings`] when there is no key or no value column, or a name is
    /// empty or contains a NUL byte.
    ///
    /// ```no_run
    /// let write = lockscript::sql::LockFencedUpsert::new("billing.accounts", &["id"], &["balance"])?;
    /// # Ok::<(), lockscript::LockError>(())
    /// ```
    pub fn new(table: &str, keys: &[&str], values: &[&str]) -> Result<Self, LockError> {
        Ok(Self {
            upsert: Upserted::new(table, keys, values)?,
            fence: LockFence::new(),
        })
    }

    /// The fence table (may be schema-qualified), shared by every statement of the locks
    /// it fences: columns `lock TEXT PRIMARY KEY, fence BIGINT NOT NULL`.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new), for a bad name.
    ///
    /// ```no_run
    /// let write = lockscript::sql::LockFencedUpsert::new("t", &["id"], &["v"])?.fence_table("fences")?;
    /// # Ok::<(), lockscript::LockError>(())
    /// ```
    pub fn fence_table(mut self, name: &str) -> Result<Self, LockError> {
        self.fence.table = qualified(name)?;
        Ok(self)
    }

    /// `CREATE TABLE IF NOT EXISTS` for the fence table.
    ///
    /// ```no_run
    /// let ddl = lockscript::sql::LockFencedUpsert::new("t", &["id"], &["v"])?.create_fence_table();
    /// assert!(ddl.starts_with("CREATE TABLE IF NOT EXISTS \"lock_fences\""));
    /// # Ok::<(), lockscript::LockError>(())
    /// ```
    #[must_use]
    pub fn create_fence_table(&self) -> String {
        self.fence.create()
    }

    /// The statement; see the [type's docs](Self) for its parameters and its result.
    ///
    /// ```no_run
    /// let sql = lockscript::sql::LockFencedUpsert::new("t", &["id"], &["v"])?.sql();
    /// assert!(sql.starts_with("WITH fence AS (INSERT INTO \"lock_fences\""));
    /// # Ok::<(), lockscript::LockError>(())
    /// ```
    #[must_use]
    pub fn sql(&self) -> String {
        let (columns, params, updates) = self.upsert.parts(None);
        let written = format!(
            "INSERT INTO {table} ({columns}) SELECT {params} FROM fence ON CONFLICT ({keys}) \
             DO UPDATE SET {updates} RETURNING 1",
            table = self.upsert.table,
            keys = self.upsert.keys.join(", "),
        );
        let lock = self.upsert.keys.len() + self.upsert.values.len() + 1;
        self.fence.statement(lock, &written)
    }
}

/// A delete fenced by **its lock's** highest token: refused when any write of the same
/// lock has carried a higher one. See the [module docs](self), and its caveat on rows
/// inserted while the delete waited.
///
/// Parameters: the key columns in the order given, then the lock's name (`TEXT`), then the
/// fencing token (`BIGINT`). One row comes back, with `accepted` (`boolean`) and `rows`
/// (`bigint`: rows deleted, 0 when refused or when no row had those keys).
///
/// ```no_run
/// let delete = lockscript::sql::LockFencedDelete::new("reports", &["id"])?;
/// // let row = client.query_one(&delete.sql(), &[&"r-1", &"report", &token]).await?;
/// # Ok::<(), lockscript::LockError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockFencedDelete {
    table: String,
    keys: Vec<String>,
    fence: LockFence,
}

impl LockFencedDelete {
    /// A delete of the rows of `table` whose `keys` columns equal the parameters, fenced in
    /// [`DEFAULT_FENCE_TABLE`] unless [`fence_table`](Self::fence_table) says otherwise.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidSettings`] when there is no key column, or a name is empty or
    /// contains a NUL byte.
    ///
    /// ```no_run
    /// let delete = lockscript::sql::LockFencedDelete::new("billing.accounts", &["id"])?;
    /// # Ok::<(), lockscript::LockError>(())
    /// ```
    pub fn new(table: &str, keys: &[&str]) -> Result<Self, LockError> {
        if keys.is_empty() {
            return Err(LockError::InvalidSettings(
                "a fenced delete needs at least one key column".to_owned(),
            ));
        }
        Ok(Self {
            table: qualified(table)?,
            keys: quote_all(keys)?,
            fence: LockFence::new(),
        })
    }

    /// The fence table, as [`LockFencedUpsert::fence_table`] (use the same for every
    /// statement of a lock).
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new), for a bad name.
    ///
    /// ```no_run
    /// let delete = lockscript::sql::LockFencedDelete::new("t", &["id"])?.fence_table("fences")?;
    /// # Ok::<(), lockscript::LockError>(())
    /// ```
    pub fn fence_table(mut self, name: &str) -> Result<Self, LockError> {
        self.fence.table = qualified(name)?;
        Ok(self)
    }

    /// The statement; see the [type's docs](Self) for its parameters and its result.
    ///
    /// ```no_run
    /// let sql = lockscript::sql::LockFencedDelete::new("t", &["id"])?.sql();
    /// assert!(sql.contains("DELETE FROM \"t\" WHERE \"id\" = $1 AND EXISTS (SELECT 1 FROM fence)"));
    /// # Ok::<(), lockscript::LockError>(())
    /// ```
    #[must_use]
    pub fn sql(&self) -> String {
        let matches: Vec<String> = self
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| format!("{k} = ${}", i + 1))
            .collect();
        let written = format!(
            "DELETE FROM {table} WHERE {matches} AND EXISTS (SELECT 1 FROM fence) RETURNING 1",
            table = self.table,
            matches = matches.join(" AND "),
        );
        self.fence.statement(self.keys.len() + 1, &written)
    }
}

/// A table name, possibly schema-qualified, quoted part by part.
fn qualified(table: &str) -> Result<String, LockError> {
    Ok(table
        .split('.')
        .map(quote)
        .collect::<Result<Vec<_>, _>>()?
        .join("."))
}

fn quote_all(names: &[&str]) -> Result<Vec<String>, LockError> {
    names.iter().map(|n| quote(n)).collect()
}

/// `name` as a quoted SQL identifier: `"name"`, inner quotes doubled.
fn quote(name: &str) -> Result<String, LockError> {
    if name.is_empty() || name.contains('\0') {
        return Err(LockError::InvalidSettings(format!(
            "SQL name {name:?} is empty or contains a NUL byte"
        )));
    }
    Ok(format!("\"{}\"", name.replace('"', "\"\"")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted_and_parameters_numbered_in_order() {
        let sql = FencedUpsert::new("billing.acc\"ounts", &["tenant", "id"], &["a", "b"])
            .unwrap()
            .fence_column("f")
            .unwrap()
            .sql();
        assert_eq!(
            sql,
            "INSERT INTO \"billing\".\"acc\"\"ounts\" AS stored (\"tenant\", \"id\", \"a\", \"b\", \"f\") \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (\"tenant\", \"id\") DO UPDATE SET \
             \"a\" = EXCLUDED.\"a\", \"b\" = EXCLUDED.\"b\", \"f\" = EXCLUDED.\"f\" \
             WHERE stored.\"f\" <= EXCLUDED.\"f\""
        );
    }

    #[test]
    fn bad_names_are_errors() {
        assert!(FencedUpsert::new("t", &[], &["v"]).is_err());
        assert!(FencedUpsert::new("t", &["id"], &[]).is_err());
        assert!(FencedUpsert::new("", &["id"], &["v"]).is_err());
        assert!(FencedUpsert::new("a..b", &["id"], &["v"]).is_err());
        assert!(FencedUpsert::new("t", &["i\0d"], &["v"]).is_err());
    }

    #[test]
    fn the_lock_fence_is_raised_and_checked_before_the_data_step() {
        let sql = LockFencedUpsert::new("s.reports", &["id"], &["body", "n"])
            .unwrap()
            .fence_table("f\"ences")
            .unwrap()
            .sql();
        assert_eq!(
            sql,
            "WITH fence AS (INSERT INTO \"f\"\"ences\" AS seen (\"lock\", \"fence\") VALUES ($4, $5) \
             ON CONFLICT (\"lock\") DO UPDATE SET \"fence\" = EXCLUDED.\"fence\" \
             WHERE seen.\"fence\" <= EXCLUDED.\"fence\" RETURNING 1), \
             written AS (INSERT INTO \"s\".\"reports\" (\"id\", \"body\", \"n\") SELECT $1, $2, $3 \
             FROM fence ON CONFLICT (\"id\") DO UPDATE SET \"body\" = EXCLUDED.\"body\", \
             \"n\" = EXCLUDED.\"n\" RETURNING 1) \
             SELECT EXISTS (SELECT 1 FROM fence) AS accepted, (SELECT count(*) FROM written) AS rows"
        );
        let delete = LockFencedDelete::new("reports", &["tenant", "id"])
            .unwrap()
            .sql();
        assert!(
            delete.contains("VALUES ($3, $4)")
                && delete.contains(
                    "DELETE FROM \"reports\" WHERE \"tenant\" = $1 AND \"id\" = $2 AND EXISTS \
                     (SELECT 1 FROM fence) RETURNING 1"
                ),
            "{delete}"
        );
    }

    #[test]
    fn bad_names_are_errors_for_the_lock_fence_too() {
        assert!(LockFencedUpsert::new("t", &[], &["v"]).is_err());
        assert!(LockFencedUpsert::new("t", &["id"], &[]).is_err());
        assert!(LockFencedDelete::new("t", &[]).is_err());
        assert!(LockFencedDelete::new("", &["id"]).is_err());
        assert!(
            LockFencedUpsert::new("t", &["id"], &["v"])
                .unwrap()
                .fence_table("a..b")
                .is_err()
        );
    }
}
