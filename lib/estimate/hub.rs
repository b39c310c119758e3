//! The Hub, touched as lightly as possible: `config.json`, the shard index, and of each safetensors
//! file only its header, fetched with two HTTP range requests (the 8-byte length, then exactly the
//! header) — a 140 GB checkpoint costs a few hundred kilobytes. Shards are fetched concurrently so the
//! second round trip costs no wall time. `HF_ENDPOINT`, `HF_TOKEN` and `HF_TOKEN_PATH` are honoured; `HF_HUB_OFFLINE`
//! refuses before any request.

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::error::EstimateError;
use super::safetensors;
use crate::env_vars::{self, Environment};

/// A response body and the file's total length, when the server said.
type Body = (Vec<u8>, Option<u64>);

/// Shards whose headers are fetched at once.
const CONCURRENCY: usize = 8;

pub struct Hub {
    agent: ureq::Agent,
    endpoint: String,
    token: Option<String>,
    repo: String,
    revision: String,
    /// Response body bytes received so far.
    bytes_received: AtomicU64,
    /// Requests made so far.
    requests: AtomicU64,
}

/// Whether `name` looks like a Hub repository id (`org/name`, or a bare `name`).
pub fn is_repo_id(name: &str) -> bool {
    let parts: Vec<&str> = name.split('/').collect();
    (1..=2).contains(&parts.len())
        && parts.iter().all(|p| {
            !p.is_empty()
                && !p.starts_with('.')
                && !p.contains("..")
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        })
}

fn offline(env: &Environment) -> bool {
    env.non_empty(env_vars::HF_HUB_OFFLINE).is_some_and(|v| {
        !matches!(
            v.to_ascii_lowercase().as_str(),
            "0" | "false" | "no" | "off"
        )
    })
}

impl Hub {
    pub fn new(repo: &str, revision: &str, env: &Environment) -> Result<Hub, EstimateError> {
        if offline(env) {
            return Err(EstimateError::HubOffline { repo: repo.into() });
        }
        let endpoint = env
            .non_empty(env_vars::HF_ENDPOINT)
            .unwrap_or("https://huggingface.co")
            .trim_end_matches('/')
            .to_string();
        let proxy = env
            .non_empty(env_vars::HTTPS_PROXY)
            .and_then(|p| ureq::Proxy::new(p).ok())
            .filter(|_| !is_loopback(&endpoint));
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // The Hub redirects renamed repositories on the same host; the token must follow them
            // (and must not follow a redirect to a CDN).
            .redirect_auth_headers(ureq::config::RedirectAuthHeaders::SameHost)
            .proxy(proxy)
            .timeout_connect(Some(Duration::from_secs(10)))
            .timeout_global(Some(Duration::from_secs(60)))
            .user_agent(concat!("accel-estimate-memory/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Ok(Hub {
            agent,
            endpoint,
            token: token(env),
            repo: repo.into(),
            revision: revision.into(),
            bytes_received: AtomicU64::new(0),
            requests: AtomicU64::new(0),
        })
    }

    /// `(requests, body bytes received)` so far.
    pub fn traffic(&self) -> (u64, u64) {
        (
            self.requests.load(Ordering::Relaxed),
            self.bytes_received.load(Ordering::Relaxed),
        )
    }

    fn url(&self, file: &str) -> String {
        format!(
            "{}/{}/resolve/{}/{file}",
            self.endpoint, self.repo, self.revision
        )
    }

