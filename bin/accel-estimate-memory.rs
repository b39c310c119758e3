fn main() -> std::process::ExitCode {
    accel::tools::main::<accel::cli::estimate::EstimateCli>(
        "accel-estimate-memory",
        accel::tools::estimate::run,
    )
}
