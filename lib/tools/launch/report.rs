//! `--report_json`: how the run ended, for a scheduler or a wrapper script to read without parsing
//! the logs: the status, the failing node, host, rank and its exit, every local rank's end, or, for
//! a run that ended in the join, the error and no ranks.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::error::{Error, Result};
use crate::exit_status::ExitStatus;
use crate::launch::{self, control, Plan};

use super::error::LaunchError;

/// How a run that never started its ranks ended (in the join), for its `--report_json`.
pub struct Unstarted {
    pub node: u32,
    pub num_nodes: u32,
    pub status: ExitStatus,
    pub failure: Option<control::FailureReport>,
    pub error: String,
}

/// `--report_json`: how the run ended, for a scheduler or a wrapper script to read without parsing
/// the logs. Its temporary file is made before any rank starts, so that a path that cannot be
/// written is refused then; it has a name of its own (`tempfile`), so that launchers writing
/// `rep/node.0` and `rep/node.1` at once never share one, and the rename makes the report whole.
pub struct Report {
    path: PathBuf,
    tmp: tempfile::NamedTempFile,
}

impl Report {
    pub fn open(path: &Path) -> Result<Report> {
        if path.is_dir() {
            return Err(LaunchError::ReportIsDir(path.to_path_buf()).into());
        }
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let name = path
            .file_name()
            .map_or_else(|| "report".into(), |n| n.to_string_lossy().into_owned());
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .tempfile_in(dir)
            .map_err(|e| Error::from(crate::error::IoError::new("create", path, e)))?;
        Ok(Report {
            path: path.to_path_buf(),
            tmp,
        })
    }

    /// A run that ended in the join: no rank started; `error` is what this launcher said.
    pub fn write_unstarted(self, u: &Unstarted) -> Result<()> {
        let v = json!({
            "status": u.status.code(),
            "ok": false,
            "node": u.node,
            "num_nodes": u.num_nodes,
            "world_size": null,
            "host": crate::host::hostname(),
            "signal": u.failure.as_ref().and_then(|f| f.signal),
            "failure": u.failure,
            "ended_in_join": true,
            "error": u.error,
            "ranks": [],
        });
        self.persist(&v)
    }

    /// A spare whose wait ended with the run: it ran no rank.
    pub fn write_spare(self, u: &Unstarted) -> Result<()> {
        let v = json!({
            "status": u.status.code(),
            "ok": u.status == ExitStatus::Success,
            "node": u.node,
            "num_nodes": u.num_nodes,
            "spare": true,
            "world_size": null,
            "host": crate::host::hostname(),
            "failure": u.failure,
            "ranks": [],
        });
        self.persist(&v)
    }

    /// How the run ended here; on node 0 of many, `roster` adds the run's spares and lost nodes.
    pub fn write(
        self,
        plan: &Plan,
        o: &launch::RunOutcome,
        roster: Option<control::Roster>,
    ) -> Result<()> {
        let t = plan.topology.as_ref();
        let mut v = json!({
            "status": o.status.code(),
            "ok": o.status == ExitStatus::Success,
            "node": t.map(|t| t.node_rank),
            "num_nodes": t.map(|t| t.num_nodes),
            "world_size": t.map(|t| t.world_size()),
            "host": plan.host,
            "signal": o.signal,
            "failure": o.failure,
            "stragglers": o.stragglers,
            "ranks": o.ranks.iter().map(|r| json!({
                "rank": r.rank,
                "local_rank": r.local_rank,
                "code": r.end.status.code(),
                "signal": std::os::unix::process::ExitStatusExt::signal(&r.end.status),
                "stopped": r.end.stopped,
            })).collect::<Vec<_>>(),
        });
        if let (Some(r), Some(map)) = (roster, v.as_object_mut()) {
            map.insert("spares".into(), json!(r.spares));
            map.insert("lost_nodes".into(), json!(r.lost_nodes));
        }
        self.persist(&v)
    }

    fn persist(self, v: &serde_json::Value) -> Result<()> {
        let text = serde_json::to_string_pretty(v).unwrap_or_default() + "\n";
        let write_err = |e| Error::from(crate::error::IoError::new("write", &self.path, e));
        let mut f = self.tmp.as_file();
        std::io::Write::write_all(&mut f, text.as_bytes()).map_err(write_err)?;
        self.tmp
            .persist(&self.path)
            .map_err(|e| write_err(e.error))?;
        Ok(())
    }
}
