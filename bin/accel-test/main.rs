// accel-test's libtorch side (torch/: the c10d binding and the rank itself) is compiled into this binary
// only, so no other tool links libtorch.
#[cfg(feature = "torch")]
mod torch;

fn main() -> std::process::ExitCode {
    // Asking CUDA costs start-up time: only for --version.
    #[cfg(feature = "torch")]
    let adjust = |c: clap::Command| {
        if std::env::args_os().any(|a| a == "--version") {
            c.long_version(torch::describe())
        } else {
            c
        }
    };
    #[cfg(not(feature = "torch"))]
    let adjust = |c: clap::Command| c;
    accel::tools::main_with::<accel::cli::test::TestCli>("accel-test", adjust, run)
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
