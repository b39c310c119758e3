//! Hangs and the stacks that explain them, for `--hang_timeout`, `--stacks` and `--stacks_on_failure`:
//! the [`watch`] judges each rank's progress from outside (Python stacks, I/O, its process tree; the
//! TCP bytes of its [`sockets`]), [`autopsy`] takes and groups py-spy's stacks, the [`flight_recorder`]
//! reads torch's record of the collectives each rank entered, and the world's one [`verdict`] is
//! agreed over the control plane when the ranks of every node are still.

pub mod autopsy;
pub mod flight_recorder;
pub mod sockets;
pub mod verdict;
pub mod watch;

pub use watch::{
    process_tree, triples, usage_of, Decision, Judge, Kind, Live, Probe, ProcProbe, Schedule,
    Usage, Watch, AUTOPSY_DUMP, BUSY_FRACTION, SAMPLE_DUMP,
};
