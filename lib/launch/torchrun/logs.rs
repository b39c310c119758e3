//! torchrun's log layout and console rules (`DefaultLogsSpecs.reify`, `PContext` and `TailLog` in
//! torch/distributed/elastic/multiprocessing/{api,tail_log}.py, torch 2.13), for a run given torchrun's
//! command line:
//!
//! - once per launcher, a run directory `<log dir>/<run id>_<8 random characters>` (`mkdtemp`); without
//!   a log directory, under a fresh `torchelastic_*` directory in TMPDIR;
//! - per attempt, `attempt_<restart count>/` (emptied when an attempt starts again), and in it a
//!   directory per local rank holding `error.json` (TORCHELASTIC_ERROR_FILE) and, for the streams
//!   `-r/--redirects` or `-t/--tee` select, `stdout.log`/`stderr.log`;
//! - `-t` streams also reach the console, each line headed `[<role><local rank>]:` (or
//!   TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE); `-r`-only streams do not; the others reach it as they are;
//! - `--local_ranks_filter`: the other local ranks' streams reach no console, their files are written;
//! - `--duplicate_std{out,err}_filters`: tee'd lines holding one of the strings also go, headed, to
//!   `attempt_<n>/filtered_std{out,err}.log`;
//! - `--log_dir /dev/null`: no files at all, every stream to the console, TORCHELASTIC_ERROR_FILE empty.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::{IoError, Result};

/// torchrun's `comma_separated_list` (torch/distributed/run.py::get_args_parser): `,,` is a literal
/// comma; an empty item stays (it matches every line, as `"" in line` does in Python).
pub fn comma_separated_list(value: &str) -> Vec<String> {
    const PLACEHOLDER: &str = "\u{0}COMMA\u{0}";
    value
        .replace(",,", PLACEHOLDER)
        .split(',')
        .map(|item| item.replace(PLACEHOLDER, ","))
        .collect()
}

/// What torchrun's logs options ask for.
#[derive(Debug, Clone, Default)]
pub struct LogsSpec {
    /// `--log_dir`; `None`: a `torchelastic_*` directory in TMPDIR.
    pub log_dir: Option<PathBuf>,
    /// The run id, the run directory's prefix.
    pub run_id: String,
    pub role: String,
    /// `-r/--redirects` and `-t/--tee`, as torchrun's `Std.from_str` takes them.
    pub redirects: String,
    pub tee: String,
    pub local_ranks_filter: Option<Vec<u32>>,
    /// TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE: `${role_name}`, `${rank}`, `${local_rank}`.
    pub prefix_template: Option<String>,
    pub duplicate_stdout: Vec<String>,
    pub duplicate_stderr: Vec<String>,
}

/// Stream bits, as torchrun's `Std` (1: stdout, 2: stderr).
fn std_of(spec: &str, local_rank: u32) -> u8 {
    if let Ok(v) = spec.parse::<u8>() {
        return v & 3;
    }
    let map: BTreeMap<u32, u8> = spec
        .split(',')
        .filter_map(|m| {
            let (r, v) = m.split_once(':')?;
            Some((r.parse().ok()?, v.parse().ok()?))
        })
        .collect();
    map.get(&local_rank).copied().unwrap_or(0) & 3
}

impl LogsSpec {
    fn devnull(&self) -> bool {
        self.log_dir.as_deref() == Some(Path::new("/dev/null"))
    }

    /// Whether anything is written to files (else a temporary root is removed at the end).
    fn writes_files(&self) -> bool {
        !self.devnull()
            && (self.redirects != "0"
                || self.tee != "0"
                || !self.duplicate_stdout.is_empty()
                || !self.duplicate_stderr.is_empty())
    }

    /// The run directory, made once per launcher as torchrun's `_make_log_dir` makes it.
    pub fn start(&self, tmp_base: &Path) -> Result<RunLogs> {
        if self.devnull() {
            return Ok(RunLogs {
                spec: self.clone(),
                run_dir: None,
                temp_root: None,
            });
        }
        let (base, temp_root) = match &self.log_dir {
            Some(d) => {
                if d.is_file() {
                    return Err(IoError::new(
                        "use as the log directory",
                        d,
                        std::io::Error::other("it is a file"),
                    )
                    .into());
                }
                std::fs::create_dir_all(d).map_err(|e| IoError::new("create", d, e))?;
                (d.clone(), None)
            }
            None => {
                let t = mkdtemp(tmp_base, "torchelastic_")?;
                (t.clone(), Some(t))
            }
        };
        let run_dir = mkdtemp(&base, &format!("{}_", self.run_id))?;
        Ok(RunLogs {
            spec: self.clone(),
            run_dir: Some(run_dir),
            temp_root,
        })
    }
}

