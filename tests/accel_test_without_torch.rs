//! Without the `torch` feature accel-test still builds and says what it lacks.

#[allow(unused_imports)]
use crate::util::{ChildExt as _, CommandExt as _, WAIT};
#[test]
fn says_it_was_built_without_libtorch() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_accel-test")).output_within(WAIT);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("accel-test: error: accel-test was built without libtorch support"),
        "{err}"
    );
    assert!(err.contains("--features torch"), "{err}");
}
