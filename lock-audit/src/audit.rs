//! Auditing a directory of scripts as plain files: what each one is, what is wrong
//! with it, and whether the directory's `SHA1SUMS` still matches.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::lua::{self, Analysis};
use crate::sha1_hex;

/// One `.lua` file.
#[derive(Clone, Debug)]
pub struct ScriptReport {
    /// The file's path as found (the directory joined with its name).
    pub path: PathBuf,
    /// The file stem, the name the runtime gives the script.
    pub name: String,
    /// SHA1 of the file's bytes.
    pub sha1: String,
    /// What the analysis found; empty when the file is not UTF-8.
    pub analysis: Analysis,
    /// Every problem, each as `path:line:col: message`.
    pub problems: Vec<String>,
    /// Every warning (what only some servers would refuse), in the same form.
    pub warnings: Vec<String>,
}

/// A directory's `SHA1SUMS` against its files.
#[derive(Clone, Debug, Default)]
pub struct SumsReport {
    /// The file exists.
    pub present: bool,
    /// How many files it lists.
    pub listed: usize,
    /// Every disagreement: a wrong digest, a listed file that is missing, a script
    /// that is not listed, a line that is not `sha1sum` format.
    pub problems: Vec<String>,
}

/// Everything found in one directory.
#[derive(Clone, Debug)]
pub struct DirReport {
    /// The directory.
    pub dir: PathBuf,
    /// Its `.lua` files, sorted by name.
    pub scripts: Vec<ScriptReport>,
    /// Its `SHA1SUMS`.
    pub sums: SumsReport,
}

impl DirReport {
    /// How many problems, scripts and `SHA1SUMS` together.
    ///
    /// ```no_run
    /// let report = lockscript_audit::audit::audit_dir("scripts".as_ref())?;
    /// assert_eq!(report.problem_count(), 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn problem_count(&self) -> usize {
        self.scripts.iter().map(|s| s.problems.len()).sum::<usize>() + self.sums.problems.len()
    }

    /// How many warnings: calls of commands that some servers of the matrix lack.
    ///
    /// ```no_run
    /// let report = lockscript_audit::audit::audit_dir("scripts".as_ref())?;
    /// println!("{} warnings", report.warning_count());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn warning_count(&self) -> usize {
        self.scripts.iter().map(|s| s.warnings.len()).sum()
    }
}

/// Audits every `.lua` file directly inside `dir`, and `dir/SHA1SUMS` when present.
///
/// ```no_run
/// let report = lockscript_audit::audit::audit_dir("scripts".as_ref())?;
/// for script in &report.scripts {
///     println!("{}  {}", script.sha1, script.name);
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn audit_dir(dir: &Path) -> io::Result<DirReport> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<io::Result<_>>()?;
    files.retain(|p| p.extension().is_some_and(|e| e == "lua") && p.is_file());
    files.sort();
    let scripts = files
        .iter()
        .map(|path| audit_file(path))
        .collect::<io::Result<Vec<_>>>()?;
    let sums = check_sums(dir, &scripts)?;
    Ok(DirReport {
        dir: dir.to_path_buf(),
        scripts,
        sums,
    })
}

/// Audits one script file.
///
/// ```no_run
/// let report = lockscript_audit::audit::audit_file("scripts/renew.lua".as_ref())?;
/// assert!(report.problems.is_empty());
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn audit_file(path: &Path) -> io::Result<ScriptReport> {
    let bytes = std::fs::read(path)?;
    let sha1 = sha1_hex(&bytes);
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let shown = path.display();
    let (analysis, problems, warnings) = match std::str::from_utf8(&bytes) {
        Ok(text) => {
            let analysis = lua::analyze(text);
            let located = |list: &[lua::Problem]| {
                list.iter()
                    .map(|p| format!("{shown}:{}: {}", p.at, p.message))
                    .collect()
            };
            let problems = located(&analysis.problems);
            let warnings = located(&analysis.warnings);
            (analysis, problems, warnings)
        }
        Err(e) => (
            Analysis::default(),
            vec![format!(
                "{shown}: not valid UTF-8 (byte {}): Redis scripts are Lua text",
                e.valid_up_to()
            )],
            Vec::new(),
        ),
    };
    Ok(ScriptReport {
        path: path.to_path_buf(),
        name,
        sha1,
        analysis,
        problems,
        warnings,
    })
}