/// `tempfile.mkdtemp(prefix=…, dir=…)`: a new directory with 8 random characters after the prefix,
/// named under `dir` as given (a relative `--log_dir` gives relative paths, as in torchrun).
fn mkdtemp(dir: &Path, prefix: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| IoError::new("create", dir, e))?;
    let made = tempfile::Builder::new()
        .prefix(prefix)
        .rand_bytes(8)
        .tempdir_in(dir)
        .map(tempfile::TempDir::keep)
        .map_err(|e| IoError::new("create a directory in", dir, e))?;
    Ok(match made.file_name() {
        Some(name) => dir.join(name),
        None => made,
    })
}

/// One launcher's logs of a run.
#[derive(Debug)]
pub struct RunLogs {
    spec: LogsSpec,
    /// `None` for `--log_dir /dev/null`.
    run_dir: Option<PathBuf>,
    /// A `torchelastic_*` directory made because no `--log_dir` was given.
    temp_root: Option<PathBuf>,
}

impl RunLogs {
    pub fn run_dir(&self) -> Option<&Path> {
        self.run_dir.as_deref()
    }

    /// An attempt's directories (emptied first, as torchrun's `reify` does at each start) and its
    /// filtered-lines files.
    pub fn attempt(&self, attempt: u32, local_ranks: &[u32]) -> Result<AttemptLogs> {
        let Some(run_dir) = &self.run_dir else {
            return Ok(AttemptLogs {
                spec: self.spec.clone(),
                dir: None,
                filtered: [None, None],
            });
        };
        let dir = run_dir.join(format!("attempt_{attempt}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| IoError::new("create", &dir, e))?;
        for lr in local_ranks {
            let d = dir.join(lr.to_string());
            std::fs::create_dir(&d).map_err(|e| IoError::new("create", &d, e))?;
        }
        let open = |needles: &[String], name: &str| -> Result<Option<Arc<Mutex<File>>>> {
            if needles.is_empty() {
                return Ok(None);
            }
            let p = dir.join(name);
            let f = File::create(&p).map_err(|e| IoError::new("create", &p, e))?;
            Ok(Some(Arc::new(Mutex::new(f))))
        };
        let filtered = [
            open(&self.spec.duplicate_stdout, "filtered_stdout.log")?,
            open(&self.spec.duplicate_stderr, "filtered_stderr.log")?,
        ];
        Ok(AttemptLogs {
            spec: self.spec.clone(),
            dir: Some(dir),
            filtered,
        })
    }

    /// At the end of the run: a temporary root that holds only error files goes.
    pub fn finish(&self) {
        if let Some(t) = self
            .temp_root
            .as_ref()
            .filter(|_| !self.spec.writes_files())
        {
            let _ = std::fs::remove_dir_all(t);
        }
    }
}

/// The logs of one attempt.
#[derive(Debug)]
pub struct AttemptLogs {
    spec: LogsSpec,
    dir: Option<PathBuf>,
    filtered: [Option<Arc<Mutex<File>>>; 2],
}

/// Where one stream of one rank goes.
#[derive(Debug, Default)]
pub struct Route {
    pub file: Option<File>,
    /// `None`: not on the console; `Some(prefix)`: shown, headed by `prefix` when there is one.
    pub console: Option<Option<String>>,
    pub duplicate: Option<Duplicate>,
}

/// Lines of a tee'd stream also written, headed, to the attempt's filtered file when they hold one of
/// the needles (`TailLog`'s `log_line_filter`: `any(needle in line …)`).
#[derive(Debug, Clone)]
pub struct Duplicate {
    pub file: Arc<Mutex<File>>,
    pub header: String,
    pub needles: Vec<String>,
}

impl Duplicate {
    /// One whole line (with its newline, as Python's `readline` returns it).
    pub fn line(&self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        if self.needles.iter().any(|n| text.contains(n.as_str())) {
            if let Ok(mut f) = self.file.lock() {
                let _ = f.write_all(self.header.as_bytes());
                let _ = f.write_all(line);
            }
        }
    }
}

impl AttemptLogs {
    /// TORCHELASTIC_ERROR_FILE of a local rank: empty under `--log_dir /dev/null`.
    pub fn error_file(&self, local_rank: u32) -> PathBuf {
        match &self.dir {
            Some(d) => d.join(local_rank.to_string()).join("error.json"),
            None => PathBuf::new(),
        }
    }

    /// The console header of a rank's tee'd lines (`TailLog.start`).
    pub fn header(&self, rank: u32, local_rank: u32) -> String {
        match &self.spec.prefix_template {
            Some(t) => super::safe_substitute(
                t,
                &[
                    ("role_name", self.spec.role.as_str()),
                    ("rank", &rank.to_string()),
                    ("local_rank", &local_rank.to_string()),
                ],
            ),
            None => format!("[{}{local_rank}]:", self.spec.role),
        }
    }

    /// Where stream `err` (false: stdout) of a rank goes, its file created.
    pub fn route(&self, rank: u32, local_rank: u32, err: bool) -> Result<Route> {
        let Some(dir) = &self.dir else {
            return Ok(Route {
                console: Some(None),
                ..Route::default()
            });
        };
        let bit = if err { 2 } else { 1 };
        let tee = std_of(&self.spec.tee, local_rank) & bit != 0;
        let redirected = tee || std_of(&self.spec.redirects, local_rank) & bit != 0;
        let shown = self
            .spec
            .local_ranks_filter
            .as_ref()
            .is_none_or(|f| f.contains(&local_rank));
        let file = if redirected {
            let p = dir.join(local_rank.to_string()).join(if err {
                "stderr.log"
            } else {
                "stdout.log"
            });
            Some(File::create(&p).map_err(|e| IoError::new("create", &p, e))?)
        } else {
            None
        };
        let header = self.header(rank, local_rank);
        let console = match (shown, tee, redirected) {
            (false, _, _) => None,
            (true, true, _) => Some(Some(header.clone())),
            (true, false, true) => None,
            (true, false, false) => Some(None),
        };
        let needles = if err {
            &self.spec.duplicate_stderr
        } else {
            &self.spec.duplicate_stdout
        };
        let duplicate = match &self.filtered[usize::from(err)] {
            Some(f) if tee && shown => Some(Duplicate {
                file: Arc::clone(f),
                header,
                needles: needles.clone(),
            }),
            _ => None,
        };
        Ok(Route {
            file,
            console,
            duplicate,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn double_comma_is_a_comma() {
        assert_eq!(comma_separated_list("err,,x,err 1"), ["err,x", "err 1"]);
        assert_eq!(comma_separated_list("a"), ["a"]);
        assert_eq!(comma_separated_list(""), [""]);
    }

    fn spec(dir: &Path, r: &str, t: &str) -> LogsSpec {
        LogsSpec {
            log_dir: Some(dir.to_path_buf()),
            run_id: "none".into(),
            role: "default".into(),
            redirects: r.into(),
            tee: t.into(),
            ..LogsSpec::default()
        }
    }

    #[test]
    fn routes_as_torchrun_reifies_them() {
        let d = tempfile::tempdir().unwrap();
        let mut s = spec(d.path(), "1", "0:2");
        s.local_ranks_filter = Some(vec![0]);
        s.duplicate_stderr = vec!["x".into()];
        let run = s.start(d.path()).unwrap();
        let dir = run.run_dir().unwrap().to_path_buf();
        assert!(dir
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("none_"));
        let a = run.attempt(0, &[0, 1]).unwrap();
        // Rank 0: stdout redirected only, stderr tee'd (header, duplicated).
        let out0 = a.route(0, 0, false).unwrap();
        assert!(out0.file.is_some() && out0.console.is_none());
        let err0 = a.route(0, 0, true).unwrap();
        assert_eq!(err0.console, Some(Some("[default0]:".into())));
        assert!(err0.duplicate.is_some());
        // Rank 1: filtered out; stdout still to its file, stderr (not redirected) nowhere.
        let out1 = a.route(1, 1, false).unwrap();
        assert!(out1.file.is_some() && out1.console.is_none());
        let err1 = a.route(1, 1, true).unwrap();
        assert!(err1.file.is_none() && err1.console.is_none());
        for f in [
            "attempt_0/0/stdout.log",
            "attempt_0/0/stderr.log",
            "attempt_0/1/stdout.log",
            "attempt_0/filtered_stderr.log",
        ] {
            assert!(dir.join(f).is_file(), "{f}");
        }
        assert!(!dir.join("attempt_0/1/stderr.log").exists());
        assert_eq!(a.error_file(1), dir.join("attempt_0/1/error.json"));
        // An attempt started again is emptied first.
        std::fs::write(dir.join("attempt_0/stale"), "").unwrap();
        run.attempt(0, &[0, 1]).unwrap();
        assert!(!dir.join("attempt_0/stale").exists());
    }

    #[test]
    fn dev_null_writes_nothing() {
        let mut s = spec(Path::new("/dev/null"), "3", "3");
        s.duplicate_stdout = vec!["x".into()];
        let run = s.start(Path::new("/nonexistent")).unwrap();
        let a = run.attempt(0, &[0]).unwrap();
        let r = a.route(0, 0, false).unwrap();
        assert!(r.file.is_none() && r.duplicate.is_none());
        assert_eq!(r.console, Some(None));
        assert_eq!(a.error_file(0), PathBuf::new());
    }

    #[test]
    fn header_template() {
        let d = tempfile::tempdir().unwrap();
        let mut s = spec(d.path(), "0", "3");
        s.prefix_template = Some("[${role_name}|${rank}|${local_rank}] ".into());
        let a = s.start(d.path()).unwrap().attempt(2, &[1]).unwrap();
        assert_eq!(a.header(5, 1), "[default|5|1] ");
    }
}