    /// One GET, at most `limit` body bytes read. `Ok(None)` for a missing file.
    fn get(
        &self,
        file: &str,
        range: Option<(u64, u64)>,
        limit: u64,
    ) -> Result<Option<Body>, EstimateError> {
        let url = self.url(file);
        let mut request = self.agent.get(&url);
        if let Some(token) = &self.token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        if let Some((start, end)) = range {
            request = request.header("Range", format!("bytes={start}-{end}"));
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        let response = request.call().map_err(|e| EstimateError::HubUnreachable {
            repo: self.repo.clone(),
            endpoint: self.endpoint.clone(),
            source: Box::new(e),
        })?;
        let status = response.status().as_u16();
        log::debug!("GET {url} range {range:?}: HTTP {status}");
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let error_code = header("x-error-code").unwrap_or_default();
        let total = header("content-range").and_then(|r| {
            r.rsplit('/')
                .next()
                .and_then(|t| t.trim().parse::<u64>().ok())
        });
        match status {
            200 | 206 => {}
            404 if error_code == "RepoNotFound" => {
                return Err(EstimateError::HubNotFound {
                    repo: self.repo.clone(),
                    file: "repository".into(),
                })
            }
            404 => return Ok(None),
            401 | 403 if error_code == "RepoNotFound" => {
                return Err(EstimateError::HubNotFound {
                    repo: self.repo.clone(),
                    file: "repository".into(),
                })
            }
            401 | 403 => {
                return Err(EstimateError::HubGated {
                    repo: self.repo.clone(),
                    file: file.into(),
                    status,
                    token: self.token.is_some(),
                })
            }
            _ => return Err(EstimateError::HubHttp { url, status }),
        }
        let total = if status == 200 {
            header("content-length").and_then(|l| l.parse().ok())
        } else {
            total
        };
        let mut body = Vec::new();
        let read = response
            .into_body()
            .into_reader()
            .take(limit)
            .read_to_end(&mut body);
        self.bytes_received
            .fetch_add(body.len() as u64, Ordering::Relaxed);
        read.map_err(|e| EstimateError::HubUnreachable {
            repo: self.repo.clone(),
            endpoint: self.endpoint.clone(),
            source: Box::new(e),
        })?;
        Ok(Some((body, total)))
    }

    /// A small text file (config, index); `None` when the repository does not have it.
    pub fn text(&self, file: &str) -> Result<Option<String>, EstimateError> {
        Ok(self
            .get(file, None, 64 << 20)?
            .map(|(body, _)| String::from_utf8_lossy(&body).into_owned()))
    }

    /// The header of a safetensors file in the repository; `None` when it does not exist.
    pub fn safetensors_header(
        &self,
        file: &str,
    ) -> Result<Option<safetensors::Header>, EstimateError> {
        let shown = format!("{}/{file}", self.repo);
        let Some((prefix, total)) = self.get(file, Some((0, 7)), 8)? else {
            return Ok(None);
        };
        let n = safetensors::header_len(&prefix, &shown)?;
        if total.is_some_and(|t| t < 8 + n) {
            return Err(EstimateError::TruncatedHeader {
                path: shown,
                need: n,
                have: total.unwrap_or(0).saturating_sub(8),
            });
        }
        let Some((json, _)) = self.get(file, Some((8, 8 + n - 1)), n)? else {
            return Ok(None);
        };
        if (json.len() as u64) < n {
            return Err(EstimateError::TruncatedHeader {
                path: shown,
                need: n,
                have: json.len() as u64,
            });
        }
        let header = safetensors::parse_header(&json, &shown)?;
        if let Some(total) = total {
            if total < 8 + n + header.data_len {
                return Err(EstimateError::TruncatedData {
                    path: shown,
                    need: 8 + n + header.data_len,
                    have: total,
                });
            }
        }
        Ok(Some(header))
    }

    /// The headers of several files, fetched concurrently, in the order given.
    pub fn safetensors_headers(
        &self,
        files: &[String],
    ) -> Result<Vec<Option<safetensors::Header>>, EstimateError> {
        let mut out = Vec::with_capacity(files.len());
        for chunk in files.chunks(CONCURRENCY) {
            let results: Vec<_> = std::thread::scope(|scope| {
                let handles: Vec<_> = chunk
                    .iter()
                    .map(|file| scope.spawn(move || self.safetensors_header(file)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(EstimateError::HubHttp {
                                url: self.endpoint.clone(),
                                status: 0,
                            })
                        })
                    })
                    .collect()
            });
            for r in results {
                out.push(r?);
            }
        }
        Ok(out)
    }
}