fn check_sums(dir: &Path, scripts: &[ScriptReport]) -> io::Result<SumsReport> {
    let sums_path = dir.join("SHA1SUMS");
    let text = match std::fs::read_to_string(&sums_path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(SumsReport::default()),
        Err(e) => return Err(e),
    };
    let mut report = SumsReport {
        present: true,
        ..SumsReport::default()
    };
    let mut listed = BTreeMap::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        // `sha1sum` writes "<digest>  <file>" (text mode) or "<digest> *<file>".
        let parsed = line
            .split_once("  ")
            .or_else(|| line.split_once(" *"))
            .filter(|(d, _)| d.len() == 40 && d.bytes().all(|b| b.is_ascii_hexdigit()));
        match parsed {
            Some((digest, file)) => {
                listed.insert(file.to_owned(), digest.to_ascii_lowercase());
            }
            None => report.problems.push(format!(
                "{}:{}: not a sha1sum line: {line:?}",
                sums_path.display(),
                n + 1
            )),
        }
    }
    report.listed = listed.len();
    for script in scripts {
        let file = script
            .path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        match listed.remove(&file) {
            Some(digest) if digest == script.sha1 => {}
            Some(digest) => report.problems.push(format!(
                "{}: SHA1SUMS says {digest}, the file is {}: review the change, then update SHA1SUMS",
                script.path.display(),
                script.sha1
            )),
            None => report.problems.push(format!(
                "{}: not listed in SHA1SUMS (add it after review: sha1sum {file} >> SHA1SUMS)",
                script.path.display()
            )),
        }
    }
    for file in listed.keys() {
        report.problems.push(format!(
            "{}: listed in SHA1SUMS but missing",
            dir.join(file).display()
        ));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::audit_dir;

    fn dir_with(files: &[(&str, &[u8])]) -> tempdir::Dir {
        tempdir::Dir::with(files)
    }

    mod tempdir {
        use std::path::PathBuf;

        /// A throwaway directory under the system temp dir.
        pub(super) struct Dir(pub(super) PathBuf);

        impl Dir {
            pub(super) fn with(files: &[(&str, &[u8])]) -> Self {
                let n: u64 = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos()
                    .try_into()
                    .unwrap();
                let dir =
                    std::env::temp_dir().join(format!("lock-audit-{}-{n}", std::process::id()));
                std::fs::create_dir_all(&dir).unwrap();
                for (name, bytes) in files {
                    std::fs::write(dir.join(name), bytes).unwrap();
                }
                Self(dir)
            }
        }

        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn clean_directory_with_matching_sums_has_no_problems() {
        let body: &[u8] = b"return redis.call('GET', KEYS[1])\n";
        let sums = format!("{}  get.lua\n", crate::sha1_hex(body));
        let dir = dir_with(&[
            ("get.lua", body),
            ("SHA1SUMS", sums.as_bytes()),
            ("notes.txt", b"x"),
        ]);
        let report = audit_dir(&dir.0).unwrap();
        assert_eq!(report.scripts.len(), 1);
        assert_eq!(report.scripts[0].name, "get");
        assert_eq!(report.scripts[0].analysis.keys.highest, 1);
        assert!(report.sums.present);
        assert_eq!(report.problem_count(), 0, "{report:?}");
    }

    #[test]
    fn stale_unlisted_and_missing_entries_are_problems() {
        let dir = dir_with(&[
            ("a.lua", b"return 1\n"),
            ("b.lua", b"return 2\n"),
            (
                "SHA1SUMS",
                b"0000000000000000000000000000000000000000  a.lua\n\
                  1111111111111111111111111111111111111111  gone.lua\nnot a line\n",
            ),
        ]);
        let report = audit_dir(&dir.0).unwrap();
        let problems = report.sums.problems.join("\n");
        assert!(problems.contains("a.lua: SHA1SUMS says 0000"), "{problems}");
        assert!(problems.contains("b.lua: not listed"), "{problems}");
        assert!(
            problems.contains("gone.lua: listed in SHA1SUMS but missing"),
            "{problems}"
        );
        assert!(problems.contains("not a sha1sum line"), "{problems}");
        assert_eq!(report.problem_count(), 4);
    }

    #[test]
    fn a_command_some_servers_lack_is_a_warning_not_a_problem() {
        let dir = dir_with(&[(
            "del-if.lua",
            b"return redis.call('DELIFEQ', KEYS[1], ARGV[1])\n",
        )]);
        let report = audit_dir(&dir.0).unwrap();
        assert_eq!(report.problem_count(), 0, "{report:?}");
        assert_eq!(report.warning_count(), 1);
        let warning = &report.scripts[0].warnings[0];
        assert!(
            warning.contains("del-if.lua:1:19: `DELIFEQ` exists from Valkey 9.0.0; Redis "),
            "{warning}"
        );
    }

    #[test]
    fn script_problems_carry_file_line_and_column() {
        let dir = dir_with(&[
            ("bad.lua", b"redis.call('SLEEP', 1)\n"),
            ("bin.lua", b"\xff"),
        ]);
        let report = audit_dir(&dir.0).unwrap();
        assert!(!report.sums.present);
        let all: Vec<&String> = report.scripts.iter().flat_map(|s| &s.problems).collect();
        assert!(
            all[0].ends_with("bad.lua:1:12: `SLEEP` is not a Redis command"),
            "{all:?}"
        );
        assert!(all[1].contains("bin.lua: not valid UTF-8"), "{all:?}");
    }
}
