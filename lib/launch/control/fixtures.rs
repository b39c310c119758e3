//! What the node-protocol unit tests share: one run, one secret and a node's join as a 2-node run
//! with 2 ranks each gives it, so that admission, the node side and the link are tested against the
//! same messages.

use super::auth::{Credentials, Secret};
use super::protocol::{Join, PROTOCOL};

pub(super) const SECRET: &[u8] = b"0123456789abcdef-the-secret";
pub(super) const RUN: &str = "port:29501";

/// Node `node`'s join to a run of 2 nodes of 2 ranks each.
pub(super) fn join(node: u32) -> Join {
    Join {
        protocol: PROTOCOL,
        run_id: RUN.into(),
        node,
        nodes: 2,
        local_ranks: 2,
        host: format!("h{node}"),
        max_restarts: 0,
        hang_timeout_ms: None,
        grace_ms: Some(3_000),
        world_size: None,
    }
}

/// The run's credentials: its secret, no MUNGE.
pub(super) fn secret() -> Credentials {
    Credentials {
        secret: Some(Secret::new(SECRET)),
        munge: None,
    }
}