/// The snapshot directory of `repo` at `revision` in huggingface_hub's cache, when it is there:
/// `models--org--name/snapshots/<commit>`, the commit read from `refs/<revision>`.
/// huggingface_hub's `HF_HOME`: the variable, else `${XDG_CACHE_HOME:-~/.cache}/huggingface`
/// (huggingface_hub/constants.py).
fn hf_home(env: &Environment) -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    if let Some(h) = env.non_empty(env_vars::HF_HOME) {
        Some(expand(h, env))
    } else if let Some(x) = env.non_empty(env_vars::XDG_CACHE_HOME) {
        Some(expand(x, env).join("huggingface"))
    } else {
        Some(PathBuf::from(env.non_empty(env_vars::HOME)?).join(".cache/huggingface"))
    }
}

/// constants.py's `os.path.expandvars(os.path.expanduser(value))`: `~` from `$HOME`, then
/// `$NAME` and `${NAME}` from the environment (an unset name stays as written).
fn expand(value: &str, env: &Environment) -> std::path::PathBuf {
    let home = crate::config::expand_user(value, env.get(env_vars::HOME));
    let text = home.to_string_lossy();
    let mut out = String::new();
    let mut rest: &str = &text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        // posixpath.expandvars: `\$(\w+|\{[^}]*\})`.
        let (name, len) = match after.strip_prefix('{') {
            Some(braced) => match braced.find('}') {
                Some(j) => (&braced[..j], j + 2),
                None => ("", 0),
            },
            None => {
                let end = after
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], end)
            }
        };
        match env.get(name).filter(|_| !name.is_empty()) {
            Some(v) => out.push_str(v),
            None => out.push_str(&rest[i..=i + len]),
        }
        rest = &after[len..];
    }
    out.push_str(rest);
    std::path::PathBuf::from(out)
}

/// The Hub token as huggingface_hub's `get_token` finds it (huggingface_hub/utils/_auth.py):
/// `HF_TOKEN`, else the older `HUGGING_FACE_HUB_TOKEN`, else the file `hf auth login` writes,
/// `HF_TOKEN_PATH` (default `$HF_HOME/token`); line breaks anywhere and surrounding spaces are
/// removed, and an empty token is none.
pub fn token(env: &Environment) -> Option<String> {
    let clean = |t: &str| {
        let t = t.replace(['\r', '\n'], "");
        let t = t.trim();
        (!t.is_empty()).then(|| t.to_string())
    };
    for var in [env_vars::HF_TOKEN, env_vars::HUGGING_FACE_HUB_TOKEN] {
        if let Some(t) = env.non_empty(var).and_then(clean) {
            return Some(t);
        }
    }
    let file = match env.non_empty(env_vars::HF_TOKEN_PATH) {
        Some(path) => expand(path, env),
        None => hf_home(env)?.join("token"),
    };
    clean(&std::fs::read_to_string(file).ok()?)
}

pub fn cached_snapshot(
    repo: &str,
    revision: &str,
    env: &Environment,
) -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    let cache = if let Some(c) = env.non_empty(env_vars::HF_HUB_CACHE) {
        PathBuf::from(c)
    } else {
        hf_home(env)?.join("hub")
    };
    let dir = cache.join(format!("models--{}", repo.replace('/', "--")));
    let commit = std::fs::read_to_string(dir.join("refs").join(revision))
        .map(|c| c.trim().to_string())
        .unwrap_or_else(|_| revision.to_string());
    let snapshot = dir.join("snapshots").join(commit);
    snapshot.is_dir().then_some(snapshot)
}

fn is_loopback(endpoint: &str) -> bool {
    let host = endpoint
        .split("://")
        .nth(1)
        .unwrap_or(endpoint)
        .split(['/', ':'])
        .next()
        .unwrap_or("");
    matches!(host, "localhost" | "127.0.0.1" | "[" | "::1") || host.starts_with("127.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids() {
        assert!(is_repo_id("meta-llama/Llama-3.1-8B"));
        assert!(is_repo_id("gpt2"));
        assert!(!is_repo_id("./x/y"));
        assert!(!is_repo_id("a/b/c"));
        assert!(!is_repo_id("/abs/path"));
        assert!(!is_repo_id("a/../b"));
    }

    #[test]
    fn offline_refuses_before_any_request() {
        let env = Environment::from_pairs([("HF_HUB_OFFLINE", "1")]);
        assert!(matches!(
            Hub::new("a/b", "main", &env),
            Err(EstimateError::HubOffline { .. })
        ));
    }
}
