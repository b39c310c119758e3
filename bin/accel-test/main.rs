// accel-test links no libtorch: its libtorch part (torch/, a shared object of its own) is loaded from the
// environment's torch when the ranks need it (lib/preflight/libtorch.rs).
fn main() -> std::process::ExitCode {
    accel::tools::main_with::<accel::cli::test::TestCli>(
        "accel-test",
        accel::tools::test::version_lines,
        accel::tools::test::run,
    )
}
