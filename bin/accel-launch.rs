fn main() -> std::process::ExitCode {
    accel::tools::main::<accel::cli::launch::LaunchCli>("accel-launch", accel::tools::launch::run)
}
