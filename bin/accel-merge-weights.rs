fn main() -> std::process::ExitCode {
    accel::tools::main::<accel::cli::merge::MergeCli>(
        "accel-merge-weights",
        accel::tools::merge::run,
    )
}
