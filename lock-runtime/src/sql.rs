//! Fencing for data in a SQL database: one statement that writes a row only with a
//! fencing token not below the one the row already has.
//!
//! A lock alone cannot stop a holder that was paused past its lease (GC, swap, SIGSTOP)
//! from writing when it resumes; the store must refuse it. Keep the highest fencing
//! token per row in a `BIGINT` column and write through [`FencedUpsert`]: the write
//! applies when its token is at least the row's (the same holder may write again), and
//! affects no row when a later holder has written already. The check and the write are
//! one statement, so no other writer can come between them.
//!
//! ```no_run
//! use lockscript::sql::FencedUpsert;
//!
//! // CREATE TABLE reports (id TEXT PRIMARY KEY, body TEXT NOT NULL, fence BIGINT NOT NULL)
//! let write = FencedUpsert::new("reports", &["id"], &["body"]).unwrap();
//! assert_eq!(
//!     write.sql(),
//!     "INSERT INTO \"reports\" AS stored (\"id\", \"body\", \"fence\") VALUES ($1, $2, $3) \
//!      ON CONFLICT (\"id\") DO UPDATE SET \"body\" = EXCLUDED.\"body\", \"fence\" = EXCLUDED.\"fence\" \
//!      WHERE stored.\"fence\" <= EXCLUDED.\"fence\""
//! );
//! // With tokio-postgres: the keys, the values, then the guard's token as i64; 1 row
//! // affected means written, 0 means refused.
//! // let token = i64::try_from(guard.fencing_token())?;
//! // let rows = client.execute(&write.sql(), &[&"r-1", &"contents", &token]).await?;
//! ```
//!
//! The statement is PostgreSQL's (`INSERT ... ON CONFLICT ... DO UPDATE ... WHERE`, 9.5 and
//! later). Fencing tokens fit a `BIGINT`: they are at most the server's clock in
//! microseconds plus the number of grants.

use crate::LockError;

/// An upsert that applies only with a fencing token at least the row's; see the
/// [module docs](self).
///
/// ```no_run
/// let write = lockscript::sql::FencedUpsert::new("accounts", &["id"], &["balance"])?
///     .fence_column("lock_fence")?;
/// println!("{}", write.sql());
/// # Ok::<(), lockscript::LockError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FencedUpsert {
    table: String,
    keys: Vec<String>,
    values: Vec<String>,
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
        if keys.is_empty() || values.is_empty() {
            return Err(LockError::InvalidSettings(
                "a fenced upsert needs at least one key column (the row's unique key) and one \
                 value column"
                    .to_owned(),
            ));
        }
        let table = table
            .split('.')
            .map(quote)
            .collect::<Result<Vec<_>, _>>()?
            .join(".");
        Ok(Self {
            table,
            keys: keys.iter().map(|k| quote(k)).collect::<Result<_, _>>()?,
            values: values.iter().map(|v| quote(v)).collect::<Result<_, _>>()?,
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
        let columns: Vec<&str> = self
            .keys
            .iter()
            .chain(&self.values)
            .chain([&self.fence])
            .map(String::as_str)
            .collect();
        let params: Vec<String> = (1..=columns.len()).map(|n| format!("${n}")).collect();
        let updates: Vec<String> = self
            .values
            .iter()
            .chain([&self.fence])
            .map(|c| format!("{c} = EXCLUDED.{c}"))
            .collect();
        format!(
            "INSERT INTO {table} AS stored ({columns}) VALUES ({params}) ON CONFLICT ({keys}) \
             DO UPDATE SET {updates} WHERE stored.{fence} <= EXCLUDED.{fence}",
            table = self.table,
            columns = columns.join(", "),
            params = params.join(", "),
            keys = self.keys.join(", "),
            updates = updates.join(", "),
            fence = self.fence,
        )
    }
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
}
