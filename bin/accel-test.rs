// The libtorch side (lib/torch) is compiled into this binary only, so no other tool links libtorch.
#[cfg(feature = "torch")]
#[path = "../lib/torch/mod.rs"]
mod torch;

fn main() -> std::process::ExitCode {
    accel::tools::main::<accel::cli::test::TestCli>("accel-test", run)
}

#[cfg(feature = "torch")]
fn run(
    cli: accel::cli::test::TestCli,
    env: &accel::env_vars::Environment,
) -> accel::error::Result<accel::exit_status::ExitStatus> {
    let ranks = accel::tools::test::Ranks {
        worker: torch::worker::run_cli,
        nccl: torch::has_nccl(),
    };
    accel::tools::test::run_with(cli, env, Some(&ranks))
}

#[cfg(not(feature = "torch"))]
use accel::tools::test::run;
