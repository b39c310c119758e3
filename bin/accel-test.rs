fn main() -> std::process::ExitCode {
    accel::tools::main::<accel::cli::test::TestCli>("accel-test", accel::tools::test::run)
}
